"""`megaprov image pull`: argv -> exit code, one line, JSON; refusals contact no host, and the answer of the play
(its set_stats) is printed one line per fact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from megaprov.cli import main
from megaprov.cluster import plays, runner
from megaprov.errors import ExitCode

GOOD = "[head]\nn1 ansible_host=192.0.2.10\n[gpu_nodes]\nn1\n"
DIGEST = "sha256:" + "ab" * 32


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and lines[0].startswith("megaprov: error: ")
    return lines[0]


@pytest.fixture
def no_play(monkeypatch):
    """Fails the test if a refusal gets as far as running a play."""

    def refuse(*args, **kwargs):
        raise AssertionError("a play was run for input that must be refused")

    monkeypatch.setattr(plays, "run", refuse)


@pytest.mark.parametrize(
    ("image", "needle"),
    [
        ("ubuntu 22.04", "IMAGE='ubuntu 22.04' is not an image reference"),
        ("ubuntu:22.04\n", "contains the control character \\n"),
        ("nvcr.io/nvidia/pytorch:25.01\nrm -rf /", "contains the control character \\n"),
        ("user:secret@nvcr.io/nvidia/pytorch:25.01-py3", "holds credentials"),
        ("https://nvcr.io/nvidia/pytorch:25.01-py3", "has a scheme"),
        ("/shared/images/pytorch.sqsh", "is a squashfs file: image pull fetches from a registry or an archive"),
        ("Ubuntu:22.04", "is not an image reference"),
        ("{{ lookup('pipe', 'id') }}", "is not an image reference"),
        (f"nvcr.io/nvidia/pytorch@{DIGEST}", "has a digest and no tag"),
        ("", "IMAGE"),
    ],
)
def test_a_bad_image_exits_2_with_one_line(capsys, tmp_path, no_play, image, needle):
    (tmp_path / "inventory.ini").write_text(GOOD)
    code, out, err = run(capsys, "image", "pull", image, "-i", tmp_path / "inventory.ini")
    assert code == ExitCode.USAGE, err
    assert needle in one_error_line(err)
    assert out == ""


@pytest.mark.parametrize(
    ("archive", "needle"),
    [
        ("missing.tar", "missing.tar: no such file"),
        (".", "is not a regular file"),
        ("a\nb.tar", "is not a file name"),
    ],
)
def test_a_bad_archive_exits_2_with_one_line(capsys, tmp_path, no_play, archive, needle):
    (tmp_path / "inventory.ini").write_text(GOOD)
    code, _, err = run(capsys, "image", "pull", "ubuntu:22.04", "-i", tmp_path / "inventory.ini", "--archive", tmp_path / archive)
    assert code == ExitCode.USAGE, err
    assert needle in one_error_line(err)


def test_a_refusal_in_json_is_an_error_object(capsys, tmp_path, no_play):
    (tmp_path / "inventory.ini").write_text(GOOD)
    code, out, _ = run(capsys, "image", "pull", "a b", "-i", tmp_path / "inventory.ini", "-o", "json")
    assert code == ExitCode.USAGE
    doc = json.loads(out)
    assert doc["ok"] is False and doc["command"] == "image pull"
    assert doc["errors"][0]["code"] == 2


def test_without_an_inventory_it_says_so(capsys, tmp_path, monkeypatch, no_play):
    monkeypatch.delenv("MEGAPROV_INVENTORY", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    code, _, err = run(capsys, "image", "pull", "ubuntu:22.04")
    assert code == ExitCode.USAGE
    assert "megaprov image pull needs -i INVENTORY" in one_error_line(err)


def test_image_without_action_names_pull(capsys):
    code, _, err = run(capsys, "image")
    assert code == ExitCode.USAGE
    assert "`megaprov image pull`" in one_error_line(err)


def _answer(monkeypatch, stats, rc=0, failures=()):
    seen = {}

    def fake(playbook, inventory, extravars, report, hosts, collect=(), strategy="linear"):
        seen.update(playbook=playbook, inventory=inventory, extravars=dict(extravars), hosts=hosts)
        return runner.RunResult(
            status="successful" if rc == 0 else "failed",
            rc=rc,
            hosts=[],
            failures=list(failures),
            results=[],
            artifacts=Path("/tmp/artifacts"),
            seconds=1.0,
            data=stats,
            stats_seen=True,
        )

    monkeypatch.setattr(plays, "run", fake)
    return seen


def test_the_play_s_answer_is_one_line_per_fact(capsys, tmp_path, monkeypatch):
    (tmp_path / "inventory.ini").write_text(GOOD)
    mirror = "192.0.2.10:5000/docker.io/library/ubuntu:22.04"
    seen = _answer(
        monkeypatch,
        {"megaprov_image": {"mirror": mirror, "squashfs": "/shared/images/x.sqsh", "bytes": "77897053", "digest": DIGEST}},
    )
    code, out, err = run(capsys, "image", "pull", "ubuntu:22.04", "-i", tmp_path / "inventory.ini")
    assert code == ExitCode.OK, err
    assert seen["playbook"] == "image_pull.yml" and seen["hosts"] == 1
    assert seen["inventory"] == tmp_path / "inventory.ini"
    assert seen["extravars"]["image_registry_pull_reference"] == "docker.io/library/ubuntu:22.04"
    assert seen["extravars"]["image_registry_pull_archive"] == ""
    assert out.splitlines() == [
        "image: ubuntu:22.04",
        f"mirror: {mirror}",
        "enroot: 192.0.2.10:5000#docker.io/library/ubuntu:22.04",
        "squashfs: /shared/images/x.sqsh",
        "bytes: 77897053",
        f"digest: {DIGEST}",
    ]


def test_json_says_no_squashfs_as_null(capsys, tmp_path, monkeypatch):
    (tmp_path / "inventory.ini").write_text(GOOD)
    archive = tmp_path / "ubuntu.tar"
    archive.write_bytes(b"not read here")
    mirror = "192.0.2.10:5000/docker.io/library/ubuntu:22.04"
    seen = _answer(monkeypatch, {"megaprov_image": {"mirror": mirror, "squashfs": "", "bytes": 5, "digest": DIGEST}})
    code, out, _ = run(capsys, "image", "pull", "ubuntu:22.04", "-i", tmp_path / "inventory.ini", "--archive", archive, "-o", "json")
    assert code == ExitCode.OK
    assert seen["extravars"]["image_registry_pull_archive"] == str(archive)
    result = json.loads(out)["result"]
    assert result["squashfs"] is None and result["bytes"] == 5 and result["mirror"] == mirror


def test_a_play_without_its_answer_is_a_failed_run(capsys, tmp_path, monkeypatch):
    (tmp_path / "inventory.ini").write_text(GOOD)
    _answer(monkeypatch, {})
    code, _, err = run(capsys, "image", "pull", "ubuntu:22.04", "-i", tmp_path / "inventory.ini")
    assert code == ExitCode.RUN_FAILED
    assert "the play ended without saying where the image is" in one_error_line(err)


def test_a_failed_task_is_exit_3_with_the_task(capsys, tmp_path, monkeypatch):
    (tmp_path / "inventory.ini").write_text(GOOD)
    failure = runner.Failure(
        host="n1", task="Pull the image", play="Pull an image once for the cluster", message="manifest unknown", unreachable=False
    )
    _answer(monkeypatch, {}, rc=2, failures=[failure])
    code, _, err = run(capsys, "image", "pull", "ubuntu:22.04", "-i", tmp_path / "inventory.ini")
    assert code == ExitCode.RUN_FAILED
    assert "image pull ubuntu:22.04: n1:" in one_error_line(err) and "manifest unknown" in err


def bundle_with_image(directory: Path, reference: str) -> Path:
    from megaprov.cluster import bundle
    from tests.helpers.bundle import DEBIAN, fake_bundle

    fake_bundle(directory)
    rel = bundle.image_file(bundle.image_repository(reference) or "")
    (directory / "images").mkdir()
    (directory / rel).write_bytes(b"a podman save archive")
    git = dict(bundle.read_manifest(directory).versions.git)
    manifest = bundle.make_manifest(directory, DEBIAN, "amd64", git, {bundle.image_repository(reference) or "": bundle.ImageEntry(file=rel)})
    (directory / bundle.MANIFEST).write_text(bundle.manifest_json(manifest))
    return directory / rel


def test_an_image_from_a_bundle_is_loaded_from_its_checked_archive(capsys, tmp_path, monkeypatch):
    (tmp_path / "inventory.ini").write_text(GOOD)
    archive = bundle_with_image(tmp_path / "b", "nvcr.io/nvidia/pytorch:25.01-py3")
    mirror = "192.0.2.10:5000/nvcr.io/nvidia/pytorch:25.01-py3"
    seen = _answer(monkeypatch, {"megaprov_image": {"mirror": mirror, "squashfs": "", "bytes": 5, "digest": DIGEST}})
    code, _, err = run(capsys, "image", "pull", "nvcr.io/nvidia/pytorch:25.01-py3", "-i", tmp_path / "inventory.ini", "--bundle", tmp_path / "b")
    assert code == ExitCode.OK, err
    assert seen["extravars"]["image_registry_pull_archive"] == str(archive.resolve())


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (None, "carries no image docker.io/library/ubuntu:22.04 (it carries: nvcr.io/nvidia/pytorch:25.01-py3): build a bundle with it"),
        ("tamper", "differs from the manifest's size or sha256"),
        ("remove", "missing or not a plain file"),
        ("link", "plain files only"),
    ],
)
def test_a_bundle_without_the_image_or_with_a_changed_one_exits_2(capsys, tmp_path, no_play, change, needle):
    (tmp_path / "inventory.ini").write_text(GOOD)
    archive = bundle_with_image(tmp_path / "b", "nvcr.io/nvidia/pytorch:25.01-py3")
    image = "ubuntu:22.04" if change is None else "nvcr.io/nvidia/pytorch:25.01-py3"
    if change == "tamper":
        archive.write_bytes(b"a podman save archivX")
    elif change in ("remove", "link"):
        archive.unlink()
        if change == "link":
            (tmp_path / "elsewhere.tar").write_bytes(b"a podman save archive")
            archive.symlink_to(tmp_path / "elsewhere.tar")
    code, _, err = run(capsys, "image", "pull", image, "-i", tmp_path / "inventory.ini", "--bundle", tmp_path / "b")
    assert code == ExitCode.USAGE, err
    assert needle in one_error_line(err)


def test_archive_and_bundle_are_one_or_the_other(capsys, tmp_path, no_play):
    (tmp_path / "inventory.ini").write_text(GOOD)
    code, _, err = run(capsys, "image", "pull", "ubuntu:22.04", "-i", tmp_path / "inventory.ini", "--bundle", tmp_path, "--archive", tmp_path / "x")
    assert code == ExitCode.USAGE
    assert "argument --archive: not allowed with argument --bundle" in one_error_line(err)

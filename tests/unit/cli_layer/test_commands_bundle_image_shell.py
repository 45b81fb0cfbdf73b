"""`megaprov bundle build|verify`, `megaprov image pull` and `megaprov completion` from argv to what the operator reads:
the exit code, every line on stdout and stderr, the JSON document of ``-o json``, the --help of each command, and what
each handler hands to the layer below. Every command runs in-process through megaprov.cli.main with the real parser.

Stood in, only at the edge: megaprov.cluster.bundle's build and verify (they download packages and walk a bundle of
gigabytes) and megaprov.cluster.image's pull (a play on the head), each by a recorder that keeps its arguments and
returns a real result object (bundle.Built, bundle.Verified with a real manifest, image.Pulled) or raises what the real
one raises. Everything else is real: the inventory is read and validated by megaprov.cluster.inventory, a --bundle's
archive is checked against its manifest, the image facts of megaprov's state are forgotten on disk, and the completion
script is argcomplete's, checked by bash -n and answered by argcomplete over the real parser."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import argcomplete
import argcomplete.io
import pytest

from megaprov import output
from megaprov.cli import main
from megaprov.cluster import bundle, image
from megaprov.errors import EnvironmentProblem, ExitCode, HostsUnreachable, RunFailed, UsageError
from megaprov.training import imagefacts
from tests.cli.test_image_cli import bundle_with_image
from tests.helpers.bundle import fake_bundle

GOOD = "[head]\nn1 ansible_host=192.0.2.10\n[gpu_nodes]\nn1\n"
DIGEST = "sha256:" + "ab" * 32
PYTORCH = "nvcr.io/nvidia/pytorch:25.01-py3"
UBUNTU = "docker.io/library/ubuntu:22.04"
MIRROR = "192.0.2.10:5000/nvcr.io/nvidia/pytorch:25.01-py3"


@pytest.fixture(autouse=True)
def _env(tmp_path, monkeypatch):
    """As the benchmark runs: no colour, a known width; megaprov's state and config of this test alone, the current
    directory the test's own (relative paths resolve under it), and no default inventory."""
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("MEGAPROV_INVENTORY", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inventory.ini").write_text(GOOD)


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def envelope(out: str) -> dict:
    return json.loads(out)


def help_lines(capsys, *argv) -> list[str]:
    """The --help of a command as the operator reads it, each line stripped of its indentation."""
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    return [line.strip() for line in capsys.readouterr().out.splitlines()]


# ---- bundle build


class BuildRecorder:
    """bundle.build: keeps what it was handed, says two progress lines through the handler's callback, and returns
    the Built a build of two git mirrors, one source and an image reports."""

    def __init__(self, raises: BaseException | None = None, **built) -> None:
        self.calls: list[tuple] = []
        self.raises = raises
        self.built = built

    def __call__(self, inventory, out, dist, arch, security, progress, images):
        self.calls.append((inventory, out, dist, arch, security, list(images)))
        progress(f"resolving what {inventory} fetches for {dist.key} {arch}")
        progress("apt: Packages.gz")
        if self.raises is not None:
            raise self.raises
        fields = {
            "directory": str(out),
            "files": 12345,
            "bytes": 1_234_550_500,
            "seconds": {"resolve": 61.7, "apt": 301.2, "wheels": 0.4},
            "apt": 812,
            "wheels": 64,
            "git": ["megatron", "nccl-tests"],
            "sources": ["pyxis", "enroot"],
            "images": [PYTORCH, UBUNTU],
        }
        return bundle.Built(**{**fields, **self.built})


@pytest.fixture
def build(monkeypatch):
    recorder = BuildRecorder()
    monkeypatch.setattr(bundle, "build", recorder)
    return recorder


def test_bundle_build_hands_down_the_inventory_made_absolute_and_the_defaults(capsys, tmp_path, build):
    code, out, err = run(capsys, "bundle", "build", "-i", "inventory.ini", "--dir", "site")
    assert code == ExitCode.OK, err
    assert build.calls == [(tmp_path / "inventory.ini", Path("site"), bundle.DISTRIBUTIONS["debian-12"], "amd64", None, [])]
    assert out == (
        "bundle site: 12,345 files, 1,234.6 MB (812 packages, 64 wheels, git: megatron, nccl-tests, sources: pyxis, enroot, "
        f"images: {PYTORCH}, {UBUNTU}); resolve 62s, apt 301s, wheels 0s\n"
    )
    assert err == f"bundle: resolving what {tmp_path / 'inventory.ini'} fetches for debian-12 amd64\nbundle: apt: Packages.gz\n"


def test_bundle_build_maps_each_flag(capsys, tmp_path, build):
    code, _, err = run(
        capsys,
        "bundle",
        "build",
        "--inventory",
        tmp_path / "inventory.ini",
        "--dir",
        tmp_path / "b",
        "--distribution",
        "noble",
        "--arch",
        "arm64",
        "--security-mirror",
        "",
        "--image",
        PYTORCH,
        "--image",
        "ubuntu:22.04",
    )
    assert code == ExitCode.OK, err
    assert build.calls == [(tmp_path / "inventory.ini", tmp_path / "b", bundle.DISTRIBUTIONS["ubuntu-24.04"], "arm64", "", [PYTORCH, "ubuntu:22.04"])]
    assert err.splitlines()[0] == f"bundle: resolving what {tmp_path / 'inventory.ini'} fetches for ubuntu-24.04 arm64"


def test_bundle_build_gives_a_security_mirror_as_written(capsys, tmp_path, build):
    code, _, _ = run(capsys, "bundle", "build", "-i", "inventory.ini", "--dir", "b", "--security-mirror", "http://mirror.example/debian-security")
    assert code == ExitCode.OK
    assert build.calls[0][4] == "http://mirror.example/debian-security"


def test_bundle_build_takes_the_default_inventory(capsys, tmp_path, monkeypatch, build):
    monkeypatch.setenv("MEGAPROV_INVENTORY", "inventory.ini")
    code, _, _ = run(capsys, "bundle", "build", "--dir", "b")
    assert code == ExitCode.OK
    assert build.calls[0][:2] == (tmp_path / "inventory.ini", Path("b"))


def test_bundle_build_says_none_for_each_part_it_did_not_carry(capsys, monkeypatch):
    recorder = BuildRecorder(git=[], sources=[], images=[], files=3, bytes=999_000, seconds={"resolve": 2.2})
    monkeypatch.setattr(bundle, "build", recorder)
    code, out, _ = run(capsys, "bundle", "build", "-i", "inventory.ini", "--dir", "b")
    assert code == ExitCode.OK
    assert out == "bundle b: 3 files, 1.0 MB (812 packages, 64 wheels, git: none, sources: none, images: none); resolve 2s\n"


def test_bundle_build_prints_a_directory_with_brackets_as_it_is(capsys, tmp_path, build):
    """The directory is the operator's: rich markup in it ([v2]) is text, not a style."""
    code, out, _ = run(capsys, "bundle", "build", "-i", "inventory.ini", "--dir", "site[v2]")
    assert code == ExitCode.OK
    assert build.calls[0][1] == Path("site[v2]")
    assert out.startswith("bundle site[v2]: 12,345 files, 1,234.6 MB (")


def test_bundle_build_in_json_is_the_built_document_and_nothing_on_stderr(capsys, tmp_path, build):
    code, out, err = run(capsys, "bundle", "build", "-i", "inventory.ini", "--dir", "b", "-o", "json")
    assert code == ExitCode.OK
    assert err == ""  # the progress lines are silent beside the JSON document
    assert envelope(out) == {
        "megaprov": output.JSON_SCHEMA_VERSION,
        "command": "bundle build",
        "ok": True,
        "result": {
            "directory": "b",
            "files": 12345,
            "bytes": 1_234_550_500,
            "seconds": {"resolve": 61.7, "apt": 301.2, "wheels": 0.4},
            "apt": 812,
            "wheels": 64,
            "git": ["megatron", "nccl-tests"],
            "sources": ["pyxis", "enroot"],
            "images": [PYTORCH, UBUNTU],
        },
    }


def test_bundle_build_without_dir_is_usage_before_anything_is_built(capsys, build):
    code, out, err = run(capsys, "bundle", "build", "-i", "inventory.ini")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == "megaprov: error: megaprov bundle build needs --dir DIR: give a new directory for the bundle (-o is the report's format)\n"
    assert build.calls == []


def test_bundle_build_without_dir_in_json_is_the_usage_error_object(capsys, build):
    code, out, _ = run(capsys, "bundle", "build", "-i", "inventory.ini", "-o", "json")
    assert code == ExitCode.USAGE
    error = {
        "code": 2,
        "kind": "usage",
        "message": "megaprov bundle build needs --dir DIR",
        "fix": "give a new directory for the bundle (-o is the report's format)",
    }
    assert envelope(out) == {
        "megaprov": output.JSON_SCHEMA_VERSION,
        "command": "bundle build",
        "ok": False,
        "result": {},
        "error": error,
        "errors": [error],
    }


def test_bundle_build_without_an_inventory_says_where_one_is_set(capsys, tmp_path, build):
    code, _, err = run(capsys, "bundle", "build", "--dir", "b")
    assert code == ExitCode.USAGE
    assert err == (
        "megaprov: error: megaprov bundle build needs -i INVENTORY: pass the cluster's inventory, or set MEGAPROV_INVENTORY or "
        f'inventory = "PATH" in {tmp_path / "config" / "megaprov" / "config.toml"}\n'
    )
    assert build.calls == []


def test_bundle_build_for_an_unknown_distribution_names_the_ones_it_knows(capsys, build):
    code, _, err = run(capsys, "bundle", "build", "-i", "inventory.ini", "--dir", "b", "--distribution", "centos-7")
    known = ", ".join(f"{d.key} ({d.codename})" for d in bundle.DISTRIBUTIONS.values())
    assert code == ExitCode.USAGE
    assert err == f"megaprov: error: --distribution 'centos-7' is not one a bundle can be built for: use {known}\n"
    assert build.calls == []


@pytest.mark.parametrize(
    ("raised", "code"),
    [
        (bundle.BundleError("bundle b: git/x.git is a link", "remove it"), ExitCode.USAGE),
        (EnvironmentProblem("podman save: podman is not installed", "install podman"), ExitCode.ENVIRONMENT),
        (RunFailed("images: pulling x failed", "check the registry"), ExitCode.RUN_FAILED),
    ],
)
def test_bundle_build_refused_below_is_its_exit_code_and_one_line(capsys, monkeypatch, raised, code):
    monkeypatch.setattr(bundle, "build", BuildRecorder(raises=raised))
    got, out, err = run(capsys, "bundle", "build", "-i", "inventory.ini", "--dir", "b")
    assert (got, out) == (code, "")
    assert err.splitlines()[-1] == f"megaprov: error: {raised.message}: {raised.hint}"
    got, out, err = run(capsys, "bundle", "build", "-i", "inventory.ini", "--dir", "b", "-o", "json")
    assert got == code and err == f"megaprov: error: {raised.message}: {raised.hint}\n"
    assert envelope(out)["error"] == {"code": int(code), "kind": envelope(out)["error"]["kind"], "message": raised.message, "fix": raised.hint}


def test_bundle_build_interrupted_exits_130(capsys, monkeypatch):
    monkeypatch.setattr(bundle, "build", BuildRecorder(raises=KeyboardInterrupt()))
    code, out, err = run(capsys, "bundle", "build", "-i", "inventory.ini", "--dir", "b")
    assert (code, out) == (ExitCode.INTERRUPTED, "")
    assert err.splitlines()[-1] == "megaprov: interrupted"


# ---- bundle verify


class VerifyRecorder:
    def __init__(self, manifest, raises: BaseException | None = None) -> None:
        self.calls: list[tuple] = []
        self.manifest = manifest
        self.raises = raises

    def __call__(self, directory, inventory=None):
        self.calls.append((directory, inventory))
        if self.raises is not None:
            raise self.raises
        return bundle.Verified(str(directory), 1234, 56_750_050, 0.44, self.manifest)


@pytest.fixture
def verify(tmp_path, monkeypatch):
    manifest = bundle.read_manifest(fake_bundle(tmp_path / "real"))
    recorder = VerifyRecorder(manifest)
    monkeypatch.setattr(bundle, "verify", recorder)
    return recorder


def test_bundle_verify_without_an_inventory_checks_the_files_alone(capsys, monkeypatch, verify):
    monkeypatch.setenv("MEGAPROV_INVENTORY", "inventory.ini")  # verify takes -i only, never the default
    code, out, err = run(capsys, "bundle", "verify", "site")
    assert (code, err) == (ExitCode.OK, "")
    assert verify.calls == [(Path("site"), None)]
    assert out == "bundle site: 1,234 files, 56.8 MB match the manifest (0.4s)\n"


def test_bundle_verify_with_an_inventory_says_it_holds_what_it_asks_for(capsys, tmp_path, verify):
    code, out, _ = run(capsys, "bundle", "verify", "site", "-i", "inventory.ini")
    assert code == ExitCode.OK
    assert verify.calls == [(Path("site"), tmp_path / "inventory.ini")]
    assert out == f"bundle site: 1,234 files, 56.8 MB match the manifest, and it holds what {tmp_path / 'inventory.ini'} asks for (0.4s)\n"


def test_bundle_verify_prints_a_directory_with_brackets_as_it_is(capsys, verify):
    code, out, _ = run(capsys, "bundle", "verify", "b[v2]")
    assert code == ExitCode.OK
    assert out == "bundle b[v2]: 1,234 files, 56.8 MB match the manifest (0.4s)\n"


def test_bundle_verify_in_json_is_the_directory_files_bytes_and_seconds(capsys, tmp_path, verify):
    code, out, err = run(capsys, "bundle", "verify", tmp_path / "b", "-i", "inventory.ini", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    assert envelope(out) == {
        "megaprov": output.JSON_SCHEMA_VERSION,
        "command": "bundle verify",
        "ok": True,
        "result": {"directory": str(tmp_path / "b"), "files": 1234, "bytes": 56_750_050, "seconds": 0.44},
    }


def test_bundle_verify_of_a_bundle_with_problems_is_one_line_each(capsys, tmp_path, monkeypatch):
    problem = bundle.BundleError("bundle b: apt/jq.deb differs from the manifest", bundle.REBUILD)
    problem.details = ["wheels/six.whl: not in the manifest"]
    monkeypatch.setattr(bundle, "verify", VerifyRecorder(None, raises=problem))
    code, out, err = run(capsys, "bundle", "verify", "b")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == (
        f"megaprov: error: bundle b: apt/jq.deb differs from the manifest: {bundle.REBUILD}\nmegaprov: error: wheels/six.whl: not in the manifest\n"
    )
    code, out, _ = run(capsys, "bundle", "verify", "b", "-o", "json")
    doc = envelope(out)
    assert (code, doc["command"], doc["ok"]) == (ExitCode.USAGE, "bundle verify", False)
    assert [e["message"] for e in doc["errors"]] == ["bundle b: apt/jq.deb differs from the manifest", "wheels/six.whl: not in the manifest"]


def test_bundle_verify_interrupted_exits_130(capsys, monkeypatch):
    monkeypatch.setattr(bundle, "verify", VerifyRecorder(None, raises=KeyboardInterrupt()))
    code, out, err = run(capsys, "bundle", "verify", "b")
    assert (code, out, err) == (ExitCode.INTERRUPTED, "", "megaprov: interrupted\n")


# ---- image pull


class PullRecorder:
    """image.pull: keeps what it was handed and answers as the play does (or raises what a failed play raises)."""

    def __init__(self, squashfs: str = "/shared/images/nvcr.io+nvidia+pytorch+25.01-py3.sqsh", raises: BaseException | None = None) -> None:
        self.calls: list[tuple] = []
        self.squashfs = squashfs
        self.raises = raises

    def __call__(self, inventory, ref, archive, report):
        self.calls.append((inventory, ref, archive, report))
        if self.raises is not None:
            raise self.raises
        return image.Pulled(image=ref, mirror=MIRROR, squashfs=self.squashfs, bytes=77897053, digest=DIGEST)


@pytest.fixture
def pull(monkeypatch):
    recorder = PullRecorder()
    monkeypatch.setattr(image, "pull", recorder)
    return recorder


def facts(tmp_path, *names: str) -> list[Path]:
    """Image facts a job's probe recorded for these names (megaprov's state of the test's inventory)."""
    paths = [imagefacts.record_path(tmp_path / "inventory.ini", name) for name in names]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}\n")
    return paths


def test_image_pull_hands_down_the_inventory_and_reference_and_prints_one_line_per_fact(capsys, tmp_path, pull):
    code, out, err = run(capsys, "image", "pull", PYTORCH, "-i", "inventory.ini")
    assert (code, err) == (ExitCode.OK, "")
    assert pull.calls == [(tmp_path / "inventory.ini", PYTORCH, None, output.SHOWN)]
    assert out.splitlines() == [
        f"image: {PYTORCH}",
        f"mirror: {MIRROR}",
        "enroot: 192.0.2.10:5000#nvcr.io/nvidia/pytorch:25.01-py3",
        "squashfs: /shared/images/nvcr.io+nvidia+pytorch+25.01-py3.sqsh",
        "bytes: 77897053",
        f"digest: {DIGEST}",
    ]


def test_image_pull_without_enroot_says_so_and_json_says_null(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(image, "pull", PullRecorder(squashfs=""))
    code, out, _ = run(capsys, "image", "pull", PYTORCH, "-i", "inventory.ini")
    assert code == ExitCode.OK
    assert out.splitlines()[3] == "squashfs: none (enroot is not installed on the head)"
    code, out, err = run(capsys, "image", "pull", PYTORCH, "-i", "inventory.ini", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    assert envelope(out)["result"]["squashfs"] is None


def test_image_pull_in_json_is_the_pulled_document_and_the_play_runs_silent(capsys, tmp_path, pull):
    code, out, err = run(capsys, "image", "pull", PYTORCH, "-i", "inventory.ini", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    assert pull.calls == [(tmp_path / "inventory.ini", PYTORCH, None, output.SILENT)]
    assert envelope(out) == {
        "megaprov": output.JSON_SCHEMA_VERSION,
        "command": "image pull",
        "ok": True,
        "result": {
            "image": PYTORCH,
            "mirror": MIRROR,
            "enroot": "192.0.2.10:5000#nvcr.io/nvidia/pytorch:25.01-py3",
            "squashfs": "/shared/images/nvcr.io+nvidia+pytorch+25.01-py3.sqsh",
            "bytes": 77897053,
            "digest": DIGEST,
        },
    }


def test_image_pull_forgets_what_probes_recorded_for_the_name_and_its_squashfs(capsys, tmp_path, pull):
    name, squashfs, other = facts(tmp_path, PYTORCH, "/shared/images/nvcr.io+nvidia+pytorch+25.01-py3.sqsh", "ubuntu:22.04")
    code, _, _ = run(capsys, "image", "pull", PYTORCH, "-i", "inventory.ini")
    assert code == ExitCode.OK
    assert (name.exists(), squashfs.exists(), other.exists()) == (False, False, True)


def test_image_pull_that_fails_keeps_the_recorded_facts(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(image, "pull", PullRecorder(raises=RunFailed(f"image pull {PYTORCH}: n1: manifest unknown", "check the tag")))
    (name,) = facts(tmp_path, PYTORCH)
    code, out, err = run(capsys, "image", "pull", PYTORCH, "-i", "inventory.ini")
    assert (code, out) == (ExitCode.RUN_FAILED, "")
    assert err == f"megaprov: error: image pull {PYTORCH}: n1: manifest unknown: check the tag\n"
    assert name.exists()


def test_image_pull_of_an_archive_hands_down_its_absolute_path(capsys, tmp_path, pull):
    (tmp_path / "pytorch.tar").write_bytes(b"a podman save archive")
    code, _, err = run(capsys, "image", "pull", "ubuntu:22.04", "-i", "inventory.ini", "--archive", "pytorch.tar")
    assert code == ExitCode.OK, err
    assert pull.calls == [(tmp_path / "inventory.ini", "ubuntu:22.04", tmp_path / "pytorch.tar", output.SHOWN)]


def test_image_pull_from_a_bundle_hands_down_the_absolute_path_of_its_checked_archive(capsys, tmp_path, pull):
    archive = bundle_with_image(tmp_path / "b", PYTORCH)
    code, _, err = run(capsys, "image", "pull", PYTORCH, "-i", "inventory.ini", "--bundle", "b")
    assert code == ExitCode.OK, err
    assert pull.calls == [(tmp_path / "inventory.ini", PYTORCH, archive, output.SHOWN)]


def test_image_pull_of_a_squashfs_path_is_refused_with_the_way_to_give_one(capsys, pull):
    code, out, err = run(capsys, "image", "pull", "/shared/images/x.sqsh", "-i", "inventory.ini")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == (
        "megaprov: error: IMAGE /shared/images/x.sqsh is a squashfs file: image pull fetches from a registry or an archive: "
        "give a registry reference (nvcr.io/nvidia/pytorch:25.01-py3); a job spec's launch.container takes the .sqsh as it is\n"
    )
    assert pull.calls == []


def test_image_pull_refuses_a_bad_reference_before_reading_the_inventory(capsys, pull):
    """image.names refuses a digest without a tag before -i is looked for: no inventory is needed to hear it."""
    code, _, err = run(capsys, "image", "pull", f"nvcr.io/nvidia/pytorch@{DIGEST}")
    assert code == ExitCode.USAGE
    assert err.startswith(f"megaprov: error: IMAGE nvcr.io/nvidia/pytorch@{DIGEST} has a digest and no tag")
    assert pull.calls == []


def test_image_pull_refuses_an_inventory_with_a_bad_variable_before_the_play(capsys, tmp_path, pull):
    (tmp_path / "inventory.ini").write_text(GOOD + "[all:vars]\nmegaprov_gpus_per_node=lots\n")
    code, _, err = run(capsys, "image", "pull", PYTORCH, "-i", "inventory.ini")
    assert code == ExitCode.USAGE
    assert err == (
        f"megaprov: error: {tmp_path / 'inventory.ini'} [all:vars]: megaprov_gpus_per_node='lots' must be a whole number: "
        "GPUs each gpu_nodes host must have (0: any).\n"
    )
    assert pull.calls == []


@pytest.mark.parametrize(
    ("raised", "code"),
    [
        (HostsUnreachable("image pull ubuntu:22.04: n1 unreachable", "check SSH to the head"), ExitCode.UNREACHABLE),
        (UsageError("image pull ubuntu:22.04: no such tag", "check the tag"), ExitCode.USAGE),
        (KeyboardInterrupt(), ExitCode.INTERRUPTED),
    ],
)
def test_image_pull_refused_or_interrupted_below_is_its_exit_code(capsys, monkeypatch, raised, code):
    monkeypatch.setattr(image, "pull", PullRecorder(raises=raised))
    got, out, err = run(capsys, "image", "pull", "ubuntu:22.04", "-i", "inventory.ini")
    assert (got, out) == (code, "")
    line = "megaprov: interrupted" if code == ExitCode.INTERRUPTED else f"megaprov: error: {raised.message}: {raised.hint}"
    assert err == line + "\n"


# ---- completion


def test_completion_bash_prints_argcompletes_script_for_megaprov_as_it_is(capsys, tmp_path):
    code, out, err = run(capsys, "completion", "bash")
    assert (code, err) == (ExitCode.OK, "")
    lines = out.splitlines()
    assert lines[0] == "#compdef megaprov"
    assert "    complete -o nospace -o default -o bashdefault -F _python_argcomplete megaprov" in lines
    assert "        compdef _python_argcomplete megaprov" in lines
    assert out.endswith("\n") and not out.endswith("\n\n")  # printed as it is, no newline added
    (tmp_path / "megaprov.bash").write_text(out)
    assert subprocess.run(["bash", "-n", str(tmp_path / "megaprov.bash")], capture_output=True, text=True).returncode == 0


def test_completion_zsh_is_the_script_that_registers_with_compdef(capsys, tmp_path):
    code, out, _ = run(capsys, "completion", "zsh")
    assert code == ExitCode.OK
    assert out.splitlines()[0] == "#compdef megaprov" and "        compdef _python_argcomplete megaprov" in out.splitlines()
    if shutil.which("zsh"):
        (tmp_path / "_megaprov").write_text(out)
        assert subprocess.run(["zsh", "-n", str(tmp_path / "_megaprov")], capture_output=True).returncode == 0


def test_completion_fish_is_a_fish_function_for_megaprov(capsys, tmp_path):
    code, out, _ = run(capsys, "completion", "fish")
    assert code == ExitCode.OK
    lines = out.splitlines()
    assert "function __fish_megaprov_complete" in lines
    assert "    set -lx _ARGCOMPLETE_SHELL fish" in lines
    assert "        megaprov 8>&1 9>&2 1>/dev/null 2>&1" in lines
    assert lines[-1] == "complete --command megaprov -f -a '(__fish_megaprov_complete)'"
    assert "compdef" not in out and "#compdef" not in out
    assert out.endswith("'(__fish_megaprov_complete)'\n")
    if shutil.which("fish"):
        (tmp_path / "megaprov.fish").write_text(out)
        assert subprocess.run(["fish", "-n", str(tmp_path / "megaprov.fish")], capture_output=True).returncode == 0


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_in_json_carries_the_shell_and_the_script_printed_in_text(capsys, shell):
    code, text, _ = run(capsys, "completion", shell)
    code, out, err = run(capsys, "completion", shell, "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    assert envelope(out) == {"megaprov": output.JSON_SCHEMA_VERSION, "command": "completion", "ok": True, "result": {"shell": shell, "code": text}}


@pytest.mark.parametrize(
    ("shell", "line"),
    [
        (
            "bsh",
            "megaprov: error: megaprov completion: argument shell: invalid choice: 'bsh': did you mean 'bash'? (see `megaprov completion --help`)",
        ),
        ("tcsh", "megaprov: error: megaprov completion: argument shell: invalid choice: 'tcsh': choose from bash, zsh, fish"),
    ],
)
def test_completion_for_another_shell_is_usage_with_the_choices(capsys, shell, line):
    code, out, err = run(capsys, "completion", shell)
    assert (code, out, err) == (ExitCode.USAGE, "", line + "\n")


def complete(monkeypatch, line: str) -> list[str]:
    """What the shell's <TAB> after ``line`` offers: argcomplete answering over the parser megaprov builds, as the
    script above asks it to (its answer goes to the shell's stream, here a buffer)."""
    from megaprov.commands import build_parser

    for name, value in {
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_SHELL": "bash",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_IFS": "\n",
    }.items():
        monkeypatch.setenv(name, value)
    stream = io.StringIO()

    class Done(Exception):
        pass

    def finish(code: int = 0) -> None:
        raise Done(code)

    class Finder(argcomplete.CompletionFinder):
        def _init_debug_stream(self) -> None:
            """argcomplete's documented override: its debug lines to a buffer, not to fd 9 (pytest's own)."""

    monkeypatch.setattr(argcomplete.io, "debug_stream", io.StringIO())
    with pytest.raises(Done):
        Finder()(build_parser(), exit_method=finish, output_stream=stream)
    return stream.getvalue().split("\n")


@pytest.mark.parametrize(
    ("line", "offered"),
    [
        ("megaprov compl", ["completion "]),
        ("megaprov completion ", ["-h", "--help", "--debug", "-o", "--output", "bash", "zsh", "fish"]),
        ("megaprov bundle ", ["-h", "--help", "--debug", "-o", "--output", "build", "verify"]),
        (
            "megaprov bundle build --",
            ["--help", "--debug", "--output", "--inventory", "--dir", "--distribution", "--arch", "--security-mirror", "--image"],
        ),
        ("megaprov bundle verify --", ["--help", "--debug", "--output", "--inventory"]),
        ("megaprov image ", ["-h", "--help", "--debug", "-o", "--output", "pull"]),
        ("megaprov image pull --", ["--help", "--debug", "--output", "--inventory", "--archive", "--bundle"]),
        ("megaprov image pull --archive x.tar --", ["--help", "--debug", "--output", "--inventory", "--archive"]),  # not --bundle
    ],
)
def test_tab_completes_the_commands_actions_and_flags_of_the_parser(monkeypatch, line, offered):
    assert complete(monkeypatch, line) == offered


# ---- what --help says


def test_top_level_help_lists_bundle_image_and_completion(capsys):
    lines = help_lines(capsys)
    assert "bundle              offline bundle for air-gapped sites: what the bootstrap fetches, with a manifest" in lines
    assert "image               container images for training: fetched once per cluster into the head's registry" in lines
    assert "completion          print the shell code that completes megaprov's commands, flags and choices (argcomplete)" in lines


def test_bundle_help_lists_build_and_verify_with_examples(capsys):
    lines = help_lines(capsys, "bundle")
    assert lines[0] == "usage: megaprov bundle [-h] [--debug] [-o {text,json}] ACTION ..."
    assert "Offline bundle for air-gapped sites: what the bootstrap fetches, with a manifest." in lines
    build = "collect what the inventory's bootstrap fetches (apt, wheels, git, sources) and container images into a new directory"
    assert f"build               {build}" in lines
    assert "verify              check a bundle's files against its manifest, and its versions against an inventory" in lines
    assert lines[lines.index("examples:") + 1 :] == [
        "megaprov bundle build -i inventory.ini --dir bundle/",
        "megaprov bundle verify bundle/ -i inventory.ini",
    ]


def test_bundle_build_help_says_each_flag(capsys):
    lines = help_lines(capsys, "bundle", "build")
    assert lines[0] == (
        "usage: megaprov bundle build [-h] [--debug] [-o {text,json}] [-i INVENTORY] [--dir DIR] [--distribution DISTRIBUTION] [--arch ARCH] "
        "[--security-mirror SECURITY_MIRROR] [--image IMAGE]"
    )
    for line in [
        "Collect what the inventory's bootstrap fetches (apt, wheels, git, sources) and container images into a new directory.",
        "the cluster's inventory (default: $MEGAPROV_INVENTORY or the config file's)",
        "--dir DIR             new directory for the bundle",
        "--distribution DISTRIBUTION",
        "the nodes' distribution: debian-12 (default), ubuntu-22.04, ubuntu-24.04",
        "--arch ARCH           the nodes' architecture: amd64 (default) or arm64",
        "--security-mirror SECURITY_MIRROR",
        "the distribution's security archive ('' for none; default: the distribution's own)",
        "--image IMAGE         a container image to carry (REGISTRY/NAME:TAG; this machine's podman saves it, pulling it unless it holds it); "
        "repeatable",
    ]:
        assert line in lines
    assert lines[lines.index("examples:") + 1 :] == [
        "megaprov bundle build -i inventory.ini --dir bundle/",
        f"megaprov bundle build -i inventory.ini --dir bundle/ --image {PYTORCH}",
        "megaprov bundle build -i inventory.ini --dir bundle/ --distribution ubuntu-24.04 --arch arm64 -o json",
    ]


def test_bundle_verify_help_says_what_the_inventory_adds(capsys):
    lines = help_lines(capsys, "bundle", "verify")
    assert lines[0] == "usage: megaprov bundle verify [-h] [--debug] [-o {text,json}] [-i INVENTORY] DIR"
    assert "Check a bundle's files against its manifest, and its versions against an inventory." in lines
    assert "also check that the bundle holds the versions this inventory asks for" in lines
    assert lines[lines.index("examples:") + 1 :] == ["megaprov bundle verify bundle/", "megaprov bundle verify bundle/ -i inventory.ini -o json"]


def test_image_help_lists_pull_with_an_example(capsys):
    lines = help_lines(capsys, "image")
    assert lines[0] == "usage: megaprov image [-h] [--debug] [-o {text,json}] ACTION ..."
    assert "Container images for training: fetched once per cluster into the head's registry." in lines
    pull = "pull an image on the head (or load an archive) into the head's registry, and import it for enroot where installed"
    assert f"pull                {pull}" in lines
    assert lines[lines.index("examples:") + 1 :] == [f"megaprov image pull {PYTORCH} -i inventory.ini"]


def test_image_pull_help_says_the_image_and_its_two_sources(capsys):
    lines = help_lines(capsys, "image", "pull")
    assert lines[0] == "usage: megaprov image pull [-h] [--debug] [-o {text,json}] [-i INVENTORY] [--archive FILE | --bundle DIR] IMAGE"
    for line in [
        "Pull an image on the head (or load an archive) into the head's registry, and import it for enroot where installed.",
        "IMAGE                 a registry reference, REGISTRY/NAME:TAG (docker.io when no registry is named)",
        "the cluster's inventory (default: $MEGAPROV_INVENTORY or the config file's)",
        "--archive FILE        a `podman save`/`docker save` archive here, loaded on the head instead of pulling",
        "--bundle DIR          an offline bundle here that carries the image (bundle build --image), loaded on the head",
    ]:
        assert line in lines
    assert lines[lines.index("examples:") + 1 :] == [
        f"megaprov image pull {PYTORCH} -i inventory.ini",
        "megaprov image pull ubuntu:22.04 -i inventory.ini -o json",
        f"megaprov image pull {PYTORCH} -i inventory.ini --archive pytorch.tar   # air-gapped",
        f"megaprov image pull {PYTORCH} -i inventory.ini --bundle bundle/   # from an offline bundle",
    ]


def test_completion_help_says_the_shells_and_where_the_script_goes(capsys):
    lines = help_lines(capsys, "completion")
    assert lines[0] == "usage: megaprov completion [-h] [--debug] [-o {text,json}] {bash,zsh,fish}"
    assert "Print the shell code that completes megaprov's commands, flags and choices (argcomplete)." in lines
    assert "{bash,zsh,fish}       the shell: bash, zsh or fish" in lines
    assert lines[lines.index("examples:") + 1 :] == [
        'eval "$(megaprov completion bash)"                     # in ~/.bashrc',
        'eval "$(megaprov completion zsh)"                      # in ~/.zshrc',
        "megaprov completion fish > ~/.config/fish/completions/megaprov.fish",
    ]


def test_each_command_runs_its_handler_under_its_path(capsys, monkeypatch, build, verify, pull):
    """The JSON envelope names the command by its full path, from the parser's defaults, also when a handler refuses."""
    for argv, command in [
        (["bundle", "build", "-i", "inventory.ini"], "bundle build"),
        (["bundle", "verify"], "bundle verify"),
        (["image", "pull", "/x.sqsh", "-i", "inventory.ini"], "image pull"),
        (["completion"], "completion"),
    ]:
        code, out, _ = run(capsys, *argv, "-o", "json")
        assert code == ExitCode.USAGE
        assert envelope(out)["command"] == command

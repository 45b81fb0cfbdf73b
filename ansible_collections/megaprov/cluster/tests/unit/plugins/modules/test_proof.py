"""The proof module (ansible_collections/megaprov/cluster/plugins/modules/proof.py): digests, the decision whether a
recorded proof still holds, what a record keeps, and main() end to end (query, record, query again, drift, force)."""

import json
import os
import stat
from pathlib import Path

import pytest

from ansible_collections.megaprov.cluster.plugins.modules import proof
from ansible_collections.megaprov.cluster.tests.unit.plugins.modules import utils as modules


def test_digest_ignores_key_order_but_not_values():
    assert proof.digest({"a": 1, "b": [2, 3]}) == proof.digest({"b": [2, 3], "a": 1})
    assert proof.digest({"a": 1}) != proof.digest({"a": 2})
    assert proof.digest([2, 3]) != proof.digest([3, 2])


MOUNTS = """sysfs /sys sysfs rw,nosuid 0 0
10.0.0.1:/export /shared nfs4 rw,hard,nconnect=4 0 0
fuse /with\\040space fuse rw 0 0
"""


@pytest.mark.parametrize(
    ("point", "line"),
    [
        ("/shared", "10.0.0.1:/export nfs4 rw,hard,nconnect=4"),
        ("/shared/", "10.0.0.1:/export nfs4 rw,hard,nconnect=4"),
        ("/with space", "fuse fuse rw"),
        ("/elsewhere", "not mounted"),
    ],
)
def test_mount_line(point, line):
    assert proof.mount_line(MOUNTS, point) == line


def test_the_last_mount_on_a_point_wins():
    text = MOUNTS + "10.0.0.2:/other /shared nfs4 ro 0 0\n"
    assert proof.mount_line(text, "/shared") == "10.0.0.2:/other nfs4 ro"


def test_shape_reads_models_memory_and_gpus():
    cpuinfo = "processor : 0\nmodel name\t: EPYC 9654\ncpu MHz : 2400.1\nprocessor : 1\nmodel name\t: EPYC 9654\ncpu MHz : 3100.9\n"
    got = proof.shape(cpuinfo, 2, "MemTotal:       16309212 kB\nMemFree: 1 kB\n", ["0000:c1:00.0 0x2330"], "6.1.0")
    assert got == {"cpu_models": ["EPYC 9654"], "cpus": 2, "memory_gib": 15, "nvidia_pci": ["0000:c1:00.0 0x2330"], "kernel": "6.1.0"}
    # The clock speed moves all the time; the shape must not.
    assert proof.shape(cpuinfo.replace("3100.9", "800.0"), 2, "MemTotal: 16309212 kB\n", [], "6.1.0")["cpu_models"] == ["EPYC 9654"]


@pytest.mark.parametrize(
    ("record", "digests", "force", "expected"),
    [
        (None, {"inputs": "a"}, False, (False, "no record")),
        ({"passed": False, "digests": {"inputs": "a"}}, {"inputs": "a"}, False, (False, "no record")),
        ({"passed": True, "digests": {"inputs": "a"}}, {"inputs": "a"}, False, (True, "inputs unchanged")),
        ({"passed": True, "digests": {"inputs": "a"}}, {"inputs": "a"}, True, (False, "forced (--verify)")),
        (
            {"passed": True, "digests": {"inputs": "a", "path /x": "1"}},
            {"inputs": "b", "path /x": "2"},
            False,
            (False, "inputs changed: inputs, path /x"),
        ),
        ({"passed": True, "digests": {"inputs": "a"}}, {"inputs": "a", "path /new": "1"}, False, (False, "inputs changed: path /new")),
        ({"passed": True, "digests": "garbage"}, {"inputs": "a"}, False, (False, "inputs changed: inputs")),
    ],
)
def test_compare(record, digests, force, expected):
    assert proof.compare(record, digests, force) == expected


def test_keep_drops_ansibles_own_keys():
    registered = {
        "pairs": [1],
        "changed": False,
        "failed": False,
        "invocation": {"module_args": {}},
        "_ansible_no_log": False,
        "ansible_facts": {"x": 1},
    }
    assert proof.keep(registered) == {"pairs": [1]}


def test_summary():
    assert proof.summary(True, "inputs unchanged", "2026-01-01T00:00:00Z") == "verified at 2026-01-01T00:00:00Z, inputs unchanged; --verify re-proves"
    assert proof.summary(False, "no record", "") == "proved this run (no record)"


def test_path_digest_sees_content_listing_and_absence(tmp_path: Path):
    f = tmp_path / "f"
    f.write_text("one")
    before = proof.path_digest(str(f))
    f.write_text("two")
    assert proof.path_digest(str(f)) != before
    listing = proof.path_digest(str(tmp_path))
    (tmp_path / "pkg-1.0.dist-info").mkdir()
    assert proof.path_digest(str(tmp_path)) != listing
    assert proof.path_digest(str(tmp_path / "missing")) == "absent"


def run(args, capsys, check_mode=False):
    if check_mode:
        args = {**args, "_ansible_check_mode": True}
    return modules.run_module(proof.main, args, capsys)


def test_query_record_query_then_drift(tmp_path: Path, capsys):
    watched = tmp_path / "watched.conf"
    watched.write_text("a=1\n")
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    store = tmp_path / "proofs"
    query = {
        "name": "ssh_mesh",
        "inputs": {"peers": ["node2"]},
        "paths": [str(watched), str(tmp_path / "venv/lib/python3*/site-packages")],
        "store": str(store),
    }
    rc, first = run(query, capsys)
    assert rc == 0 and first["valid"] is False and first["reason"] == "no record" and first["recorded"] is False
    assert set(first["digests"]) == {"inputs", f"path {watched}", f"path {site}"}

    rc, rec = run(
        {
            "name": "ssh_mesh",
            "state": "record",
            "digests": first["digests"],
            "result": {"pairs": [{"ok": True}], "changed": False},
            "action": "megaprov.cluster.ssh_check",
            "store": str(store),
        },
        capsys,
    )
    assert rc == 0 and rec["changed"] is False and rec["recorded"] is True
    saved = store / "ssh_mesh.json"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600 and stat.S_IMODE(store.stat().st_mode) == 0o700
    assert json.loads(saved.read_text())["result"] == {"pairs": [{"ok": True}]}

    rc, again = run(query, capsys)
    assert again["valid"] is True and again["result"] == {"pairs": [{"ok": True}]} and again["action"] == "megaprov.cluster.ssh_check"
    assert again["summary"].startswith(f"verified at {again['verified_at']}, inputs unchanged")

    rc, forced = run({**query, "force": True}, capsys)
    assert forced["valid"] is False and forced["reason"] == "forced (--verify)" and forced["result"] == {}

    (site / "torch-2.13.0.dist-info").mkdir()
    rc, drift = run(query, capsys)
    assert drift["valid"] is False and drift["reason"] == f"inputs changed: path {site}"

    rc, values = run({**query, "inputs": {"peers": ["node2", "node3"]}}, capsys)
    assert values["reason"].startswith("inputs changed: inputs")


def test_record_writes_nothing_in_check_mode(tmp_path: Path, capsys):
    rc, rec = run({"name": "n", "state": "record", "digests": {"inputs": "x"}, "store": str(tmp_path / "p")}, capsys, check_mode=True)
    assert rc == 0 and rec["changed"] is False
    assert not (tmp_path / "p").exists()


def test_record_needs_the_query_digests(tmp_path: Path, capsys):
    rc, out = run({"name": "n", "state": "record", "store": str(tmp_path)}, capsys)
    assert rc == 1 and "needs digests" in out["msg"]


@pytest.mark.parametrize("name", ["../etc/passwd", "a/b", "", "x" * 65, ".hidden"])
def test_names_that_are_not_file_names_are_refused(tmp_path: Path, capsys, name):
    rc, out = run({"name": name, "store": str(tmp_path)}, capsys)
    assert rc == 1 and "name=" in out["msg"]
    assert os.listdir(tmp_path) == []


def test_a_corrupt_record_is_no_record(tmp_path: Path, capsys):
    (tmp_path / "n.json").write_text("{not json")
    rc, out = run({"name": "n", "store": str(tmp_path)}, capsys)
    assert rc == 0 and out["valid"] is False and out["reason"] == "no record"


def test_a_file_the_verification_writes_is_digested_after_it(tmp_path: Path, capsys):
    fact = tmp_path / "compute.fact"
    query = {"name": "compute_rate", "paths": [str(fact)], "store": str(tmp_path / "p")}
    dummy, first = run(query, capsys)
    fact.write_text('{"tflops": 1}')  # the measurement stores its fact
    run({"name": "compute_rate", "state": "record", "digests": first["digests"], "rehash": [str(fact)], "store": str(tmp_path / "p")}, capsys)
    dummy, again = run(query, capsys)
    assert again["valid"] is True
    fact.unlink()  # someone removed the stored fact: measure again
    dummy, gone = run(query, capsys)
    assert gone["reason"] == f"inputs changed: path {fact}"


def test_a_path_root_cannot_read_digests_as_unreadable(tmp_path: Path, monkeypatch):
    def denied(path):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(proof, "_path_digest", denied)
    assert proof.path_digest(str(tmp_path)) == "unreadable: Permission denied"

"""The proof module (plugins/modules/proof.py) to the letter, beside test_proof.py: the digest of a directory's listing
(entry kinds and sizes) and of a file's content, the mount table line (a 4-field line, the root, a point ending in
the letters the old strip would eat), the node's shape read from /proc and /sys, and main()'s whole answer for a query
and a record: the record file's content and modes, the digests of mounts and the node's shape, the messages of
refused arguments.

Stood in: the node's files under /proc, /sys and /var/lib (the module's open() and glob redirected into tmp_path), its
CPU affinity and kernel release, and the clock (time.gmtime). Everything else is the module's real code."""

import hashlib
import json
import os
import stat
import time
from pathlib import Path

import pytest

from ansible_collections.megaprov.cluster.plugins.modules import proof
from ansible_collections.megaprov.cluster.tests.unit.plugins.modules import utils as modules

NOW = "2025-11-30T12:00:00Z"

# ---- digests


def test_a_directory_digest_is_its_sorted_listing_of_kinds_names_and_file_sizes(tmp_path):
    (tmp_path / "b.txt").write_text("abc")
    (tmp_path / "a-dir").mkdir()
    (tmp_path / "a-dir" / "inner").write_text("not listed")
    (tmp_path / "c-link").symlink_to(tmp_path / "b.txt")
    (tmp_path / "d-dirlink").symlink_to(tmp_path / "a-dir")
    assert proof.path_digest(str(tmp_path)) == proof.digest(["d a-dir 0", "f b.txt 3", "l c-link 0", "l d-dirlink 0"])


def test_a_file_digest_is_the_sha256_of_its_content(tmp_path):
    big = os.urandom(1 << 20) + b"tail"  # more than one read block
    (tmp_path / "f").write_bytes(big)
    assert proof.path_digest(str(tmp_path / "f")) == hashlib.sha256(big).hexdigest()
    (tmp_path / "g").write_bytes(b"x")
    assert proof.path_digest(str(tmp_path / "g")) == hashlib.sha256(b"x").hexdigest()
    (tmp_path / "empty").write_bytes(b"")
    assert proof.path_digest(str(tmp_path / "empty")) == hashlib.sha256(b"").hexdigest()


def test_a_link_to_a_directory_is_digested_as_the_directory(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "x").write_text("12")
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    assert proof.path_digest(str(tmp_path / "alias")) == proof.digest(["f x 2"])
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert proof.path_digest(str(tmp_path / "dangling")) == "absent"


def test_an_error_without_a_message_is_named_by_its_class(tmp_path, monkeypatch):
    def broken(path):
        raise OSError()

    monkeypatch.setattr(proof, "_path_digest", broken)
    assert proof.path_digest(str(tmp_path)) == "unreadable: OSError"


def test_digest_is_the_sha256_of_sorted_json_and_reads_other_values_as_text():
    assert proof.digest({"b": 1, "a": [1, "x"]}) == hashlib.sha256(b'{"a": [1, "x"], "b": 1}').hexdigest()
    assert proof.digest({"p": Path("/x")}) == proof.digest({"p": "/x"})


def test_patterns_expand_sorted_and_a_pattern_matching_nothing_is_absent(tmp_path):
    for version in ("3.12", "3.11"):
        (tmp_path / ("python" + version)).write_text(version)
    missing = str(tmp_path / "nothing*")
    plain = str(tmp_path / "plain[1]")
    got = proof.paths_digests([str(tmp_path / "python3*"), missing, plain])
    assert list(got) == [f"path {tmp_path}/python3.11", f"path {tmp_path}/python3.12", "path " + missing, "path " + plain]
    assert got[f"path {tmp_path}/python3.11"] == hashlib.sha256(b"3.11").hexdigest()
    assert got["path " + missing] == "absent" and got["path " + plain] == "absent"


# ---- the mount table and the node's shape

MOUNTS = "/dev/nvme0n1p2 / ext4 rw,relatime 0 0\ntmpfs /scratch tmpfs rw,size=10g\nserver:/x /exports/X nfs4 ro 0 0\nshort /p\n"


@pytest.mark.parametrize(
    ("point", "line"),
    [("/", "/dev/nvme0n1p2 ext4 rw,relatime"), ("/scratch", "tmpfs tmpfs rw,size=10g"), ("/exports/X", "server:/x nfs4 ro"), ("/p", "not mounted")],
)
def test_mount_lines_of_four_fields_the_root_and_a_point_ending_in_x(point, line):
    assert proof.mount_line(MOUNTS, point) == line


def test_shape_reads_a_model_name_with_a_colon_and_memory_in_whole_gib():
    cpuinfo = "processor\t: 0\nmodel name\t: AMD EPYC: 9654 96-Core\nprocessor\t: 1\nmodel name\t: Other CPU\n"
    got = proof.shape(cpuinfo, 2, "MemFree: 1 kB\nMemTotal: 67108864 kB\n", ["b", "a"], "6.8.0")
    assert got == {"cpu_models": ["AMD EPYC: 9654 96-Core", "Other CPU"], "cpus": 2, "memory_gib": 64, "nvidia_pci": ["a", "b"], "kernel": "6.8.0"}
    assert proof.shape("", 1, "MemFree: 1 kB\n", [], "6.8.0")["memory_gib"] == 0


class Node:
    """The node's files under /proc, /sys and /var/lib in tmp_path/node; its affinity and kernel release."""

    def __init__(self, tmp_path, monkeypatch):
        self.root = tmp_path / "node"
        real_open, real_glob = open, proof.glob.glob

        def node_path(path):
            path = str(path)
            return str(self.root) + path if path.startswith(("/proc/", "/sys/", "/var/lib/")) else path

        monkeypatch.setattr(proof, "open", lambda path, *a, **k: real_open(node_path(path), *a, **k), raising=False)
        monkeypatch.setattr(proof.glob, "glob", lambda pattern, **k: real_glob(node_path(pattern), **k))
        monkeypatch.setattr(proof.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
        monkeypatch.setattr(proof.platform, "release", lambda: "6.1.0-28-amd64")
        real = time.gmtime
        monkeypatch.setattr(proof.time, "gmtime", lambda *a: real(1764504000))

    def file(self, path, text):
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


CPUINFO = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\ncpu MHz\t\t: 2000.000\n"
MEMINFO = "MemTotal:       2113466368 kB\nMemFree:        1 kB\n"
SHAPE = {
    "cpu_models": ["Intel(R) Xeon(R) Platinum 8480+"],
    "cpus": 4,
    "memory_gib": 2015,
    "nvidia_pci": ["0000:18:00.0 0x2330", "0000:2a:00.0 0x2330"],
    "kernel": "6.1.0-28-amd64",
}


def shaped_node(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch)
    node.file("/proc/cpuinfo", CPUINFO)
    node.file("/proc/meminfo", MEMINFO)
    for address, vendor, device in (
        ("0000:2a:00.0", "0x10de", "0x2330"),
        ("0000:00:1f.0", "0x8086", "0x1234"),
        ("0000:18:00.0", "0x10de\n", "0x2330\n"),
    ):
        node.file(f"/sys/bus/pci/devices/{address}/vendor", vendor)
        node.file(f"/sys/bus/pci/devices/{address}/device", device)
    return node


def test_the_node_shape_is_read_from_proc_and_the_pci_bus(tmp_path, monkeypatch):
    shaped_node(tmp_path, monkeypatch)
    assert proof.node_shape() == SHAPE


def test_a_node_with_nothing_readable_has_an_empty_shape(tmp_path, monkeypatch):
    Node(tmp_path, monkeypatch)
    assert proof.node_shape() == {"cpu_models": [], "cpus": 4, "memory_gib": 0, "nvidia_pci": [], "kernel": "6.1.0-28-amd64"}


# ---- main()


def run(args, capsys, check_mode=False):
    if check_mode:
        args = {**args, "_ansible_check_mode": True}
    return modules.run_module(proof.main, args, capsys)


def test_a_query_digests_inputs_mounts_and_the_node_shape(tmp_path, monkeypatch, capsys):
    node = shaped_node(tmp_path, monkeypatch)
    node.file("/proc/self/mounts", "10.0.0.1:/export /shared nfs4 rw,hard 0 0\n")
    rc, out = run(
        {"name": "munge", "inputs": {"key": "k1"}, "mounts": ["/shared", "/gone"], "node_shape": True, "store": str(tmp_path / "p")},
        capsys,
    )
    assert rc == 0
    assert out == {
        "changed": False,
        "name": "munge",
        "recorded": False,
        "valid": False,
        "reason": "no record",
        "digests": {
            "inputs": proof.digest({"key": "k1"}),
            "mount /shared": proof.digest("10.0.0.1:/export nfs4 rw,hard"),
            "mount /gone": proof.digest("not mounted"),
            "node shape": proof.digest(SHAPE),
        },
        "verified_at": "",
        "result": {},
        "action": "",
        "summary": "proved this run (no record)",
        "invocation": out["invocation"],
    }


def test_a_record_is_written_whole_and_a_query_then_returns_it(tmp_path, monkeypatch, capsys):
    Node(tmp_path, monkeypatch)
    store = tmp_path / "proofs"
    store.mkdir(mode=0o755)
    fact = tmp_path / "compute.fact"
    fact.write_text("{}")
    digests = {"inputs": proof.digest({}), f"path {fact}": "absent"}
    rc, out = run(
        {
            "name": "compute_rate",
            "state": "record",
            "digests": digests,
            "rehash": [str(fact)],
            "result": {"stored": {"tflops": 1}, "changed": True, "_ansible_no_log": False},
            "action": "megaprov.cluster.compute_rate",
            "store": str(store),
        },
        capsys,
    )
    held = {"inputs": proof.digest({}), f"path {fact}": hashlib.sha256(b"{}").hexdigest()}
    assert rc == 0
    assert {k: v for k, v in out.items() if k != "invocation"} == {
        "changed": False,
        "name": "compute_rate",
        "recorded": True,
        "valid": True,
        "reason": "recorded",
        "digests": held,
        "verified_at": NOW,
        "result": {},
        "action": "megaprov.cluster.compute_rate",
        "summary": "recorded at " + NOW,
    }
    doc = {
        "version": 1,
        "name": "compute_rate",
        "passed": True,
        "verified_at": NOW,
        "digests": held,
        "action": "megaprov.cluster.compute_rate",
        "result": {"stored": {"tflops": 1}},
    }
    saved = store / "compute_rate.json"
    assert saved.read_text() == json.dumps(doc, sort_keys=True)
    assert os.listdir(store) == ["compute_rate.json"]
    assert stat.S_IMODE(store.stat().st_mode) == 0o700 and stat.S_IMODE(saved.stat().st_mode) == 0o600

    rc, again = run({"name": "compute_rate", "paths": [str(fact)], "store": str(store)}, capsys)
    assert {k: again[k] for k in ("valid", "reason", "verified_at", "result", "action", "summary")} == {
        "valid": True,
        "reason": "inputs unchanged",
        "verified_at": NOW,
        "result": {"stored": {"tflops": 1}},
        "action": "megaprov.cluster.compute_rate",
        "summary": f"verified at {NOW}, inputs unchanged; --verify re-proves",
    }


def test_the_default_store_is_var_lib_megaprov_proofs(tmp_path, monkeypatch, capsys):
    node = Node(tmp_path, monkeypatch)
    record = {"passed": True, "verified_at": "then", "digests": {"inputs": proof.digest({})}, "action": "a", "result": {"ok": 1}}
    node.file("/var/lib/megaprov/proofs/nccl.json", json.dumps(record))
    rc, out = run({"name": "nccl"}, capsys)
    assert (out["valid"], out["result"], out["verified_at"], out["action"]) == (True, {"ok": 1}, "then", "a")


def test_a_record_that_is_not_an_object_is_no_record(tmp_path, monkeypatch, capsys):
    (tmp_path / "n.json").write_text("[1, 2]")
    rc, out = run({"name": "n", "store": str(tmp_path)}, capsys)
    assert (out["valid"], out["reason"], out["verified_at"], out["action"], out["result"]) == (False, "no record", "", "", {})


def test_an_invalid_record_still_says_when_and_from_what_but_returns_no_result(tmp_path, capsys):
    record = {"passed": True, "verified_at": "then", "digests": {"inputs": "old"}, "action": "a", "result": {"ok": 1}}
    (tmp_path / "n.json").write_text(json.dumps(record))
    rc, out = run({"name": "n", "store": str(tmp_path)}, capsys)
    assert (out["valid"], out["reason"], out["verified_at"], out["action"], out["result"]) == (False, "inputs changed: inputs", "then", "a", {})
    assert out["summary"] == "proved this run (inputs changed: inputs)"


def test_a_record_in_check_mode_answers_as_recorded_and_writes_nothing(tmp_path, monkeypatch, capsys):
    Node(tmp_path, monkeypatch)
    rc, out = run({"name": "n", "state": "record", "digests": {"inputs": "x"}, "store": str(tmp_path / "p")}, capsys, check_mode=True)
    assert (out["recorded"], out["valid"], out["reason"], out["verified_at"], out["digests"]) == (True, True, "recorded", NOW, {"inputs": "x"})
    assert not (tmp_path / "p").exists()


def test_refused_arguments_say_what_to_do(tmp_path, capsys):
    rc, out = run({"name": "a/b", "store": str(tmp_path)}, capsys)
    assert rc == 1 and out["msg"] == "name='a/b': use letters, digits, '.', '_' and '-' (at most 64)"
    rc, out = run({"name": "n", "state": "record", "store": str(tmp_path)}, capsys)
    assert rc == 1 and out["msg"] == 'state=record needs digests: pass the query\'s digests (register it, then digests: "{{ q.digests }}")'
    rc, out = run({"name": "A" + "b.-_9" * 12 + "xyz", "store": str(tmp_path)}, capsys)
    assert rc == 0 and out["name"] == "A" + "b.-_9" * 12 + "xyz"


def test_keep_drops_every_key_of_ansibles_own():
    result = {k: 1 for k in proof.DROPPED} | {"_ansible_verbose_always": True, "ansible_x": 2, "pairs": 3}
    assert proof.keep(result) == {"ansible_x": 2, "pairs": 3}
    assert proof.keep(None) == {}


def test_arguments_as_the_playbook_hands_them_are_converted(tmp_path, monkeypatch, capsys):
    node = shaped_node(tmp_path, monkeypatch)
    node.file("/proc/self/mounts", "a /m nfs rw 0 0\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "w").write_text("1")
    query = {"name": "p", "inputs": '{"a": 1}', "paths": f"{tmp_path}/w,{tmp_path}/v", "mounts": "/m", "node_shape": "yes", "store": "~/proofs"}
    rc, first = run({**query, "force": "no"}, capsys)
    assert rc == 0 and first["digests"] == {
        "inputs": proof.digest({"a": 1}),
        f"path {tmp_path}/w": hashlib.sha256(b"1").hexdigest(),
        f"path {tmp_path}/v": "absent",
        "mount /m": proof.digest("a nfs rw"),
        "node shape": proof.digest(SHAPE),
    }
    record = {"name": "p", "state": "record", "digests": json.dumps(first["digests"]), "rehash": f"{tmp_path}/v", "store": "~/proofs"}
    rc, rec = run({**record, "result": '{"ok": true}', "action": "x"}, capsys)
    assert rc == 0 and (tmp_path / "proofs" / "p.json").is_file()
    rc, again = run({**query, "force": "no"}, capsys)
    assert (again["valid"], again["result"], again["action"]) == (True, {"ok": True}, "x")


def test_a_state_that_is_neither_query_nor_record_is_refused(tmp_path, capsys):
    rc, out = run({"name": "n", "state": "check", "store": str(tmp_path)}, capsys)
    assert rc == 1 and out["msg"] == "value of state must be one of: query, record, got: check"
    rc, out = run({"store": str(tmp_path)}, capsys)
    assert rc == 1 and out["msg"] == "missing required arguments: name"


def test_an_nvidia_function_without_a_readable_device_id_is_listed_by_address(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch)
    node.file("/sys/bus/pci/devices/0000:3b:00.0/vendor", "0x10de")
    assert proof.node_shape()["nvidia_pci"] == ["0000:3b:00.0 "]


def test_a_record_without_an_action_says_none(tmp_path, monkeypatch, capsys):
    Node(tmp_path, monkeypatch)
    rc, out = run({"name": "n", "state": "record", "digests": {"inputs": "x"}, "store": str(tmp_path)}, capsys)
    assert out["action"] == "" and json.loads((tmp_path / "n.json").read_text())["action"] == ""

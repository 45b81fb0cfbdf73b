"""The nfs_client role's N-writer, N-reader check of the shared directory (roles/nfs_client/library/
megaprov_shared_check.py), run through main() as Ansible runs it: on a directory under tmp_path (access: path) and
through fake libnfs tools (nfs-cp, nfs-cat) that keep the share in a directory (access: libnfs)."""

import hashlib
import stat
from pathlib import Path

import pytest

from tests.conftest import load_module
from tests.helpers import modules

ROOT = Path(__file__).resolve().parents[3]
COLLECTION = ROOT / "ansible_collections" / "megaprov" / "cluster"
shared = load_module(COLLECTION / "plugins" / "modules" / "shared_check.py", "shared_check")

DIGEST = hashlib.sha256(b"node2's data").hexdigest()


def run_module(args: dict, capsys) -> tuple[int, dict]:
    return modules.run_module(shared.main, args, capsys)


@pytest.fixture
def share(tmp_path) -> Path:
    (tmp_path / "share" / "cache").mkdir(parents=True)
    return tmp_path / "share"


def test_the_check_file_is_named_by_writer_and_content():
    assert shared.check_file("node1", DIGEST) == f".megaprov-check-node1-{DIGEST[:16]}"
    assert len(shared.check_file("node1", DIGEST)) == len(".megaprov-check-node1-") + 16


def test_path_write_replaces_this_writers_old_file_only(share, capsys):
    old_mine = share / "cache" / ".megaprov-check-node1-0123456789abcdef"
    other = share / "cache" / ".megaprov-check-node10-0123456789abcdef"  # node1 is a prefix of node10
    old_mine.write_text("old")
    other.write_text("node10's")
    rc, result = run_module({"access": "path", "root": str(share), "name": "node1", "write": True, "size_kb": 2}, capsys)
    assert rc == 0 and result["changed"] is False and (result["access"], result["root"]) == ("path", str(share))
    written = share / "cache" / result["file"]
    data = written.read_bytes()
    assert len(data) == 2048 and result["bytes"] == 2048
    assert result["sha256"] == hashlib.sha256(data).hexdigest() and result["file"] == f".megaprov-check-node1-{result['sha256'][:16]}"
    assert 0 <= result["seconds"] < 30 and result["seconds"] == round(result["seconds"], 3)
    assert sorted(p.name for p in (share / "cache").iterdir()) == sorted([result["file"], other.name])  # no temporary left


def test_path_write_into_a_missing_directory_fails_with_the_reason(share, capsys):
    rc, result = run_module({"access": "path", "root": str(share), "subdir": "absent", "name": "node1", "write": True, "size_kb": 1}, capsys)
    assert rc == 1 and result["failed"] is True and (result["access"], result["root"]) == ("path", str(share))
    assert (
        result["msg"].startswith("cannot write absent/.megaprov-check-node1-")
        and f" in {share}: [Errno 2] No such file or directory: " in result["msg"]
    )


def test_check_mode_writes_nothing_but_still_reads(share, capsys):
    args = {"access": "path", "root": str(share), "name": "node1", "write": True, "_ansible_check_mode": True}
    rc, result = run_module(args, capsys)
    assert rc == 0 and result["skipped"] is True and result["msg"] == "check mode: the shared directory is not written"
    assert (result["changed"], result["access"], result["root"]) == (False, "path", str(share))
    assert list((share / "cache").iterdir()) == []
    (share / "cache" / shared.check_file("node2", DIGEST)).write_bytes(b"node2's data")
    rc, result = run_module({"access": "path", "root": str(share), "name": "node1", "peers": {"node2": DIGEST}, "_ansible_check_mode": True}, capsys)
    assert rc == 0 and result["checks"] == [{"writer": "node2", "ok": True, "error": ""}]


def test_path_read_of_every_writer(share, capsys):
    good = {}
    for name in ("node1", "node2"):
        data = f"{name}'s data".encode()
        good[name] = hashlib.sha256(data).hexdigest()
        (share / "cache" / shared.check_file(name, good[name])).write_bytes(data)
    rc, result = run_module({"access": "path", "root": str(share), "name": "node2", "peers": good}, capsys)
    assert rc == 0 and result["checks"] == [{"writer": "node1", "ok": True, "error": ""}, {"writer": "node2", "ok": True, "error": ""}]
    assert "sha256" not in result and result["changed"] is False


def test_path_read_names_every_bad_writer(share, capsys):
    tampered = hashlib.sha256(b"node3's data").hexdigest()
    (share / "cache" / shared.check_file("node3", tampered)).write_bytes(b"node3's data, changed on the way")
    (share / "cache" / shared.check_file("node2", DIGEST)).write_bytes(b"node2's data")
    missing = hashlib.sha256(b"node4's data").hexdigest()
    peers = {"node4": missing, "node3": tampered, "node2": DIGEST, "node1": ""}
    rc, result = run_module({"access": "path", "root": str(share), "name": "node2", "peers": peers}, capsys)
    absent = share / "cache" / shared.check_file("node4", missing)
    assert rc == 1 and result["checks"] == [
        {"writer": "node1", "ok": False, "error": "that node wrote no check file"},
        {"writer": "node2", "ok": True, "error": ""},
        {"writer": "node3", "ok": False, "error": "content differs from what the writer wrote"},
        {"writer": "node4", "ok": False, "error": f"[Errno 2] No such file or directory: '{absent}'"},
    ]
    assert result["msg"] == (
        "node2 reading node1's file: that node wrote no check file; "
        "node2 reading node3's file: content differs from what the writer wrote; "
        f"node2 reading node4's file: [Errno 2] No such file or directory: '{absent}'"
    )


# libnfs: the fake tools keep the export nfs://lab-nfs/export in $STORE and record their argv (NUL-separated).
NFS_CP = """#!/bin/sh
printf '%s\\0' "$@" > "$0.args"
if [ -n "$FAKE_SLEEP" ]; then exec sleep "$FAKE_SLEEP"; fi
if [ -n "$FAKE_RC" ]; then printf "$FAKE_OUT"; printf "$FAKE_ERR" >&2; exit "$FAKE_RC"; fi
if [ -n "$FAKE_DELAY" ]; then sleep "$FAKE_DELAY"; fi
rel=${2#nfs://lab-nfs/export/}
cat "$1" > "$STORE/${rel%%\\?*}"
"""
NFS_CAT = """#!/bin/sh
printf '%s\\0' "$@" > "$0.args"
if [ -n "$FAKE_SLEEP" ]; then exec sleep "$FAKE_SLEEP"; fi
if [ -n "$FAKE_RC" ]; then printf "$FAKE_ERR" >&2; exit "$FAKE_RC"; fi
rel=${1#nfs://lab-nfs/export/}
cat "$STORE/${rel%%\\?*}"
"""


@pytest.fixture
def libnfs(tmp_path, monkeypatch) -> Path:
    tools = tmp_path / "bin"
    tools.mkdir()
    for name, script in (("nfs-cp", NFS_CP), ("nfs-cat", NFS_CAT)):
        (tools / name).write_text(script)
        (tools / name).chmod(0o755 | stat.S_IXUSR)
    store = tmp_path / "export"
    (store / "cache").mkdir(parents=True)
    monkeypatch.setenv("STORE", str(store))
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    return tools


def argv_of(tools: Path, name: str) -> list[str]:
    return (tools / f"{name}.args").read_text().split("\0")[:-1]


NFS = {"access": "libnfs", "root": "nfs://lab-nfs/export/", "name": "node1", "uid": 1000, "gid": 1001}


def test_libnfs_write_then_read_as_the_check_user(libnfs, tmp_path, capsys):
    rc, written = run_module({**NFS, "write": True, "size_kb": 3}, capsys)
    assert rc == 0 and written["bytes"] == 3072
    # NFSv3 URL of libnfs with the check account's uid/gid; the export's trailing slash is not doubled
    url = f"nfs://lab-nfs/export/cache/{written['file']}?uid=1000&gid=1001"
    local, target = argv_of(libnfs, "nfs-cp")
    assert target == url and not Path(local).exists()  # the local copy is a temporary file, removed after
    stored = (tmp_path / "export" / "cache" / written["file"]).read_bytes()
    assert hashlib.sha256(stored).hexdigest() == written["sha256"] and len(stored) == 3072
    rc, result = run_module({**NFS, "peers": {"node1": written["sha256"]}}, capsys)
    assert rc == 0 and result["checks"] == [{"writer": "node1", "ok": True, "error": ""}]
    assert argv_of(libnfs, "nfs-cat") == [url]


def test_libnfs_read_of_different_content(libnfs, tmp_path, capsys):
    (tmp_path / "export" / "cache" / shared.check_file("node2", DIGEST)).write_bytes(b"something else")
    rc, result = run_module({**NFS, "peers": {"node2": DIGEST}}, capsys)
    assert rc == 1 and result["msg"] == "node1 reading node2's file: content differs from what the writer wrote"


@pytest.mark.parametrize(
    ("out", "err", "reason"),
    [
        ("", "nfs-cp: Failed to mount nfs share : mount_cb: RPC error: Mount failed with error MNT3ERR_ACCES(13)\\n", None),
        ("Failed to open destination file: Permission denied\\n", "", "Failed to open destination file: Permission denied"),
        ("", "", "nfs-cp exited 2"),
        ("", "bad \\377 byte", "bad \ufffd byte"),
    ],
)
def test_libnfs_write_failure_names_the_tools_reason(libnfs, capsys, monkeypatch, out, err, reason):
    monkeypatch.setenv("FAKE_RC", "2")
    monkeypatch.setenv("FAKE_OUT", out)
    monkeypatch.setenv("FAKE_ERR", err)
    rc, result = run_module({**NFS, "write": True, "size_kb": 1}, capsys)
    expected = reason or "nfs-cp: Failed to mount nfs share : mount_cb: RPC error: Mount failed with error MNT3ERR_ACCES(13)"
    assert rc == 1 and result["msg"].startswith("cannot write cache/.megaprov-check-node1-")
    assert result["msg"].endswith(f" in nfs://lab-nfs/export/: {expected}")


@pytest.mark.parametrize(
    ("err", "reason"),
    [("nfs-cat: Failed to open file\\n", "nfs-cat: Failed to open file"), ("", "nfs-cat exited 1"), ("bad \\377 byte", "bad \ufffd byte")],
)
def test_libnfs_read_failure_names_the_tools_reason(libnfs, capsys, monkeypatch, err, reason):
    monkeypatch.setenv("FAKE_RC", "1")
    monkeypatch.setenv("FAKE_ERR", err)
    rc, result = run_module({**NFS, "peers": {"node2": DIGEST}}, capsys)
    assert rc == 1 and result["checks"] == [{"writer": "node2", "ok": False, "error": reason}]


def test_a_hung_libnfs_tool_is_stopped_at_the_timeout(libnfs, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_SLEEP", "30")
    rc, result = run_module({**NFS, "peers": {"node2": DIGEST}, "timeout": 1}, capsys)
    assert rc == 1 and result["msg"] == "node1 reading node2's file: nfs-cat timed out after 1 s"


def test_a_missing_libnfs_tool_is_a_failure_with_its_name(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    rc, result = run_module({**NFS, "write": True, "size_kb": 1}, capsys)
    assert rc == 1 and result["msg"].endswith(": nfs-cp: No such file or directory")


def test_a_hung_nfs_cp_is_stopped_at_the_timeout(libnfs, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_SLEEP", "30")
    rc, result = run_module({**NFS, "write": True, "size_kb": 1, "timeout": 1}, capsys)
    assert rc == 1 and result["msg"].endswith(" in nfs://lab-nfs/export/: nfs-cp timed out after 1 s")


def test_the_libnfs_url_keeps_the_exports_own_name():
    assert shared._url("nfs://nas1/vol/BOX", "cache/f", 1000, 1001) == "nfs://nas1/vol/BOX/cache/f?uid=1000&gid=1001"
    assert shared._url("nfs://nas1/vol/BOX//", "cache/f", 0, 0) == "nfs://nas1/vol/BOX/cache/f?uid=0&gid=0"


def test_the_write_time_is_measured(libnfs, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_DELAY", "0.3")
    rc, result = run_module({**NFS, "write": True, "size_kb": 1}, capsys)
    # in milliseconds: at least the fake nfs-cp's 0.3 s, not a whole number of seconds
    assert rc == 0 and 0.3 <= result["seconds"] < 30 and result["seconds"] != int(result["seconds"])


def test_a_missing_nfs_cat_is_a_failure_with_its_name(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    rc, result = run_module({**NFS, "peers": {"node2": DIGEST}}, capsys)
    assert rc == 1 and result["checks"] == [{"writer": "node2", "ok": False, "error": "nfs-cat: No such file or directory"}]

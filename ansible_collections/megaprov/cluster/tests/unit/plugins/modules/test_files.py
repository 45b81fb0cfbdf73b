"""The files module (ansible_collections/megaprov/cluster/plugins/modules/files.py): a role's files and directories in
one call, changed only where they differ, planned whole before anything is applied, exact in check and diff mode."""

import os
import stat
from pathlib import Path

from ansible_collections.megaprov.cluster.plugins.modules import files
from ansible_collections.megaprov.cluster.tests.unit.plugins.modules import utils as modules


def run(capsys, entries, check_mode=False, diff=False):
    args = {"files": entries}
    if check_mode:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    return modules.run_module(files.main, args, capsys)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_parse_mode_and_entry_problems():
    assert files.parse_mode("0644") == 0o644 and files.parse_mode("755") == 0o755 and files.parse_mode("01777") == 0o1777
    assert files.parse_mode("u+rw") is None and files.parse_mode("") is None and files.parse_mode("0648") is None
    bad = files.problems(
        [
            {"path": "etc/x", "state": "file", "content": "", "mode": "0644"},
            {"path": "/etc/../x", "state": "file", "content": "", "mode": "0644"},
            {"path": "/etc/y", "state": "file", "content": None, "mode": "0644"},
            {"path": "/etc/z", "state": "directory", "content": "a", "mode": "0755"},
            {"path": "/etc/w", "state": "file", "content": "a", "mode": "rw"},
        ]
    )
    assert bad == [
        "files[0] (etc/x): path must be absolute and normalised, not the root",
        "files[1] (/etc/../x): path must be absolute and normalised, not the root",
        "files[2] (/etc/y): a file needs content",
        "files[3] (/etc/z): content is for state=file only",
        "files[4] (/etc/w): mode must be octal such as \"0644\", got 'rw'",
    ]


def test_create_then_nothing_to_do(tmp_path: Path, capsys):
    entries = [
        {"path": str(tmp_path / "conf.d"), "state": "directory", "mode": "0750"},
        {"path": str(tmp_path / "conf.d" / "a.conf"), "content": "a = 1\n", "mode": "0640"},
        {"path": str(tmp_path / "b.conf"), "content": "b = 2\n", "mode": "0600", "owner": "root", "group": "root"},
    ]
    rc, first = run(capsys, entries)
    assert rc == 0 and first["changed"] is True
    assert first["changed_paths"] == [e["path"] for e in entries]
    assert (tmp_path / "conf.d" / "a.conf").read_text() == "a = 1\n"
    assert [mode_of(Path(e["path"])) for e in entries] == [0o750, 0o640, 0o600]
    assert not list(tmp_path.rglob(".megaprov.*")), "a temporary file was left behind"
    rc, again = run(capsys, entries)
    assert rc == 0 and again["changed"] is False and again["changed_paths"] == [] and again["reasons"] == {}


def test_check_mode_reports_what_a_run_would_change_and_changes_nothing(tmp_path: Path, capsys):
    (tmp_path / "kept.conf").write_text("same\n")
    os.chmod(tmp_path / "kept.conf", 0o644)
    (tmp_path / "drift.conf").write_text("old\n")
    os.chmod(tmp_path / "drift.conf", 0o644)
    entries = [
        {"path": str(tmp_path / "kept.conf"), "content": "same\n", "mode": "0644"},
        {"path": str(tmp_path / "drift.conf"), "content": "new\n", "mode": "0644"},
        {"path": str(tmp_path / "new.d"), "state": "directory", "mode": "0755"},
        # in a directory only an earlier entry creates: check mode plans it without the directory existing
        {"path": str(tmp_path / "new.d" / "c.conf"), "content": "c\n", "mode": "0644"},
    ]
    rc, result = run(capsys, entries, check_mode=True, diff=True)
    assert rc == 0 and result["changed"] is True
    assert result["changed_paths"] == [str(tmp_path / "drift.conf"), str(tmp_path / "new.d"), str(tmp_path / "new.d" / "c.conf")]
    assert result["reasons"][str(tmp_path / "drift.conf")] == ["content"]
    drift = str(tmp_path / "drift.conf")
    assert {"before_header": drift, "after_header": drift, "before": "old\n", "after": "new\n"} in result["diff"]
    assert (tmp_path / "drift.conf").read_text() == "old\n" and not (tmp_path / "new.d").exists()


def test_mode_or_owner_drift_alone_is_fixed_without_rewriting(tmp_path: Path, capsys):
    target = tmp_path / "limits.conf"
    target.write_text("x\n")
    os.chmod(target, 0o666)
    inode = os.stat(target).st_ino
    rc, result = run(capsys, [{"path": str(target), "content": "x\n", "mode": "0644"}], diff=True)
    assert rc == 0 and result["reasons"] == {str(target): ["mode/owner"]} and result["diff"] == []
    assert mode_of(target) == 0o644 and os.stat(target).st_ino == inode


def test_a_missing_directory_fails_before_anything_is_applied(tmp_path: Path, capsys):
    first = tmp_path / "first.conf"
    entries = [
        {"path": str(first), "content": "1\n", "mode": "0644"},
        {"path": str(tmp_path / "nowhere" / "second.conf"), "content": "2\n", "mode": "0644"},
    ]
    rc, result = run(capsys, entries)
    assert rc == 1 and result["failed"] is True
    assert result["msg"] == (
        f"{tmp_path}/nowhere/second.conf: its directory {tmp_path}/nowhere does not exist (add it as an earlier entry with state=directory)"
    )
    assert not first.exists(), "the first entry was applied though the set failed its plan"


def test_an_unknown_owner_is_named(tmp_path: Path, capsys):
    rc, result = run(capsys, [{"path": str(tmp_path / "a"), "content": "", "mode": "0644", "owner": "no-such-user-megaprov"}])
    assert rc == 1 and result["msg"] == "no user 'no-such-user-megaprov'"


def test_a_link_is_replaced_by_the_file_and_its_target_is_left_alone(tmp_path: Path, capsys):
    target, link = tmp_path / "elsewhere.conf", tmp_path / "link.conf"
    target.write_text("theirs\n")
    link.symlink_to(target)
    rc, result = run(capsys, [{"path": str(link), "content": "ours\n", "mode": "0644"}])
    assert rc == 0 and result["changed_paths"] == [str(link)]
    assert not link.is_symlink() and link.read_text() == "ours\n" and target.read_text() == "theirs\n"


def test_a_link_to_a_directory_stands_for_the_directory(tmp_path: Path, capsys):
    real = tmp_path / "real"
    real.mkdir(mode=0o755)
    os.chmod(real, 0o755)
    (tmp_path / "alias").symlink_to(real)
    rc, result = run(capsys, [{"path": str(tmp_path / "alias"), "state": "directory", "mode": "0755"}])
    assert rc == 0 and result["changed"] is False


def test_absent_removes_a_file_and_refuses_a_directory(tmp_path: Path, capsys):
    gone = tmp_path / "old.conf"
    gone.write_text("x")
    rc, result = run(capsys, [{"path": str(gone), "state": "absent"}, {"path": str(tmp_path / "never"), "state": "absent"}])
    assert rc == 0 and result["changed_paths"] == [str(gone)] and not gone.exists()
    (tmp_path / "d").mkdir()
    rc, result = run(capsys, [{"path": str(tmp_path / "d"), "state": "absent"}])
    assert rc == 1 and result["msg"] == f"{tmp_path}/d is a directory; this module removes files only"


def test_unsafe_writes_rewrites_in_place(tmp_path: Path, capsys):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    inode = os.stat(hosts).st_ino
    rc, result = run(capsys, [{"path": str(hosts), "content": "127.0.0.1 localhost\n10.0.0.2 node1\n", "mode": "0644", "unsafe_writes": True}])
    assert rc == 0 and result["changed"] is True
    assert os.stat(hosts).st_ino == inode and hosts.read_text().endswith("node1\n")


def test_the_diff_of_a_file_others_cannot_read_shows_no_content(tmp_path: Path, capsys):
    key = tmp_path / "id_ed25519"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY----- old\n")
    os.chmod(key, 0o600)
    rc, result = run(capsys, [{"path": str(key), "content": "-----BEGIN OPENSSH PRIVATE KEY----- new\n", "mode": "0600"}], check_mode=True, diff=True)
    assert rc == 0 and result["changed"] is True
    assert "PRIVATE KEY" not in str(result["diff"]) and result["diff"][0]["before"].startswith("(not world-readable")


def test_a_directory_is_made_with_its_missing_parents(tmp_path: Path, capsys):
    facts = tmp_path / "etc" / "ansible" / "facts.d"
    entries = [{"path": str(facts), "state": "directory", "mode": "0755"}, {"path": str(facts / "x.fact"), "content": "{}\n", "mode": "0644"}]
    rc, planned = run(capsys, entries, check_mode=True)
    assert rc == 0 and planned["changed_paths"] == [str(facts), str(facts / "x.fact")] and not (tmp_path / "etc").exists()
    rc, result = run(capsys, entries)
    assert rc == 0 and (facts / "x.fact").read_text() == "{}\n" and mode_of(tmp_path / "etc" / "ansible") == 0o755

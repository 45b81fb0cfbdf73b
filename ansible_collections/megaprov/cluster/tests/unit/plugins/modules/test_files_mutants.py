"""The files module (plugins/modules/files.py), what a role's run reports and leaves on disk: the exact reasons and
diffs of each kind of change (create, content, mode/owner, a directory, a removal), what diff mode hides (files others
cannot read, binary or oversized content), the group drift alone, the refusals' exact words, a file rewritten by
rename unless unsafe_writes, the temporary file made beside its target and removed when the rename fails. Real files
in a temporary directory, real users and groups; stood in: only the kernel's refusal of a rename (EBUSY, a
bind-mounted file)."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

import pytest

from ansible_collections.megaprov.cluster.plugins.modules import files
from ansible_collections.megaprov.cluster.tests.unit.plugins.modules.utils import run_module


def run(capsys, entries, check_mode=False, diff=False):
    args = {"files": entries, "_ansible_check_mode": check_mode, "_ansible_diff": diff}
    return run_module(files.main, args, capsys)


def entry(path: Path, **over) -> dict:
    """An entry as main() hands it to plan_entry (its defaults filled in)."""
    return {"path": str(path), "state": "file", "content": None, "mode": "0644", "owner": "root", "group": "root", "unsafe_writes": False, **over}


def written(path: Path, text: str | bytes, mode: int) -> Path:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    os.chmod(path, mode)
    return path


def test_modes_of_more_than_five_digits_or_with_letters_are_refused():
    assert files.parse_mode("00644") == 0o644
    assert files.parse_mode("000644") is None
    assert files.parse_mode("X") is None  # chmod's symbolic X (execute if a directory) is no octal digit
    assert files.parse_mode(None) is None


def test_a_new_file_is_a_create_with_an_empty_before(tmp_path, capsys):
    target = tmp_path / "a.conf"
    code, result = run(capsys, [entry(target, content="a = 1\n")], diff=True)
    assert code == 0 and result["reasons"] == {str(target): ["create"]}
    assert result["diff"] == [{"before_header": str(target), "after_header": str(target), "before": "", "after": "a = 1\n"}]


def test_emptying_a_file_shows_an_empty_after(tmp_path, capsys):
    target = written(tmp_path / "a.conf", "a = 1\n", 0o644)
    code, result = run(capsys, [entry(target, content="")], diff=True)
    assert result["reasons"] == {str(target): ["content"]}
    assert result["diff"] == [{"before_header": str(target), "after_header": str(target), "before": "a = 1\n", "after": ""}]
    assert target.read_text() == ""


def test_a_file_others_may_run_but_not_read_keeps_its_content_out_of_the_diff(tmp_path, capsys):
    target = written(tmp_path / "hook.sh", "#!/bin/sh\nsecret=1\n", 0o711)
    code, result = run(capsys, [entry(target, content="#!/bin/sh\nsecret=2\n", mode="0711")], check_mode=True, diff=True)
    assert result["diff"] == [
        {"before_header": str(target), "after_header": str(target), "before": "(not world-readable: content not shown)\n", "after": "(changed)\n"}
    ]


def test_binary_content_shows_as_empty_and_64_kib_of_text_shows_whole(tmp_path, capsys):
    blob = written(tmp_path / "blob", b"\x7fELF\0\0\0", 0o644)
    limit = written(tmp_path / "limit.txt", "x" * files.DIFF_MAX, 0o644)
    over = written(tmp_path / "over.txt", "y" * (files.DIFF_MAX + 1), 0o644)
    entries = [entry(blob, content="text now\n"), entry(limit, content="short\n"), entry(over, content="short\n")]
    code, result = run(capsys, entries, check_mode=True, diff=True)
    assert [(d["before"], d["after"]) for d in result["diff"]] == [("", "text now\n"), ("x" * files.DIFF_MAX, "short\n"), ("", "short\n")]


def test_a_removal_reads_present_then_absent(tmp_path, capsys):
    gone = written(tmp_path / "old.conf", "x", 0o644)
    code, result = run(capsys, [{"path": str(gone), "state": "absent"}], diff=True)
    assert code == 0 and result["reasons"] == {str(gone): ["remove"]}
    assert result["diff"] == [{"before_header": str(gone), "after_header": str(gone), "before": "present\n", "after": "absent\n"}]


def test_a_new_directory_and_a_directory_of_the_wrong_mode(tmp_path, capsys):
    made, drift = tmp_path / "made.d", tmp_path / "drift.d"
    drift.mkdir()
    os.chmod(drift, 0o777)
    code, result = run(capsys, [entry(made, state="directory", mode="0750"), entry(drift, state="directory", mode="0755")], diff=True)
    assert code == 0 and result["reasons"] == {str(made): ["create directory"], str(drift): ["mode/owner"]}
    assert result["diff"] == []
    assert stat.S_IMODE(made.stat().st_mode) == 0o750 and stat.S_IMODE(drift.stat().st_mode) == 0o755


def test_a_group_that_drifted_alone_is_a_mode_owner_change(tmp_path, capsys):
    target = written(tmp_path / "a.conf", "same\n", 0o644)
    os.chown(target, 0, 1)  # group daemon, owner root as wanted
    code, result = run(capsys, [entry(target, content="same\n")])
    assert result["reasons"] == {str(target): ["mode/owner"]} and target.stat().st_gid == 0


def test_a_mode_drift_has_reasons_and_no_diff(tmp_path):
    path = written(tmp_path / "a.conf", "same\n", 0o600)
    assert files.plan_entry(entry(path, content="same\n"), set()) == (["mode/owner"], None)


def test_an_unknown_group_is_named(tmp_path, capsys):
    code, result = run(capsys, [entry(tmp_path / "a", content="", group="no-such-group-megaprov")])
    assert (code, result["msg"]) == (1, "no group 'no-such-group-megaprov'")


def test_a_directory_where_a_file_belongs_is_refused(tmp_path, capsys):
    (tmp_path / "conf").mkdir()
    code, result = run(capsys, [entry(tmp_path / "conf", content="x")])
    assert (code, result["msg"], result["changed_paths"]) == (1, f"{tmp_path}/conf is a directory, not a file", [])


@pytest.mark.parametrize("kind", ["file", "dangling link"])
def test_something_else_where_a_directory_belongs_is_refused(tmp_path, capsys, kind):
    where = tmp_path / "conf.d"
    if kind == "file":
        where.write_text("x")
    else:
        where.symlink_to(tmp_path / "nowhere")
    code, result = run(capsys, [entry(where, state="directory", mode="0755")])
    assert (code, result["msg"]) == (1, f"{where} exists and is not a directory")


def test_a_changed_file_is_renamed_into_place_not_rewritten(tmp_path, capsys):
    target = written(tmp_path / "a.conf", "old\n", 0o644)
    inode = target.stat().st_ino
    code, result = run(capsys, [entry(target, content="new\n")])
    assert code == 0 and target.read_text() == "new\n" and target.stat().st_ino != inode


def test_the_temporary_file_is_made_beside_the_target_not_in_tmpdir(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-tmpdir"))
    target = tmp_path / "a.conf"
    code, result = run(capsys, [entry(target, content="a\n")])
    assert code == 0 and target.read_text() == "a\n" and sorted(p.name for p in tmp_path.iterdir()) == ["a.conf"]


def test_a_rename_the_kernel_refuses_fails_the_task_and_leaves_no_temporary_file(tmp_path, capsys, monkeypatch):
    target = written(tmp_path / "hosts", "127.0.0.1 localhost\n", 0o644)

    def busy(src, dst):  # a bind-mounted file (a container's /etc/hosts): rename over it is EBUSY
        raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))

    monkeypatch.setattr(files.os, "rename", busy)
    code, result = run(capsys, [entry(target, content="10.0.0.2 node1\n")])
    assert (code, result["msg"], result["changed"]) == (1, f"{target}: [Errno 16] Device or resource busy", True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hosts"] and target.read_text() == "127.0.0.1 localhost\n"

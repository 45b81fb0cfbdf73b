"""A job directory read and written through the head (megaprov.training.jobdir): the helper the head runs, spoken to
here over a pipe instead of SSH, and the mirror the controller keeps from it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from megaprov.training import jobdir


class LocalChannel(jobdir.Channel):
    """The helper run here, on a directory standing in for the head's <shared>/jobs (the same protocol as over SSH)."""

    def __init__(self, root: Path) -> None:
        self.head = "head"
        self.proc = subprocess.Popen(
            jobdir.helper_command(sys.executable, str(root)), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self._line()


@pytest.fixture
def head_and_mirror(tmp_path, monkeypatch):
    head = tmp_path / "head-shared" / "jobs"
    (head / "j1" / "logs").mkdir(parents=True)
    (head / "j1" / "job.json").write_text('{"name": "j1"}\n')
    (head / "j1" / "logs" / "node1.log").write_text("line 1\n")
    root = tmp_path / "mirror"
    (root / "jobs").mkdir(parents=True)
    (root / jobdir.ORIGIN).write_text(json.dumps({"inventory": "x", "shared_dir": "/shared"}))
    channel = LocalChannel(head)
    monkeypatch.setitem(jobdir._CHANNELS, root, channel)
    yield head, root
    channel.close()


def test_the_mirror_follows_the_head(head_and_mirror):
    head, root = head_and_mirror
    local = root / "jobs" / "j1"
    assert jobdir.is_remote(local) and jobdir.list_jobs(root) == ["j1"]
    assert jobdir.refresh(local) is True
    assert (local / "logs" / "node1.log").read_text() == "line 1\n" and json.loads((local / "job.json").read_text()) == {"name": "j1"}
    assert jobdir.refresh(local) is False  # nothing new: nothing read
    with (head / "j1" / "logs" / "node1.log").open("a") as log:
        log.write("line 2\n")
    (head / "j1" / "launch").mkdir()
    (head / "j1" / "launch" / "nodes").write_text("node1\n")
    (head / "j1" / "report.json").write_text("{}\n")
    assert jobdir.refresh(local, jobdir.FOLLOWED) is True  # while following: what the nodes write, not the rest
    assert (local / "logs" / "node1.log").read_text() == "line 1\nline 2\n" and (local / "launch" / "nodes").is_file()
    assert not (local / "report.json").exists()


def test_the_controller_s_files_go_back_to_the_head(head_and_mirror):
    head, root = head_and_mirror
    local = root / "jobs" / "j1"
    jobdir.refresh(local)
    (local / "job.json").write_text('{"name": "j1", "state": "finished"}\n')
    (local / "report.md").write_text("# report\n")
    jobdir.push(local, "job.json", "report.md", "absent.txt")
    assert json.loads((head / "j1" / "job.json").read_text())["state"] == "finished"
    assert (head / "j1" / "report.md").read_text() == "# report\n"
    assert not [p for p in (head / "j1").iterdir() if "megaprov-tmp" in p.name]


def test_links_fifos_and_escapes_are_not_followed_on_the_head(head_and_mirror, tmp_path):
    head, root = head_and_mirror
    secret = tmp_path / "secret"
    secret.write_text("root's\n")
    os.symlink(secret, head / "j1" / "logs" / "node2.log")  # the cluster user links a log to any file
    os.mkfifo(head / "j1" / "logs" / "node3.log")  # or makes it a FIFO: nothing may block on it
    os.symlink(tmp_path, head / "j1" / "launch")
    local = root / "jobs" / "j1"
    jobdir.refresh(local)
    assert sorted(p.name for p in (local / "logs").iterdir()) == ["node1.log"]
    assert not (local / "launch").exists()
    channel = jobdir.channel(root)
    for path in ("j1/logs/node2.log", "j1/../../secret", "/etc/shadow", "j1/launch/secret"):
        answer = channel.call(op="read", path=path, offset=0, length=100)
        assert answer["ok"] is False and "root's" not in json.dumps(answer), (path, answer)
    answer = channel.call(op="write", path="j1/launch/x", data="eA==")
    assert answer["ok"] is False and not (tmp_path / "x").exists()


def test_an_answer_is_bounded(head_and_mirror):
    head, root = head_and_mirror
    (head / "j1" / "logs" / "big.log").write_bytes(b"x" * (jobdir.CHUNK + 10))
    answer = jobdir.channel(root).call(op="read", path="j1/logs/big.log", offset=0, length=1 << 30)
    assert answer["ok"] and answer["size"] == jobdir.CHUNK + 10 and len(answer["data"]) <= (4 * 1024 * 1024) * 4 // 3 + 4
    jobdir.refresh(root / "jobs" / "j1")
    assert (root / "jobs" / "j1" / "logs" / "big.log").stat().st_size == jobdir.CHUNK + 10  # read in parts


def test_a_dead_head_is_exit_4(tmp_path):
    class Dead(jobdir.Channel):
        def __init__(self) -> None:
            self.head = "head"
            said = "import sys; sys.stderr.write('ssh: connect to host 10.9.9.9 port 22: No route to host\\n')"
            self.proc = subprocess.Popen([sys.executable, "-c", said], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    with pytest.raises(jobdir.HostsUnreachable) as info:
        Dead()._line()
    assert info.value.exit_code == 4 and "No route to host" in info.value.message

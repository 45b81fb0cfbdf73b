"""A job directory read through the head, in this process: the helper the head runs (megaprov.training.jobdir_helper)
called directly and through its request loop, and the controller's side (megaprov.training.jobdir) against it or
against a head that answers what it likes: the command sent over SSH, what a dead or silent head says, the mirror's
files, modes and bookkeeping, and every answer the controller refuses to act on."""

import base64
import contextlib
import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from megaprov.errors import HostsUnreachable, RunFailed, UsageError
from megaprov.training import jobdir
from megaprov.training import jobdir_helper as helper

# ---- the head's side, called directly


@pytest.fixture
def head(tmp_path):
    """<shared>/jobs on the head, with job j1; yields (the jobs directory, an fd on it)."""
    jobs = tmp_path / "head" / "jobs"
    (jobs / "j1" / "logs").mkdir(parents=True)
    (jobs / "j1" / "job.json").write_text('{"name": "j1"}\n')
    (jobs / "j1" / "logs" / "node1.log").write_text("line 1\n")
    fd = os.open(jobs, os.O_RDONLY | os.O_DIRECTORY)
    yield jobs, fd
    os.close(fd)


def test_a_path_is_split_into_checked_names():
    assert helper.parts("j1/logs/node1.log") == ["j1", "logs", "node1.log"]
    assert helper.parts("/j1//logs/") == ["j1", "logs"]
    assert helper.parts("a/b/c/d/e") == ["a", "b", "c", "d", "e"]
    assert helper.parts("x" * 255) == ["x" * 255]


@pytest.mark.parametrize("rel", ["", "/", "a/b/c/d/e/f", "j1/../x", "j1/.", ".hidden", "j1/-x", "x" * 256, "a b"])
def test_a_path_that_leaves_the_jobs_directory_is_refused(rel):
    with pytest.raises(ValueError) as info:
        helper.parts(rel)
    assert str(info.value) == f"not a path inside the jobs directory: {rel[:200]!r}"


def test_the_refusal_shows_at_most_200_characters():
    with pytest.raises(ValueError) as info:
        helper.parts("y" * 300)
    assert str(info.value) == f"not a path inside the jobs directory: {'y' * 200!r}"


def test_open_dir_walks_real_directories_and_keeps_the_root_open(head, tmp_path):
    jobs, fd = head
    sub = helper.open_dir(fd, ["j1", "logs"])
    try:
        assert os.listdir(sub) == ["node1.log"]
    finally:
        os.close(sub)
    assert "j1" in os.listdir(fd)  # the root's fd is the caller's: still open
    os.symlink(tmp_path, jobs / "j1" / "out")
    with pytest.raises(OSError):
        helper.open_dir(fd, ["j1", "out"])


def test_a_file_where_a_directory_is_expected_is_named(head):
    _, fd = head
    with pytest.raises(NotADirectoryError) as info:
        helper.read(fd, "j1/job.json/x", 0, 10)
    assert info.value.filename == "job.json"


def test_a_scan_lists_regular_files_with_size_and_mtime_sorted(head, tmp_path):
    jobs, fd = head
    (jobs / "j1" / "a.txt").write_text("abc")
    os.mkfifo(jobs / "j1" / "logs" / "fifo.log")
    os.symlink(tmp_path / "secret", jobs / "j1" / "logs" / "link.log")
    (jobs / "j1" / ".job.json.megaprov-tmp").write_text("half written")
    deep = jobs / "j1" / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    (deep / "f").write_text("4 levels down")
    (deep / "e").mkdir()
    (deep / "e" / "g").write_text("5 levels down")
    files = helper.scan(fd, "j1")["files"]
    info = os.stat(jobs / "j1" / "a.txt")
    assert files == [  # each directory's entries in order, a directory's files where it comes
        ["a/b/c/d/f", 13, os.stat(deep / "f").st_mtime_ns],
        ["a.txt", 3, info.st_mtime_ns],
        ["job.json", 15, os.stat(jobs / "j1" / "job.json").st_mtime_ns],
        ["logs/node1.log", 7, os.stat(jobs / "j1" / "logs" / "node1.log").st_mtime_ns],
    ]


def test_a_scan_lists_at_most_max_files(head):
    jobs, fd = head
    many = jobs / "j1" / "many"
    many.mkdir()
    for i in range(helper.MAX_FILES):
        (many / f"f{i:05d}").touch()
    files = helper.scan(fd, "j1")["files"]
    # job.json and logs/node1.log come first: 4094 of the others
    assert len(files) == helper.MAX_FILES and files[-1][0] == f"many/f{helper.MAX_FILES - 3:05d}"


def test_read_answers_bytes_from_an_offset(head):
    jobs, fd = head
    (jobs / "j1" / "logs" / "node2.log").write_bytes(b"0123456789")
    read = helper.read
    assert read(fd, "j1/logs/node2.log", 0, 4) == {"size": 10, "data": base64.b64encode(b"0123").decode()}
    assert read(fd, "j1/logs/node2.log", "6", "100") == {"size": 10, "data": base64.b64encode(b"6789").decode()}
    assert read(fd, "j1/logs/node2.log", -5, 2)["data"] == base64.b64encode(b"01").decode()  # a negative offset: the start
    assert read(fd, "j1/logs/node2.log", 0, -1)["data"] == ""  # a negative length: nothing


def test_read_answers_at_most_max_read(head):
    jobs, fd = head
    (jobs / "j1" / "big").write_bytes(b"x" * (helper.MAX_READ + 1))
    answer = helper.read(fd, "j1/big", 0, 1 << 30)
    assert len(base64.b64decode(answer["data"])) == helper.MAX_READ and answer["size"] == helper.MAX_READ + 1


def test_read_follows_no_link(head, tmp_path):
    jobs, fd = head
    (tmp_path / "secret").write_text("root's")
    os.symlink(tmp_path / "secret", jobs / "j1" / "logs" / "link.log")
    with pytest.raises(OSError):
        helper.read(fd, "j1/logs/link.log", 0, 10)


def test_a_jobs_path_that_is_no_directory_is_refused_before_ready(tmp_path):
    (tmp_path / "jobs").write_text("")
    out = io.StringIO()
    with pytest.raises(NotADirectoryError), contextlib.redirect_stdout(out):
        helper.serve(str(tmp_path / "jobs"))
    assert out.getvalue() == ""


def test_each_answer_is_sent_before_the_next_request_is_read(head, monkeypatch):
    """Over SSH stdout is a pipe: an answer left in a buffer would leave the controller waiting for ever."""
    jobs, _ = head
    sent: list[str] = []

    class Pipe(io.StringIO):
        def flush(self):
            sent.append(self.getvalue())

    pipe = Pipe()

    def requests():
        for request in ({"op": "list"}, {"op": "scan", "path": "j1"}, {"op": "list"}):
            assert sent and sent[-1] == pipe.getvalue(), "an answer was not flushed before the next request"
            yield json.dumps(request) + "\n"

    monkeypatch.setattr(sys, "stdin", requests())
    with contextlib.redirect_stdout(pipe):
        helper.serve(str(jobs))
    assert sent[-1] == pipe.getvalue() and len(pipe.getvalue().splitlines()) == 4


def test_read_refuses_what_is_no_regular_file_without_blocking(head):
    jobs, fd = head
    os.mkfifo(jobs / "j1" / "logs" / "fifo.log")
    with pytest.raises(ValueError) as info:
        helper.read(fd, "j1/logs/fifo.log", 0, 10)
    assert str(info.value) == "j1/logs/fifo.log is not a regular file"
    with pytest.raises(ValueError):
        helper.read(fd, "j1/logs", 0, 10)


def test_write_replaces_the_file_whole(head):
    jobs, fd = head
    old = os.umask(0o022)
    try:
        (jobs / "j1" / ".job.json.megaprov-tmp").write_text("x" * 100)  # left over from an interrupted write
        assert helper.write(fd, "j1/job.json", base64.b64encode(b'{"state": "done"}').decode()) == {"written": 17}
    finally:
        os.umask(old)
    assert (jobs / "j1" / "job.json").read_bytes() == b'{"state": "done"}'
    assert stat.S_IMODE(os.stat(jobs / "j1" / "job.json").st_mode) == 0o644
    assert not (jobs / "j1" / ".job.json.megaprov-tmp").exists()
    old = os.umask(0o022)
    try:
        helper.write(fd, "j1/logs/report.md", base64.b64encode(b"# r").decode())  # a new file, deeper down
    finally:
        os.umask(old)
    assert (jobs / "j1" / "logs" / "report.md").read_text() == "# r"
    assert stat.S_IMODE(os.stat(jobs / "j1" / "logs" / "report.md").st_mode) == 0o644
    assert not (jobs / "j1" / "logs" / ".report.md.megaprov-tmp").exists() and not (jobs / "j1" / "report.md").exists()
    (jobs / "j1" / "logs" / ".node1.log.megaprov-tmp").write_text("stale")
    helper.write(fd, "j1/logs/node1.log", base64.b64encode(b"new").decode())
    assert sorted(p.name for p in (jobs / "j1" / "logs").iterdir()) == ["node1.log", "report.md"]  # its stale copy used up


def test_write_follows_no_link_planted_at_its_temporary_name(head, tmp_path):
    jobs, fd = head
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    os.symlink(victim, jobs / "j1" / ".job.json.megaprov-tmp")
    with pytest.raises(OSError):
        helper.write(fd, "j1/job.json", base64.b64encode(b"{}").decode())
    assert victim.read_text() == "untouched"


def test_write_takes_at_most_max_write_bytes(head):
    jobs, fd = head
    assert helper.write(fd, "j1/big", base64.b64encode(b"x" * helper.MAX_WRITE).decode()) == {"written": helper.MAX_WRITE}
    with pytest.raises(ValueError) as info:
        helper.write(fd, "j1/big2", base64.b64encode(b"x" * (helper.MAX_WRITE + 1)).decode())
    assert str(info.value) == f"j1/big2: more than {helper.MAX_WRITE} bytes"
    assert not (jobs / "j1" / "big2").exists()


# ---- the head's request loop


def serve(root: Path, *requests: object) -> list[dict]:
    """Run the helper's loop here on ``requests`` (dicts are sent as JSON, strings as they are); its answers."""
    lines = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in requests)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        old, sys.stdin = sys.stdin, io.StringIO(lines)
        try:
            helper.serve(str(root))
        finally:
            sys.stdin = old
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_loop_says_it_is_ready_and_as_whom_then_answers_each_line(head):
    jobs, _ = head
    (jobs / "j0").mkdir()
    (jobs / ".hidden").mkdir()
    (jobs / "j1" / "logs" / "node2.log").write_bytes(b"abc")
    ready, listed, scanned, read, default_read, written = serve(
        jobs,
        {"op": "list"},
        {"op": "scan", "path": "j1"},
        {"op": "read", "path": "j1/logs/node2.log", "offset": 1, "length": 1},
        {"op": "read", "path": "j1/logs/node2.log"},
        {"op": "write", "path": "j1/x", "data": base64.b64encode(b"xy").decode()},
    )
    assert ready == {"ready": True, "user": os.getuid()}
    assert listed == {"jobs": ["j0", "j1"], "ok": True}
    assert scanned["ok"] is True and [f[0] for f in scanned["files"]] == ["job.json", "logs/node1.log", "logs/node2.log"]
    assert read == {"size": 3, "data": base64.b64encode(b"b").decode(), "ok": True}
    assert default_read["data"] == base64.b64encode(b"abc").decode()  # from the start, up to MAX_READ
    assert written == {"written": 2, "ok": True} and (jobs / "j1" / "x").read_bytes() == b"xy"


def test_the_loop_answers_every_bad_request_and_goes_on(head):
    jobs, _ = head
    answers = serve(
        jobs,
        {"op": "read", "path": "j1/nosuch"},
        {"op": "rm", "path": "j1"},
        {"op": "scan"},
        "not json",
        {"op": "read", "path": "j1/../../etc/passwd"},
        {"op": "list"},
    )[1:]
    assert answers[0] == {"ok": False, "missing": True, "error": "No such file or directory: nosuch"}
    assert answers[1] == {"ok": False, "error": "ValueError: unknown request 'rm'"}
    assert answers[2] == {"ok": False, "error": "KeyError: 'path'"}
    assert answers[3]["ok"] is False and answers[3]["error"].startswith("JSONDecodeError: Expecting value")
    assert answers[4] == {"ok": False, "error": "ValueError: not a path inside the jobs directory: 'j1/../../etc/passwd'"}
    assert answers[5]["ok"] is True  # still answering


def test_the_loop_bounds_what_it_repeats_of_a_request(head):
    jobs, _ = head
    _, unknown, missing = serve(jobs, {"op": "x" * 100}, {"op": "read", "path": "j1/" + "n" * 250})
    assert unknown["error"] == f"ValueError: unknown request {'x' * 40!r}"
    assert missing["error"] == "No such file or directory: " + "n" * 200
    _, typed = serve(jobs, {"op": "read", "path": "j1/job.json", "offset": [1]})
    assert typed["ok"] is False and typed["error"].startswith("ValueError: invalid literal for int()")
    rel = "j1" + "/" * 400 + "logs"
    long_error = serve(jobs, {"op": "read", "path": rel})[1]
    assert long_error == {"ok": False, "error": "ValueError: " + f"{rel} is not a regular file"[:300]}


# ---- the controller's side against the helper in this process


class InProcess(jobdir.Channel):
    """The helper's loop called here for each request: the same answers as over SSH, in this process."""

    def __init__(self, root: Path) -> None:
        self.head = "head"
        self.root = root
        self.requests: list[dict] = []
        self.proc = SimpleNamespace(poll=lambda: None)

    def call(self, **request):
        self.requests.append(request)
        return serve(self.root, request)[1]


class Scripted(jobdir.Channel):
    """A head that answers what the test says (a compromised or broken one): the answers in turn, the last repeated."""

    def __init__(self, *answers: dict) -> None:
        self.head = "head"
        self.answers = list(answers)
        self.requests: list[dict] = []
        self.proc = SimpleNamespace(poll=lambda: None)

    def call(self, **request):
        self.requests.append(request)
        return self.answers[min(len(self.requests), len(self.answers)) - 1]


@pytest.fixture
def mirror(tmp_path, head, monkeypatch):
    jobs, _ = head
    root = tmp_path / "mirror"
    (root / "jobs").mkdir(parents=True)
    (root / jobdir.ORIGIN).write_text(json.dumps({"inventory": "x", "shared_dir": "/shared"}))
    channel = InProcess(jobs)
    monkeypatch.setitem(jobdir._CHANNELS, root, channel)
    return SimpleNamespace(head=jobs, root=root, local=root / "jobs" / "j1", channel=channel)


def use(mirror, monkeypatch, channel):
    monkeypatch.setitem(jobdir._CHANNELS, mirror.root, channel)
    return channel


def test_a_mirror_is_private_and_remembers_its_bookkeeping(mirror):
    old = os.umask(0o022)
    try:
        assert jobdir.refresh(mirror.local) is True
    finally:
        os.umask(old)
    assert stat.S_IMODE(mirror.local.stat().st_mode) == 0o700 and stat.S_IMODE((mirror.local / "logs").stat().st_mode) == 0o700
    state = json.loads((mirror.local / ".mirror.json").read_text())
    head_log = os.stat(mirror.head / "j1" / "logs" / "node1.log")
    assert state["logs/node1.log"] == [7, head_log.st_mtime_ns]
    assert mirror.channel.requests[0] == {"op": "scan", "path": "j1"}
    assert mirror.channel.requests[1] == {"op": "read", "path": "j1/job.json", "offset": 0, "length": 15}
    assert jobdir.refresh(mirror.local) is False and len(mirror.channel.requests) == 4  # one more scan, no read


def test_a_file_removed_from_the_mirror_is_read_again(mirror):
    jobdir.refresh(mirror.local)
    (mirror.local / "job.json").unlink()
    assert jobdir.refresh(mirror.local) is True and (mirror.local / "job.json").read_text() == '{"name": "j1"}\n'


def test_a_grown_log_is_read_from_where_the_mirror_ends_other_files_whole(mirror):
    jobdir.refresh(mirror.local)
    with (mirror.head / "j1" / "logs" / "node1.log").open("a") as fh:
        fh.write("line 2\n")
    (mirror.head / "j1" / "job.json").write_text('{"name": "j1", "state": "running"}\n')
    mirror.channel.requests.clear()
    assert jobdir.refresh(mirror.local) is True
    reads = {r["path"]: (r["offset"], r["length"]) for r in mirror.channel.requests if r["op"] == "read"}
    assert reads == {"j1/job.json": (0, 35), "j1/logs/node1.log": (7, 7)}
    assert (mirror.local / "logs" / "node1.log").read_text() == "line 1\nline 2\n"
    assert (mirror.local / "job.json").read_text() == '{"name": "j1", "state": "running"}\n'


def test_a_log_that_shrank_on_the_head_is_read_whole_again(mirror):
    jobdir.refresh(mirror.local)
    (mirror.head / "j1" / "logs" / "node1.log").write_text("new\n")  # rotated, restarted
    jobdir.refresh(mirror.local)
    assert (mirror.local / "logs" / "node1.log").read_text() == "new\n"


def test_a_log_the_mirror_has_without_bookkeeping_is_read_whole(mirror):
    (mirror.local / "logs").mkdir(parents=True)
    (mirror.local / "logs" / "node1.log").write_text("stale")
    (mirror.local / ".mirror.json").write_text("{not json")  # a damaged record: everything is read again
    assert jobdir.refresh(mirror.local) is True
    assert (mirror.local / "logs" / "node1.log").read_text() == "line 1\n"


def test_a_file_deeper_in_the_job_gets_its_directories(mirror):
    (mirror.head / "j1" / "launch" / "a").mkdir(parents=True)
    (mirror.head / "j1" / "launch" / "a" / "nodes").write_text("node1\n")
    jobdir.refresh(mirror.local)
    assert (mirror.local / "launch" / "a" / "nodes").read_text() == "node1\n"


def test_a_large_file_is_read_in_chunks(mirror, monkeypatch):
    monkeypatch.setattr(jobdir, "CHUNK", 4)
    (mirror.head / "j1" / "launch").mkdir()
    (mirror.head / "j1" / "launch" / "nodes").write_text("0123456789")
    jobdir.refresh(mirror.local, ("launch/",))
    reads = [(r["offset"], r["length"]) for r in mirror.channel.requests if r["op"] == "read"]
    assert reads == [(0, 4), (4, 4), (8, 2)]
    assert (mirror.local / "launch" / "nodes").read_text() == "0123456789"
    assert not (mirror.local / "job.json").exists()  # only what was asked for


def test_a_name_that_is_no_job_is_refused_before_the_head_is_asked(mirror):
    with pytest.raises(UsageError) as info:
        jobdir.refresh(mirror.root / "jobs" / "Bad Name")
    assert info.value.message == "job name='Bad Name' is not a job name" and mirror.channel.requests == []


def test_a_job_the_head_does_not_have_leaves_the_mirror_alone(mirror):
    assert jobdir.refresh(mirror.root / "jobs" / "j2") is False and not (mirror.root / "jobs" / "j2").exists()


def test_a_local_mount_is_not_refreshed(tmp_path):
    (tmp_path / "jobs" / "j1").mkdir(parents=True)
    assert jobdir.refresh(tmp_path / "jobs" / "j1") is False
    jobdir.push(tmp_path / "jobs" / "j1", "job.json")  # nothing to send
    assert not jobdir.is_remote(tmp_path / "jobs" / "j1")


def test_a_mirror_root_needs_its_origin_file_and_its_jobs_directory(tmp_path):
    root = tmp_path / "m"
    (root / "jobs" / "j1").mkdir(parents=True)
    assert not jobdir.is_remote(root / "jobs" / "j1")
    (root / jobdir.ORIGIN).mkdir()
    assert not jobdir.is_remote(root / "jobs" / "j1")  # not a file
    (root / jobdir.ORIGIN).rmdir()
    (root / jobdir.ORIGIN).write_text("{}")
    assert jobdir.is_remote(root / "jobs" / "j1") and jobdir.is_remote(root)
    other = tmp_path / "o"
    other.mkdir()
    (other / jobdir.ORIGIN).write_text("{}")
    assert not jobdir.is_remote(other)  # no jobs directory


def test_a_scan_the_head_cannot_answer_is_run_failed(mirror, monkeypatch):
    use(mirror, monkeypatch, Scripted({"ok": False, "error": "PermissionError: denied"}))
    with pytest.raises(RunFailed) as info:
        jobdir.refresh(mirror.local)
    assert (info.value.message, info.value.hint) == ("the head cannot list job j1: PermissionError: denied", "check the shared directory on the head")


@pytest.mark.parametrize(
    "item",
    [
        "job.json",
        ["job.json", 3],
        ["job.json", 3, 1, 1],
        [5, 3, 1],
        ["job.json", "3", 1],
        ["job.json", 3, 1.5],
        ["job.json", -1, 1],
        ["job.json", jobdir.MAX_FILE + 1, 1],
        ["../../x", 3, 1],
        ["logs/../../x", 3, 1],
        ["/etc/x", 3, 1],
        ["a\0b", 3, 1],
    ],
)
def test_an_entry_of_a_scan_that_is_not_a_file_of_the_job_is_skipped(mirror, monkeypatch, item):
    conn = use(mirror, monkeypatch, Scripted({"ok": True, "files": [item]}, {"ok": True, "data": "eHl6"}))
    assert jobdir.refresh(mirror.local) is False
    assert conn.requests == [{"op": "scan", "path": "j1"}]


def test_the_largest_file_and_an_empty_one_are_mirrored(mirror, monkeypatch):
    conn = use(mirror, monkeypatch, Scripted({"ok": True, "files": [["big", jobdir.MAX_FILE, 1], ["empty", 0, 1]]}, {"ok": False}))
    assert jobdir.refresh(mirror.local) is True
    assert conn.requests[1] == {"op": "read", "path": "j1/big", "offset": 0, "length": jobdir.CHUNK}
    assert (mirror.local / "empty").read_bytes() == b"" and len(conn.requests) == 2


def test_a_scan_is_read_up_to_max_listed_entries(mirror, monkeypatch):
    files = [[f"f{i:05d}", 0, 1] for i in range(jobdir.MAX_LISTED + 1)]
    use(mirror, monkeypatch, Scripted({"ok": True, "files": files}))
    jobdir.refresh(mirror.local)
    state = json.loads((mirror.local / ".mirror.json").read_text())
    assert len(state) == jobdir.MAX_LISTED and f"f{jobdir.MAX_LISTED:05d}" not in state


def test_a_scan_without_a_list_changes_nothing(mirror, monkeypatch):
    use(mirror, monkeypatch, Scripted({"ok": True, "files": {"job.json": 3}}))
    assert jobdir.refresh(mirror.local) is False and not (mirror.local / ".mirror.json").exists()


def test_a_file_that_ends_early_on_the_head_stops_the_reads(mirror, monkeypatch):
    conn = use(mirror, monkeypatch, Scripted({"ok": True, "files": [["job.json", 10, 1]]}, {"ok": True, "data": "eHl6"}, {"ok": True, "data": ""}))
    assert jobdir.refresh(mirror.local) is True
    assert (mirror.local / "job.json").read_bytes() == b"xyz" and len(conn.requests) == 3
    assert conn.requests[2] == {"op": "read", "path": "j1/job.json", "offset": 3, "length": 7}


def test_list_jobs_names_the_heads_jobs(mirror, monkeypatch):
    (mirror.head / "j2").mkdir()
    assert jobdir.list_jobs(mirror.root) == ["j1", "j2"]
    use(mirror, monkeypatch, Scripted({"ok": True, "jobs": ["j1", 5, None, "j3"]}))
    assert jobdir.list_jobs(mirror.root) == ["j1", "j3"]
    use(mirror, monkeypatch, Scripted({"ok": True}))
    assert jobdir.list_jobs(mirror.root) == []
    use(mirror, monkeypatch, Scripted({"ok": False, "missing": True, "error": "No such file or directory: jobs"}))
    assert jobdir.list_jobs(mirror.root) == []  # no job started yet
    use(mirror, monkeypatch, Scripted({"ok": False, "error": "PermissionError: denied"}))
    with pytest.raises(RunFailed) as info:
        jobdir.list_jobs(mirror.root)
    assert (info.value.message, info.value.hint) == (
        "the head cannot list the jobs: PermissionError: denied",
        "check the shared directory on the head",
    )


def test_push_sends_each_file_whole_and_skips_the_absent(mirror, monkeypatch):
    jobdir.refresh(mirror.local)
    (mirror.local / "report.md").write_text("# report\n")
    conn = use(mirror, monkeypatch, Scripted({"ok": True, "written": 9}))
    jobdir.push(mirror.local, "report.md", "absent.txt")
    assert conn.requests == [{"op": "write", "path": "j1/report.md", "data": base64.b64encode(b"# report\n").decode()}]
    use(mirror, monkeypatch, Scripted({"ok": False, "error": "ValueError: j1/report.md: more than 16777216 bytes"}))
    with pytest.raises(RunFailed) as info:
        jobdir.push(mirror.local, "report.md")
    assert info.value.message == "the head did not take j1/report.md: ValueError: j1/report.md: more than 16777216 bytes"
    assert info.value.hint == "check the shared directory on the head"


# ---- the mirror's root and the channel


class Found:
    """An inventory as Channel and mirror_root read it."""

    def __init__(self, path: Path, head_vars: dict, node_vars: dict | None = None) -> None:
        self.path = path
        self.head = "head1"
        self.vars = {"head1": head_vars, "node1": node_vars or {}}

    def host_var(self, host, var, default=None):
        return self.vars.get(host, {}).get(var, default)

    def hosts_of(self, group):
        return ["node1", "node2"] if group == "gpu_nodes" else []


def test_the_mirror_root_is_one_private_directory_per_inventory_and_shared_directory(tmp_path, monkeypatch):
    import hashlib

    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    inventory = tmp_path / "inv.ini"
    inventory.write_text("")
    old = os.umask(0o022)
    try:
        root = jobdir.mirror_root(Found(inventory, {}), "/shared")
    finally:
        os.umask(old)
    key = hashlib.sha256(f"{inventory.resolve()}\0/shared".encode()).hexdigest()[:16]
    assert root == tmp_path / "state" / "remote" / key
    assert stat.S_IMODE((root / "jobs").stat().st_mode) == 0o700
    assert json.loads((root / jobdir.ORIGIN).read_text()) == {"inventory": str(inventory.resolve()), "shared_dir": "/shared"}
    assert (root / jobdir.ORIGIN).read_text().endswith("}\n")
    (root / jobdir.ORIGIN).write_text('{"inventory": "elsewhere", "shared_dir": "/shared"}')
    assert jobdir.mirror_root(Found(inventory, {}), "/shared") == root  # a second call: the same root, its origin set right
    assert json.loads((root / jobdir.ORIGIN).read_text())["inventory"] == str(inventory.resolve())
    assert jobdir.mirror_root(Found(inventory, {}), "/other") != root


READY = "import json, sys; print(json.dumps({'ready': True}), flush=True); [print(json.dumps({'got': l}), flush=True) for l in sys.stdin]"


@pytest.fixture
def spawned(monkeypatch):
    """Channel's SSH command recorded; a small stand-in answers instead of the head."""
    from megaprov.cluster import sshcmd

    real = subprocess.Popen
    seen = []
    monkeypatch.setattr(sshcmd, "ssh_argv", lambda found, host: ["ssh", "--", host])

    def popen(argv, **kwargs):
        seen.append((argv, kwargs))
        return real([sys.executable, "-c", READY], **kwargs)

    monkeypatch.setattr(jobdir.subprocess, "Popen", popen)
    return seen


@pytest.mark.parametrize(
    ("head_vars", "node_vars", "prefix", "python"),
    [
        ({"ansible_user": "root"}, {}, ["runuser", "-u", "megaprov", "--"], "python3"),
        ({"ansible_user": "ops"}, {"megaprov_cluster_user": "trainer"}, ["sudo", "-n", "-u", "trainer", "--"], "python3"),
        ({"ansible_user": "trainer"}, {"megaprov_cluster_user": "trainer"}, [], "python3"),
        ({}, {}, ["sudo", "-n", "-u", "megaprov", "--"], "python3"),
        (
            {"ansible_user": "root", "ansible_python_interpreter": "/usr/bin/python3.12"},
            {},
            ["runuser", "-u", "megaprov", "--"],
            "/usr/bin/python3.12",
        ),
        ({"ansible_user": "root", "ansible_python_interpreter": "auto_silent"}, {}, ["runuser", "-u", "megaprov", "--"], "python3"),
        ({"ansible_user": "root", "ansible_python_interpreter": "{{ py }}"}, {}, ["runuser", "-u", "megaprov", "--"], "python3"),
    ],
)
def test_the_channel_runs_the_helper_on_the_head_as_the_cluster_user(spawned, tmp_path, head_vars, node_vars, prefix, python):
    import shlex

    channel = jobdir.Channel(Found(tmp_path / "inv.ini", head_vars, node_vars), "/shared/")
    try:
        [(argv, kwargs)] = spawned
        assert argv == ["ssh", "--", "head1", shlex.join([*prefix, *jobdir.helper_command(python, "/shared/jobs")])]
        assert kwargs == {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        assert channel.head == "head1" and channel.argv == argv
        assert channel.call(op="list", path="j1") == {"got": '{"op": "list", "path": "j1"}\n'}
    finally:
        channel.close()


def test_the_channel_reaches_the_head_with_the_inventorys_ssh_settings_and_keeps_a_shared_paths_own_letters(monkeypatch, tmp_path):
    """ssh_argv gets the inventory (its user, port, key and pinned host keys); only a trailing slash of the shared
    directory is dropped, never a letter of its name."""
    import shlex

    from megaprov.cluster import sshcmd

    asked = []
    monkeypatch.setattr(sshcmd, "ssh_argv", lambda found, host: asked.append((found, host)) or ["ssh", "--", host])
    real = subprocess.Popen
    monkeypatch.setattr(jobdir.subprocess, "Popen", lambda argv, **kwargs: real([sys.executable, "-c", READY], **kwargs))
    found = Found(tmp_path / "inv.ini", {"ansible_user": "megaprov"})
    channel = jobdir.Channel(found, "/data/X/")
    try:
        assert asked == [(found, "head1")]
        assert channel.argv[-1] == shlex.join(jobdir.helper_command("python3", "/data/X/jobs"))
    finally:
        channel.close()


def test_a_cluster_user_that_is_no_user_name_is_refused(spawned, tmp_path):
    with pytest.raises(UsageError) as info:
        jobdir.Channel(Found(tmp_path / "inv.ini", {}, {"megaprov_cluster_user": "x; rm -rf /"}), "/shared")
    assert info.value.message == "megaprov_cluster_user='x; rm -rf /' is not a user name" and spawned == []


class Stand(jobdir.Channel):
    def __init__(self, program: str) -> None:
        self.head = "head1"
        self.proc = subprocess.Popen([sys.executable, "-c", program], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_head_that_ends_says_its_last_line_of_stderr(monkeypatch):
    program = "import sys; sys.stderr.buffer.write(b'first\\nsudo: a password is required \\xff' + b'x' * 400 + b'\\n')"
    with pytest.raises(HostsUnreachable) as info:
        Stand(program)._line()
    said = "sudo: a password is required \ufffd" + "x" * 400
    assert info.value.message == f"the job directory cannot be read through the head head1: {said[:300]}"
    assert info.value.hint == "check that the head answers SSH with the inventory's settings and that the cluster user may run python3 there"


def test_only_the_start_of_a_long_stderr_is_read():
    program = "import sys; sys.stderr.write('a' * 3990 + '\\nsecond line of the error\\n')"
    with pytest.raises(HostsUnreachable) as info:
        Stand(program)._line()
    assert info.value.message == "the job directory cannot be read through the head head1: second li"


def test_a_head_that_says_nothing_is_no_answer_and_is_stopped(monkeypatch):
    monkeypatch.setattr(jobdir, "TIMEOUT", 0.2)
    stand = Stand("import time; time.sleep(30)")
    with pytest.raises(HostsUnreachable) as info:
        stand.call(op="list")
    assert info.value.message == "the job directory cannot be read through the head head1 (no answer)"
    assert stand.proc.wait(timeout=5) != 0  # killed


def test_a_head_that_is_gone_before_the_request_is_unreachable():
    stand = Stand("pass")
    stand.proc.wait()
    with pytest.raises(HostsUnreachable):
        stand.call(op="list", path="x" * 100_000)


def test_an_answer_that_is_no_object_is_run_failed():
    with pytest.raises(RunFailed) as info:
        Stand("print('[' + '1, ' * 100 + '1]', flush=True)")._line()
    assert info.value.message == f"the head head1 answered {(b'[' + b'1, ' * 100)[:100]!r}"
    assert info.value.hint == "see the head's python3"


def test_close_ends_the_helper_and_kills_one_that_does_not_stop():
    stand = Stand("import time; time.sleep(30)")
    stand.close()
    assert stand.proc.poll() is not None
    stand.close()  # closed already: nothing to do
    stubborn = Stand("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('{}', flush=True); time.sleep(60)")
    stubborn._line()  # it ignores SIGTERM from now on
    stubborn.close()
    assert stubborn.proc.wait(timeout=5) == -9


def test_the_channel_of_a_mirror_is_opened_once_and_again_when_it_died(tmp_path, monkeypatch):
    from megaprov import paths

    root = tmp_path / "m"
    (root / "jobs").mkdir(parents=True)
    (root / jobdir.ORIGIN).write_text(json.dumps({"inventory": "/inv.ini", "shared_dir": "/shared"}))
    loads, opened = [], []
    monkeypatch.setattr(jobdir.inv, "load", lambda *a: loads.append(a) or "FOUND")

    class Opened:
        def __init__(self, found, shared):
            opened.append((found, shared))
            self.alive = True
            self.proc = SimpleNamespace(poll=lambda: None if self.alive else 1)

    monkeypatch.setattr(jobdir, "Channel", Opened)
    monkeypatch.setattr(jobdir, "_CHANNELS", {})
    first = jobdir.channel(root)
    assert jobdir.channel(root) is first and opened == [("FOUND", "/shared")]
    assert loads == [("/inv.ini", paths.roles_dir(), paths.cluster_defaults())]
    first.alive = False
    assert jobdir.channel(root) is not first and len(opened) == 2


# ---- a launcher's lines


def test_event_lines_are_the_launchers_own_lines_shown_as_text(tmp_path):
    local = tmp_path / "jobs" / "el"
    (local / "logs").mkdir(parents=True)
    job = SimpleNamespace(local_dir=local)
    assert jobdir.event_lines(job, "logs/elastic.log", "events", "megaprov: ") == []  # no file yet
    filler = b"x" * (1 << 20)
    body = b"megaprov: too old\n" + filler + b"\nmegaprov: job el lost node3\x1b[2J \xff\nplanted\nmegaprov: megaprov: twice\n"
    (local / "logs" / "elastic.log").write_bytes(body)
    assert jobdir.event_lines(job, "logs/elastic.log", "events", "megaprov: ") == ["job el lost node3\\x1b[2J \ufffd", "megaprov: twice"]


def test_event_lines_are_never_read_through_a_link_the_cluster_user_planted(tmp_path):
    """The events file is read below the job's root without following links: a link to a file the cluster user wrote
    elsewhere (or to one of root's) gives no lines."""
    local = tmp_path / "jobs" / "el"
    (local / "logs").mkdir(parents=True)
    elsewhere = tmp_path / "planted.log"
    elsewhere.write_text("megaprov: job el lost node3\n")
    (local / "logs" / "elastic.log").symlink_to(elsewhere)
    job = SimpleNamespace(local_dir=local)
    assert jobdir.event_lines(job, "logs/elastic.log", "events", "megaprov: ") == []


def test_the_helper_travels_whole_and_compressed_in_one_argument(tmp_path):
    """The program in the command line is jobdir_helper.py byte for byte, in one argument far under Linux's 128 KiB
    (MAX_ARG_STRLEN) limit, and it runs: the head answers ready and serves a listing."""
    import base64
    import re
    import zlib

    python, flag, program, root = jobdir.helper_command("python3", "/shared/jobs")
    assert (python, flag, root) == ("python3", "-c", "/shared/jobs")
    packed = re.fullmatch(r"import base64,zlib;exec\(zlib\.decompress\(base64\.b64decode\('([A-Za-z0-9+/=]+)'\)\)\)", program)
    assert packed and zlib.decompress(base64.b64decode(packed.group(1))) == jobdir.HELPER.read_bytes()
    assert len(program) < len(jobdir.HELPER.read_bytes())
    (tmp_path / "j1").mkdir()
    proc = subprocess.run(
        [sys.executable, *jobdir.helper_command(sys.executable, str(tmp_path))[1:]],
        input='{"op": "list", "path": ""}\n',
        capture_output=True,
        text=True,
        timeout=30,
    )
    ready, answer = proc.stdout.splitlines()[:2]
    assert json.loads(ready)["ready"] is True and "j1" in answer

"""megaprov/untrusted.py entry by entry: what each reader returns for a regular file (exactly, at its bound, from its
end), and the exact refusal (message, problem, fix, the entry's path, Missing or not) for each thing a cluster user
can put in the tree: a missing file or directory, a link as the last or a middle component, a file where a directory
is walked, a path outside the root or too deep, a FIFO, a device, a socket, a file past its bound or one that grew
while read, bytes that are not UTF-8, text that is not JSON, a directory filled past its limit. The descriptors it
hands out are blocking and close-on-exec, and none leaks when an entry is refused.

Everything is real (files, directories, links, FIFOs and a socket in tmp_path, /dev/null as the device); the one
stand-in is os.fstat in the grow-while-read tests, which appends to the file right after the reader took its size
(the race a job that writes its log while megaprov reads it makes)."""

from __future__ import annotations

import errno
import os
import socket
import stat
from pathlib import Path

import pytest

from megaprov import untrusted
from megaprov.errors import ExitCode
from tests.unit.core.test_untrusted import _never_blocks  # noqa: F401 (autouse: a read that blocks fails the test)

HINT = untrusted.HINT
MISSING_FIX = "check the name; the job may not have written it yet"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A trusted root (the shared view) with a job directory holding one log; a secret file lies outside it."""
    view = tmp_path / "view"
    (view / "jobs" / "evil" / "logs").mkdir(parents=True)
    (view / "jobs" / "evil" / "logs" / "n1.log").write_bytes(b"step 1\n")
    (tmp_path / "secret").write_text("outside")
    return view


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def refused(call, *args, **kwargs) -> untrusted.BadEntry:
    """The BadEntry a call raises (exit 2), checked to be no Missing unless the caller asks for one."""
    with pytest.raises(untrusted.BadEntry) as caught:
        call(*args, **kwargs)
    assert caught.value.exit_code == ExitCode.USAGE
    return caught.value


def assert_entry(exc: untrusted.BadEntry, path: Path | str, problem: str, fix: str | None = HINT) -> None:
    assert exc.path == str(path)
    assert exc.problem == problem
    assert exc.message == f"{path} {problem}"
    assert exc.hint == fix
    assert str(exc) == (f"{path} {problem}: {fix}" if fix else f"{path} {problem}")


def read_all(fd: int) -> bytes:
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


# ---- open_fd: what it hands out


@pytest.mark.parametrize("as_text", [False, True])
def test_a_file_inside_the_root_opens_as_a_blocking_descriptor_not_inherited_by_children(root, as_text):
    log = root / "jobs" / "evil" / "logs" / "n1.log"
    fd = untrusted.open_fd(str(log) if as_text else log, str(root) if as_text else root)
    assert os.get_blocking(fd) is True  # opened O_NONBLOCK only to refuse a FIFO; reads of the file block as usual
    assert os.get_inheritable(fd) is False
    assert read_all(fd) == b"step 1\n"


def test_a_file_the_operator_names_opens_through_their_link_blocking_and_not_inherited(tmp_path):
    (tmp_path / "real.yml").write_text("name: x\n")
    (tmp_path / "link.yml").symlink_to(tmp_path / "real.yml")
    for path in (tmp_path / "real.yml", tmp_path / "link.yml", str(tmp_path / "link.yml")):
        fd = untrusted.open_fd(path, None)
        assert os.get_blocking(fd) is True
        assert os.get_inheritable(fd) is False
        assert read_all(fd) == b"name: x\n"


def test_open_binary_is_a_stream_of_the_file(root):
    with untrusted.open_binary(root / "jobs" / "evil" / "logs" / "n1.log", root) as handle:
        assert handle.read() == b"step 1\n"


# ---- open_fd: what it refuses, entry by entry


@pytest.mark.parametrize("with_root", [True, False])
def test_a_fifo_is_refused_without_blocking_and_its_descriptor_closed(root, with_root):
    fifo = root / "jobs" / "evil" / "logs" / "n2.log"
    os.mkfifo(fifo)
    before = open_fds()
    exc = refused(untrusted.open_fd, fifo, root if with_root else None)
    assert_entry(exc, fifo, "is not a regular file (it is a FIFO)")
    assert not isinstance(exc, untrusted.Missing)
    assert open_fds() == before


@pytest.mark.parametrize("with_root", [True, False])
def test_a_directory_is_refused_as_a_directory_and_its_descriptor_closed(root, with_root):
    logs = root / "jobs" / "evil" / "logs"
    before = open_fds()
    exc = refused(untrusted.open_fd, logs, root if with_root else None)
    assert_entry(exc, logs, "is not a regular file (it is a directory)")
    assert open_fds() == before


@pytest.mark.parametrize("within", ["/dev", None])
def test_a_device_is_refused_as_a_device_and_its_descriptor_closed(within):
    before = open_fds()
    exc = refused(untrusted.open_fd, "/dev/null", within)
    assert_entry(exc, "/dev/null", "is not a regular file (it is a device)")
    assert open_fds() == before


def test_a_socket_cannot_be_opened_and_says_why_with_the_permission_fix(root):
    path = root / "jobs" / "evil" / "logs" / "n1.sock"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        exc = refused(untrusted.open_fd, path, root)
    finally:
        server.close()
    assert_entry(exc, path, f"cannot be read ({os.strerror(errno.ENXIO)})", "check its permissions")
    assert not isinstance(exc, untrusted.Missing)


@pytest.mark.parametrize("within", ["/dev/pts", None])
def test_a_terminal_is_refused_without_becoming_the_controlling_terminal_of_megaprov(within):
    """Opened O_NOCTTY: a session leader without a terminal (megaprov under systemd or cron) that opens a terminal
    named to it is refused the device and does not take the terminal as its own. Run in a forked session leader."""
    pid = os.fork()
    if pid == 0:  # the child: a new session, no controlling terminal
        code = 9
        try:
            os.setsid()
            try:
                _, follower = os.openpty()
                name = os.ttyname(follower)
            except OSError:
                os._exit(3)  # no terminal to open here
            try:
                os.close(os.open("/dev/tty", os.O_RDWR))
                code = 3  # this system's openpty already made it the controlling terminal
            except OSError:
                try:
                    untrusted.open_fd(name, within)
                except untrusted.BadEntry as exc:
                    code = 4 if exc.problem != "is not a regular file (it is a device)" else 0
                try:
                    os.close(os.open("/dev/tty", os.O_RDWR))
                    code = 1  # the refused open made it megaprov's controlling terminal
                except OSError:
                    pass
        finally:
            os._exit(code)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code == 3:
        pytest.skip("no terminal to open here, or openpty gives the controlling terminal")
    assert code == 0


@pytest.mark.parametrize("with_root", [True, False])
def test_a_missing_file_is_missing_with_its_name_and_the_fix(root, with_root):
    path = root / "jobs" / "evil" / "logs" / "n9.log"
    exc = refused(untrusted.open_fd, path, root if with_root else None)
    assert isinstance(exc, untrusted.Missing)
    assert_entry(exc, path, "does not exist", MISSING_FIX)


def test_a_file_below_a_missing_directory_is_missing_by_its_whole_path(root):
    path = root / "jobs" / "gone" / "logs" / "n1.log"
    exc = refused(untrusted.open_fd, path, root)
    assert isinstance(exc, untrusted.Missing)
    assert_entry(exc, path, "does not exist", MISSING_FIX)


def test_a_link_as_the_entry_is_refused_as_a_link_even_to_a_file_inside(root):
    link = root / "jobs" / "evil" / "logs" / "n2.log"
    link.symlink_to("n1.log")
    exc = refused(untrusted.open_fd, link, root)
    assert_entry(exc, link, "is a symbolic link (or passes through one)")
    assert not isinstance(exc, untrusted.Missing)


def test_a_link_in_the_middle_of_the_path_is_named_in_the_refusal(root, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "n1.log").write_text("outside")
    (root / "jobs" / "evil" / "l\x1bgs").symlink_to(tmp_path / "elsewhere")
    path = root / "jobs" / "evil" / "l\x1bgs" / "n1.log"
    exc = refused(untrusted.open_fd, path, root)
    assert exc.path == str(path)
    assert exc.problem == "passes through a symbolic link (l\\x1bgs)"
    assert str(exc) == f"{root}/jobs/evil/l\\x1bgs/n1.log passes through a symbolic link (l\\x1bgs): {HINT}"


def test_a_file_where_a_directory_is_walked_is_refused_as_not_a_directory_on_the_way(root):
    path = root / "jobs" / "evil" / "logs" / "n1.log" / "inner"
    exc = refused(untrusted.open_fd, path, root)
    assert_entry(exc, path, "passes through something that is not a directory")


# ---- the path below the root


def test_a_path_outside_the_root_is_refused_as_outside(root, tmp_path):
    exc = refused(untrusted.open_fd, tmp_path / "secret", root)
    assert_entry(exc, tmp_path / "secret", f"is outside {root}")


def test_a_path_that_climbs_out_with_dotdot_is_refused_as_outside(root, monkeypatch):
    monkeypatch.chdir(root / "jobs")
    exc = refused(untrusted.open_fd, "../../secret", ".")
    assert_entry(exc, "../../secret", "is outside .")
    assert untrusted.kind("../../secret", ".") == "other"


def test_a_dotdot_that_stays_inside_is_read_as_its_normal_form(root):
    assert read_all(untrusted.open_fd(root / "jobs" / "x" / ".." / "evil" / "logs" / "n1.log", root)) == b"step 1\n"


def test_the_deepest_path_read_is_max_depth_directories_below_the_root(tmp_path):
    assert untrusted.MAX_DEPTH == 16
    deepest = tmp_path.joinpath(*[f"d{i}" for i in range(1, 17)])
    too_deep = deepest / "d17"
    too_deep.mkdir(parents=True)
    (deepest / "f").write_text("deep enough")
    (too_deep / "f").write_text("too deep")
    assert read_all(untrusted.open_fd(deepest / "f", tmp_path)) == b"deep enough"
    exc = refused(untrusted.open_fd, too_deep / "f", tmp_path)
    assert_entry(exc, too_deep / "f", f"is outside {tmp_path}")


# ---- _kind and _oserror: every branch's words


@pytest.mark.parametrize(
    ("mode", "words"),
    [
        (stat.S_IFDIR | 0o755, "a directory"),
        (stat.S_IFIFO | 0o644, "a FIFO"),
        (stat.S_IFCHR | 0o666, "a device"),
        (stat.S_IFBLK | 0o660, "a device"),
        (stat.S_IFSOCK | 0o755, "a socket"),
        (stat.S_IFLNK | 0o777, "a symbolic link"),
        (0o644, "not a file"),
    ],
)
def test_each_kind_of_entry_is_named_in_words(mode, words):
    assert untrusted._kind(mode) == words  # noqa: SLF001 (a socket or link never reaches fstat: open refuses them first)


@pytest.mark.parametrize(
    ("exc", "directory", "problem", "fix"),
    [
        (FileNotFoundError(errno.ENOENT, "No such file or directory"), False, "does not exist", MISSING_FIX),
        (OSError(errno.ELOOP, "Too many levels of symbolic links"), False, "is a symbolic link (or passes through one)", HINT),
        (OSError(errno.EMLINK, "Too many links"), False, "is a symbolic link (or passes through one)", HINT),  # BSD's O_NOFOLLOW
        (NotADirectoryError(errno.ENOTDIR, "Not a directory"), False, "passes through something that is not a directory", HINT),
        (NotADirectoryError(errno.ENOTDIR, "Not a directory"), True, "is not a directory", HINT),
        (OSError(errno.EIO, "Input/output error"), False, "cannot be read (Input/output error)", "check its permissions"),
        (PermissionError(), False, "cannot be read (PermissionError)", "check its permissions"),
    ],
)
def test_each_os_error_becomes_its_refusal(exc, directory, problem, fix):
    made = untrusted._oserror(Path("/v/jobs/a/x.log"), exc, directory=directory)  # noqa: SLF001
    assert type(made) is (untrusted.Missing if exc.errno == errno.ENOENT else untrusted.BadEntry)
    assert_entry(made, "/v/jobs/a/x.log", problem, fix)


def test_an_os_error_is_about_a_path_walked_through_unless_said_otherwise():
    made = untrusted._oserror("/v/x", NotADirectoryError(errno.ENOTDIR, "Not a directory"))  # noqa: SLF001
    assert made.problem == "passes through something that is not a directory"


# ---- size, read_bytes


def test_size_is_the_files_length_and_leaves_no_descriptor_open(root, tmp_path):
    log = root / "jobs" / "evil" / "logs" / "n1.log"
    before = open_fds()
    assert untrusted.size(log, root) == 7
    assert untrusted.size(tmp_path / "secret", None) == 7
    assert open_fds() == before
    os.mkfifo(root / "fifo")
    assert_entry(refused(untrusted.size, root / "fifo", root), root / "fifo", "is not a regular file (it is a FIFO)")
    assert open_fds() == before
    (root / "link").symlink_to(log)
    assert_entry(refused(untrusted.size, root / "link", root), root / "link", "is a symbolic link (or passes through one)")
    assert_entry(refused(untrusted.size, tmp_path / "secret", root), tmp_path / "secret", f"is outside {root}")


def test_a_file_exactly_at_its_bound_is_read_whole(root):
    path = root / "jobs" / "evil" / "report.json"
    path.write_bytes(b"x" * 1000)
    assert untrusted.read_bytes(path, "report", 1000, root) == b"x" * 1000
    assert untrusted.read_bytes(path, "report", 1000, root, tail=True) == b"x" * 1000


def test_a_file_one_byte_past_its_bound_is_refused_with_its_size_and_the_bound(root):
    path = root / "jobs" / "evil" / "report.json"
    path.write_bytes(b"x" * 1001)
    before = open_fds()
    exc = refused(untrusted.read_bytes, path, "report", 1000, root)
    assert_entry(exc, path, "(report) is 1,001 bytes", "megaprov reads at most 1,000 bytes of it: remove or shorten it")
    assert open_fds() == before


def test_a_tail_read_is_the_last_bytes_of_a_larger_file(root):
    path = root / "jobs" / "evil" / "logs" / "n1.log"
    path.write_bytes(b"0123456789")
    assert untrusted.read_bytes(path, "node log", 4, root, tail=True) == b"6789"
    assert untrusted.read_bytes(path, "node log", 4, None, tail=True) == b"6789"


def grows_after_sizing(monkeypatch, path: Path, extra: bytes) -> None:
    """The job appends ``extra`` to ``path`` right after read_bytes took its size (the second fstat of the read; the
    first is open_fd's check that it is a regular file)."""
    real = os.fstat
    calls = []

    def fstat(fd):
        info = real(fd)
        calls.append(fd)
        if len(calls) == 2:
            with path.open("ab") as handle:
                handle.write(extra)
        return info

    monkeypatch.setattr(untrusted.os, "fstat", fstat)


def test_a_log_that_grows_while_read_from_its_end_gives_its_newest_bytes_within_the_bound(root, monkeypatch):
    path = root / "jobs" / "evil" / "logs" / "n1.log"
    path.write_bytes(b"0123456789")
    grows_after_sizing(monkeypatch, path, b"ABC")
    assert untrusted.read_bytes(path, "node log", 10, root, tail=True) == b"123456789A"


def test_a_file_that_grows_past_its_bound_while_read_is_refused(root, monkeypatch):
    path = root / "jobs" / "evil" / "report.json"
    path.write_bytes(b"x" * 1000)
    grows_after_sizing(monkeypatch, path, b"ABC")
    exc = refused(untrusted.read_bytes, path, "report", 1000, root)
    assert_entry(exc, path, "(report) is larger than 1,000 bytes", "remove or shorten it")


def test_a_file_that_grows_within_its_bound_while_read_is_read_as_it_was_sized(root, monkeypatch):
    path = root / "jobs" / "evil" / "report.json"
    path.write_bytes(b"x" * 10)
    grows_after_sizing(monkeypatch, path, b"AB")
    assert untrusted.read_bytes(path, "report", 12, root) == b"x" * 10 + b"AB"


# ---- read_text, read_json


def test_text_is_utf8_decoded(root):
    path = root / "jobs" / "evil" / "logs" / "n1.log"
    path.write_bytes("h\u00e9llo\n".encode())
    assert untrusted.read_text(path, "node log", 100, root) == "h\u00e9llo\n"
    assert untrusted.read_text(path, "node log", 3, root, tail=True) == "lo\n"


def test_bytes_that_are_not_utf8_are_refused_unless_the_read_is_not_strict(root):
    path = root / "jobs" / "evil" / "logs" / "n1.log"
    path.write_bytes(b"ok\n\xff\n")
    exc = refused(untrusted.read_text, path, "node log", 100, root)
    assert_entry(exc, path, "(node log) is not UTF-8 text")
    assert str(exc.__cause__) == f"node log {path} is not UTF-8 (byte 0xff on line 2): save it as UTF-8"
    assert untrusted.read_text(path, "node log", 100, root, strict=False) == "ok\n\ufffd\n"


def test_text_past_its_bound_is_refused_with_what_it_is(root):
    path = root / "jobs" / "evil" / "spec.yml"
    path.write_text("name: x\n")
    exc = refused(untrusted.read_text, path, "job spec", 4, root)
    assert_entry(exc, path, "(job spec) is 8 bytes", "megaprov reads at most 4 bytes of it: remove or shorten it")


def test_json_is_parsed(root):
    path = root / "jobs" / "evil" / "report.json"
    path.write_text('{"verdict": "passed", "steps": [1, 2]}')
    assert untrusted.read_json(path, "report", 100, root) == {"verdict": "passed", "steps": [1, 2]}


def test_json_past_its_bound_is_refused_with_what_it_is(root):
    path = root / "jobs" / "evil" / "report.json"
    path.write_text('{"verdict": "passed"}')
    exc = refused(untrusted.read_json, path, "report", 4, root)
    assert_entry(exc, path, "(report) is 21 bytes", "megaprov reads at most 4 bytes of it: remove or shorten it")


def test_text_that_is_not_json_is_a_bad_entry_naming_the_file(root):
    path = root / "jobs" / "evil" / "report.json"
    path.write_text('{"verdict": passed}')
    exc = refused(untrusted.read_json, path, "report", 100, root)
    assert_entry(exc, path, "(report) is not valid JSON")
    assert str(exc.__cause__).startswith(f"report {path}: not valid JSON (Expecting value: line 1 column 13")


def test_json_nested_too_deep_is_a_bad_entry_naming_the_file(root):
    path = root / "jobs" / "evil" / "report.json"
    path.write_text("[" * 40 + "]" * 40)
    exc = refused(untrusted.read_json, path, "report", 100, root)
    assert_entry(exc, path, "(report) is not valid JSON")
    assert str(exc.__cause__) == f"report {path}: nested deeper than 32 levels: it is not a file megaprov wrote: remove it"


def test_bytes_that_are_not_utf8_in_json_are_refused_as_not_text(root):
    path = root / "jobs" / "evil" / "report.json"
    path.write_bytes(b'{"a": "\xff"}')
    assert_entry(refused(untrusted.read_json, path, "report", 100, root), path, "(report) is not UTF-8 text")


# ---- kind, is_file, is_dir


def test_kind_says_what_each_entry_is_without_following_or_opening_it(root, tmp_path):
    evil = root / "jobs" / "evil"
    os.mkfifo(evil / "fifo")
    (evil / "to-file").symlink_to("logs/n1.log")
    (evil / "to-dir").symlink_to("logs")
    (evil / "to-secret").symlink_to(tmp_path / "secret")
    expected = {
        evil / "logs" / "n1.log": "file",
        evil / "logs": "dir",
        evil: "dir",
        root: "dir",
        evil / "nothing": "missing",
        evil / "gone" / "n1.log": "missing",
        evil / "fifo": "other",
        evil / "to-file": "other",
        evil / "to-dir": "other",
        evil / "to-secret": "other",
        evil / "to-dir" / "n1.log": "other",  # through a link
        evil / "logs" / "n1.log" / "x": "other",  # through a file
        evil / ("n" * 300): "other",  # a name the system refuses (too long) is not "missing"
        tmp_path / "secret": "other",  # outside the root
    }
    assert {path: untrusted.kind(path, root) for path in expected} == expected
    assert untrusted.kind(str(evil / "logs" / "n1.log"), str(root)) == "file"
    assert untrusted.kind("/dev/null", "/dev") == "other"


def test_is_file_and_is_dir_are_true_only_for_their_kind(root):
    log, logs, fifo = root / "jobs" / "evil" / "logs" / "n1.log", root / "jobs" / "evil" / "logs", root / "fifo"
    os.mkfifo(fifo)
    assert [untrusted.is_file(p, root) for p in (log, logs, fifo, root / "none")] == [True, False, False, False]
    assert [untrusted.is_dir(p, root) for p in (log, logs, fifo, root / "none")] == [False, True, False, False]


# ---- entries, files


def make_listing(directory: Path, outside: Path) -> None:
    for name in ("b.log", "a.log", "c.txt", "x-a.log"):
        (directory / name).write_text(name)
    (directory / "sub").mkdir()
    (directory / "d.log").symlink_to(outside)
    (directory / "e.log").symlink_to("a.log")
    (directory / "f-dir").symlink_to("sub")
    os.mkfifo(directory / "g.log")


def test_entries_are_every_name_with_its_kind_sorted(root, tmp_path):
    logs = root / "jobs" / "evil" / "logs"
    make_listing(logs, tmp_path / "secret")
    found = untrusted.entries(logs, root)
    assert list(found.items()) == [
        ("a.log", "file"),
        ("b.log", "file"),
        ("c.txt", "file"),
        ("d.log", "other"),
        ("e.log", "other"),
        ("f-dir", "other"),
        ("g.log", "other"),
        ("n1.log", "file"),
        ("sub", "dir"),
        ("x-a.log", "file"),
    ]


def test_entries_of_the_root_itself_are_listed(root):
    (root / "top.txt").write_text("")
    before = open_fds()
    assert untrusted.entries(root, root) == {"jobs": "dir", "top.txt": "file"}
    assert untrusted.entries(str(root), str(root)) == {"jobs": "dir", "top.txt": "file"}
    assert open_fds() == before


def test_a_missing_directory_has_no_entries(root):
    assert untrusted.entries(root / "jobs" / "other", root) == {}
    assert untrusted.entries(root / "jobs" / "other" / "logs", root) == {}
    assert untrusted.files(root / "jobs" / "other" / "logs", root, suffix=".log") == []


@pytest.mark.parametrize("make", [lambda p: p.write_text(""), lambda p: p.symlink_to("logs")], ids=["file", "link"])
def test_a_directory_that_is_not_one_is_refused_as_not_a_directory(root, make):
    path = root / "jobs" / "evil" / "listing"
    make(path)
    exc = refused(untrusted.entries, path, root)
    assert_entry(exc, path, "is not a directory")
    assert not isinstance(exc, untrusted.Missing)


def test_a_directory_through_a_link_is_refused_by_the_link(root):
    (root / "jobs" / "linked").symlink_to("evil")
    path = root / "jobs" / "linked" / "logs"
    assert_entry(refused(untrusted.entries, path, root), path, "passes through a symbolic link (linked)")


def test_a_directory_at_its_limit_is_listed_and_one_past_it_refused(root):
    logs = root / "jobs" / "evil" / "logs"
    (logs / "n2.log").write_text("")
    (logs / "n3.log").write_text("")
    assert untrusted.entries(logs, root, limit=3) == {"n1.log": "file", "n2.log": "file", "n3.log": "file"}
    (logs / "n4.log").write_text("")
    before = open_fds()
    exc = refused(untrusted.entries, logs, root, limit=3)
    assert_entry(exc, logs, "holds more than 3 entries", "remove what the job did not write there")
    assert open_fds() == before
    exc = refused(untrusted.files, logs, root, suffix=".log", limit=3)
    assert exc.problem == "holds more than 3 entries"


def test_files_are_the_regular_files_with_the_prefix_and_suffix_sorted(root, tmp_path):
    logs = root / "jobs" / "evil" / "logs"
    make_listing(logs, tmp_path / "secret")
    names = lambda found: [p.name for p in found]  # noqa: E731
    assert untrusted.files(logs, root) == [logs / n for n in ("a.log", "b.log", "c.txt", "n1.log", "x-a.log")]
    assert names(untrusted.files(str(logs), root, suffix=".log")) == ["a.log", "b.log", "n1.log", "x-a.log"]
    assert names(untrusted.files(logs, root, prefix="x-")) == ["x-a.log"]
    assert names(untrusted.files(logs, root, suffix=".log", prefix="n")) == ["n1.log"]
    assert untrusted.files(logs, root, suffix=".csv") == []


def test_the_job_root_is_the_shared_view_two_levels_above_a_job_directory():
    assert untrusted.job_root(Path("/srv/view/jobs/evil")) == Path("/srv/view")

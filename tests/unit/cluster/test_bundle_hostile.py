"""A bundle is hostile input: it is copied in from another site. Gzip bombs and files that are not gzip,
deep or wide trees, links and FIFOs swapped in while a bundle is read, a hostile keyring package and a server that
trickles: each is refused in one line naming the file (exit 2 for the bundle; the build's download, exit 5), within
a bound, without blocking and without following a link out of the bundle."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import socket
import socketserver
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from megaprov.cli import main
from megaprov.cluster import bundle
from megaprov.errors import EnvironmentProblem, ExitCode, UsageError
from tests.helpers.bounded import limited
from tests.helpers.bundle import fake_bundle

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = "apt/Packages.gz"
SIX = "wheels/six-1.17.0-py2.py3-none-any.whl"
MIB = 1 << 20
CONTENTS = bundle.Contents(apt=(bundle.AptGroup("common_extra_packages", ("jq",)),))


def rehash(directory: Path, name: str) -> None:
    """The manifest made to match ``name`` as it is now: what an attacker who wrote both would ship."""
    digest = hashlib.sha256()
    with (directory / name).open("rb") as handle:
        while chunk := handle.read(MIB):
            digest.update(chunk)
    path = directory / bundle.MANIFEST
    data = json.loads(path.read_text())
    data["files"][name] = {"sha256": digest.hexdigest(), "size": (directory / name).stat().st_size}
    path.write_text(json.dumps(data))


def one_line(error: UsageError | EnvironmentProblem) -> str:
    line = error.one_line()
    assert "\n" not in line and not error.details
    return line


# ---- 1. a gzip bomb: streamed and bounded, in a child whose address space is 512 MiB


def gzip_bomb(path: Path, unit: bytes, members: int = 1, total: int = 1 << 30) -> None:
    """A gzip file expanding to ``total`` bytes of ``unit`` over and over, in ``members`` members, written as it is
    made: the test never holds the expansion."""
    block = unit * max(1, MIB // len(unit))
    blocks = total // len(block) // members
    with path.open("wb") as raw:
        for _ in range(members):
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as out:
                for _ in range(blocks):
                    out.write(block)


BOMBS = {  # name -> (what repeats, members, what refuses it)
    "1 GiB of zeros (no line)": (b"\0", 1, f"more than {MIB:,} bytes in one line (MAX_PACKAGES_LINE)"),
    "1 GiB of newlines": (b"\n", 1, "more than 4,000,000 lines (MAX_PACKAGES_LINES)"),
    "1 GiB of stanzas": (b"Package: jq\nVersion: 1\n\n", 1, "more than 1,000,000 packages and provided names (MAX_APT_NAMES)"),
    "1 GiB of long lines": (b"Description: " + b"x" * (MIB // 2) + b"\n", 1, "more than 134,217,728 bytes expanded (MAX_PACKAGES_BYTES)"),
    "1 GiB in 64 members": (b"Description: " + b"y" * 4000 + b"\n", 64, "more than 134,217,728 bytes expanded (MAX_PACKAGES_BYTES)"),
}
# 512 MiB beyond what the child's imports took (tests.helpers.bounded).
CHILD = limited(
    """import json, sys
from megaprov.cli import main
from megaprov.cluster import bundle
for key, value in json.loads(sys.argv[3]).items():
    setattr(bundle, key, value)
bundle.resolve = lambda *args: bundle.Contents(apt=(bundle.AptGroup("common_extra_packages", ("jq",)),))
sys.exit(main(["bundle", "verify", sys.argv[1], "-i", sys.argv[2]]))
""",
    512 << 20,
)


def verify_in_child(directory: Path, bounds: dict[str, int] | None = None) -> tuple[int, str]:
    (directory.parent / "inventory.ini").write_text("[head]\nn1\n")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(directory), str(directory.parent / "inventory.ini"), json.dumps(bounds or {})],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    return proc.returncode, proc.stderr


def error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("megaprov: error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize(("bomb", "bounds"), [*((name, None) for name in BOMBS), ("4 MiB stored", {"MAX_PACKAGES_GZ_BYTES": MIB})])
def test_a_gzip_bomb_is_refused_at_its_bound_in_bounded_memory(tmp_path, bomb, bounds):
    directory = fake_bundle(tmp_path / "b")
    if bounds is None:
        unit, members, needle = BOMBS[bomb]
        gzip_bomb(directory / PACKAGES, unit, members)
        assert (directory / PACKAGES).stat().st_size < 8 * MIB  # small as stored: the reviewer's was 1 MiB
    else:  # within every expanded bound, but larger as stored than MAX_PACKAGES_GZ_BYTES (1 MiB here)
        (directory / PACKAGES).write_bytes(gzip.compress(os.urandom(4 * MIB), mtime=0))
        needle = "more than 1,048,576 bytes as stored (MAX_PACKAGES_GZ_BYTES)"
    rehash(directory, PACKAGES)
    code, err = verify_in_child(directory, bounds)
    assert code == ExitCode.USAGE, err
    line = error_line(err)
    assert f"{directory}: {PACKAGES}" in line and needle in line


# ---- 2. a Packages.gz that is not gzip: exit 2, one line naming it


def gzipped(text: bytes) -> bytes:
    return gzip.compress(text, mtime=0)


GOOD = gzipped(b"Package: jq\nVersion: 1.6-2.1+deb12u3\n")


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"Package: jq\nVersion: 1\n", "is not a whole gzip file"),
        (b"\x1f\x8b\x08\x00" + b"\xff" * 64, "is not a whole gzip file"),
        (GOOD[:-12], "is not a whole gzip file"),  # cut short
        (GOOD[:10] + b"\xff" * (len(GOOD) - 10), "is not a whole gzip file"),  # the header, then no deflate stream
        (GOOD + b"trailing garbage", "is not a whole gzip file"),
        (b"", "is empty, not a gzip file"),
    ],
    ids=["plain text", "bad header", "truncated", "corrupt deflate", "trailing garbage", "empty"],
)
def test_a_packages_gz_that_is_not_gzip_exits_2_naming_it(capsys, tmp_path, monkeypatch, content, needle):
    directory = fake_bundle(tmp_path / "b")
    (directory / PACKAGES).write_bytes(content)
    rehash(directory, PACKAGES)
    (tmp_path / "inventory.ini").write_text("[head]\nn1\n")
    monkeypatch.setattr(bundle, "resolve", lambda *args: CONTENTS)
    code = main(["bundle", "verify", str(directory), "-i", str(tmp_path / "inventory.ini")])
    _, err = capsys.readouterr()
    assert code == ExitCode.USAGE, err
    line = error_line(err)
    assert f"bundle {directory}: {PACKAGES} " in line and needle in line


# ---- 3. trees: iterative and bounded walks; no link followed, no FIFO opened


def nest(parent: Path, name: str, depth: int) -> None:
    """``depth`` directories ``name`` inside each other under ``parent``, made one name at a time (the whole path is
    longer than PATH_MAX for long names)."""
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


def unnest(parent: Path, name: str) -> None:
    """Remove what :func:`nest` made, deepest first, one name at a time (shutil.rmtree recurses)."""
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    depth = 0
    while True:
        try:
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        except FileNotFoundError:
            break
        os.close(fd)
        fd, depth = child, depth + 1
    for _ in range(depth):
        up = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = up
        os.rmdir(name, dir_fd=fd)
    os.close(fd)


def deep(name: str, depth: int, under: str) -> Callable[[Path], Callable[[], None]]:
    def make(directory: Path) -> Callable[[], None]:
        nest(directory / under, name, depth)
        return lambda: unnest(directory / under, name)

    return make


def wide(count: int) -> Callable[[Path], Callable[[], None]]:
    def make(directory: Path) -> Callable[[], None]:
        for i in range(count):
            (directory / "git" / f"empty{i}").mkdir()
        return lambda: None

    return make


def fifo(directory: Path) -> Callable[[], None]:
    os.mkfifo(directory / "apt" / "x.deb")
    return lambda: None


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (deep("d", 1200, "git/nccl-tests.git"), "is more than 32 directories deep"),
        (deep("d", 1200, "."), "is more than 32 directories deep"),
        (deep("n" * 200, 40, "apt"), "is more than 32 directories deep"),  # 8,000 characters: past PATH_MAX
        (wide(120), "more than 100 entries"),  # empty directories: no file, but each one is looked at
        (fifo, "'apt/x.deb' is not a plain file"),
    ],
    ids=["1,200 deep in a git mirror", "1,200 deep at the top", "past PATH_MAX", "too many entries", "a FIFO"],
)
def test_a_deep_or_wide_tree_is_refused_at_its_bound(tmp_path, monkeypatch, make, needle):
    directory = fake_bundle(tmp_path / "b")
    monkeypatch.setattr(bundle, "MAX_ENTRIES", 100, raising=False)
    cleanup = make(directory)
    try:
        with pytest.raises(UsageError) as exc:
            bundle.verify(directory)
        line = one_line(exc.value)
        assert line.startswith(f"bundle {directory}: ") and needle in line
    finally:
        cleanup()


def feed_fifo(path: Path, data: bytes, seconds: float = 3.0) -> None:
    """Writes ``data`` into the FIFO ``path`` once a reader opened it (or gives up): a reader that blocks is freed."""

    def run() -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # ENXIO: no reader yet
                time.sleep(0.05)
                continue
            os.write(fd, data)
            os.close(fd)
            return

    threading.Thread(target=run, daemon=True).start()


def swap_for_fifo(directory: Path, name: str) -> None:
    data = (directory / name).read_bytes()
    (directory / name).unlink()
    os.mkfifo(directory / name)
    feed_fifo(directory / name, data)


def swap_for_link(directory: Path, name: str) -> None:
    outside = directory.parent / "outside" / Path(name).name
    outside.parent.mkdir(exist_ok=True)
    (directory / name).rename(outside)
    (directory / name).symlink_to(outside)


def swap_dir_for_link(directory: Path, name: str) -> None:
    top = directory / name.split("/")[0]
    top.rename(directory.parent / "outside")
    top.symlink_to(directory.parent / "outside")


def hash_after_walk(directory: Path, seen: dict[str, os.stat_result]) -> object:
    """check_files with what a walk saw before the swap: the read itself must not block or follow."""
    return bundle.check_files(directory, bundle.read_manifest(directory), seen)


def index(directory: Path, _: object) -> object:
    return bundle.apt_index(directory)


def manifest(directory: Path, _: object) -> object:
    return bundle.read_manifest(directory)


@pytest.mark.parametrize(
    ("swap", "name", "read", "needle"),
    [
        (swap_for_fifo, SIX, hash_after_walk, f"{SIX!r} is not a plain file"),
        (swap_for_link, SIX, hash_after_walk, f"{SIX!r} is a link"),
        (swap_dir_for_link, SIX, hash_after_walk, "'wheels' is a link"),
        (swap_for_fifo, PACKAGES, index, f"{PACKAGES!r} is not a plain file"),
        (swap_for_link, PACKAGES, index, f"{PACKAGES!r} is a link"),
        (swap_dir_for_link, PACKAGES, index, "'apt' is a link"),
        (swap_for_link, bundle.MANIFEST, manifest, "manifest.json: missing or not a plain file"),
        (swap_for_fifo, bundle.MANIFEST, manifest, "manifest.json: missing or not a plain file"),
    ],
    ids=["wheel->FIFO", "wheel->link", "wheels/->link", "Packages.gz->FIFO", "Packages.gz->link", "apt/->link", "manifest->link", "manifest->FIFO"],
)
def test_a_file_read_from_the_bundle_is_never_a_link_or_fifo(tmp_path, swap, name, read, needle):
    """Swapped in after the walk (as a second process could): each read opens the file itself, name by name."""
    directory = fake_bundle(tmp_path / "b")
    seen = bundle.walk(directory)
    swap(directory, name)
    began = time.monotonic()
    with pytest.raises(UsageError) as exc:
        read(directory, seen)
    assert time.monotonic() - began < 2  # did not wait for the FIFO's writer
    line = one_line(exc.value)
    assert needle in line and str(directory) in line


# ---- 4a. the keyring package of `bundle build`: streamed from dpkg-deb, nothing extracted, every entry checked

KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"


def deb(path: Path, entries: list[tuple[str, bytes | str | int]]) -> Path:
    """A .deb (ar: debian-binary, control.tar.gz, data.tar.gz) whose data.tar holds ``entries``: bytes for a file,
    'link:TARGET' or 'hard:TARGET' for a link, an int for a character device (major)."""

    def tgz(items: list[tuple[str, bytes | str | int]]) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
            for name, what in items:
                info = tarfile.TarInfo(name)
                if isinstance(what, bytes):
                    info.size = len(what)
                    tar.addfile(info, io.BytesIO(what))
                    continue
                if isinstance(what, int):
                    info.type, info.devmajor = tarfile.CHRTYPE, what
                else:
                    info.type = tarfile.SYMTYPE if what.startswith("link:") else tarfile.LNKTYPE
                    info.linkname = what.split(":", 1)[1]
                tar.addfile(info)
        return buffer.getvalue()

    members = [
        ("debian-binary", b"2.0\n"),
        ("control.tar.gz", tgz([("./control", b"Package: cuda-keyring\nVersion: 1.1-1\nArchitecture: all\n")])),
        ("data.tar.gz", tgz(entries)),
    ]
    out = bytearray(b"!<arch>\n")
    for name, data in members:
        out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode() + data + (b"\n" if len(data) % 2 else b"")
    path.write_bytes(bytes(out))
    return path


@pytest.mark.parametrize(
    ("entries", "bounds", "needle"),
    [
        ([("./usr/../usr/share/keyrings/cuda-archive-keyring.gpg", b"key")], {}, "is outside the package's root"),
        ([("../usr/share/keyrings/cuda-archive-keyring.gpg", b"key")], {}, "is outside the package's root"),
        ([(KEYRING, b"key")], {}, "is outside the package's root"),  # absolute
        ([("./etc/x", b"x"), ("./usr/share/keyrings/cuda-archive-keyring.gpg", "link:/etc/shadow")], {}, "is a link or not a regular file"),
        ([("./etc/x", b"x"), ("./usr/share/keyrings/cuda-archive-keyring.gpg", "hard:./etc/x")], {}, "is a link or not a regular file"),
        ([("./dev/sda", 8), ("./usr/share/keyrings/cuda-archive-keyring.gpg", b"key")], {}, "is a device or FIFO"),
        ([("./usr/share/keyrings/cuda-archive-keyring.gpg", b"key")] * 2, {}, "is in it twice"),
        ([("./usr/share/keyrings/cuda-archive-keyring.gpg", b"k" * 4096)], {"MAX_KEYRING_BYTES": 1024}, "more than 1,024 (MAX_KEYRING_BYTES)"),
        (
            [("./zeros", bytes(4 * MIB)), ("./usr/share/keyrings/cuda-archive-keyring.gpg", b"key")],
            {"MAX_KEYRING_TAR_BYTES": MIB},
            "more than 1,048,576 bytes (MAX_KEYRING_TAR_BYTES)",
        ),
        (
            [(f"./f{i}", b"") for i in range(60)] + [("./usr/share/keyrings/cuda-archive-keyring.gpg", b"key")],
            {"MAX_TAR_MEMBERS": 50},
            "more than 50 entries (MAX_TAR_MEMBERS)",
        ),
    ],
    ids=["dot-dot inside", "dot-dot", "absolute", "symlink", "hardlink", "device", "twice", "large keyring", "tar bomb", "many entries"],
)
def test_a_hostile_keyring_package_is_refused_naming_it(tmp_path, monkeypatch, entries, bounds, needle):
    for key, value in bounds.items():
        monkeypatch.setattr(bundle, key, value, raising=False)
    package = deb(tmp_path / "cuda-keyring_1.1-1_all.deb", entries)
    with pytest.raises(EnvironmentProblem) as exc:
        bundle._keyring_from_deb(package, KEYRING, tmp_path / "keyring.gpg")
    line = one_line(exc.value)
    assert line.startswith("cuda-keyring_1.1-1_all.deb") and needle in line
    assert not (tmp_path / "keyring.gpg").exists()


def test_a_plain_keyring_package_still_gives_its_keyring(tmp_path):
    package = deb(
        tmp_path / "k.deb",
        [("./usr/share/doc/x", b"doc"), ("./usr/share/doc/y", "link:x"), ("./usr/share/keyrings/cuda-archive-keyring.gpg", b"key")],
    )
    bundle._keyring_from_deb(package, KEYRING, tmp_path / "keyring.gpg")
    assert (tmp_path / "keyring.gpg").read_bytes() == b"key"


# ---- 4b. the download of `bundle build`: a deadline for the whole of it, a size bound, a plain file only


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@contextlib.contextmanager
def serve(behaviour: Callable[[socket.socket], None]) -> Iterator[str]:
    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.recv(65536)
            try:
                behaviour(self.request)
            except OSError:  # the client shut the connection
                pass

    with Server(("127.0.0.1", 0), Handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/cuda-keyring_1.1-1_all.deb"
        finally:
            server.shutdown()


def trickle(head: bytes, body: bytes) -> Callable[[socket.socket], None]:
    """``head`` at once, then ``body`` a byte every 0.2 s for at most 4 s (a reader with no deadline waits it out)."""

    def run(sock: socket.socket) -> None:
        sock.sendall(head)
        end = time.monotonic() + 4
        for byte in body:
            if time.monotonic() > end:
                return
            sock.sendall(bytes([byte]))
            time.sleep(0.2)

    return run


@pytest.mark.parametrize(
    ("behaviour", "needle"),
    [
        (trickle(b"HTTP/1.0 200 OK\r\nContent-Length: 100\r\n\r\n", b"k" * 100), "did not finish within 1s"),
        (trickle(b"HTTP/1.0 200 OK\r\n", b"X-Slow: " + b"y" * 100), "did not finish within 1s"),
        (trickle(b"", b"HTTP/1.0 200 OK\r\n\r\n"), "did not finish within 1s"),
        (lambda sock: sock.sendall(b"HELLO\r\n\r\n"), "could not fetch"),  # http.client's BadStatusLine
        (lambda sock: sock.sendall(b"HTTP/1.0 200 OK\r\n\r\n" + b"k" * 5000), "is larger than 4,096 bytes"),
        (lambda sock: sock.sendall(b"HTTP/1.0 302 Found\r\nLocation: ftp://127.0.0.1/x\r\n\r\n"), "http and https only"),
    ],
    ids=["trickled body", "trickled headers", "trickled status", "not HTTP", "too large", "redirect to ftp"],
)
def test_a_download_has_one_deadline_and_a_size_bound(tmp_path, monkeypatch, behaviour, needle):
    for proxy in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.setattr(bundle, "FETCH_SECONDS", 1, raising=False)
    monkeypatch.setattr(bundle, "FETCH_READ_SECONDS", 5, raising=False)  # longer than a trickle's pause
    with serve(behaviour) as url:
        began = time.monotonic()
        with pytest.raises(EnvironmentProblem) as exc:
            bundle._fetch(url, tmp_path / "k.deb", 4096)
        assert time.monotonic() - began < 3.5  # the trickles last 4 s: a per-read timeout would still be reading
        line = one_line(exc.value)
        assert url.rsplit("/", 1)[0] in line and needle in line
        assert not (tmp_path / "k.deb").exists()


def test_a_file_url_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "k.deb")
    feed_fifo(tmp_path / "k.deb", b"key")
    began = time.monotonic()
    with pytest.raises(EnvironmentProblem) as exc:
        bundle._fetch((tmp_path / "k.deb").as_uri(), tmp_path / "out.deb", 4096)
    assert time.monotonic() - began < 2 and "not a plain file" in one_line(exc.value) and str(tmp_path / "k.deb") in exc.value.message


def test_a_download_within_its_bounds_is_written_through_a_redirect(tmp_path, monkeypatch):
    for proxy in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(proxy, raising=False)

    calls: list[int] = []

    def answer(sock: socket.socket) -> None:
        port = sock.getsockname()[1]
        calls.append(port)
        if len(calls) == 1:
            sock.sendall(f"HTTP/1.0 302 Found\r\nLocation: http://127.0.0.1:{port}/k.deb\r\n\r\n".encode())
        else:
            sock.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nkey\r\n0\r\n\r\n")

    with serve(answer) as url:
        bundle._fetch(url, tmp_path / "k.deb", 4096)
    assert (tmp_path / "k.deb").read_bytes() == b"key"

"""megaprov.paths.cached_dir: a cache directory is filled once, atomically, and a failed fill leaves nothing."""

import multiprocessing
import os
import time

import pytest

from megaprov.paths import cached_dir


def test_cached_dir_fills_once_and_leaves_nothing_on_failure(tmp_path):
    calls = []

    def fill(tmp):
        calls.append(tmp)
        (tmp / "a.whl").write_text("x")
        (tmp / "a.whl").chmod(0o600)

    final = cached_dir(tmp_path / "c" / "v1", fill, "stamp")
    assert (final / ".complete").read_text() == "stamp\n" and (final / "a.whl").stat().st_mode & 0o444 == 0o444
    assert cached_dir(tmp_path / "c" / "v1", fill, "stamp") == final and len(calls) == 1

    def broken(tmp):
        (tmp / "half").write_text("x")
        raise RuntimeError("download failed")

    with pytest.raises(RuntimeError):
        cached_dir(tmp_path / "c" / "v2", broken, "stamp")
    assert sorted(p.name for p in (tmp_path / "c").iterdir() if not p.name.endswith(".lock")) == ["v1"]


def _fill_slowly(tmp):
    with open(tmp.parent / "fills.log", "a") as log:
        log.write(f"{os.getpid()}\n")
    time.sleep(0.5)
    (tmp / "a.whl").write_text("x")


def _cache(final):
    cached_dir(final, _fill_slowly, "stamp")


def test_two_processes_fill_a_cache_directory_once(tmp_path):
    """Parallel test workers ask for the same wheelhouse: one fills it, the other waits and uses it."""
    final = tmp_path / "c" / "v1"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_cache, args=(final,)) for _ in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(30)
    assert [proc.exitcode for proc in procs] == [0, 0]
    assert len((tmp_path / "c" / "fills.log").read_text().split()) == 1 and (final / "a.whl").read_text() == "x"

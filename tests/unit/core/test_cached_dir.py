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


def test_a_fill_happens_in_a_hidden_sibling_and_leaves_every_file_readable_and_every_directory_traversable(tmp_path):
    """The parents are made; the fill gets a fresh ``.<name>-*`` folder beside ``final`` (one rename moves it into
    place); afterwards each file gains read bits only and each directory read and search bits; no temporary is left."""
    seen = []

    def fill(tmp):
        seen.append(tmp)
        (tmp / "sub").mkdir(mode=0o700)
        (tmp / "sub" / "a.whl").write_text("x")
        (tmp / "sub" / "a.whl").chmod(0o600)

    final = tmp_path / "deep" / "er" / "v1"
    assert cached_dir(final, fill, "stamp") == final
    [tmp] = seen
    assert tmp.parent == final.parent and tmp.name.startswith(".v1-")
    assert (final / "sub").stat().st_mode & 0o777 == 0o755 and (final / "sub" / "a.whl").stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in final.parent.iterdir()) == [".v1.lock", "v1"]


def test_a_directory_left_without_its_completion_mark_is_filled_again(tmp_path):
    final = tmp_path / "c" / "v1"
    final.mkdir(parents=True)
    (final / "half").write_text("an interrupted fill")
    made = cached_dir(final, lambda tmp: (tmp / "a.whl").write_text("x"), "stamp")
    assert sorted(p.name for p in made.iterdir()) == [".complete", "a.whl"]

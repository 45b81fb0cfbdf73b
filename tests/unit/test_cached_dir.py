"""megaprov.paths.cached_dir: a cache directory is filled once, atomically, and a failed fill leaves nothing."""

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
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["v1"]

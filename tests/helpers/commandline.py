"""Running megaprov's commands in-process as an operator would, for the command-layer tests: a test's own
environment (no colour, a known width, megaprov's state and config of the test alone, its own current directory, no
default inventory, no completion request), the exit code and both streams of one command line, its --help, and the
cells of a rich table row."""

from __future__ import annotations

from pathlib import Path

import pytest

from megaprov.cli import main


def isolate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """As the mutation benchmark runs: NO_COLOR and a width set here, never taken from the caller's environment."""
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("MEGAPROV_INVENTORY", raising=False)
    monkeypatch.delenv("_ARGCOMPLETE", raising=False)
    monkeypatch.chdir(tmp_path)


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def help_lines(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    """A command's --help as the operator reads it, each line stripped of its indentation."""
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    return [line.strip() for line in capsys.readouterr().out.splitlines()]


def options(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The options section of a command's --help, its words joined by one space (argparse's column layout aside)."""
    lines = help_lines(capsys, *argv)
    return " ".join(" ".join(lines[lines.index("options:") : lines.index("examples:")]).split())


def cells(line: str) -> list[str]:
    """The cells of a row of a rich table."""
    return [c.strip() for c in line.replace("┃", "│").strip("│ ").split("│")]

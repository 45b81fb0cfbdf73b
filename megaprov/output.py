"""Rendering: live progress of Ansible runs, result tables, and the JSON envelope.

Human output goes to a TTY with rich (NO_COLOR respected); ``--output json`` prints one
versioned JSON document on stdout and keeps progress off it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from megaprov import values

# The envelope's version (schemas/envelope-v2.json): 2 made errors objects (code, kind, message, fix, file, line, field)
# and ``command`` the full subcommand path.
JSON_SCHEMA_VERSION = 2


class _Console(Console):
    """rich's console as megaprov's one sink for the terminal. Much of what it prints came from the cluster (log
    lines, node and job names, Prometheus labels, evidence quoted from a log), so: no markup, emoji codes or
    highlighting are interpreted in strings (``[link=...]`` or ``[/]`` in a log line stays text; megaprov styles its
    own words with :class:`rich.text.Text`), and every segment of text it writes passes :func:`values.printable` (an
    escape sequence in a cell shows as ``\\x1b``). rich's own control segments (cursor moves of a live status) and
    the colours it renders around the text are left as they are."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        # Escaped before layout, so that a table's columns are measured on what is shown.
        return super().render_str(values.printable(text, lines=True), **kwargs)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        # The net under it: text that reached rich as a Text (not a str) is escaped on the way out.
        return super()._render_buffer(
            segment if segment.control else Segment(values.printable(segment.text, lines=True), segment.style, segment.control) for segment in buffer
        )


def console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    # Logs and pipes get wide tables rather than rich's 80-column default.
    width = None if stream.isatty() or os.environ.get("COLUMNS") else 140
    return _Console(
        stderr=stderr,
        no_color=bool(os.environ.get("NO_COLOR")),
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=True,
        width=width,
    )


def write_lines(lines: Iterable[str]) -> None:
    """Lines that came from outside (a node's log, a journal) to stdout as they are, each through
    :func:`values.printable` (no rich: a log is not reflowed)."""
    for line in lines:
        sys.stdout.write(values.printable(line) + "\n")
    sys.stdout.flush()


def styled(text: str, style: str) -> Text:
    """A table cell or line in one of megaprov's own styles (markup is off: see :class:`_Console`)."""
    return Text(values.printable(text), style=style)


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {k: _plain(v) for k, v in asdict(value).items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def envelope(command: str, ok: bool, result: Any, errors: list[dict[str, Any]] | None = None) -> str:
    """The one JSON document a command prints with ``-o json``: ``error`` is the first error object, ``errors`` all."""
    doc: dict[str, Any] = {"megaprov": JSON_SCHEMA_VERSION, "command": command, "ok": ok, "result": _plain(result)}
    if errors:
        doc["error"] = errors[0]
        doc["errors"] = errors
    return json.dumps(doc, indent=2, sort_keys=False)


class RunProgress:
    """Turns ansible-runner events into a live line: stage, task, hosts done/failed."""

    def __init__(self, total_hosts: int, quiet: bool = False) -> None:
        self.err = console(stderr=True)
        self.total_hosts = total_hosts
        self.quiet = quiet
        self.live = self.err.is_terminal and not quiet
        self.play = ""
        self.announced = False
        self.task = ""
        self.done: set[str] = set()
        self.failed: set[str] = set()
        self.status: Any = None
        if self.live:
            self.status = self.err.status("starting ansible-playbook")
            self.status.start()

    def _line(self) -> str:
        failed = f", {len(self.failed)} failed" if self.failed else ""
        return f"[{self.play}] {self.task}: {len(self.done)}/{max(self.total_hosts, len(self.done))} hosts{failed}"

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self.play = data.get("play", "")
            self.announced = False
        elif kind == "playbook_on_task_start":
            if not self.announced and not self.quiet:
                # Announce a stage when its first task starts: stages skipped by --tags stay silent.
                self.err.print(f"stage: {self.play}", markup=False)
                self.announced = True
            self.task = data.get("task", "")
            self.done.clear()
        elif kind in ("runner_on_ok", "runner_on_skipped", "runner_on_failed", "runner_on_unreachable"):
            host = data.get("host", "?")
            self.done.add(host)
            if kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
                self.failed.add(host)
                if not self.quiet:
                    res = data.get("res") or {}
                    msg = str(res.get("msg", "")).strip().splitlines()
                    self.err.print(f"  FAILED {host}: {self.task}: {msg[0] if msg else kind}", markup=False)
        if self.status is not None and self.task:
            self.status.update(self._line())

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None


class Reporter:
    """What domain code tells the operator while it works: the live progress of its Ansible runs and its notes, on
    stderr. Domain code takes one instead of a ``quiet`` flag; the command line makes it from ``--output`` (text: shown;
    JSON: silent, the one document on stdout is the whole output)."""

    def __init__(self, shown: bool) -> None:
        self.shown = shown

    def run(self, total_hosts: int) -> RunProgress:
        """The progress of one ansible-runner run over ``total_hosts`` hosts (call ``stop()`` when it ends)."""
        return RunProgress(total_hosts=total_hosts, quiet=not self.shown)

    def say(self, line: str) -> None:
        """One line for the operator (as data: no markup)."""
        if self.shown:
            console(stderr=True).print(line, markup=False)


SHOWN = Reporter(True)
SILENT = Reporter(False)


def host_table(hosts: list[Any], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("host", "ok", "changed", "failed", "unreachable", "skipped", "time"):
        table.add_column(column, justify="left" if column == "host" else "right")
    for h in hosts:
        table.add_row(h.host, str(h.ok), str(h.changed), str(h.failed), str(h.unreachable), str(h.skipped), f"{h.seconds:.1f}s")
    return table


def verdict_table(rows: list[dict[str, Any]], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("host", "check", "value", "verdict", "reason"):
        table.add_column(column)
    styles = {"pass": "green", "warn": "yellow", "fail": "bold red"}
    for row in rows:
        table.add_row(
            row["host"], row["check"], str(row.get("value", "")), styled(row["status"], styles.get(row["status"], "")), row.get("reason", "")
        )
    return table


def print_json(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()

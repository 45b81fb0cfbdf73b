"""``megaprov logs``: the nodes' journals that the observe stage keeps on the head, read there with journalctl
(``playbooks/logs.yml``, through ansible-runner). Every argument is checked here, once, and passed as data."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from megaprov.cluster import inventory as inv
from megaprov.errors import UsageError
from megaprov.ops import remote
from megaprov.output import Reporter

MAX_LINES = 10_000
MAX_GREP = 200
MAX_OUTPUT = 8 * 1024 * 1024
_RELATIVE = re.compile(r"^(\d{1,6})(s|m|min|h|d|w)$")
_ABSOLUTE = re.compile(r"^\d{4}-\d\d-\d\d(?:[ T]\d\d:\d\d(?::\d\d)?)?$")
_UNITS = {"s": "s", "m": "min", "min": "min", "h": "h", "d": "d", "w": "weeks"}


@dataclass(frozen=True)
class Query:
    host: str  # the head, where the journals are kept
    node: str | None
    since: str | None
    grep: str | None
    lines: int

    def vars(self) -> dict[str, Any]:
        return {"host": self.host, "node": self.node or "", "since": self.since or "", "grep": self.grep or "", "lines": self.lines}


def since_arg(value: str) -> str:
    """``--since`` as journalctl takes it: 30m, 2h, 1d (relative to now) or a date and time. Pure."""
    text = value.strip()
    m = _RELATIVE.match(text)
    if m:
        return f"-{int(m.group(1))}{_UNITS[m.group(2)]}"
    if _ABSOLUTE.match(text) or text in ("today", "yesterday"):
        return text.replace("T", " ")
    raise UsageError(f"--since {value!r} is not a time", "give a duration before now (30m, 2h, 1d) or a date and time (2026-12-01 14:30)")


def grep_arg(value: str) -> str:
    """``--grep`` as a regular expression (journalctl's PCRE2; checked here with Python's, which agrees on the common
    syntax). Pure."""
    if not value or len(value) > MAX_GREP or any(ord(c) < 32 for c in value):
        raise UsageError(f"--grep must be 1-{MAX_GREP} printable characters", "give a shorter regular expression")
    try:
        re.compile(value)
    except re.error as exc:
        raise UsageError(f"--grep {value!r} is not a regular expression ({exc})", "escape special characters with \\") from None
    return value


def build(found: inv.Inventory, node: str | None, since: str | None, grep: str | None, lines: int) -> Query:
    """The checked query for an inventory. Pure."""
    if not 1 <= lines <= MAX_LINES:
        raise UsageError(f"--lines {lines} is out of range", f"give 1 to {MAX_LINES}")
    if node is not None and node not in found.hosts:
        raise UsageError(f"--node {node} is not a host of {found.path}", "use one of " + ", ".join(sorted(found.hosts)))
    if not inv.as_bool(found.host_var(found.head, "megaprov_observe", False)):
        raise UsageError(
            f"the observe stage is off in {found.path}: no journals are kept on the head",
            "set megaprov_observe: true and run `megaprov bootstrap -i INVENTORY --tags observe`",
        )
    host = str(found.host_var(found.head, "central_logs_host", found.head))
    if host not in found.hosts:
        host = found.head
    return Query(host, node, since_arg(since) if since else None, grep_arg(grep) if grep else None, lines)


def read(inventory_path: str, query: Query, report: Reporter) -> list[str]:
    text = remote.command_output(
        Path(inventory_path),
        "logs.yml",
        {"megaprov_logs": query.vars()},
        command="logs",
        role="the head",
        host=query.host,
        doing="the journals could not be read",
        limit=MAX_OUTPUT,
        report=report,
    )
    return [line for line in text.splitlines() if line and line != "-- No entries --"]

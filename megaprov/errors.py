"""The one exception family of megaprov and its exit codes: one table, used by every command and the README.

The command line turns a :class:`MegaprovError` into one line on stderr (plus a hint), an error object in the JSON
envelope, and its exit code.
"""

from __future__ import annotations

import enum
import re
from typing import Any


class ExitCode(enum.IntEnum):
    """Exit codes of the ``megaprov`` command: the same cause gives the same code in every command (EXIT_CODES)."""

    OK = 0
    INTERNAL = 1
    USAGE = 2
    RUN_FAILED = 3
    UNREACHABLE = 4
    ENVIRONMENT = 5
    VERDICT_FAILED = 6
    INTERRUPTED = 130


# The table of exit codes (the README's is generated from it and a test keeps them equal): code -> (name, meaning).
EXIT_CODES: dict[ExitCode, tuple[str, str]] = {
    ExitCode.OK: ("ok", "success"),
    ExitCode.INTERNAL: ("internal", "a bug in megaprov: rerun with --debug for the traceback and report it"),
    ExitCode.USAGE: ("usage", "bad input (flags, inventory, variables, job spec, a file on the shared directory): nothing was contacted or changed"),
    ExitCode.RUN_FAILED: ("run-failed", "something failed on the cluster: a task on a host, a job's start or stop, a service's answer"),
    ExitCode.UNREACHABLE: ("unreachable", "a host or a cluster service could not be reached: SSH to a node or the head, Prometheus"),
    ExitCode.ENVIRONMENT: ("environment", "this machine lacks something megaprov needs (podman, debootstrap, ansible-playbook, a package)"),
    ExitCode.VERDICT_FAILED: (
        "verdict-failed",
        "the checks ran and failed: a node failed preflight, a job does not fit its GPUs, a run failed its verdict, doctor found something wrong",
    ),
    ExitCode.INTERRUPTED: ("interrupted", "interrupted (Ctrl-C)"),
}

# "file:line: ..." at the start of a message, as inventory and spec errors are written
_LOCATED = re.compile(r"^(?P<file>[^\s:]{1,4096}):(?P<line>\d{1,9}): ")
# "argument --nodes: ..." (argparse) or "--nodes 99 ..." at the start of a message: the flag is the field
_FLAG = re.compile(r"^(?:[a-z-]+ [a-z-]+: )?(?:argument )?(?P<flag>--?[a-z][a-z0-9-]*)\b")


class MegaprovError(Exception):
    """An error a user can act on: ``message`` names the thing, ``hint`` the fix; ``field``, ``file`` and ``line`` where known."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, hint: str | None = None, *, field: str | None = None, file: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.field = field
        self.file = file
        self.line = line
        # Further problems found in the same check, one line each (a job spec can have several).
        self.details: list[str] = []

    def __str__(self) -> str:
        return self.one_line()

    def one_line(self) -> str:
        return f"{self.message}: {self.hint}" if self.hint else self.message

    def objects(self) -> list[dict[str, Any]]:
        """The error as the JSON envelope carries it: one object per problem (code, message, fix, file, line, field)."""
        return [error_object(self.exit_code, self.message, self.hint, field=self.field, file=self.file, line=self.line)] + [
            error_object(self.exit_code, detail) for detail in self.details
        ]


def error_object(
    code: ExitCode, message: str, fix: str | None = None, *, field: str | None = None, file: str | None = None, line: int | None = None
) -> dict[str, Any]:
    """One error of the JSON envelope; the file, line and flag are read from the message where it starts with them."""
    located = _LOCATED.match(message)
    if located and file is None:
        file, line = located["file"], int(located["line"])
    flag = _FLAG.match(message)
    if flag and field is None:
        field = flag["flag"]
    doc: dict[str, Any] = {"code": int(code), "kind": EXIT_CODES[code][0], "message": message}
    for key, value in (("fix", fix), ("file", file), ("line", line), ("field", field)):
        if value is not None and value != "":
            doc[key] = value
    return doc


class UsageError(MegaprovError):
    exit_code = ExitCode.USAGE


class InventoryError(UsageError):
    """The inventory or its variables are invalid; raised before any host is contacted."""


class EnvironmentProblem(MegaprovError):
    exit_code = ExitCode.ENVIRONMENT


class RunFailed(MegaprovError):
    exit_code = ExitCode.RUN_FAILED


class HostsUnreachable(MegaprovError):
    exit_code = ExitCode.UNREACHABLE

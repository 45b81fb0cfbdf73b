"""The one exception family of megaprov and its documented exit codes.

The CLI turns a :class:`MegaprovError` into one line on stderr (plus a hint) and its exit code.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Exit codes of the ``megaprov`` command (documented in the README)."""

    OK = 0
    INTERNAL = 1  # a bug in megaprov: rerun with --debug and report it
    USAGE = 2  # bad flags, inventory, variables or job spec: nothing was changed
    RUN_FAILED = 3  # a task failed on a host
    UNREACHABLE = 4  # a host could not be reached over SSH
    ENVIRONMENT = 5  # this machine lacks something megaprov needs (podman, the image, ...)
    VERDICT_FAILED = 6  # the checks ran and a node did not meet the requirements
    INTERRUPTED = 130


class MegaprovError(Exception):
    """An error a user can act on: ``message`` names the thing, ``hint`` the fix."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        # Further problems found in the same check, one line each (a job spec can have several).
        self.details: list[str] = []

    def __str__(self) -> str:
        return self.one_line()

    def one_line(self) -> str:
        return f"{self.message}: {self.hint}" if self.hint else self.message


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


class VerdictFailed(MegaprovError):
    exit_code = ExitCode.VERDICT_FAILED

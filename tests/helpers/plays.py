"""ansible-runner stood in for the tests of code that runs a play (doctor's examine, bootstrap, preflight):
``runner.run`` replaced by a recorder of the specs and collected actions it was handed, answering one result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from megaprov.cluster import runner


class Play:
    """Put in place of ``runner.run``; ``answer`` is the RunResult every call gets (a successful run by default)."""

    def __init__(
        self,
        tmp_path: Path,
        results: list[runner.TaskResult],
        failures: list[runner.Failure] | None = None,
        *,
        hosts: list[runner.HostStats] | None = None,
        status: str = "successful",
        rc: int = 0,
        seconds: float = 0.1,
        **over: Any,
    ):
        self.specs: list[runner.RunSpec] = []
        self.collect: list[tuple[str, ...]] = []
        self.progress: list[Any] = []  # the progress line each run was given (its total_hosts sizes it)
        self.answer = runner.RunResult(status, rc, hosts or [], failures or [], results, tmp_path / "artifacts", seconds, **over)

    def __call__(self, spec: runner.RunSpec, progress: Any, collect: tuple[str, ...]) -> runner.RunResult:
        self.specs.append(spec)
        self.collect.append(tuple(collect))
        self.progress.append(progress)
        return self.answer

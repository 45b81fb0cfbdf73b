"""A training job's plays: one run of a job playbook with progress, and its failure as the one error the user sees.

:mod:`megaprov.training.jobs` and both launchers (:mod:`megaprov.training.launchers`) run their plays through here;
:mod:`megaprov.cluster.runner` stays the only door to ansible-runner. What a play tells megaprov comes back as
structured results (a module's ``usage_error``, the play's ``set_stats`` data), never as a task's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from megaprov import paths
from megaprov.cluster import runner
from megaprov.errors import HostsUnreachable, MegaprovError, RunFailed, UsageError
from megaprov.output import Reporter
from megaprov.paths import fact_cache_dir, state_dir


def run(
    playbook: str,
    inventory: Path,
    extravars: Mapping[str, Any],
    report: Reporter,
    hosts: int,
    collect: tuple[str, ...] = (),
    strategy: str = "linear",
) -> runner.RunResult:
    """Run ``playbook`` of the collection against ``inventory``; ``hosts`` sizes the progress line."""
    spec = runner.RunSpec(
        playbook=paths.playbook(playbook),
        inventories=(inventory,),
        private_data_dir=runner.new_private_dir(state_dir(), playbook.removesuffix(".yml")),
        collections_root=paths.collections_root(),
        fact_cache_dir=fact_cache_dir(inventory),
        options=runner.RunOptions(extravars=dict(extravars), strategy=strategy),
    )
    progress = report.run(hosts)
    try:
        return runner.run(spec, progress, collect)
    finally:
        progress.stop()


def failure(result: runner.RunResult, what: str) -> MegaprovError:
    """The error for a failed run: unreachable nodes (nothing was started), a refusal of the job's own settings (a
    module's ``usage_error``: exit 2), or the first failed task (exit 3)."""
    if not result.failures:
        return RunFailed(f"{what}: {result.error_line or f'ansible-playbook ended with status {result.status}'}", f"see {result.artifacts}/stdout")
    down = sorted({f.host for f in result.failures if f.unreachable})
    if down:
        return HostsUnreachable(
            f"{what}: node(s) {', '.join(down)} unreachable ({result.failures[0].message})", "check that they run and answer SSH; nothing was started"
        )
    first = result.failures[0]
    if first.usage:
        return UsageError(f"{what}: {first.message}")
    return RunFailed(f"{what}: {first.host}: task '{first.task}' failed: {first.message}", f"see {result.artifacts}/stdout")

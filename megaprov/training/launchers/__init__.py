"""Launchers: how a rendered job starts on the nodes, how its state is read, how it is stopped, where its logs are.

``systemd`` (launch.launcher: torchrun): one supervised unit per node, started through Ansible; the units restart
torchrun after a failure. ``slurm`` (launch.launcher: slurm): the batch script submitted to Slurm, which allocates
the nodes, runs the node script with srun and continues the job in a new allocation after a failure. Both write the same node logs
(``logs/<node>.log``) into the job directory: one follower, one verdict and one report serve both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    from megaprov.cluster.inventory import Inventory
    from megaprov.output import Reporter
    from megaprov.training.follow import JobLog
    from megaprov.training.jobs import Job
    from megaprov.training.jobspec import JobSpec
    from megaprov.training.render import Rendered


class JobState(Protocol):
    """One look at the job as its launcher sees it (the Slurm job, or the systemd units together)."""

    @property
    def job_id(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def reason(self) -> str: ...

    @property
    def alive(self) -> bool:
        """Not over: it runs, waits or will start again."""
        ...

    def describe(self) -> str: ...


class Launcher(Protocol):
    name: str
    restart_wait_s: float  # after every node's torchrun exited, how long before gave_up is asked

    def stage(self, job: Job, spec: JobSpec, rendered: Rendered, found: Inventory, staging: Path) -> dict[str, Any]:
        """Write the launcher's own files into ``staging`` (the job directory before it travels); the extra vars
        its start play needs."""

    def start(self, job: Job, job_vars: dict[str, Any], report: Reporter, strategy: str) -> None:
        """Start the staged job (its bundle is in ``job_vars``); raise with the reason when it cannot."""

    def stop(self, job: Job, report: Reporter) -> None:
        """SIGTERM to every rank (they save a checkpoint), wait for them, leave nothing running."""

    def states(self, job: Job, report: Reporter) -> dict[str, dict[str, str]]:
        """What the launcher says about the job: per node (systemd units) or for the job (``slurm``)."""

    def state(self, job: Job, report: Reporter) -> JobState:
        """The job as a whole: whether it is over, and the words for it."""

    def current_id(self, job: Job) -> str:
        """The id the launcher knows the job by now (a Slurm job's latest continuation, the units' name)."""

    def events(self, job: Job) -> list[str]:
        """The launcher's own story of the job (allocations, requeues, the end), for reasons and reports."""

    def log_hosts(self, job: Job) -> list[str]:
        """The nodes whose logs the follower reads now."""

    def gave_up(self, job: Job, log: JobLog, report: Reporter) -> str | None:
        """Asked when every node's torchrun has exited: the reason the job will not run again, or None."""


def of(name: str) -> Launcher:
    """The launcher of a job: ``slurm``, or ``systemd`` (a spec's launcher ``torchrun``, and every older job)."""
    if name == "slurm":
        from megaprov.training.launchers.slurm import SlurmLauncher

        return SlurmLauncher()
    from megaprov.training.launchers.systemd import SystemdLauncher

    return SystemdLauncher()

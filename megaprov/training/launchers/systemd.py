"""The systemd launcher: one unit per node (``job_launch.yml``, ``job_status.yml``, ``job_stop.yml``); each unit
runs the node's torchrun and starts it again after a failure (RestartSec, up to launch.max_restarts an hour)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from megaprov.output import SILENT, Reporter

if TYPE_CHECKING:
    from megaprov.training.follow import JobLog
    from megaprov.training.jobs import Job


class SystemdLauncher:
    name = "systemd"

    def start(self, job: Job, job_vars: dict[str, Any], report: Reporter, strategy: str) -> None:
        from megaprov.training import jobs

        result = jobs._play(job, "job_launch.yml", job_vars, report, strategy=strategy)
        if not result.ok:
            if any(f.task.startswith("Start") for f in result.failures):
                jobs._play(job, "job_stop.yml", job.vars(), report)  # some units may run: stop them all
            raise jobs._failure(result, f"job {job.name} not started")

    def stop(self, job: Job, report: Reporter) -> None:
        from megaprov.training import jobs

        result = jobs._play(job, "job_stop.yml", job.vars(), report)
        if not result.ok:
            raise jobs._failure(result, f"job {job.name}: stop failed")

    def states(self, job: Job, report: Reporter) -> dict[str, dict[str, str]]:
        from megaprov.training import jobs

        result = jobs._play(job, "job_status.yml", job.vars(), report, collect=("ansible.builtin.command", "command"))
        if not result.ok:
            raise jobs._failure(result, f"job {job.name}: unit state unknown")
        states = {}
        for task in result.results:
            pairs = (line.partition("=") for line in str(task.res.get("stdout", "")).splitlines())
            states[task.host] = {k: v for k, _, v in pairs}
        return states

    def log_hosts(self, job: Job) -> list[str]:
        return list(job.hosts)

    def gave_up(self, job: Job, log: JobLog, report: Reporter) -> str | None:
        units = self.states(job, report=SILENT)
        if any(u.get("ActiveState") in ("active", "activating", "reloading") for u in units.values()):
            return None
        failed = ", ".join(f"{h} ({log.node_state(h)})" for h in job.hosts if log.node_state(h) != "exited-0")
        return f"torchrun ended on {failed} and the units gave up"

"""The systemd launcher: one unit per node (``job_launch.yml``, ``job_status.yml``, ``job_stop.yml``); each unit
runs the node's torchrun and starts it again after a failure (RestartSec, up to launch.max_restarts an hour)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from megaprov import values
from megaprov.cluster import inventory as inv
from megaprov.cluster import plays, runner
from megaprov.output import SILENT, Reporter
from megaprov.training import jobdir, render

if TYPE_CHECKING:
    from megaprov.training.follow import JobLog
    from megaprov.training.jobs import Job
    from megaprov.training.jobspec import JobSpec

RESTART_SEC = 10  # the unit's RestartSec: torchrun is started again this long after it failed
START_LIMIT_INTERVAL = 3600
# The ActiveStates of a unit that runs, or that systemd will start again
WILL_RUN = ("active", "activating", "reloading")
# What job_launch.yml says (set_stats) once it starts units: from then on a failure must stop them on every node
UNITS_MAY_RUN = "units_may_run"


# ExecStop of every job unit, run by systemd on `systemctl stop` (and after a node script that ended with 0): with
# $MAINPID alive it hands SIGTERM to the node script and waits for it (the ranks save a checkpoint, the node script
# reaps what is left); then it reaps whatever of the job is still there, for a node script that was killed itself.
STOP_SCRIPT = f"""#!/bin/bash
# Written by megaprov train: ExecStop of the job's unit on every node (argument: $MAINPID, empty once it exited).
unit=${{{render.JOB_MARKER}:-}}
unset {render.JOB_MARKER}  # what this script starts is not part of the job
main=${{1:-}}
if [ -n "$main" ] && kill -0 "$main" 2>/dev/null; then
    kill -TERM "$main"
    while kill -0 "$main" 2>/dev/null; do sleep 0.2; done  # bounded by the unit's TimeoutStopSec
fi
{render.REAP_FUNCTION}
reap_job "$unit"
exit 0
"""
STOP_SCRIPT_FILE = "launch/stop.sh"


def unit_text(spec: JobSpec, job: Job, host: str, rank: int, user: str, lab: bool, stop: render.StopGrace | None = None) -> str:
    """The node's unit. ``stop`` sizes TimeoutStopSec (SIGTERM -> checkpoint -> exit before systemd kills): the
    render's grace for the job's checkpoint size and the shared directory's write speed."""
    grace = stop or render.stop_grace(spec)
    lines = [
        "# Written by megaprov train; megaprov job stop stops it.",
        "[Unit]",
        "Description=" + values.systemd_value(f"megaprov job {job.name} on {host} (node rank {rank} of {len(job.hosts)})", "Description"),
        "Wants=network-online.target",
        "After=network-online.target remote-fs.target",
        f"StartLimitIntervalSec={START_LIMIT_INTERVAL}",
        f"StartLimitBurst={spec.launch.max_restarts + 1}",  # starts: the first and each restart
        "",
        "[Service]",
        "Type=simple",
        "User=" + values.systemd_value(values.posix_user(user, "megaprov_cluster_user"), "User"),
        "Group=" + values.systemd_value(user, "Group"),
        "Environment=" + values.systemd_value(f"{render.JOB_MARKER}={job.unit}", "Environment"),  # the unit name is a job name: no spaces
        "WorkingDirectory=" + values.systemd_value(job.job_dir, "WorkingDirectory"),
        "ExecStart=" + values.systemd_exec_line(["/bin/bash", f"{job.job_dir}/launch/{host}.sh"]),
        # $MAINPID is systemd's: the node script's PID while it runs, empty after it exited.
        "ExecStop=" + values.systemd_exec_line(["/bin/bash", f"{job.job_dir}/{STOP_SCRIPT_FILE}"], "ExecStop") + " $MAINPID",
        # The node script appends its output to its log itself, as the job user: systemd opens an append: file as
        # root, before User= applies, which a root-squashed share refuses.
        "StandardOutput=journal",
        "StandardError=inherit",
        "Restart=on-failure",
        f"RestartSec={RESTART_SEC}",
        # ExecStop hands SIGTERM to the node script, which hands it to torchrun and waits; leftovers are killed there.
        "KillMode=mixed",
        "SuccessExitStatus=143",
        # torchrun waits TORCH_ELASTIC_SHUTDOWN_TIMEOUT (grace.torchrun_s) for the ranks' checkpoint; systemd a minute more.
        f"TimeoutStopSec={grace.unit_s}",
    ]
    lines += unit_limits(lab)
    return "\n".join(lines) + "\n"


def is_lab(found: inv.Inventory, host: str) -> bool:
    """The host is a node of megaprov's container lab (megaprov_lab), whose units cannot raise their limits."""
    return inv.as_bool(found.host_var(host, "megaprov_lab", False))


def unit_limits(lab: bool) -> list[str]:
    """The resource limits of a job's unit (the checks in a container image run under the same, imagecheck.py)."""
    return [] if lab else ["LimitMEMLOCK=infinity"]  # RDMA registers pinned memory; lab containers may not raise the limit


@dataclass(frozen=True)
class UnitsState:
    """The job's units seen together: ``RUNNING`` while one runs or will start again, else ``ENDED``."""

    job_id: str  # the unit's name
    state: str
    reason: str = ""  # each node's ActiveState

    @property
    def alive(self) -> bool:
        return self.state == "RUNNING"

    def describe(self) -> str:
        return f"unit {self.job_id} {self.state}" + (f" ({self.reason})" if self.reason else "")


class SystemdLauncher:
    name = "systemd"
    restart_wait_s = float(RESTART_SEC + 15)  # every node's torchrun exited this long ago: the units would have started it again

    def stage(self, job: Job, spec: JobSpec, rendered: render.Rendered, found: inv.Inventory, staging: Path) -> dict[str, Any]:
        """The node scripts, each node's unit and the units' ExecStop script; the units travel in the start play's vars."""
        user = str(found.host_var(job.hosts[0], "megaprov_cluster_user", "megaprov"))
        lab = is_lab(found, job.hosts[0])
        (staging / STOP_SCRIPT_FILE).write_text(STOP_SCRIPT)
        units = {}
        for node in rendered.nodes:
            (staging / "launch" / f"{node.host}.sh").write_text(node.script)
            units[node.host] = unit_text(spec, job, node.host, node.node_rank, user, lab, rendered.stop)
            (staging / "launch" / f"{node.host}.service").write_text(units[node.host])
        return {"units": units}

    def start(self, job: Job, job_vars: dict[str, Any], report: Reporter, strategy: str) -> None:
        result = plays.run("job_launch.yml", job.inventory, {"megaprov_job": job_vars}, report, len(job.hosts), strategy=strategy)
        if not result.ok:
            # some units may run: stop them all. A run that ended without the play's stats (cancelled, timed out,
            # ansible-playbook gone) cannot say it stopped before the start: stopped too.
            if result.data.get(UNITS_MAY_RUN) or not result.stats_seen:
                self.stop_units(job, report)
            raise plays.failure(result, f"job {job.name} not started")

    def stop_units(self, job: Job, report: Reporter) -> runner.RunResult:
        return plays.run("job_stop.yml", job.inventory, {"megaprov_job": job.vars()}, report, len(job.hosts))

    def stop(self, job: Job, report: Reporter) -> None:
        result = self.stop_units(job, report)
        if not result.ok:
            raise plays.failure(result, f"job {job.name}: stop failed")

    def states(self, job: Job, report: Reporter) -> dict[str, dict[str, str]]:
        result = plays.run(
            "job_status.yml", job.inventory, {"megaprov_job": job.vars()}, report, len(job.hosts), collect=("ansible.builtin.command", "command")
        )
        if not result.ok:
            raise plays.failure(result, f"job {job.name}: unit state unknown")
        states = {}
        for task in result.results:
            pairs = (line.partition("=") for line in str(task.res.get("stdout", "")).splitlines())
            states[task.host] = {k: v for k, _, v in pairs}
        return states

    def state(self, job: Job, report: Reporter = SILENT) -> UnitsState:
        units = self.states(job, report)
        active = {h: u.get("ActiveState", "unknown") for h, u in units.items()}
        running = any(s in WILL_RUN for s in active.values())
        return UnitsState(job.unit, "RUNNING" if running else "ENDED", ", ".join(f"{h} {s}" for h, s in sorted(active.items())))

    def current_id(self, job: Job) -> str:
        return job.unit

    def events(self, job: Job) -> list[str]:
        """The units keep no story of their own beyond the node logs; an elastic job's changes of nodes are its lines
        (logs/elastic.log, written by the follower and `megaprov job grow`)."""
        return jobdir.event_lines(job, render.ELASTIC_EVENTS, "elastic events", "megaprov: job ")

    def log_hosts(self, job: Job) -> list[str]:
        return list(job.hosts)

    def gave_up(self, job: Job, log: JobLog, report: Reporter) -> str | None:
        return gave_up(self.states(job, report=SILENT), job.hosts, log)


def gave_up(units: Mapping[str, Mapping[str, str]], hosts: list[str], log: JobLog, going: tuple[str, ...] = WILL_RUN) -> str | None:
    """Why the job's units will not run torchrun again (every node's torchrun has exited), or None while one of them
    is in a ``going`` ActiveState (by default: runs or will be started again)."""
    if any(u.get("ActiveState") in going for u in units.values()):
        return None
    failed = ", ".join(f"{h} ({log.node_state(h)})" for h in hosts if log.node_state(h) != "exited-0")
    if not failed:  # every node exited 0 short of the last iteration: Restart=on-failure does not start a clean exit again
        return f"torchrun exited with 0 on every node ({', '.join(hosts)}) before training finished, and the units do not restart a clean exit"
    return f"torchrun ended on {failed} and the units gave up"

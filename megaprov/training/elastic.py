"""launch.elastic: a job that loses a node continues on the healthy ones, and grows back when the node returns.

Tensor, pipeline and context sizes stay; the data-parallel size follows the nodes and the global batch is kept by more
gradient accumulation (``planner.elastic_counts``), so every restart resumes from the latest checkpoint with the same
samples in the same order (Megatron-LM's ``torch_dist`` checkpoints reshard over data parallelism).

- Slurm: the batch script does it. Its continuation asks for ``min_nodes-nodes`` and trains on the largest count of
  its allocation that keeps the global batch; ``megaprov job grow`` asks it (launch/grow, then USR1) to save and
  continue in a new allocation, which gets the node back when Slurm has it idle.
- systemd: the follower (``megaprov train``, ``megaprov job attach``) does it. When torchrun fails on a node, when
  every node's torchrun exited before the end, or when no iteration came for a while, it asks every node of the
  current segment for its unit; a node that does not answer (twice, 5 s apart), whose unit gave up while another's
  still runs, or that a ``megaprov doctor`` run since the segment began found an error on, is lost. The units of
  the others are stopped, the launch is rendered again for them (a new rendezvous on the first of them,
  ``--nnodes`` their count) and started from the checkpoint. ``megaprov job grow`` does the
  same towards more nodes; so does a restart of the job (the follower then asks the lost nodes again) and
  ``megaprov train --resume``, which plans on every node of the job again.

Every change is a line of the job's events (``logs/elastic.log``; Slurm's are in ``logs/slurm.log``) and a segment
of job.json; the report splits the run at each change (:func:`megaprov.training.verdict.segments`).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from megaprov import untrusted, values
from megaprov.cluster import plays
from megaprov.errors import MegaprovError, UsageError
from megaprov.output import SILENT, Reporter
from megaprov.owner import as_owner_of
from megaprov.training import follow, jobdir, jobmeta, render

if TYPE_CHECKING:
    from megaprov.training.jobs import Job
    from megaprov.training.jobspec import JobSpec
    from megaprov.training.planner import Cluster

CONFIRM_S = 5.0  # an unreachable node is asked again after this long before it counts as lost
QUIET_MIN_S = 45.0  # no new iteration for this long (or 5 iterations' time, if longer): the nodes are asked
PROBE_EVERY_S = 30.0  # at most one question to the nodes this often while nothing changes


@dataclass(frozen=True)
class Probe:
    """What the nodes of the current segment said: their units, and the nodes lost (host -> why)."""

    units: dict[str, dict[str, str]]
    lost: dict[str, str]


def event(job: Job, line: str) -> str:
    """Append ``megaprov: LINE at TIME`` to the job's events (as the owner of the job directory) and return it."""
    text = f"megaprov: {values.printable(line)} at {follow.utc_now()}"
    path = job.local_dir / render.ELASTIC_EVENTS
    with as_owner_of(job.local_dir):
        with path.open("a") as fh:
            fh.write(text + "\n")
    jobdir.push(job.local_dir, render.ELASTIC_EVENTS)
    return text


def unhealthy(job: Job, since: float = 0.0) -> set[str]:
    """Nodes with error findings in the cluster's last ``megaprov doctor`` run, if that run was made after ``since``
    (epoch seconds; 0: whenever it ran, within the day its findings hold)."""
    from megaprov.ops.doctor import health

    nodes, age = health.unhealthy_nodes(str(job.inventory))
    if age is None or time.time() - age < since:
        return set()
    return set(nodes)


def probe(job: Job, since: float, hosts: list[str] | None = None) -> Probe:
    """Ask ``hosts`` (default: every node of the current segment) for the job's unit (``job_status.yml``): those that
    do not answer are lost, so are those a doctor run after ``since`` found an error on, and those whose unit gave up
    while another's still runs (:func:`gave_up_units`)."""
    asked = list(job.hosts if hosts is None else hosts)
    result = plays.run(
        "job_status.yml", job.inventory, {"megaprov_job": job.vars(hosts=asked)}, SILENT, len(asked), collect=("ansible.builtin.command", "command")
    )
    lost = {f.host: "unreachable" for f in result.failures if f.unreachable and f.host in asked}
    units = {}
    for task in result.results:
        pairs = (line.partition("=") for line in str(task.res.get("stdout", "")).splitlines())
        units[task.host] = {k: v for k, _, v in pairs}
    for host, why in gave_up_units(units).items():
        lost.setdefault(host, why)
    for host in sorted(unhealthy(job, since) & set(asked)):
        lost.setdefault(host, "error findings of megaprov doctor")
    return Probe(units, lost)


def gave_up_units(units: dict[str, dict[str, str]]) -> dict[str, str]:
    """Nodes whose unit gave up (systemd's start limit: its ranks died at every start) while another node's unit still
    runs or starts again: the node is what fails, not the job. Pure."""
    from megaprov.training.launchers.systemd import WILL_RUN

    going = [h for h, u in units.items() if u.get("ActiveState") in WILL_RUN]
    if not going:
        return {}
    return {
        h: f"its unit gave up ({u.get('Result', 'failed')}, {u.get('NRestarts', '?')} restarts)"
        for h, u in units.items()
        if u.get("ActiveState") == "failed"
    }


def continue_on(counts: list[int], healthy: list[str]) -> list[str]:
    """The nodes to continue on: the first of ``healthy`` (rank order), as many as the largest of ``counts`` (the node
    counts that keep the global batch and fit, largest first) they can fill; [] when fewer than the smallest are left.
    Pure."""
    for count in counts:
        if count <= len(healthy):
            return healthy[:count]
    return []


def counts_of(spec: JobSpec, cluster: Cluster) -> list[int]:
    """The node counts the job may run on, largest first (planner.usable_counts)."""
    from megaprov.training import planner

    return planner.usable_counts(spec, cluster)


def quiet_after(log: follow.JobLog) -> float:
    """Seconds without a new iteration after which the follower asks the nodes: QUIET_MIN_S, or five iterations."""
    recent = [it.ms_per_iteration for it in log.series()[-10:] if it.ms_per_iteration]
    return max(QUIET_MIN_S, 5 * statistics.median(recent) / 1000.0) if recent else QUIET_MIN_S


def relaunch(job: Job, spec: JobSpec, hosts: list[str], why: str, report: Reporter, stop_first: list[str] | None = None, kill: bool = False) -> Job:
    """Stop the job's units on ``stop_first`` (default: the current nodes) and start it again on ``hosts`` from its
    latest checkpoint: rendered for them (rendezvous on the first, their count), a new segment. ``kill``: after a loss
    the others cannot save (they wait for the lost peer), so their processes are killed at once. What can be refused
    (the inventory, the plan, the render) is worked out before anything is stopped, and job.json says "reshaping" from
    then on: a follower in another shell waits while it does."""
    from megaprov.training import jobs, jobview, planner, target

    inventory = str(job.inventory)
    known = _gpu_nodes(inventory)
    hosts = [h for h in hosts if h in known]  # job.json is the cluster user's: only the inventory's nodes
    found, addressed = target.cluster(spec, inventory, target.Shape(len(hosts), exclude=tuple(n for n in known if n not in hosts)))
    planned = planner.plan(spec, found)
    text = untrusted.read_text(job.local_dir / "spec.yml", "job spec", values.MAX_FILE_BYTES, untrusted.job_root(job.local_dir))
    rendered = render.render(spec, found, addressed, dict(os.environ))
    jobs.set_state(job, "reshaping", reshaping=why)
    stopping = [h for h in (job.hosts if stop_first is None else stop_first) if h in known]
    if stopping:
        stopped = plays.run("job_stop.yml", job.inventory, {"megaprov_job": job.vars(hosts=stopping, kill=kill)}, report, len(stopping))
        if not stopped.ok:
            jobs.set_state(job, "failed", reshaping=f"{why}: the units could not be stopped before the change")
            raise plays.failure(stopped, f"job {job.name}: the units could not be stopped before the change")
    try:
        started = jobs.start(spec, text, found, planned, jobview.plan_dict(planned), rendered, inventory, True, report, change=why)
    except Exception:
        jobs.set_state(job, "failed", reshaping=f"{why}: the start on {', '.join(hosts)} failed")  # nothing of it runs (jobs.start)
        raise
    job.hosts = started.hosts
    return job


def _gpu_nodes(inventory: str) -> list[str]:
    from megaprov import paths
    from megaprov.cluster import inventory as inv

    return list(inv.load(inventory, paths.roles_dir(), paths.cluster_defaults()).hosts_of("gpu_nodes"))


def grow_systemd(job: Job, spec: JobSpec, report: Reporter) -> tuple[list[str], list[str]]:
    """``megaprov job grow`` of a systemd job: the job's other nodes that answer (and that no recent doctor run found
    an error on) join it. Returns (the nodes it runs on now, those it runs on after)."""
    from megaprov.training import target

    meta = jobmeta.load(job.local_dir / "job.json", job.name)
    known = _gpu_nodes(str(job.inventory))
    everyone = [h for h in meta.job_hosts if h in known]  # job.json is the cluster user's: only the inventory's nodes
    missing = [h for h in everyone if h not in job.hosts]
    if not missing:
        raise UsageError(f"job {job.name} runs on all {len(job.hosts)} of its nodes", "nothing to grow")
    asked = plays.run("job_status.yml", job.inventory, {"megaprov_job": job.vars(hosts=everyone)}, SILENT, len(everyone))
    down = {f.host for f in asked.failures if f.unreachable}
    bad = unhealthy(job)
    back = [h for h in missing if h not in down and h not in bad]
    if not back:
        why = ", ".join(f"{h} ({'unreachable' if h in down else 'error findings of megaprov doctor'})" for h in missing)
        raise UsageError(f"job {job.name} cannot grow: {why}", "bring the node back (and run `megaprov doctor` again), then grow")
    healthy = [h for h in everyone if h in job.hosts or h in back]
    full, _ = target.cluster(spec, str(job.inventory), target.Shape(len(everyone), exclude=tuple(n for n in known if n not in everyone)))
    target_hosts = continue_on(counts_of(spec, full), healthy)
    if len(target_hosts) <= len(job.hosts):
        raise UsageError(
            f"job {job.name} cannot grow: {len(healthy)} healthy nodes keep the global batch on no more than its {len(job.hosts)}",
            "bring more of its nodes back",
        )
    before = list(job.hosts)
    event(job, f"job {job.name} grows from {len(before)} to {len(target_hosts)} nodes ({', '.join(target_hosts)}): {', '.join(back)} answer again")
    try:  # the returning nodes are stopped too: one that was only cut off may still be restarting its old unit
        relaunch(job, spec, target_hosts, f"grew to {len(target_hosts)} nodes: {', '.join(back)} back (megaprov job grow)", report, before + back)
    except MegaprovError:
        event(job, f"job {job.name} could not start on {len(target_hosts)} nodes: back on {', '.join(before)}")
        relaunch(job, spec, before, f"the grow failed: back on {len(before)} nodes", report, [])
        raise
    return before, target_hosts


class Watch:
    """The follower's side of launch.elastic for a systemd job: when to ask the nodes, and what to do about a loss."""

    def __init__(self, job: Job, spec: JobSpec, report: Reporter, cluster: Cluster) -> None:
        self.job = job
        self.spec = spec
        self.report = report
        self.counts = counts_of(spec, cluster)  # the node counts it may run on, largest first
        self.since = time.time()  # the current segment's start: doctor findings older than this are not news
        self.asked = 0.0
        self.said: dict[str, str] = {}
        self.restarting = False

    def due(self, log: follow.JobLog, states: list[str], quiet_s: float) -> bool:
        """Whether to ask the nodes now: a node's torchrun failed or every node's ended short of the last iteration,
        or no iteration came for a while; at most every PROBE_EVERY_S."""
        if time.monotonic() - self.asked < PROBE_EVERY_S:
            return False
        failed = any(s.startswith("failed") for s in states)
        ended = bool(states) and all(s.startswith(("exited", "failed")) for s in states) and not (log.total and log.furthest >= log.total)
        self.restarting = failed or ended  # torchrun starts again anyway: the moment to take a returned node back in
        return failed or ended or quiet_s > quiet_after(log)

    def check(self, log: follow.JobLog) -> str | None:
        """Ask the nodes; on a loss continue on the others (a new segment) and return the event's line, else None."""
        from megaprov.training import jobs

        self.asked = time.monotonic()
        if jobs.job_state(self.job) == "reshaping":  # `megaprov job grow` from another shell is at it
            return None
        self.job.hosts = jobs.segment_hosts(self.job)  # as job.json has them now: a grow from another shell may have changed them
        found = probe(self.job, self.since)
        if any(why == "unreachable" for why in found.lost.values()):  # one SSH hiccup is no lost node: ask again
            time.sleep(CONFIRM_S)
            again = probe(self.job, self.since)
            found = Probe(again.units, {h: why for h, why in found.lost.items() if h in again.lost})
        if not found.lost:
            return self.regrow() if self.restarting else None
        healthy = [h for h in self.job.hosts if h not in found.lost]
        keep = continue_on(self.counts, healthy)
        lost = ", ".join(f"{h} ({why})" for h, why in sorted(found.lost.items()))
        if not keep:
            key = f"cannot:{lost}"
            if self.said.get("cannot") == key:
                return None
            self.said["cannot"] = key
            low = self.spec.launch.elastic.min_nodes if self.spec.launch.elastic else 0
            left = f"{len(healthy)} node(s) left, fewer than launch.elastic.min_nodes={low}"
            return event(self.job, f"job {self.job.name} lost {lost}: {left}; it cannot continue")
        last = max(log.saves, default=0)
        line = event(
            self.job,
            f"job {self.job.name} lost {lost}: continues on {len(keep)} node(s) ({', '.join(keep)}) from the checkpoint at iteration {last}"
            f" (iteration {log.current} reached)",
        )
        # Every node that answers is stopped, a lost one too when it answers (doctor's findings): its unit would
        # otherwise start torchrun again against the old rendezvous.
        answering = [h for h in self.job.hosts if found.lost.get(h) != "unreachable"]
        relaunch(self.job, self.spec, keep, f"lost {lost}", self.report, answering, kill=True)
        self.since = time.time()
        self.asked = time.monotonic()
        return line

    def regrow(self) -> str | None:
        """At a restart (torchrun failed or ended on the current nodes), the job's other nodes that answer again, and
        that no doctor run since the segment began flagged, are taken back in: the restart costs the same either way."""
        missing = [h for h in self.job.every_host if h not in self.job.hosts]
        if not missing:
            return None
        found = probe(self.job, self.since, missing)
        back = [h for h in missing if h not in found.lost and h in found.units]
        if not back:
            return None
        keep = continue_on(self.counts, [h for h in self.job.every_host if h in self.job.hosts or h in back])
        if len(keep) <= len(self.job.hosts):
            return None
        line = event(
            self.job,
            f"job {self.job.name} grows back to {len(keep)} nodes ({', '.join(keep)}) at its restart: {', '.join(back)} answer again",
        )
        relaunch(
            self.job,
            self.spec,
            keep,
            f"grew back to {len(keep)} nodes at a restart: {', '.join(back)}",
            self.report,
            self.job.hosts + back,
            kill=True,
        )
        self.since = time.time()
        self.asked = time.monotonic()
        return line

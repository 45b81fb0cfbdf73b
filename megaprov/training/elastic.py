"""launch.elastic: a job that loses a node continues on the healthy ones, and grows back when the node returns.

Tensor, pipeline and context sizes stay; the data-parallel size follows the nodes and the global batch is kept by more
gradient accumulation (``planner.elastic_counts``), so every restart resumes from the latest checkpoint with the same
samples in the same order (Megatron-LM's ``torch_dist`` checkpoints reshard over data parallelism).

- Slurm: the batch script does it. Its continuation asks for ``min_nodes-nodes`` and trains on the largest count of
  its allocation that keeps the global batch; ``megaprov job grow`` asks it (launch/grow, then USR1) to save and
  continue in a new allocation, which gets the node back when Slurm has it idle.
- systemd: the follower (``megaprov train``, ``megaprov job attach``) does it. When torchrun fails on a node, when
  every node's torchrun exited before the end, or when no iteration came for a while, it asks every node of the
  current segment for its unit; a node that does not answer, or that the last ``megaprov doctor`` run found an
  error on, is lost. The units of the others are stopped, the launch is rendered again for them (a new rendezvous
  on the first of them, ``--nnodes`` their count) and started from the checkpoint. ``megaprov job grow`` does the
  same towards more nodes; so does ``megaprov train --resume``, which plans on every node of the job again.

Every change is a line of the job's events (``logs/elastic.log``; Slurm's are in ``logs/slurm.log``) and a segment
of job.json; the report splits the run at each change (:func:`megaprov.training.verdict.segments`).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from megaprov import untrusted, values
from megaprov.cluster import plays
from megaprov.errors import UsageError
from megaprov.output import SILENT, Reporter
from megaprov.owner import as_owner_of
from megaprov.training import follow, jobdir, jobmeta, render

if TYPE_CHECKING:
    from megaprov.training.jobs import Job
    from megaprov.training.jobspec import JobSpec

EVENTS = "logs/elastic.log"  # systemd: the changes of an elastic job's nodes, one line each
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
    path = job.local_dir / EVENTS
    with as_owner_of(job.local_dir):
        with path.open("a") as fh:
            fh.write(text + "\n")
    jobdir.push(job.local_dir, EVENTS)
    return text


def events(job: Job) -> list[str]:
    """The job's elastic events (the cluster user can write the file: read bounded, shown as text)."""
    try:
        text = untrusted.read_text(job.local_dir / EVENTS, "elastic events", 1 << 20, untrusted.job_root(job.local_dir), tail=True, strict=False)
    except UsageError:
        return []
    return [values.printable(line.removeprefix("megaprov: ")) for line in text.splitlines() if line.startswith("megaprov: ")]


def unhealthy(job: Job, since: float) -> set[str]:
    """Nodes of the job with error findings in a ``megaprov doctor`` run made after ``since`` (epoch seconds)."""
    from megaprov.ops.doctor import health

    nodes, age = health.unhealthy_nodes(str(job.inventory))
    if age is None or time.time() - age < since:
        return set()
    return set(nodes) & set(job.hosts)


def probe(job: Job, since: float) -> Probe:
    """Ask every node of the current segment for its unit (``job_status.yml``): those that do not answer are lost, and
    so are those a doctor run after ``since`` found an error on."""
    result = plays.run(
        "job_status.yml", job.inventory, {"megaprov_job": job.vars()}, SILENT, len(job.hosts), collect=("ansible.builtin.command", "command")
    )
    lost = {f.host: "unreachable" for f in result.failures if f.unreachable and f.host in job.hosts}
    units = {}
    for task in result.results:
        pairs = (line.partition("=") for line in str(task.res.get("stdout", "")).splitlines())
        units[task.host] = {k: v for k, _, v in pairs}
    for host in sorted(unhealthy(job, since)):
        lost.setdefault(host, "error findings of megaprov doctor")
    return Probe(units, lost)


def continue_on(spec: JobSpec, healthy: list[str], gpus_per_node: int, nodes: int) -> list[str]:
    """The nodes to continue on: the first of ``healthy`` (rank order), as many as the largest count the policy keeps
    the global batch on; [] when fewer than min_nodes are left. Pure."""
    for count in planner_counts(spec, nodes, gpus_per_node):
        if count <= len(healthy):
            return healthy[:count]
    return []


def planner_counts(spec: JobSpec, nodes: int, gpus_per_node: int) -> list[int]:
    from megaprov.training import planner

    return planner.elastic_counts(spec, nodes, gpus_per_node)


def quiet_after(log: follow.JobLog) -> float:
    """Seconds without a new iteration after which the follower asks the nodes: QUIET_MIN_S, or five iterations."""
    recent = [it.ms_per_iteration for it in log.series()[-10:] if it.ms_per_iteration]
    return max(QUIET_MIN_S, 5 * statistics.median(recent) / 1000.0) if recent else QUIET_MIN_S


def relaunch(job: Job, spec: JobSpec, hosts: list[str], why: str, report: Reporter, stop_first: list[str] | None = None, kill: bool = False) -> Job:
    """Stop the job's units on ``stop_first`` (the nodes that answer; default: the current ones) and start it again on
    ``hosts`` from its latest checkpoint: rendered for them (rendezvous on the first, their count), a new segment.
    ``kill``: after a loss the others cannot save (they wait for the lost peer): their processes are killed at once."""
    from megaprov.training import jobs, jobview, planner, target

    stopping = list(stop_first if stop_first is not None else job.hosts)
    if stopping:
        stopped = plays.run("job_stop.yml", job.inventory, {"megaprov_job": job.vars(hosts=stopping, kill=kill)}, report, len(stopping))
        if not stopped.ok:
            raise plays.failure(stopped, f"job {job.name}: the units could not be stopped before the change")
    inventory = str(job.inventory)
    names = [n for n in _gpu_nodes(inventory) if n not in hosts]
    found, addressed = target.cluster(spec, inventory, target.Shape(len(hosts), exclude=tuple(names)))
    planned = planner.plan(spec, found)
    text = untrusted.read_text(job.local_dir / "spec.yml", "job spec", values.MAX_FILE_BYTES, untrusted.job_root(job.local_dir))
    rendered = render.render(spec, found, addressed, dict(os.environ))
    jobs.set_state(job, "reshaping", reshaping=why)
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
    meta = jobmeta.load(job.local_dir / "job.json", job.name)
    missing = [h for h in meta.job_hosts if h not in job.hosts]
    if not missing:
        raise UsageError(f"job {job.name} runs on all {len(job.hosts)} of its nodes", "nothing to grow")
    everyone = [h for h in meta.job_hosts]
    asked = plays.run("job_status.yml", job.inventory, {"megaprov_job": job.vars(hosts=everyone)}, SILENT, len(everyone))
    down = {f.host for f in asked.failures if f.unreachable}
    bad = unhealthy_any(job)
    back = [h for h in missing if h not in down and h not in bad]
    if not back:
        why = ", ".join(f"{h} ({'unreachable' if h in down else 'error findings of megaprov doctor'})" for h in missing)
        raise UsageError(f"job {job.name} cannot grow: {why}", "bring the node back (and run `megaprov doctor` again), then grow")
    healthy = [h for h in meta.job_hosts if h in job.hosts or h in back]
    gpus = meta.gpus_per_node
    target_hosts = continue_on(spec, healthy, gpus, len(meta.job_hosts))
    if len(target_hosts) <= len(job.hosts):
        raise UsageError(
            f"job {job.name} cannot grow: {len(healthy)} healthy nodes keep the global batch on no more than its {len(job.hosts)}",
            "bring more of its nodes back",
        )
    before = list(job.hosts)
    event(job, f"job {job.name} grows from {len(before)} to {len(target_hosts)} nodes ({', '.join(target_hosts)}): {', '.join(back)} answer again")
    relaunch(job, spec, target_hosts, f"grew to {len(target_hosts)} nodes: {', '.join(back)} back (megaprov job grow)", report, before)
    return before, target_hosts


def unhealthy_any(job: Job) -> set[str]:
    """Nodes with error findings in the last doctor run of the job's cluster (whenever it ran, within a day)."""
    from megaprov.ops.doctor import health

    nodes, _ = health.unhealthy_nodes(str(job.inventory))
    return set(nodes)


class Watch:
    """The follower's side of launch.elastic for a systemd job: when to ask the nodes, and what to do about a loss."""

    def __init__(self, job: Job, spec: JobSpec, report: Reporter, gpus_per_node: int, job_hosts: list[str]) -> None:
        self.job = job
        self.spec = spec
        self.report = report
        self.gpus = gpus_per_node
        self.job_hosts = job_hosts
        self.since = time.time()  # the current segment's start: doctor findings older than this are not news
        self.asked = 0.0
        self.said: dict[str, str] = {}

    def due(self, log: follow.JobLog, states: list[str], quiet_s: float) -> bool:
        """Whether to ask the nodes now: a node's torchrun failed or every node's ended short of the last iteration,
        or no iteration came for a while; at most every PROBE_EVERY_S."""
        if time.monotonic() - self.asked < PROBE_EVERY_S:
            return False
        failed = any(s.startswith("failed") for s in states)
        ended = bool(states) and all(s.startswith(("exited", "failed")) for s in states) and not (log.total and log.furthest >= log.total)
        return failed or ended or quiet_s > quiet_after(log)

    def check(self, log: follow.JobLog) -> str | None:
        """Ask the nodes; on a loss continue on the others (a new segment) and return the event's line, else None."""
        self.asked = time.monotonic()
        found = probe(self.job, self.since)
        if not found.lost:
            return None
        healthy = [h for h in self.job.hosts if h not in found.lost]
        keep = continue_on(self.spec, healthy, self.gpus, len(self.job_hosts))
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
        relaunch(self.job, self.spec, keep, f"lost {lost}", self.report, healthy, kill=True)
        self.since = time.time()
        self.asked = time.monotonic()
        return line


def segment_hosts(job: Job) -> list[str]:
    """The nodes the job runs on now, from job.json (a `job grow` from another shell changes them)."""
    try:
        return list(jobmeta.load(job.local_dir / "job.json", job.name).hosts)
    except UsageError:
        return list(job.hosts)


def describe(spec: JobSpec) -> dict[str, Any] | None:
    return None if spec.launch.elastic is None else {"min_nodes": spec.launch.elastic.min_nodes}

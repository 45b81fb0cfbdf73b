"""The Slurm launcher: the rendered batch script is submitted on the Slurm controller as the cluster user (through
Ansible, ``job_slurm.yml``), Slurm runs ``launch/slurm-node.sh`` on every node of the allocation, and the follower
reads the same node logs as with systemd units. Restarts are Slurm jobs: after a failure (up to
``launch.max_restarts``) and at its time limit the batch script submits its continuation (``--dependency=afterany``),
whose id it appends to ``launch/slurm-jobs``; ``megaprov job stop`` signals the steps of the current one.

What Slurm says about a job is parsed here (pure functions): ``scontrol show job -o`` and the pending queue.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from megaprov import paths, untrusted, values
from megaprov.cluster import inventory as inv
from megaprov.cluster import plays, runner
from megaprov.errors import RunFailed, UsageError
from megaprov.output import SILENT, Reporter
from megaprov.training import jobdir, jobmeta, render

if TYPE_CHECKING:
    from megaprov.training.follow import JobLog
    from megaprov.training.jobs import Job
    from megaprov.training.jobspec import JobSpec

SLURM_ID = re.compile(r"^\d{1,12}$")
# Every job state squeue(1) lists (JOB STATE CODES, 24 of them) is in one of these: over, or not over. REVOKED is a
# federated sibling withdrawn after another cluster started the job; STOPPED keeps its nodes (SIGSTOP), SPECIAL_EXIT
# and RESV_DEL_HOLD are held jobs that an operator can release: none of those three is over.
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED", "REVOKED")
ALIVE = (
    "UNKNOWN",  # slurmctld did not answer (restarting, a timeout): not known to be over
    "PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED", "STAGE_OUT", "SIGNALING",
    "STOPPED", "SPECIAL_EXIT", "RESV_DEL_HOLD",
)  # fmt: skip
# What job_slurm.yml says (set_stats): sbatch --parsable's output (action submit), the job's record (action status)
SUBMITTED = "slurm_submitted"
STATE = "slurm_state"
GROW = "slurm_grow"  # action grow: Slurm's idle nodes


@dataclass(frozen=True)
class SlurmState:
    """One look at a Slurm job. ``state`` is Slurm's JobState, or ``GONE`` once slurmctld forgot it (MinJobAge)."""

    job_id: str
    state: str
    reason: str = ""
    nodes: str = ""
    restarts: int = 0
    position: int | None = None  # 1 = next to start, among the pending jobs in priority order
    pending: int = 0  # jobs pending in the whole queue
    exit_code: str = ""

    @property
    def alive(self) -> bool:
        return self.state in ALIVE

    def describe(self) -> str:
        if self.state == "PENDING":
            where = f", {self.position} of {self.pending} in the queue" if self.position else ""
            return f"slurm job {self.job_id} PENDING ({self.reason or 'None'}{where})"
        if self.state == "GONE":
            return f"slurm job {self.job_id} no longer known to slurmctld"
        nodes = f" on {self.nodes}" if self.nodes and self.nodes != "(null)" else ""
        extra = f", exit {self.exit_code}" if self.state in ENDED and self.exit_code else ""
        return f"slurm job {self.job_id} {self.state}{nodes}{extra}" + (f", requeued {self.restarts} time(s)" if self.restarts else "")

    def as_dict(self) -> dict[str, Any]:
        return {
            "slurm_job_id": self.job_id,
            "state": self.state,
            "reason": self.reason,
            "nodes": self.nodes,
            "restarts": self.restarts,
            "position": self.position,
            "pending": self.pending,
            "exit_code": self.exit_code,
        }


def submit_host(found: inv.Inventory) -> str:
    """Where Slurm jobs are submitted: the [slurm_controller] host, else [head] (the scheduler stage's controller)."""
    for group in ("slurm_controller", "head"):
        members = found.hosts_of(group)
        if members:
            return members[0]
    raise UsageError(f"{found.path}: no [head] host to submit Slurm jobs on", "add the Slurm controller as [head] or [slurm_controller]")


def current_id(job: Job) -> str:
    """The job's current Slurm id: its latest continuation (``launch/slurm-jobs``), else the one megaprov submitted.
    The file is on the shared directory (the cluster user writes it): only whole digit lines count."""
    try:
        text = untrusted.read_text(
            job.local_dir / render.SLURM_JOBS_FILE, "Slurm continuations", 1 << 20, untrusted.job_root(job.local_dir), tail=True
        )
    except UsageError:
        return str(job.slurm_id)
    ids = [line.strip() for line in text.splitlines() if SLURM_ID.fullmatch(line.strip())]
    return ids[-1] if ids else str(job.slurm_id)


def job_id(text: str, where: str) -> str:
    """A Slurm job id as sbatch --parsable prints it (``ID`` or ``ID;cluster``), checked."""
    first = text.strip().splitlines()[-1].split(";")[0].strip() if text.strip() else ""
    if not SLURM_ID.fullmatch(first):
        raise UsageError(f"{where}: {values.shown(text.strip()[:80])} is not a Slurm job id", "see the job's submission on the Slurm controller")
    return first


def fields(line: str) -> dict[str, str]:
    """``scontrol show job -o`` KEY=VALUE words. Values hold no spaces except Reason/Comment-like fields at the end
    of a word run, which are joined back to the key before them."""
    out: dict[str, str] = {}
    key = ""
    for word in line.split():
        name, sep, value = word.partition("=")
        if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9_:/]*", name):
            key = name
            out[key] = value
        elif key:
            out[key] += " " + word
    return out


def parse_state(job: str, text: str) -> SlurmState:
    """The state from the status play's output: ``scontrol show job -o ID`` then ``--- pending`` and the ids of
    the pending jobs in priority order. Pure."""
    # the last marker: the job's own name or comment (the cluster user's words, in the record) may hold one
    head, marker, pending_text = text.rpartition("--- pending")
    if not marker:  # no queue printed: the whole answer is the record
        head, pending_text = text, ""
    line = next((ln for ln in head.splitlines() if ln.startswith("JobId=")), "")
    pending_ids = [p.strip() for p in pending_text.split() if SLURM_ID.fullmatch(p.strip())]
    if not line:
        # Only this error means slurmctld forgot the job (MinJobAge after its end); anything else (a timeout,
        # "Unable to contact slurm controller") says nothing about the job.
        gone = "Invalid job id specified" in head
        return SlurmState(job, "GONE" if gone else "UNKNOWN", "" if gone else values.printable(head.strip())[:200], pending=len(pending_ids))
    f = fields(line)
    state = f.get("JobState", "UNKNOWN").split()[0]
    try:
        restarts = int(f.get("Restarts", "0"))
    except ValueError:
        restarts = 0
    reason = f.get("Reason", "")
    position = pending_ids.index(job) + 1 if job in pending_ids else None
    return SlurmState(
        job,
        state if re.fullmatch(r"[A-Z_]{1,32}", state) else "UNKNOWN",
        "" if reason == "None" else values.printable(reason)[:200],
        values.printable(f.get("NodeList", ""))[:200],
        restarts,
        position,
        len(pending_ids),
        f.get("ExitCode", "")[:16],
    )


class SlurmLauncher:
    name = "slurm"
    restart_wait_s = 0.0  # Slurm itself says when the job is over (state), not a wait after the nodes exited

    def __init__(self) -> None:
        self._submit_hosts: dict[Path, str] = {}

    def _submit_host(self, job: Job) -> str:
        """The host Ansible reaches: from the inventory, never from job.json (the cluster user can write it); read
        once per inventory by this launcher (a follower asks Slurm every few seconds)."""
        if job.inventory not in self._submit_hosts:
            self._submit_hosts[job.inventory] = submit_host(inv.load(job.inventory, paths.roles_dir(), paths.cluster_defaults()))
        return self._submit_hosts[job.inventory]

    def _run(self, job: Job, action: str, report: Reporter, slurm_id: str, **extra: Any) -> runner.RunResult:
        job.submit_host = self._submit_host(job)
        job_vars = job.vars(action=action, submit_host=job.submit_host, slurm_id=slurm_id or "0", **extra)
        return plays.run("job_slurm.yml", job.inventory, {"megaprov_job": job_vars}, report, 1)

    def stage(self, job: Job, spec: JobSpec, rendered: render.Rendered, found: inv.Inventory, staging: Path) -> dict[str, Any]:
        """The batch script and the node script srun runs; the job is submitted on the Slurm controller."""
        job.submit_host = submit_host(found)
        (staging / render.SLURM_BATCH_SCRIPT).write_text(rendered.sbatch or "")
        (staging / render.SLURM_NODE_SCRIPT).write_text(rendered.slurm_node or "")
        return {}

    def start(self, job: Job, job_vars: dict[str, Any], report: Reporter, strategy: str) -> None:
        submit = {**job_vars, "action": "submit", "submit_host": job.submit_host, "slurm_id": "0", "grace": 0}
        result = plays.run("job_slurm.yml", job.inventory, {"megaprov_job": submit}, report, 1)
        if not result.ok:
            raise plays.failure(result, f"job {job.name} not submitted")
        if not isinstance(result.data.get(SUBMITTED), str):
            raise RunFailed(f"job {job.name}: sbatch printed no job id", f"see {result.artifacts}/stdout")
        job.slurm_id = job_id(result.data[SUBMITTED], "sbatch --parsable")

    def state(self, job: Job, report: Reporter = SILENT) -> SlurmState:
        """The state of the job's current Slurm job, labelled with the id that was asked about (a continuation
        submitted while the play ran is not this answer's job: the caller compares with current_id)."""
        asked = current_id(job)
        result = self._run(job, "status", report, asked)
        if not result.ok:  # the controller did not answer this time (a bootstrap restarting slurmctld, SSH)
            first = result.failures[0].message if result.failures else f"ansible-playbook ended with status {result.status}"
            return SlurmState(asked, "UNKNOWN", values.printable(first)[:200])
        said = result.data.get(STATE)
        return parse_state(asked, said if isinstance(said, str) else "")

    def current_id(self, job: Job) -> str:
        return current_id(job)

    def events(self, job: Job) -> list[str]:
        """The batch script's own lines (allocations, requeues, the end), for reasons and reports."""
        return _events(job)

    def stop(self, job: Job, report: Reporter) -> None:
        grace = _grace(job)
        result = self._run(job, "stop", report, current_id(job), grace=grace)
        if not result.ok:
            raise plays.failure(result, f"job {job.name}: stop failed")

    def grow(self, job: Job, partition: str | None, report: Reporter) -> list[str]:
        """launch.elastic: ask the batch script of the current allocation to save and continue in a new one over the
        job's node range (``job_slurm.yml`` action grow); Slurm's idle nodes, which it may add, are returned."""
        result = self._run(job, "grow", report, current_id(job), partition=partition or "")
        if not result.ok:
            raise plays.failure(result, f"job {job.name}: grow failed")
        idle = result.data.get(GROW)
        return [h for h in idle if isinstance(h, str) and values.HOST_NAME.fullmatch(h)] if isinstance(idle, list) else []

    def states(self, job: Job, report: Reporter) -> dict[str, dict[str, str]]:
        found = self.state(job, report)
        return {"slurm": {k: "" if v is None else str(v) for k, v in found.as_dict().items()}}

    def log_hosts(self, job: Job) -> list[str]:
        """The nodes of the job's current allocation (``launch/nodes``, which the batch script writes as it starts):
        an earlier allocation's nodes, whose last state was their failure or their save at the time limit, are not
        this run's. Before any allocation: none. The file is the cluster user's: only host names count."""
        try:
            text = untrusted.read_text(job.local_dir / render.SLURM_NODES_FILE, "Slurm allocation", 1 << 20, untrusted.job_root(job.local_dir))
        except UsageError:
            return []
        return [line.strip() for line in text.splitlines() if values.HOST_NAME.fullmatch(line.strip())][: values.MAX_HOSTS]

    def gave_up(self, job: Job, log: JobLog, report: Reporter) -> str | None:
        found = self.state(job, report=SILENT)
        if found.alive:
            return None
        return "; ".join([found.describe(), *_events(job)[-2:]])


def _events(job: Job) -> list[str]:
    return jobdir.event_lines(job, render.SLURM_EVENTS, "Slurm events", "megaprov: slurm job")


def _grace(job: Job) -> int:
    """Seconds ``job stop`` waits for the ranks' checkpoint: the stop grace rendered for the job (job.json)."""
    try:
        grace = values.bounded_int(jobmeta.load(job.local_dir / "job.json", job.name).raw.get("stop_grace_s", 0), "stop_grace_s", 0, 1 << 30)
    except UsageError:
        grace = 0
    return min(max(grace, 60), 6 * 3600 + 120)

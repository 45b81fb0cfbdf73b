"""Training jobs on the cluster: start (one systemd unit per node, through Ansible), follow, judge, stop, list.

The job directory lives on the shared directory (``<shared>/jobs/<name>``): ``job.json``, ``spec.yml``,
``plan.json``, ``launch/<node>.sh`` and ``.service``, ``bin/`` (the lab trainer), ``logs/<node>.log`` (everything a
node's torchrun and ranks print, appended by its unit), ``metrics.jsonl``, ``metrics.prom`` and ``report.*``.
Checkpoints go to ``checkpoint.directory``. megaprov reads and writes the job directory where this machine sees
the shared directory (``megaprov_controller_shared_dir``); nodes are only reached through Ansible.
"""

from __future__ import annotations

import base64
import json
import posixpath
import re
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from megaprov import paths, untrusted, values
from megaprov.cluster import inventory as inv
from megaprov.cluster import runner
from megaprov.errors import EnvironmentProblem, UsageError
from megaprov.output import SHOWN, SILENT, Reporter
from megaprov.owner import as_owner_of
from megaprov.paths import PACKAGE_DIR, state_dir
from megaprov.training import follow, jobdir, jobmeta, launchers, render, verdict
from megaprov.training.jobspec import JobSpec
from megaprov.training.launchers import systemd
from megaprov.training.planner import Cluster, Plan


@dataclass
class Job:
    """Where a job is, for the nodes and for this machine."""

    name: str
    inventory: Path
    hosts: list[str]
    shared_dir: str
    job_dir: str  # as the nodes see it
    local_dir: Path  # as this machine sees it
    checkpoint_dir: str
    unit: str
    launcher: str = "systemd"  # systemd units, or slurm (megaprov/training/launchers)
    slurm_id: str = ""  # the Slurm job id (launcher slurm)
    submit_host: str = ""  # where Slurm jobs are submitted and asked about (the Slurm controller)
    job_hosts: list[str] = field(default_factory=list)  # launch.elastic: every node it was started on (hosts: the current ones)

    @property
    def every_host(self) -> list[str]:
        """The nodes whose logs hold the job's lines: every node it ran on, the current ones last-added."""
        return list(dict.fromkeys([*self.job_hosts, *self.hosts]))

    def vars(self, **extra: Any) -> dict[str, Any]:
        return {"name": self.name, "hosts": self.hosts, "dir": self.job_dir, "unit": self.unit, "checkpoint_dir": self.checkpoint_dir, **extra}


def controller_root(found: inv.Inventory, shared: str) -> Path:
    """Where this machine reads the shared directory: its mount (megaprov_controller_shared_dir, else the path the
    nodes use), or, where it has none, a mirror kept through the head (megaprov.training.jobdir)."""
    first = found.hosts_of("gpu_nodes")[0]
    configured = str(found.host_var(first, "megaprov_controller_shared_dir", "") or "")
    root = Path(configured or shared)
    if root.is_dir():
        return root
    if configured:  # said to be mounted here, and it is not: a mistake, not a laptop
        raise EnvironmentProblem(
            f"this machine does not see the cluster's shared directory (megaprov_controller_shared_dir={configured} is not a directory here)",
            "mount it there, or drop megaprov_controller_shared_dir: megaprov then reads the job directories through the head",
        )
    return jobdir.mirror_root(found, shared)


def shared_view(inventory_path: str | Path) -> Path:
    """Where this machine sees the shared directory of the cluster in ``inventory_path``."""
    found = inv.load(inventory_path, paths.roles_dir(), paths.cluster_defaults())
    return controller_root(found, str(found.host_var(found.hosts_of("gpu_nodes")[0], "megaprov_shared_dir", "/shared")))


def locate(found: inv.Inventory, name: str, shared: str, hosts: list[str], checkpoint_dir: str) -> Job:
    job_dir = posixpath.join(shared, "jobs", name)
    local = controller_root(found, shared) / "jobs" / name
    return Job(name, found.path.resolve(), hosts, shared, job_dir, local, checkpoint_dir, render.unit_name(name))


# ---- the controller's index of jobs (so that `job status NAME` needs no -i)


def _index() -> Path:
    return state_dir() / "jobs"


def remember(job: Job) -> None:
    _index().mkdir(parents=True, exist_ok=True)
    record = {"name": job.name, "inventory": str(job.inventory), "local_dir": str(job.local_dir)}
    (_index() / f"{job.name}.json").write_text(json.dumps(record) + "\n")


def find(name: str, inventory_path: str | None = None) -> Job:
    """A started job by name: from the index, or from the shared directory of ``inventory_path``. Its job.json is
    checked like any input (:mod:`megaprov.training.jobmeta`): the cluster user can write it."""
    values.job_name(name, "job name")
    local: Path | None = None
    inventory = inventory_path
    record_path = _index() / f"{name}.json"
    if record_path.is_file():
        record = json.loads(record_path.read_text())
        inventory = inventory or record["inventory"]
        local = Path(record["local_dir"])
    if inventory is None:
        raise UsageError(f"no job {name!r} is known on this machine", "pass -i INVENTORY of the cluster it ran on (megaprov jobs lists known jobs)")
    if local is None or untrusted.kind(local / "job.json", untrusted.job_root(local)) == "missing":
        local = shared_view(inventory) / "jobs" / name
    jobdir.refresh(local)  # through the head where this machine does not mount the shared directory
    if untrusted.kind(local / "job.json", untrusted.job_root(local)) == "missing":
        raise UsageError(f"no job {name!r} in {local.parent}", "megaprov jobs lists the jobs")
    meta = jobmeta.load(local / "job.json", name)
    return Job(
        name,
        Path(inventory).resolve(),
        list(meta.hosts),
        meta.shared_dir,
        meta.job_dir,
        local,
        meta.checkpoint_dir,
        meta.unit,
        meta.launcher,
        meta.slurm_id,
        meta.submit_host,
        list(meta.job_hosts),
    )


def listing(inventory_path: str | None) -> list[dict[str, Any]]:
    dirs: dict[str, Path] = {}
    if _index().is_dir():
        for record in sorted(_index().glob("*.json")):
            data = json.loads(record.read_text())
            dirs[data["name"]] = Path(data["local_dir"])
    if inventory_path:
        jobs_dir = shared_view(inventory_path) / "jobs"
        if jobdir.is_remote(jobs_dir):
            for name in jobdir.list_jobs(jobs_dir.parent):
                if values.JOB_NAME.fullmatch(name):
                    jobdir.refresh(jobs_dir / name)
        for entry, kind in untrusted.entries(jobs_dir, jobs_dir.parent).items():
            if kind == "dir":
                dirs.setdefault(entry, jobs_dir / entry)
    rows = []
    for name, local in sorted(dirs.items()):
        root = untrusted.job_root(local)
        if untrusted.kind(local / "job.json", root) == "missing":
            continue
        shown = name if values.JOB_NAME.fullmatch(name) else values.shown(name)
        try:
            meta = jobmeta.load(local / "job.json", name)
        except UsageError as exc:  # one damaged or hostile job does not hide the others
            rows.append({"name": shown, "state": "invalid", "verdict": None, "nodes": 0, "started": None, "job_dir": str(local), "problem": str(exc)})
            continue
        rows.append(
            {
                "name": name,
                "state": meta.state,
                "verdict": report_verdict(local / "report.json"),
                "nodes": len(meta.hosts),
                "started": meta.started,
                "job_dir": str(local),
                "launcher": meta.launcher,
                "slurm_job_id": meta.slurm_id or None,
            }
        )
    return rows


def report_verdict(path: Path) -> str | None:
    """passed/failed from a job's report.json, or None (absent, unreadable or not megaprov's)."""
    try:
        verdict_value = untrusted.read_json(path, "report", 64 << 20, untrusted.job_root(path.parent)).get("verdict")
    except (UsageError, AttributeError):
        return None
    return verdict_value if verdict_value in ("passed", "failed") else None


def model_shape(spec: JobSpec) -> dict[str, Any]:
    m = spec.model
    return {
        "num_layers": m.num_layers,
        "hidden_size": m.hidden_size,
        "num_attention_heads": m.num_attention_heads,
        "ffn_hidden_size": m.ffn,
        "seq_length": m.seq_length,
        "tensor": spec.parallel.tensor,
        "pipeline": spec.parallel.pipeline,
    }


def start(
    spec: JobSpec,
    text: str,
    cluster: Cluster,
    planned: Plan,
    plan_doc: dict[str, Any],
    rendered: render.Rendered,
    inventory_path: str,
    resume: bool,
    report: Reporter,
    strategy: str = "linear",
    change: str | None = None,
) -> Job:
    """Stage the job's files, check and start every node's unit; on any failure nothing is left running. ``change``
    (launch.elastic) says why an existing job starts again on other nodes: a new segment, not a resume."""
    found = inv.load(inventory_path, paths.roles_dir(), paths.cluster_defaults())
    hosts = [n.host for n in rendered.nodes]
    job = locate(found, spec.name, cluster.shared_dir, hosts, rendered.checkpoint_dir)
    jobdir.refresh(job.local_dir)  # a job of that name on the head, where this machine has no mount
    exists = untrusted.kind(job.local_dir / "job.json", untrusted.job_root(job.local_dir)) != "missing"
    if exists and not resume:
        raise UsageError(
            f"job {spec.name} already exists in {job.job_dir}",
            f"pass --name NEW for a new job, or `megaprov train --resume {spec.name}` to continue it",
        )
    job.launcher = "slurm" if spec.launch.launcher == "slurm" else "systemd"
    launcher = launchers.of(job.launcher)
    started = follow.utc_now()
    meta = {
        "name": spec.name,
        "state": "starting",
        "started": started,
        "hosts": hosts,
        "shared_dir": cluster.shared_dir,
        "job_dir": job.job_dir,
        "checkpoint_dir": job.checkpoint_dir,
        "unit": job.unit,
        "trainer": spec.launch.trainer,
        "nodes": cluster.nodes,
        "gpus_per_node": cluster.gpus_per_node,
        "gpu": cluster.gpu.name,
        "inventory": str(job.inventory),
        "train_iters": spec.train.train_iters,
        "launcher": job.launcher,
        "stop_grace_s": rendered.stop.unit_s if rendered.stop else 0,
    }
    segments: list[dict[str, Any]] = []
    if exists:
        old = jobmeta.load(job.local_dir / "job.json", job.name)
        meta["resumes"] = old.resumes + (0 if change else 1)
        meta["first_started"] = old.first_started
        job.job_hosts = list(dict.fromkeys([*old.job_hosts, *hosts]))  # every node it ran on, in the order they joined
        segments = [{"hosts": list(g.hosts), "started": g.started, "why": g.why} for g in old.segments]
    else:
        meta["first_started"] = started
        job.job_hosts = list(hosts)
    meta["job_hosts"] = job.job_hosts
    if spec.launch.elastic is not None:
        why = change or ("resumed (megaprov train --resume)" if exists else "started")
        meta["segments"] = (segments + [{"hosts": hosts, "started": started, "why": why}])[-jobmeta.MAX_SEGMENTS :]
    with tempfile.TemporaryDirectory(prefix="megaprov-job-") as staging_dir:
        staging = Path(staging_dir)
        (staging / "launch").mkdir()
        (staging / "spec.yml").write_text(text)
        (staging / "plan.json").write_text(json.dumps(plan_doc, indent=2) + "\n")
        launched = launcher.stage(job, spec, rendered, found, staging)
        if job.submit_host:  # where the launcher asks about the job (the Slurm controller)
            meta["submit_host"] = job.submit_host
        (staging / "job.json").write_text(json.dumps(meta, indent=2) + "\n")
        if spec.launch.trainer == "lab":
            (staging / "bin").mkdir()
            shutil.copy(PACKAGE_DIR / "training" / "trainer.py", staging / render.LAB_TRAINER_FILE)
        (staging / "logs").mkdir()
        data = _bundle(staging)
        if len(data) > BUNDLE_MAX:
            raise UsageError(
                f"the job's files are {len(data) >> 20} MiB packed (more than {BUNDLE_MAX >> 20} MiB)", "keep data and checkpoints out of the job"
            )
        # The files travel inside the module call that unpacks them (megaprov.cluster.job_step): one round trip.
        job_vars = job.vars(
            python=spec.launch.interpreter,
            container=spec.launch.container is not None,
            master_port=spec.launch.master_port,
            bundle_b64=base64.b64encode(data).decode(),
            resume=resume,
            shape=model_shape(spec),
            **launched,
        )
        launcher.start(job, job_vars, report, strategy)
    if jobdir.is_remote(job.local_dir):  # the files the nodes now have, into this machine's mirror
        job.local_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        jobdir.refresh(job.local_dir)
    if job.slurm_id:
        set_state(job, "submitted", slurm_job_id=job.slurm_id)
    remember(job)
    return job


MAX_LOG_TAIL = 64 << 20  # bytes of a node's log `job logs` looks at (its end)
MAX_SCRIPT_BYTES = 1 << 20  # a launch script the report quotes

# The packed job files (spec, plan, launch scripts, the lab trainer: tens of KB); they travel as a module argument.
BUNDLE_MAX = 8 * 1024 * 1024


def _bundle(directory: Path) -> bytes:
    """One gzip tar of the job's files, in memory (it travels inside the module call that unpacks it); modes
    0755/0644, owner set on unpack."""
    import io
    import tarfile

    def normal(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mode = 0o755 if info.isdir() else 0o644
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(directory.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(directory)), recursive=False, filter=normal)
    return buffer.getvalue()


def stop(job: Job, report: Reporter) -> None:
    launchers.of(job.launcher).stop(job, report)
    set_state(job, "stopped")


def unit_states(job: Job, report: Reporter = SILENT) -> dict[str, dict[str, str]]:
    """What the job's launcher says: each node's unit (systemd), or the Slurm job (key ``slurm``)."""
    return launchers.of(job.launcher).states(job, report)


def node_log(job: Job, node: str | None, lines: int, pattern: re.Pattern[str] | None = None) -> tuple[str, list[str]]:
    """A node's log of the job (default: the last node, where the last rank prints): its last ``lines`` lines, those
    matching ``pattern`` where one is given. A Slurm job's nodes are its current allocation's, named as Slurm names them."""
    jobdir.refresh(job.local_dir, jobdir.FOLLOWED)
    nodes = (launchers.of(job.launcher).log_hosts(job) if job.launcher == "slurm" else []) or job.hosts
    host = node or nodes[-1]
    if host not in nodes:
        raise UsageError(f"--node {host} is not a node of job {job.name}", "use one of " + ", ".join(nodes))
    try:
        text = untrusted.read_text(
            job.local_dir / "logs" / f"{host}.log", "node log", MAX_LOG_TAIL, untrusted.job_root(job.local_dir), tail=True, strict=False
        )
    except untrusted.Missing:
        text = ""
    return host, [line for line in text.splitlines() if pattern is None or pattern.search(line)][-lines:]


def job_spec(job: Job) -> JobSpec:
    """The spec stored with the job (``spec.yml``, read as the cluster user's file: :mod:`megaprov.untrusted`)."""
    from megaprov.training import target

    return target.read(str(job.local_dir / "spec.yml"), untrusted.job_root(job.local_dir))[0]


def segment_hosts(job: Job) -> list[str]:
    """The nodes the job runs on now, from job.json (launch.elastic: a `job grow` from another shell changes them)."""
    try:
        return list(jobmeta.load(job.local_dir / "job.json", job.name).hosts)
    except UsageError:
        return list(job.hosts)


def job_state(job: Job) -> str:
    """The state job.json records (checked: the cluster user can write it)."""
    return jobmeta.load(job.local_dir / "job.json", job.name).state


FOLLOW_POLL = 1.0  # seconds between looks at a followed log


def follow_log(job: Job, node: str | None, lines: int, emit: Callable[[str], None], poll: float = FOLLOW_POLL) -> str:
    """`job logs -f`: the node's last ``lines`` lines, then each new line as it is written, until the job is over
    (job.json says so, or the node's torchrun exited after the last iteration) or the operator presses Ctrl-C."""
    host, last = node_log(job, node, lines)
    for line in last:
        emit(line)
    root = untrusted.job_root(job.local_dir)
    reader = follow.LogReader(job.local_dir / "logs" / f"{host}.log", root)
    try:
        reader.offset = untrusted.size(reader.path, root)
    except untrusted.Missing:
        pass
    spec = None
    try:
        while True:
            # through the head where this machine has no mount: what the nodes write, and the job's state
            jobdir.refresh(job.local_dir, (*jobdir.FOLLOWED, "job.json"))
            new = reader.lines()
            for line in new:
                emit(line)
            if new:
                continue
            if job_state(job) not in ("starting", "running", "submitted"):
                return host
            if spec is None:
                spec = job_spec(job)
            log = read_log(job, spec.model.seq_length, spec.train.log_interval)
            if log.node_state(host) == "exited-0" and log.total and log.furthest >= log.total:
                return host
            time.sleep(poll)
    except KeyboardInterrupt:
        return host


def set_state(job: Job, state: str, **extra: Any) -> None:
    path = job.local_dir / "job.json"
    meta = jobmeta.load(path, job.name).raw
    meta.update(state=state, **extra)
    tmp = path.with_name(".job.json.tmp")
    with as_owner_of(job.local_dir):
        tmp.write_text(json.dumps(meta, indent=2) + "\n")
        tmp.replace(path)
    jobdir.push(job.local_dir, "job.json")


# ---- following and judging


@dataclass
class Progress:
    job: str
    iteration: int
    total: int
    loss: float | None
    tokens_per_second: float | None
    tflops_per_gpu: float | None
    eta_seconds: float | None
    checkpoint: int
    restarts: int


@dataclass
class Outcome:
    state: str  # finished, failed, stalled, detached
    log: follow.JobLog
    reason: str = ""
    timing: dict[str, Any] = field(default_factory=dict)


def read_log(job: Job, seq_length: int, log_interval: int = 1) -> follow.JobLog:
    """Everything the nodes logged so far (for job status and reports)."""
    log = follow.JobLog(seq_length, log_interval)
    now = time.time()
    for host in job.every_host:
        for line in follow.LogReader(job.local_dir / "logs" / f"{host}.log", untrusted.job_root(job.local_dir)).lines():
            log.feed(host, line, now)
    return log


def follow_job(
    job: Job,
    seq_length: int,
    on_progress: Callable[[Progress], None],
    stall_timeout: float,
    poll: float = 0.5,
    report: Reporter = SHOWN,
    log_interval: int = 1,
    on_waiting: Callable[[str], None] | None = None,
    targets: follow.Targets | None = None,
    watch: Any = None,
) -> Outcome:
    """Follow the job's node logs until it finished, failed for good, stalled or the operator detached. The nodes
    whose logs are read come from the launcher (a Slurm job's appear as its allocation starts them). While no node
    runs (a Slurm job waiting in the queue, or requeued), the launcher is asked about the job every
    ``WAIT_POLL`` seconds and ``on_waiting`` hears what it says when that changes; the stall clock does not run
    while the job waits in a queue. ``watch`` (launch.elastic, systemd: :class:`megaprov.training.elastic.Watch`)
    asks the nodes when torchrun failed, ended short or went quiet, and continues the job on the healthy ones;
    ``on_waiting`` hears each change."""
    launcher = launchers.of(job.launcher)
    readers: dict[str, follow.LogReader] = {}
    log = follow.JobLog(seq_length, log_interval)
    last_news = time.monotonic()
    all_down_since: float | None = None
    last_asked = 0.0
    said = ""
    shown = -1
    with as_owner_of(job.local_dir):
        (job.local_dir / "metrics.jsonl").write_text("")  # the logs are read from their start again (a resumed job)

    def read_new() -> bool:
        """Feeds the nodes' new lines to the log; whether there were any."""
        nonlocal shown
        now = time.time()
        news = False
        new: list[follow.Iteration] = []
        for host, reader in readers.items():
            for line in reader.lines():
                news = True
                if (it := log.feed(host, line, now)) is not None:
                    new.append(it)
        if news:
            follow.append_metrics(job.local_dir, job.name, new, log, "running", targets)
            if log.furthest != shown and log.furthest:
                shown = log.furthest
                on_progress(_progress(job.name, log))
        return news

    remote = jobdir.is_remote(job.local_dir)
    pushed = 0.0
    hosts_read = time.monotonic()
    try:
        while True:
            if remote:  # the nodes' new lines, through the head; the metrics Prometheus reads, back to it now and then
                jobdir.refresh(job.local_dir, jobdir.FOLLOWED)
                if time.monotonic() - pushed > METRICS_PUSH_S:
                    jobdir.push(job.local_dir, "metrics.prom")
                    pushed = time.monotonic()
            current = launcher.log_hosts(job)  # a Slurm job's current allocation (a continuation may differ)
            if watch is not None and time.monotonic() - hosts_read > RUNNING_POLL:  # a `job grow` from another shell
                hosts_read = time.monotonic()
                now_on = segment_hosts(job)
                if now_on != job.hosts and on_waiting:
                    on_waiting(f"job {job.name} now runs on {len(now_on)} node(s): {', '.join(now_on)}")
                job.hosts = now_on
                current = list(job.hosts)
            for host in [*job.every_host, *current]:
                if host not in readers:
                    readers[host] = follow.LogReader(job.local_dir / "logs" / f"{host}.log", untrusted.job_root(job.local_dir))
            if job.launcher == "slurm" and current and current != job.hosts:
                job.hosts = list(current)
            if read_new():
                last_news = time.monotonic()
            hosts = list(current) if job.launcher == "slurm" else list(job.hosts)
            states = [log.node_state(h) for h in hosts]
            if hosts and all(s == "exited-0" for s in states) and log.total and log.furthest >= log.total:
                return Outcome("finished", log)
            waiting = job.launcher == "slurm" and not any(s == "running" for s in states)
            # A Slurm job is asked about while no node runs it, and now and then while one does: a node that died
            # without its exit line still shows "running", and only Slurm knows the job is over.
            every = WAIT_POLL if waiting else RUNNING_POLL
            if job.launcher == "slurm" and time.monotonic() - last_asked > every:
                last_asked = time.monotonic()
                found = launcher.state(job, SILENT)
                if found.describe() != said:
                    said = found.describe()
                    if on_waiting:
                        on_waiting(said)
                if found.state == "PENDING" and "held" not in found.reason.lower():
                    last_news = time.monotonic()  # a queue is not a stall (a job held after a failed launch is)
                elif not found.alive and found.job_id == launcher.current_id(job):  # over, and no continuation since
                    # The nodes' last lines (their exit lines) may have been written while Slurm was asked: read
                    # them before judging (a full suite caught "torchrun did not finish cleanly ... (running)" on a
                    # job Slurm had seen COMPLETED with exit 0:0).
                    read_new()
                    states = [log.node_state(h) for h in hosts]
                    if hosts and all(s == "exited-0" for s in states) and log.total and log.furthest >= log.total:
                        return Outcome("finished", log)
                    return Outcome("failed", log, "; ".join([found.describe(), *launcher.events(job)[-2:]]))
            if watch is not None and watch.due(log, states, time.monotonic() - last_news):
                changed = watch.check(log)
                if changed is not None:
                    if on_waiting:
                        on_waiting(changed)
                    last_news = time.monotonic()
                    all_down_since = None
                    hosts_read = time.monotonic()
                    continue
            if job.launcher != "slurm" and all(s.startswith(("exited", "failed")) for s in states):
                all_down_since = all_down_since or time.monotonic()
                if time.monotonic() - all_down_since > launcher.restart_wait_s:  # the units would have started torchrun again by now
                    reason = launcher.gave_up(job, log, SILENT)
                    if reason is not None and watch is not None and job_state(job) == "reshaping":  # a `job grow` under way
                        reason = None
                    if reason is not None:
                        return Outcome("failed", log, reason)
                    all_down_since = None
            else:
                all_down_since = None
            if time.monotonic() - last_news > stall_timeout:  # hung ranks hold the nodes: stop them
                stop(job, report)
                return Outcome("stalled", log, f"no output from any node for {stall_timeout:.0f} s; the job was stopped")
            time.sleep(poll)
    except KeyboardInterrupt:
        return Outcome("detached", log, "interrupted: the job keeps running on the nodes")


WAIT_POLL = 5.0  # seconds between questions to Slurm while no node runs the job
METRICS_PUSH_S = 10.0  # seconds between copies of metrics.prom to the head (a controller without the shared mount)
RUNNING_POLL = 30.0  # and while one does


def launcher_events(job: Job) -> list[str]:
    """The launcher's own lines about the job (a Slurm batch script's allocations, requeues, the end), for reasons and reports."""
    return launchers.of(job.launcher).events(job)


def _progress(name: str, log: follow.JobLog) -> Progress:
    last = log.iterations[log.furthest]
    recent = [it.ms_per_iteration for it in log.series()[-10:] if it.ms_per_iteration]
    eta = (log.total - log.furthest) * statistics.median(recent) / 1000.0 if recent and log.total else None
    return Progress(
        name, log.furthest, log.total, last.loss, last.tokens_per_second, last.tflops_per_gpu, eta, max(log.saves, default=0), len(log.restarts)
    )


def expected_throughput(spec: JobSpec, planned: Plan) -> tuple[float, str]:
    """The throughput the verdict holds the run to, and where it comes from: an explicit verify.tokens_per_second,
    else the plan's estimate (MFU x the slowest node's measured GEMM rate, or the published peak)."""
    if spec.verify.tokens_per_second:
        return spec.verify.tokens_per_second, "verify.tokens_per_second, set in the job spec"
    rate = f"; {planned.peak.text}" if planned.peak else ""
    if spec.verify.mfu:
        return planned.tokens_per_second * spec.verify.mfu / planned.mfu_assumed, f"the plan at verify.mfu={spec.verify.mfu:g}{rate}"
    return planned.tokens_per_second, f"the plan's estimate at MFU {planned.mfu_assumed:.1%}{rate}"


def metrics_targets(spec: JobSpec, planned: Plan) -> follow.Targets:
    """What the job's exported metrics are held to (the alert rules and dashboards read them beside the metrics)."""
    expected, _ = expected_throughput(spec, planned)
    return follow.Targets(
        expected_tokens_per_second=round(expected, 3),
        tokens_per_second_floor=round(expected * spec.verify.throughput_tolerance, 3),
        save_interval=spec.checkpoint.save_interval,
        gpu_utilization_floor=spec.verify.gpu_utilization,
        log_interval=spec.train.log_interval,
    )


def expected_by_nodes(spec: JobSpec, planned: Plan, cluster: Cluster) -> dict[int, float]:
    """launch.elastic: the tokens/s each node count the job may run on is held to: the plan on that many of the
    cluster's nodes (an explicit verify.tokens_per_second is the full job's, scaled by the node count)."""
    from megaprov.training import planner

    out = {planned.nodes: expected_throughput(spec, planned)[0]}
    base = planner.without_elastic(spec)
    for n in planner.elastic_counts(spec, planned.nodes, planned.gpus_per_node):
        if n in out:
            continue
        if spec.verify.tokens_per_second:
            out[n] = spec.verify.tokens_per_second * n / planned.nodes
            continue
        smaller = planner.plan(base, planner.shrunk(cluster, cluster.hosts[:n]) if len(cluster.hosts) >= n else replace(cluster, nodes=n))
        out[n] = expected_throughput(spec, smaller)[0]
    return out


def conclude(
    job: Job, spec: JobSpec, planned: Plan, outcome: Outcome, gpu_nodes: bool, timing: dict[str, Any], cluster: Cluster | None = None
) -> tuple[verdict.Verdict, dict[str, Any], dict[str, Path]]:
    """Judge the run, write report.json/.md/.png and the final metrics into the job directory."""
    log = outcome.log
    window = follow.training_window(log)
    samples = {
        h: follow.during(follow.gpu_samples(job.local_dir / "logs" / f"gpu-{h}.csv", untrusted.job_root(job.local_dir)), window) for h in job.hosts
    }
    expected, source = expected_throughput(spec, planned)
    judged, measured = verdict.judge(
        log,
        job.hosts,
        spec.verify.loss_window,
        expected,
        spec.verify.throughput_tolerance,
        source,
        gpu_nodes,
        spec.verify.gpu_utilization,
        samples,
        {r.host: r.tflops_per_device for r in planned.rates},
        follow_load=not spec.verify.tokens_per_second and planned.peak is not None and planned.peak.source == "measured",
        elastic=(expected_by_nodes(spec, planned, cluster), spec.train.global_batch_size) if spec.launch.elastic and cluster else None,
    )
    if outcome.state != "finished":
        judged.passed = False
        judged.checks.append(verdict.Check("run", verdict.FAIL, f"{outcome.state}: {outcome.reason}"))
    root = untrusted.job_root(job.local_dir)
    meta = jobmeta.load(job.local_dir / "job.json", job.name).raw
    commands = {
        p.stem: untrusted.read_text(p, "launch script", MAX_SCRIPT_BYTES, root, strict=False)
        for p in untrusted.files(job.local_dir / "launch", root, suffix=".sh")
    }
    parts = verdict.segments(log.series(), log.changes, expected_by_nodes(spec, planned, cluster)) if spec.launch.elastic and cluster else None
    report = verdict.report_dict(meta, judged, log, measured, commands, timing, parts)
    follow.write_metrics(job.local_dir, job.name, log, outcome.state, metrics_targets(spec, planned))
    paths = verdict.write_report(job.local_dir, report, log.series())
    jobdir.push(job.local_dir, "metrics.jsonl", "metrics.prom", *(p.name for p in paths.values()))
    set_state(job, outcome.state, verdict="passed" if judged.passed else "failed", ended=follow.utc_now())
    return judged, report, paths


def first_start_seconds(log: follow.JobLog, since_epoch: float) -> dict[str, Any]:
    """Launch timing: megaprov -> torchrun started (node clocks; on the first node and on every node) -> first iteration read."""

    # each node's first torchrun start of this launch (not those of earlier attempts; a stamp that is no time is skipped)
    per_node = []
    for starts in log.starts.values():
        stamps = [t for t in (runner.epoch(s) for s in starts) if t is not None and t >= since_epoch - 1]
        if stamps:
            per_node.append(min(stamps))
    out: dict[str, Any] = {}
    if per_node:
        first = min(per_node)
        out["megaprov_to_torchrun_start_s"] = round(first - since_epoch, 2)
        # every node's torchrun of this launch: the latest of their first starts
        out["megaprov_to_torchrun_started_everywhere_s"] = round(max(per_node) - since_epoch, 2)
        firsts = [it.seen for it in log.series() if it.attempt == 0][:1]
        if firsts:
            out["torchrun_start_to_first_iteration_s"] = round(firsts[0] - first, 2)
    return out


def settle(job: Job, units: dict[str, dict[str, str]] | None = None) -> bool:
    """Judge a job that ended with nobody following it (``train --detach``, or megaprov interrupted): whenever its
    state is read, a job that is still "starting"/"running" in job.json but whose logs show every node's torchrun
    exited 0 at the last iteration gets its verdict and report now; with ``units`` (from ``job_status.yml``), a job
    whose units all gave up is judged failed. Returns whether a verdict was written."""
    from megaprov.training import planner, target

    jobdir.refresh(job.local_dir)
    meta_path = job.local_dir / "job.json"
    root = untrusted.job_root(job.local_dir)
    if untrusted.kind(job.local_dir / "report.json", root) != "missing" or untrusted.kind(meta_path, root) == "missing":
        return False
    meta = jobmeta.load(meta_path, job.name)
    if meta.state not in ("starting", "running", "submitted"):
        return False
    spec = job_spec(job)
    if job.launcher == "slurm":  # the current allocation's nodes (an earlier one's ended with its failure)
        job.hosts = launchers.of("slurm").log_hosts(job) or job.hosts
    log = read_log(job, spec.model.seq_length, spec.train.log_interval)
    states = [log.node_state(h) for h in job.hosts]
    slurm = (units or {}).get("slurm")
    if all(s == "exited-0" for s in states) and log.total and log.furthest >= log.total:
        outcome = Outcome("finished", log)
    elif slurm is not None:  # a Slurm job is over when Slurm says so (a requeued one waits again)
        from megaprov.training.launchers.slurm import ALIVE

        if slurm.get("state") in ALIVE:
            return False
        said = "; ".join(launcher_events(job)[-2:])
        outcome = Outcome("failed", log, f"slurm job {slurm.get('slurm_job_id')} {slurm.get('state')}" + (f": {said}" if said else ""))
    elif units is not None and all(s.startswith(("exited", "failed")) for s in states):
        # judged only once no unit is stopping either (its ExecStop may still be saving the checkpoint)
        reason = systemd.gave_up({h: units.get(h, {}) for h in job.hosts}, job.hosts, log, systemd.WILL_RUN + ("deactivating",))
        if reason is None:
            return False
        outcome = Outcome("failed", log, reason)
    else:
        return False
    nodes = len(meta.job_hosts) if spec.launch.elastic and job.launcher != "slurm" else meta.nodes  # planned on all of its nodes
    found, _ = target.cluster(spec, str(job.inventory), target.Shape(nodes, meta.gpus_per_node, meta.gpu))
    conclude(job, spec, planner.plan(spec, found), outcome, found.gpu.name != "cpu", {"judged_after_the_run": True}, found)
    return True

"""Following a training job: parse what the nodes print, keep the job's state, write metrics.

The iteration line is Megatron-LM's ``training_log`` (``print_rank_last``: the last rank, on the last node), a
run of `` key: value |`` fields after ``iteration N/ M |``; fields come and go between versions (the timestamp
since core_v0.8, TFLOP/s/GPU with --log-throughput, energy and power with --log-energy), so the parser reads the
fields by name and needs only the iteration. Checkpoint lines (rank 0, the first node) and the lines megaprov's
node script prints around torchrun complete the picture. The lab trainer adds per-rank evidence for the throughput
verdict, each rank into its own node's log: ``megaprov compute | rank: R | ... | rate (TFLOP/s): X |`` (its GEMM
rate at start-up) and ``megaprov straggler | rank: R | iterations: A-B | compute time per iteration (ms): X |
collective wait per iteration (ms): Y |`` (the idea of Megatron's ``--log-straggler``, per rank). Pure parsing here; :class:`JobLog` folds lines into
state and :func:`write_metrics` writes ``metrics.jsonl`` and a Prometheus textfile.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import deque
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ansible_collections.megaprov.cluster.plugins.module_utils import gpu_query
from megaprov import untrusted
from megaprov.owner import as_owner_of

_ITERATION = re.compile(r"(?:\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)\]\s+)?iteration\s+(?P<it>\d+)/\s*(?P<total>\d+)\s*\|(?P<rest>.*)$")
_SAVED = re.compile(r"successfully saved checkpoint (?:from|at) iteration\s+(?P<it>\d+) to (?P<dir>\S+)")
_LOADED = re.compile(r"successfully loaded checkpoint from (?P<dir>\S+) .*?at iteration (?P<it>\d+)")
_NODE = re.compile(
    r"^megaprov: node (?P<host>\S+) \(node rank (?P<rank>\d+)\): torchrun (?:starting|exited with (?P<rc>-?\d+)) at (?P<at>\S+)"
    r"(?: on (?P<nodes>\d{1,6}) nodes)?"  # launch.elastic: the node count of this run of torchrun
)
_SIGTERM = "exiting program after receiving SIGTERM"
_EVIDENCE = re.compile(r"megaprov (?P<kind>compute|straggler) \|(?P<rest>.*)$")
# Lines worth quoting when a job fails: the trainers' own one-line errors and Python's exception lines.
_ERROR = re.compile(r"(megaprov\.trainer: .*|^\S*(Error|Exception)(: .*)?$|AssertionError.*|RuntimeError: .*|ChildFailedError.*)")

FIELDS = {
    "consumed samples": "consumed_samples",
    "elapsed time per iteration (ms)": "ms_per_iteration",
    "throughput per GPU (TFLOP/s/GPU)": "tflops_per_gpu",
    "learning rate": "lr",
    "global batch size": "global_batch",
    "lm loss": "loss",
    "loss scale": "loss_scale",
    "grad norm": "grad_norm",
    "number of skipped iterations": "skipped",
    "number of nan iterations": "nan",
}


@dataclass
class Iteration:
    iteration: int
    total: int
    logged_at: str | None = None  # Megatron's own timestamp (node clock), when the version prints one
    seen: float = 0.0  # when the follower read it (controller clock, epoch seconds)
    consumed_samples: int | None = None
    ms_per_iteration: float | None = None
    tflops_per_gpu: float | None = None
    lr: float | None = None
    global_batch: int | None = None
    loss: float | None = None
    loss_scale: float | None = None
    grad_norm: float | None = None
    skipped: int = 0
    nan: int = 0
    tokens_per_second: float | None = None
    attempt: int = 0
    nodes: int | None = None  # launch.elastic: the node count of the run that logged it (its node's start line)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_iteration(line: str) -> Iteration | None:
    """One Megatron iteration line, or None. Unknown fields are ignored; a missing loss stays None."""
    match = _ITERATION.search(line)
    if not match:
        return None
    it = Iteration(int(match["it"]), int(match["total"]), match["ts"])
    for part in match["rest"].split("|"):
        key, sep, value = part.partition(":")
        name = FIELDS.get(key.strip())
        if not sep or name is None:
            continue
        number = _number(value.strip())
        if number is None:
            continue
        if name in ("consumed_samples", "global_batch", "skipped", "nan"):
            setattr(it, name, int(number))
        else:
            setattr(it, name, number)
    return it


@dataclass(frozen=True)
class RankCompute:
    """One rank's compute time per iteration over a window of iterations (from a ``megaprov straggler`` line)."""

    rank: int
    first: int
    last: int
    compute_ms: float
    wait_ms: float


def parse_evidence(line: str) -> tuple[str, dict[str, str]] | None:
    """A ``megaprov compute`` or ``megaprov straggler`` line as (kind, fields by name), or None."""
    match = _EVIDENCE.search(line)
    if not match:
        return None
    fields = {}
    for part in match["rest"].split("|"):
        key, sep, value = part.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return match["kind"], fields


def parse_rank_compute(fields: dict[str, str]) -> RankCompute | None:
    try:
        first, _, last = fields["iterations"].partition("-")
        return RankCompute(
            int(fields["rank"]),
            int(first),
            int(last or first),
            float(fields["compute time per iteration (ms)"]),
            float(fields.get("collective wait per iteration (ms)", "0")),
        )
    except (KeyError, ValueError):
        return None


@dataclass
class Restart:
    seen: float  # when the last iteration before the failure was read
    last_iteration: int  # the furthest iteration logged before the failure
    resumed_from: int  # the iteration training continued after (the checkpoint's)
    first_iteration_seen: float | None = None  # when the first iteration after the restart was read
    first_iteration: int = 0  # the first iteration logged after the restart
    loaded: int | None = None  # the checkpoint iteration rank 0 said it loaded, when read before that iteration

    @property
    def lost_iterations(self) -> int:
        return max(0, self.last_iteration - self.resumed_from)


@dataclass
class Change:
    """launch.elastic: the job went on with another node count (the first iteration logged by the new count)."""

    nodes_before: int
    nodes_after: int
    last_iteration: int  # the furthest iteration logged before the change
    last_loss: float | None  # its loss
    first_iteration: int  # the first iteration logged after it
    first_loss: float | None
    same_iteration_loss: float | None  # the loss the earlier nodes logged at first_iteration, if they got there
    resumed_from: int  # the checkpoint it continued from
    before: tuple[tuple[int, float], ...] = ()  # the earlier nodes' last logged losses (iteration, loss), oldest first

    @property
    def lost_iterations(self) -> int:
        return max(0, self.last_iteration - self.resumed_from)


RUN_TAIL = 4096  # the last logged losses a run of torchrun keeps (a change compares the next run's with them)


@dataclass
class Run:
    """One run of torchrun on the node whose log carries the iterations: from its start line to the next."""

    host: str
    nodes: int | None
    order: int  # the order runs were read in (a fallback where iterations carry no timestamp)
    first: int = 0
    first_loss: float | None = None
    first_at: str | None = None  # the node's timestamp of its first iteration
    last: int = 0
    last_loss: float | None = None
    tail: deque[tuple[int, float | None]] = field(default_factory=lambda: deque(maxlen=RUN_TAIL))


@dataclass
class JobLog:
    """Everything the follower knows about a job, folded from the node logs line by line."""

    seq_length: int
    # Megatron logs every log_interval-th iteration: the first one logged after a restart is up to that many past
    # the checkpoint it resumed from (exactly that many when checkpoints fall on logged iterations).
    log_interval: int = 1
    iterations: dict[int, Iteration] = field(default_factory=dict)
    saves: list[int] = field(default_factory=list)
    loads: list[int] = field(default_factory=list)
    starts: dict[str, list[str]] = field(default_factory=dict)
    restarts: list[Restart] = field(default_factory=list)
    last_node_event: dict[str, str] = field(default_factory=dict)
    iteration_host: str = ""  # the node whose log carries the iteration lines (the last rank's)
    errors: list[str] = field(default_factory=list)
    sigterm: bool = False
    launch_rates: dict[str, dict[int, float]] = field(default_factory=dict)  # host -> rank -> GEMM TFLOP/s at start-up
    rank_compute: dict[str, list[RankCompute]] = field(default_factory=dict)  # host -> its ranks' compute windows
    furthest: int = 0  # the highest iteration logged
    current: int = 0  # the latest iteration logged (goes back after a restart)
    last_seen: float = 0.0  # when the latest iteration was read
    total: int = 0
    nodes_of: dict[str, int] = field(default_factory=dict)  # launch.elastic: host -> node count of its latest torchrun
    runs: list[Run] = field(default_factory=list)  # every run of torchrun that logged iterations, as read
    open_runs: dict[str, Run] = field(default_factory=dict)  # host -> its current run

    def feed(self, host: str, line: str, now: float) -> Iteration | None:
        """Fold one line; return the iteration it carried, if any."""
        it = parse_iteration(line)
        if it is not None:
            it.seen = now
            self.iteration_host = self.iteration_host or host
            if it.ms_per_iteration and it.global_batch:
                it.tokens_per_second = it.global_batch * self.seq_length / (it.ms_per_iteration / 1000.0)
            resumed = max(0, it.iteration - self.log_interval)
            if it.iteration <= self.current:  # the run went back: a restart resumed from an earlier checkpoint
                if not self.restarts or self.restarts[-1].first_iteration_seen is not None:
                    self.restarts.append(Restart(self.last_seen, self.current, resumed))
            if self.restarts and self.restarts[-1].first_iteration_seen is None:
                self.restarts[-1].first_iteration_seen = now
                self.restarts[-1].first_iteration = it.iteration
                loaded = self.restarts[-1].loaded
                fits = loaded is not None and resumed <= loaded < it.iteration
                self.restarts[-1].resumed_from = loaded if fits and loaded is not None else resumed
            it.attempt = len(self.restarts)
            it.nodes = self.nodes_of.get(host)
            run = self.open_runs.get(host)
            if run is None:  # iterations before any start line of that node (a log from elsewhere)
                run = self.open_runs[host] = Run(host, it.nodes, len(self.runs))
            if not run.tail:
                run.first, run.first_loss, run.first_at = it.iteration, it.loss, it.logged_at
                self.runs.append(run)
            run.last, run.last_loss = it.iteration, it.loss
            run.tail.append((it.iteration, it.loss))
            earlier = self.iterations.get(it.iteration)
            if earlier is not None and earlier.logged_at and it.logged_at and it.logged_at < earlier.logged_at:
                return it  # an older run's line read after a newer one's (another node's file): the newer one stands
            self.iterations[it.iteration] = it
            self.furthest = max(self.furthest, it.iteration)
            self.current = it.iteration
            self.last_seen = now
            self.total = it.total
            return it
        if (evidence := parse_evidence(line)) is not None:
            kind, fields = evidence
            if kind == "compute":
                try:
                    self.launch_rates.setdefault(host, {})[int(fields["rank"])] = float(fields["rate (TFLOP/s)"])
                except (KeyError, ValueError):
                    pass
            elif (window := parse_rank_compute(fields)) is not None:
                self.rank_compute.setdefault(host, []).append(window)
            return None
        if (m := _SAVED.search(line)) is not None:
            self.saves.append(int(m["it"]))
        elif (m := _LOADED.search(line)) is not None:
            loaded = int(m["it"])
            self.loads.append(loaded)
            # Rank 0 names the checkpoint it loaded; its line may be read before or after the first iteration of
            # the restart (another node's file): it refines resumed_from where it fits that iteration.
            last = self.restarts[-1] if self.restarts else None
            if last is not None and last.first_iteration_seen is None:
                last.loaded = loaded
            elif last is not None and last.first_iteration - self.log_interval <= loaded < last.first_iteration:
                last.resumed_from = loaded
        elif (m := _NODE.match(line.strip())) is not None:
            if m["rc"] is None:
                self.starts.setdefault(m["host"], []).append(m["at"])
                if m["nodes"] is not None:
                    self.nodes_of[m["host"]] = int(m["nodes"])
                self.open_runs[m["host"]] = Run(m["host"], self.nodes_of.get(m["host"]), len(self.runs))
                self.last_node_event[m["host"]] = "running"
                # torchrun starting again on the node that logs the iterations, after some were logged: a restart.
                # (Its own file orders the two exactly; a restart that resumes where it stopped never goes back.)
                open_restart = bool(self.restarts) and self.restarts[-1].first_iteration_seen is None
                if m["host"] == self.iteration_host and self.current > 0 and not open_restart:
                    self.restarts.append(Restart(self.last_seen, self.current, self.current))
            else:
                self.last_node_event[m["host"]] = "exited-0" if int(m["rc"]) == 0 else f"failed-{m['rc']}"
        elif _SIGTERM in line:
            self.sigterm = True
        elif (m := _ERROR.search(line.strip())) is not None:
            text = m.group(0).strip()
            if text not in self.errors:
                self.errors.append(text)
                del self.errors[:-10]
        return None

    @property
    def changes(self) -> list[Change]:
        """launch.elastic: each change of the node count, between consecutive runs in time (their first iteration's
        timestamp, else the order they were read in: the nodes' files are read one after the other)."""
        runs = [r for r in self.runs if r.nodes is not None]
        stamped = all(r.first_at for r in runs)
        runs.sort(key=lambda r: (r.first_at or "", r.order) if stamped else (r.order,))
        out = []
        for before, after in zip(runs, runs[1:], strict=False):
            if before.nodes == after.nodes or before.nodes is None or after.nodes is None:
                continue
            same = next((loss for k, loss in before.tail if k == after.first), None)
            resumed = max(0, after.first - self.log_interval)
            loaded = [x for x in self.loads if resumed <= x < after.first]
            window = tuple((k, v) for k, v in list(before.tail)[-40:] if v is not None and math.isfinite(v))
            out.append(
                Change(
                    before.nodes,
                    after.nodes,
                    before.last,
                    before.last_loss,
                    after.first,
                    after.first_loss,
                    same,
                    loaded[-1] if loaded else resumed,
                    window,
                )
            )
        return out

    def node_state(self, host: str) -> str:
        """running (started, not exited since), exited-0, failed-N or waiting (never started)."""
        # The latest line decides: a start not followed by an exit runs (a stopped attempt prints no exit line).
        return self.last_node_event.get(host, "waiting")

    def series(self) -> list[Iteration]:
        return [self.iterations[k] for k in sorted(self.iterations)]


MAX_READ = 64 << 20  # bytes of a log read in one look (a larger backlog is read over the next looks)
MAX_PARTIAL = 1 << 20  # a line without an end this long is taken as it is
MAX_CSV_BYTES = 64 << 20  # a node's nvidia-smi samples (a week at 4 GPUs every 10 s is about 15 MB)


class LogReader:
    """Reads new complete lines from a growing file (a node's log on the shared directory, below ``root``: read
    through :mod:`megaprov.untrusted`, so a link or a FIFO in its place is refused, not followed or waited on)."""

    def __init__(self, path: Path, root: Path) -> None:
        self.path = path
        self.root = root
        self.offset = 0
        self.partial = b""

    def lines(self) -> list[str]:
        try:
            with untrusted.open_binary(self.path, self.root) as handle:
                if os.fstat(handle.fileno()).st_size < self.offset:  # truncated or replaced: from its start
                    self.offset, self.partial = 0, b""
                handle.seek(self.offset)
                data = handle.read(MAX_READ)
        except untrusted.Missing:
            return []
        self.offset += len(data)
        data = self.partial + data
        *complete, self.partial = data.split(b"\n")
        if len(self.partial) > MAX_PARTIAL:
            complete, self.partial = [*complete, self.partial], b""
        return [raw.decode("utf-8", "replace") for raw in complete]


def gpu_samples(path: Path, root: Path | None) -> list[dict[str, float]]:
    """The job's nvidia-smi samples (gpu_query.SAMPLES, as render.GPU_QUERY asks them), parsed (its last MAX_CSV_BYTES; a
    missing file has none; a link, FIFO or directory in its place is refused)."""
    rows: list[dict[str, float]] = []
    try:
        text = untrusted.read_text(path, "GPU samples", MAX_CSV_BYTES, root, tail=True, strict=False)
    except untrusted.Missing:
        return rows
    for sample in gpu_query.rows(text, gpu_query.SAMPLES):
        try:
            row = {
                "gpu": float(sample["index"]),
                "util": float(sample["utilization.gpu"]),
                "mem_used": float(sample["memory.used"]),
                "mem_total": float(sample["memory.total"]),
            }
        except ValueError:
            continue  # "[N/A]" or a torn line
        try:  # nvidia-smi's local time, "2026/11/30 01:00:00.000"; compared with Megatron's local timestamps
            row["at"] = datetime.strptime(sample["timestamp"], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        except ValueError:
            pass
        rows.append(row)
    return rows


def training_window(log: JobLog) -> tuple[float, float] | None:
    """First and last iteration times on the node clock (local time, as Megatron prints them), if logged."""
    stamps = []
    for it in log.series():
        if it.logged_at:
            try:
                stamps.append(datetime.strptime(it.logged_at.split(".")[0], "%Y-%m-%d %H:%M:%S").timestamp())
            except ValueError:
                continue
    return (min(stamps), max(stamps) + 1.0) if len(stamps) >= 2 else None


def during(rows: list[dict[str, float]], window: tuple[float, float] | None) -> list[dict[str, float]]:
    """The samples taken while iterations ran (start-up and shutdown would drag the mean utilisation down)."""
    if window is None:
        return rows
    return [r for r in rows if "at" not in r or window[0] <= r["at"] <= window[1]]


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def metrics_record(it: Iteration) -> dict[str, Any]:
    record = {k: v for k, v in asdict(it).items() if v is not None}
    for key, value in list(record.items()):
        if isinstance(value, float) and not math.isfinite(value):
            record[key] = str(value)  # JSON has no nan
    return record


# The training-stalled alert fires when no iteration was logged for this long: STALL_STEPS x the median time between two
# logged iterations, and never less than STALL_MIN_SECONDS (a checkpoint save or a restart's start-up is not a stall).
STALL_STEPS = 10
STALL_MIN_SECONDS = 60.0


@dataclass(frozen=True)
class Targets:
    """What the job is held to, exported beside its metrics for the alert rules and dashboards: the verdict's
    expectation and floor, the checkpoint interval, the GPU utilisation floor and how often Megatron logs."""

    expected_tokens_per_second: float = 0.0
    tokens_per_second_floor: float = 0.0
    save_interval: int = 0
    gpu_utilization_floor: float = 0.0
    log_interval: int = 1


def stall_after(log: JobLog, log_interval: int) -> float:
    """Seconds without a new iteration after which the job counts as stalled. Pure."""
    steps = [it.ms_per_iteration for it in log.series()[-20:] if it.ms_per_iteration]
    median = sorted(steps)[len(steps) // 2] / 1000.0 if steps else 0.0
    return max(STALL_MIN_SECONDS, STALL_STEPS * max(1, log_interval) * median)


def _sample_value(value: float) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, float) and math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value) if isinstance(value, float) else str(value)


def prometheus_text(job: str, log: JobLog, state: str, targets: Targets | None = None) -> str:
    """The job's metrics in Prometheus's text format, labelled job and node (the node whose log carries the
    iterations): the observe stage's training-job collector on the head gathers them into node-exporter."""
    targets = targets or Targets()
    last = log.iterations.get(log.furthest)
    label = f'{{job="{job}",node="{log.iteration_host or "unknown"}"}}'
    rows: list[tuple[str, str, float]] = [
        ("megaprov_job_iteration", "Latest training iteration logged", log.furthest),
        ("megaprov_job_train_iterations", "Iterations the job trains for", log.total),
        ("megaprov_job_restarts_total", "Restarts that resumed from a checkpoint", len(log.restarts)),
        ("megaprov_job_checkpoint_iteration", "Latest iteration saved in a checkpoint", max(log.saves, default=0)),
        ("megaprov_job_running", "1 while the job runs", 1 if state == "running" else 0),
        ("megaprov_job_expected_tokens_per_second", "Throughput the verdict expects", targets.expected_tokens_per_second),
        ("megaprov_job_tokens_per_second_floor", "Throughput below which the job is too slow", targets.tokens_per_second_floor),
        ("megaprov_job_save_interval_iterations", "Iterations between two checkpoints", targets.save_interval),
        ("megaprov_job_gpu_utilization_floor_ratio", "GPU utilisation the job must keep", targets.gpu_utilization_floor),
        ("megaprov_job_stall_after_seconds", "Seconds without an iteration that make it stalled", round(stall_after(log, targets.log_interval), 3)),
    ]
    if log.last_seen:
        rows.append(("megaprov_job_last_progress_timestamp_seconds", "When the latest iteration was read (unix time)", round(log.last_seen, 3)))
    if last is not None:
        for name, help_text, value in (
            ("megaprov_job_loss", "lm loss of the latest iteration", last.loss),
            ("megaprov_job_tokens_per_second", "Cluster throughput of the latest iteration", last.tokens_per_second),
            ("megaprov_job_tflops_per_gpu", "TFLOP/s per GPU of the latest iteration", last.tflops_per_gpu),
            ("megaprov_job_iteration_seconds", "Time per iteration", (last.ms_per_iteration or 0) / 1000.0),
        ):
            if value is not None:
                rows.append((name, help_text, value))
    out = []
    for name, help_text, value in rows:
        kind = "counter" if name.endswith("_total") else "gauge"
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name}{label} {_sample_value(value)}"]
    return "\n".join(out) + "\n"


def append_metrics(directory: Path, job: str, new: list[Iteration], log: JobLog, state: str, targets: Targets | None = None) -> None:
    """While following: the new iterations appended to metrics.jsonl (after a restart an iteration comes again with
    a higher ``attempt``; the later line wins) and metrics.prom replaced. Cost per poll: what is new, not the run."""
    with as_owner_of(directory):
        if new:
            with (directory / "metrics.jsonl").open("a") as handle:
                handle.write("".join(json.dumps(metrics_record(it)) + "\n" for it in new))
        _atomic(directory / "metrics.prom", prometheus_text(job, log, state, targets))


def write_metrics(directory: Path, job: str, log: JobLog, state: str, targets: Targets | None = None) -> None:
    """At the end: metrics.jsonl with one line per iteration (the latest attempt's) and metrics.prom, replaced whole."""
    directory.mkdir(parents=True, exist_ok=True)
    with as_owner_of(directory):
        _atomic(directory / "metrics.jsonl", "".join(json.dumps(metrics_record(it)) + "\n" for it in log.series()))
        _atomic(directory / "metrics.prom", prometheus_text(job, log, state, targets))


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

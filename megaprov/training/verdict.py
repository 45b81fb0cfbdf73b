"""The acceptance verdict of a training run and its report (report.json, report.md, report.png).

Checks, each pass / fail / skipped with a one-line reason:
- the loss falls: Mann-Kendall trend test on every logged loss (rank based, so a noisy curve with a real trend
  passes and a flat noisy one fails), one-sided at 5 %, plus a negative Theil-Sen slope; at least
  ``verify.loss_window`` iterations are needed;
- no nan iteration (Megatron's counter, and no non-finite loss);
- throughput: the median tokens/s of steady iterations (not the first ones of each attempt) at least
  ``throughput_tolerance`` x the expectation (``verify.tokens_per_second`` when the spec sets it, else the plan's
  estimate from the slowest node's measured GEMM rate, or the published peak where nothing was measured), and no
  node so slow that the others wait for it as long as they compute (its ranks' compute time per iteration, collective
  waits excluded, ``STRAGGLER_FAIL`` x the median of the other nodes'): synchronous training runs at the pace of its
  slowest rank, so such a node costs half the cluster's throughput or more, whatever the absolute floor says. The
  detail names the source, and a slow node where the evidence shows one: ``STRAGGLER_FACTOR`` x slower than the
  others, or a GEMM rate at start-up below ``THROTTLED_BELOW`` of the rate it was measured at when built;
- GPUs: mean utilisation >= ``verify.gpu_utilization`` and memory below the GPU's size, from the nvidia-smi samples
  of GPU nodes; "skipped: no GPU" on CPU nodes;
- every rank alive: the last iteration reached and torchrun exited 0 on every node.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from megaprov.owner import as_owner_of
from megaprov.training.follow import Change, Iteration, JobLog, RankCompute

PASS, FAIL, SKIP = "pass", "fail", "skipped"
STRAGGLER_FACTOR = 1.5  # a node this many times slower than the median of the others is named
STRAGGLER_FAIL = 2.0  # and at this many times it fails the throughput check (the others wait as long as they compute)
THROTTLED_BELOW = 0.5  # a start-up GEMM rate below this fraction of the node's stored rate is named
LOAD_FACTOR_MIN = 0.5  # the expectation follows a busier machine down to half, not further: below that nodes are throttled


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str


@dataclass
class Verdict:
    passed: bool
    checks: list[Check] = field(default_factory=list)

    def reasons(self) -> list[str]:
        return [f"{c.name}: {c.detail}" for c in self.checks if c.status == FAIL]


def mann_kendall(values: list[float]) -> tuple[float, float]:
    """Kendall's S statistic turned into a z score (normal approximation, ties corrected) and tau."""
    n = len(values)
    s = 0
    for i in range(n - 1):
        for j in range(i + 1, n):
            d = values[j] - values[i]
            s += (d > 0) - (d < 0)
    ties: dict[float, int] = {}
    for v in values:
        ties[v] = ties.get(v, 0) + 1
    var = (n * (n - 1) * (2 * n + 5) - sum(t * (t - 1) * (2 * t + 5) for t in ties.values())) / 18.0
    if var <= 0:
        return 0.0, 0.0
    z = (s - 1) / math.sqrt(var) if s > 0 else (s + 1) / math.sqrt(var) if s < 0 else 0.0
    return z, s / (n * (n - 1) / 2)


def theil_sen(xs: list[float], ys: list[float]) -> float:
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[j] != xs[i]]
    return statistics.median(slopes) if slopes else 0.0


Z_5_PERCENT = -1.645  # one-sided


def loss_check(series: list[Iteration], window: int) -> Check:
    points = [(it.iteration, it.loss) for it in series if it.loss is not None and math.isfinite(it.loss)]
    if len(points) < window:
        return Check("loss falling", FAIL, f"only {len(points)} iteration(s) with a loss, the trend test needs {window} (verify.loss_window)")
    if len(points) > 400:  # the test is O(n^2): thin evenly, keeping the ends
        step = len(points) / 400
        points = [points[int(i * step)] for i in range(400)] + [points[-1]]
    xs, ys = [float(x) for x, _ in points], [y for _, y in points]
    z, tau = mann_kendall(ys)
    slope = theil_sen(xs, ys)
    head, tail = statistics.median(ys[: max(3, len(ys) // 5)]), statistics.median(ys[-max(3, len(ys) // 5) :])
    text = (
        f"Mann-Kendall z={z:.2f} (tau {tau:.2f}) over {len(ys)} iterations, Theil-Sen slope {slope:.3g}/iteration,"
        f" median loss {head:.3f} -> {tail:.3f}"
    )
    if z <= Z_5_PERCENT and slope < 0:
        return Check("loss falling", PASS, text)
    return Check("loss falling", FAIL, f"no falling trend: {text}; check the learning rate (train.lr) and the data")


def nan_check(series: list[Iteration]) -> Check:
    nan_iters = sum(it.nan for it in series)
    bad = [it.iteration for it in series if it.loss is not None and not math.isfinite(it.loss)]
    if nan_iters or bad:
        where = f"; first non-finite loss at iteration {bad[0]}" if bad else ""
        return Check("no nan", FAIL, f"{nan_iters} nan iteration(s) reported{where}: lower train.lr, use bf16, check the data")
    return Check("no nan", PASS, f"0 nan iterations in {len(series)} logged")


def steady(series: list[Iteration], skip: int = 2) -> list[Iteration]:
    """Iterations past the first ``skip`` of each attempt (start-up, compilation and the first save skew them)."""
    out: list[Iteration] = []
    seen_in_attempt: dict[int, int] = {}
    for it in series:
        count = seen_in_attempt.get(it.attempt, 0)
        seen_in_attempt[it.attempt] = count + 1
        if count >= skip:
            out.append(it)
    return out or series


def node_compute_ms(windows: dict[str, list[RankCompute]]) -> dict[str, float]:
    """Per node: the median compute time per iteration of its slowest rank (the first window of a rank that logged
    more than one is left out: start-up skews it)."""
    out: dict[str, float] = {}
    for host, found in windows.items():
        per_rank: dict[int, list[RankCompute]] = {}
        for w in found:
            per_rank.setdefault(w.rank, []).append(w)
        medians = [statistics.median(w.compute_ms for w in (ws[1:] if len(ws) > 1 else ws)) for ws in per_rank.values()]
        if medians:
            out[host] = max(medians)
    return out


def stragglers(per_node: dict[str, float], factor: float = STRAGGLER_FACTOR) -> list[tuple[str, float, float]]:
    """(node, its compute ms, the median of the other nodes') for each node ``factor`` x slower than the others, slowest
    first. One node alone has nobody to be compared with."""
    out = []
    for host, ms in per_node.items():
        others = [v for h, v in per_node.items() if h != host]
        if others and ms >= factor * statistics.median(others):
            out.append((host, ms, statistics.median(others)))
    return sorted(out, key=lambda s: -s[1] / max(s[2], 1e-9))


def throttled(launch: dict[str, dict[int, float]], stored: dict[str, float], below: float = THROTTLED_BELOW) -> list[tuple[str, float, float]]:
    """(node, its slowest rank's GEMM TFLOP/s at start-up, its stored rate) where the first fell below ``below`` x the second."""
    out = []
    for host, ranks in sorted(launch.items()):
        if ranks and stored.get(host) and min(ranks.values()) < below * stored[host]:
            out.append((host, min(ranks.values()), stored[host]))
    return out


def launch_factor(launch: dict[str, dict[int, float]], stored: dict[str, float]) -> float | None:
    """How much of its stored rate the median node still had at start-up, between ``LOAD_FACTOR_MIN`` and 1, or None
    when unknown.

    The median, not the slowest: a busier machine slows every node and lowers the expectation with it, while one
    slow node among the others leaves the median where it was (and with two nodes halves the drop at most, far less
    than a throttled node costs the run). The lower bound keeps a cluster whose every node is throttled (power or
    thermal capping, a CPU quota) from lowering its own floor: that is a finding, not load."""
    ratios = [min(ranks.values()) / stored[host] for host, ranks in launch.items() if ranks and stored.get(host)]
    return max(LOAD_FACTOR_MIN, min(1.0, statistics.median(ratios))) if ratios else None


def _tf(tflops: float) -> str:
    return f"{tflops * 1e3:.1f} GFLOP/s" if tflops < 1 else f"{tflops:.1f} TFLOP/s"


def _tflops_per_gpu(tflops: float) -> str:
    """Two decimals, or two significant digits below 0.1: a CPU lab rank's 0.004 TFLOP/s is not 0.00."""
    return f"{tflops:.2g}" if 0 < tflops < 0.1 else f"{tflops:.2f}"


def slow_nodes(log: JobLog, stored: dict[str, float]) -> list[str]:
    """Sentences naming the slow nodes the logs show (empty when none stands out)."""
    per_node = node_compute_ms(log.rank_compute)
    lines = [
        f"{host} is {ms / max(others, 1e-9):.1f}x slower than the median node ({ms:,.0f} ms of compute per iteration, others {others:,.0f} ms)"
        for host, ms, others in stragglers(per_node)
    ]
    lines += [
        f"{host} computed {_tf(fresh)} at start-up, {fresh / was:.2f}x the {_tf(was)} it was measured at (throttled or busy)"
        for host, fresh, was in throttled(log.launch_rates, stored)
    ]
    return lines


def throughput_check(
    series: list[Iteration], expected: float, tolerance: float, source: str, slow: list[str] | None = None, per_node: dict[str, float] | None = None
) -> tuple[Check, float]:
    rates = [it.tokens_per_second for it in steady(series) if it.tokens_per_second]
    if not rates:
        return Check("throughput", FAIL, "no iteration reported its time (elapsed time per iteration)"), 0.0
    measured = statistics.median(rates)
    floor = expected * tolerance
    text = f"median {measured:,.0f} tokens/s, expected {expected:,.0f} ({source}) x {tolerance:g} = {floor:,.0f}"
    nodes = ", ".join(f"{h} {ms:,.0f} ms" for h, ms in sorted((per_node or {}).items()))
    held_back = stragglers(per_node or {}, STRAGGLER_FAIL)
    if measured >= floor and not held_back:
        return Check("throughput", PASS, text + (f"; compute per iteration: {nodes}" if nodes else "")), measured
    if held_back:
        host, ms, others = held_back[0]
        text += f", but the job ran at the pace of {host}: the other nodes computed {ms / max(others, 1e-9):.1f}x faster and waited for it"
    if slow:
        why = "; ".join(slow)
    elif nodes:
        why = f"no single node stands out (compute per iteration: {nodes}): the whole cluster is slower than measured"
    else:
        why = ""
    # Above the floor and failed only because one node held the others back: not "too slow" (the figures say otherwise).
    label = "too slow" if measured < floor else "held back by a slow node"
    return Check("throughput", FAIL, f"{label}: {text}" + (f"; {why}" if why else "")), measured


def gpu_check(samples: dict[str, list[dict[str, float]]], gpu_nodes: bool, min_util: float) -> Check:
    if not gpu_nodes:
        return Check("GPU utilisation and memory", SKIP, "skipped: no GPU (CPU nodes)")
    rows = [r for host in samples.values() for r in host]
    if not rows and min_util == 0:
        return Check("GPU utilisation and memory", SKIP, "skipped: no nvidia-smi sample while iterations ran and verify.gpu_utilization is 0")
    if not rows:
        return Check("GPU utilisation and memory", FAIL, "no nvidia-smi samples from the nodes (logs/gpu-*.csv): is nvidia-smi on PATH?")
    util = statistics.fmean(r["util"] for r in rows) / 100.0
    worst = max(rows, key=lambda r: r["mem_used"] / max(r["mem_total"], 1.0))
    frac = worst["mem_used"] / max(worst["mem_total"], 1.0)
    peak = f"peak memory {worst['mem_used']:.0f}/{worst['mem_total']:.0f} MiB"
    text = f"mean utilisation {util:.0%} over {len(rows)} samples (needs {min_util:.0%}), {peak}"
    if util < min_util:
        return Check("GPU utilisation and memory", FAIL, f"GPUs idle too much: {text}")
    if frac >= 0.98:
        return Check("GPU utilisation and memory", FAIL, f"memory at the limit: {text}")
    return Check("GPU utilisation and memory", PASS, text)


def alive_check(log: JobLog, hosts: list[str]) -> Check:
    if log.total and log.furthest < log.total:
        return Check("every rank alive", FAIL, f"stopped at iteration {log.furthest} of {log.total}")
    states = {h: log.node_state(h) for h in hosts}
    bad = {h: s for h, s in states.items() if s != "exited-0"}
    if bad:
        return Check("every rank alive", FAIL, "torchrun did not finish cleanly on " + ", ".join(f"{h} ({s})" for h, s in bad.items()))
    restarts = f", {len(log.restarts)} restart(s) resumed from checkpoints" if log.restarts else ""
    return Check("every rank alive", PASS, f"all {log.total} iterations; torchrun exited 0 on {len(hosts)} node(s){restarts}")


def judge(
    log: JobLog,
    hosts: list[str],
    window: int,
    expected_tps: float,
    tolerance: float,
    source: str,
    gpu_nodes: bool,
    min_util: float,
    samples: dict[str, list[dict[str, float]]],
    stored_rates: dict[str, float] | None = None,
    follow_load: bool = False,
    elastic: tuple[dict[int, float], int] | None = None,
) -> tuple[Verdict, float]:
    """``stored_rates``: node -> the GEMM TFLOP/s measured when it was built (the plan's), to compare start-up rates
    with; ``follow_load``: the expectation came from those rates, so scale it by :func:`launch_factor`. ``elastic``
    (launch.elastic): the expected tokens/s per node count and the global batch; a run that changed its node count is
    then held to each segment's own expectation, and its loss and sample order across the changes are checked."""
    series = log.series()
    factor = launch_factor(log.launch_rates, stored_rates or {}) if follow_load else None
    if factor is not None and factor < 1.0:
        expected_tps *= factor
        source += f"; x {factor:.2f}: the median node computed at {factor:.2f} of its stored rate at start-up (a busier machine)"
    tp, measured = throughput_check(series, expected_tps, tolerance, source, slow_nodes(log, stored_rates or {}), node_compute_ms(log.rank_compute))
    checks = [loss_check(series, window), nan_check(series), tp, gpu_check(samples, gpu_nodes, min_util), alive_check(log, hosts)]
    if elastic is not None:
        expected_by_nodes, global_batch = elastic
        if factor is not None and factor < 1.0:
            expected_by_nodes = {n: e * factor for n, e in expected_by_nodes.items()}
        parts = segments(series, log.changes, expected_by_nodes)
        if len(parts) > 1 or (parts and parts[0].nodes != max(expected_by_nodes)):  # mixed or smaller: each to its own
            checks[2] = segment_throughput_check(parts, tolerance)
        checks += [continuity_check(series, log.changes), sample_order_check(series, global_batch)]
    return Verdict(all(c.status != FAIL for c in checks), checks), measured


# ---- launch.elastic: the run in segments, one per node count

CONTINUITY_SIGMAS = 4.0  # the first loss after a change may lie this far, in the run's own noise, from the curve before
CONTINUITY_WINDOW = 20  # iterations before a change whose trend and noise it is held to


@dataclass(frozen=True)
class Segment:
    """A stretch of the run on one node count: its iterations, throughput against its own expectation, the iterations
    the change into it lost, and the loss on each side of that change."""

    nodes: int
    first: int
    last: int
    tokens_per_second: float | None  # median of its steady iterations
    expected: float | None
    lost_iterations: int = 0
    loss_before: float | None = None  # the last loss logged before the change into it
    loss_after: float | None = None  # its first logged loss
    same_iteration_before: float | None = None  # the loss the earlier nodes logged at its first iteration


def segments(series: list[Iteration], changes: list[Change], expected: dict[int, float]) -> list[Segment]:
    """Split the final series (every iteration as last logged) where the node count changes; pure."""
    runs: list[list[Iteration]] = []
    for it in series:
        if it.nodes is None:
            continue
        if runs and runs[-1][-1].nodes == it.nodes:
            runs[-1].append(it)
        else:
            runs.append([it])
    out = []
    for index, run in enumerate(runs):
        nodes = run[0].nodes or 0
        rates = [it.tokens_per_second for it in run[2:] if it.tokens_per_second] or [it.tokens_per_second for it in run if it.tokens_per_second]
        into = next((c for c in reversed(changes) if c.nodes_after == nodes and c.first_iteration == run[0].iteration), None) if index else None
        out.append(
            Segment(
                nodes,
                run[0].iteration,
                run[-1].iteration,
                statistics.median(rates) if rates else None,
                expected.get(nodes),
                into.lost_iterations if into else 0,
                into.last_loss if into else None,
                into.first_loss if into else None,
                into.same_iteration_loss if into else None,
            )
        )
    return out


def continuity_check(series: list[Iteration], changes: list[Change]) -> Check:
    """Every change of the node count continued the loss curve. The run's own noise is the spread of the losses around
    their trend over the last CONTINUITY_WINDOW iterations before the change (Theil-Sen line, MAD of the residuals);
    the first loss after the change must lie within CONTINUITY_SIGMAS of it from the loss the earlier nodes logged at
    the same iteration, or, where they never got there, from the trend's value at that iteration."""
    if not changes:
        return Check("elastic continuity", SKIP, "skipped: the node count never changed")
    parts, bad = [], []
    for c in changes:
        before = list(c.before)[-CONTINUITY_WINDOW:]
        label = f"{c.nodes_before}->{c.nodes_after} nodes at iteration {c.first_iteration} (resumed from {c.resumed_from}, {c.lost_iterations} lost)"
        if c.first_loss is None or len(before) < 5:
            parts.append(f"{label}: too few losses to compare")
            continue
        xs, ys = [float(k) for k, _ in before], [v for _, v in before]
        slope = theil_sen(xs, ys)
        intercept = statistics.median(y - slope * x for x, y in zip(xs, ys, strict=True))
        noise = 1.4826 * statistics.median(abs(y - intercept - slope * x) for x, y in zip(xs, ys, strict=True))
        if c.same_iteration_loss is not None:
            reference, what = c.same_iteration_loss, "the same iteration before the change"
        else:
            reference, what = intercept + slope * c.first_iteration, f"the trend of iterations {before[0][0]}-{before[-1][0]}"
        bound = CONTINUITY_SIGMAS * noise + 1e-6 * abs(reference)
        text = f"{label}: loss {c.first_loss:.4f} vs {reference:.4f} from {what} (|d| {abs(c.first_loss - reference):.4f}, bound {bound:.4f})"
        parts.append(text)
        if abs(c.first_loss - reference) > bound:
            bad.append(text)
    if bad:
        return Check("elastic continuity", FAIL, "the loss jumped at a change: " + "; ".join(bad))
    return Check("elastic continuity", PASS, "; ".join(parts))


def sample_order_check(series: list[Iteration], global_batch: int) -> Check:
    """Every logged iteration consumed exactly its global batches (consumed samples = iteration x global batch): no
    sample skipped or seen twice across the changes (Megatron's sampler goes on from the checkpoint's count)."""
    counted = [it for it in series if it.consumed_samples is not None]
    if not counted:
        return Check("sample order", SKIP, "skipped: no iteration logged its consumed samples")
    wrong = [it for it in counted if it.consumed_samples != it.iteration * global_batch]
    if wrong:
        it = wrong[0]
        return Check(
            "sample order",
            FAIL,
            f"iteration {it.iteration} had consumed {it.consumed_samples} samples, not {it.iteration * global_batch} (iteration x global batch"
            f" {global_batch}): {len(wrong)} iteration(s) off",
        )
    return Check("sample order", PASS, f"consumed samples = iteration x {global_batch} at all {len(counted)} logged iterations")


def segment_throughput_check(parts: list[Segment], tolerance: float) -> Check:
    """Each segment's median tokens/s against its own node count's expectation."""
    texts, bad = [], []
    for g in parts:
        if g.tokens_per_second is None or g.expected is None:
            texts.append(f"{g.nodes} nodes (iterations {g.first}-{g.last}): no measure")
            continue
        text = (
            f"{g.nodes} nodes (iterations {g.first}-{g.last}): {g.tokens_per_second:,.0f} tokens/s of {g.expected:,.0f} expected"
            f" ({g.tokens_per_second / g.expected:.2f}x)"
        )
        texts.append(text)
        if g.tokens_per_second < tolerance * g.expected:
            bad.append(text)
    if bad:
        return Check("segment throughput", FAIL, f"below {tolerance:g} x its expectation: " + "; ".join(bad))
    return Check("segment throughput", PASS, "; ".join(texts))


# ---- report


def report_dict(
    job: dict[str, Any],
    verdict: Verdict,
    log: JobLog,
    measured_tps: float,
    commands: dict[str, str],
    timing: dict[str, Any],
    parts: list[Segment] | None = None,
) -> dict[str, Any]:
    series = log.series()
    losses = [it.loss for it in series if it.loss is not None and math.isfinite(it.loss)]
    tflops = [it.tflops_per_gpu for it in steady(series) if it.tflops_per_gpu is not None]
    return {
        "job": job,
        "verdict": "passed" if verdict.passed else "failed",
        "checks": [asdict(c) for c in verdict.checks],
        "iterations": {"logged": len(series), "last": log.furthest, "total": log.total},
        "loss": {"first": losses[0] if losses else None, "last": losses[-1] if losses else None, "min": min(losses) if losses else None},
        "throughput": {"tokens_per_second_median": measured_tps, "tflops_per_gpu_median": statistics.median(tflops) if tflops else None},
        "checkpoints": sorted(set(log.saves)),
        "restarts": [
            {
                "last_iteration": r.last_iteration,
                "resumed_from": r.resumed_from,
                "lost_iterations": r.lost_iterations,
                "seconds_to_resumed_iteration": None if r.first_iteration_seen is None else round(r.first_iteration_seen - r.seen, 1),
            }
            for r in log.restarts
        ],
        **(
            {}
            if parts is None
            else {
                "changes": [
                    {
                        "nodes_before": c.nodes_before,
                        "nodes_after": c.nodes_after,
                        "last_iteration": c.last_iteration,
                        "resumed_from": c.resumed_from,
                        "lost_iterations": c.lost_iterations,
                        "first_iteration": c.first_iteration,
                        "loss_before": c.last_loss,
                        "loss_after": c.first_loss,
                        "loss_before_same_iteration": c.same_iteration_loss,
                    }
                    for c in log.changes
                ],
                "segments": [asdict(g) for g in parts],
            }
        ),
        "errors": log.errors,
        "timing": timing,
        "commands": commands,
    }


def render_markdown(report: dict[str, Any]) -> str:
    job = report["job"]
    lines = [
        f"# megaprov job {job['name']}: {report['verdict'].upper()}",
        "",
        f"{job['nodes']} node(s) x {job['gpus_per_node']} process(es), trainer {job['trainer']},"
        f" {report['iterations']['last']}/{report['iterations']['total']} iterations.",
        "",
        "| check | result | detail |",
        "|---|---|---|",
        *(f"| {c['name']} | {c['status']} | {c['detail']} |" for c in report["checks"]),
        "",
        f"Loss {report['loss']['first']} -> {report['loss']['last']} (min {report['loss']['min']}); "
        f"median {report['throughput']['tokens_per_second_median']:,.0f} tokens/s"
        + (
            f", {_tflops_per_gpu(report['throughput']['tflops_per_gpu_median'])} TFLOP/s per GPU"
            if report["throughput"]["tflops_per_gpu_median"] is not None
            else ""
        )
        + ".",
        "",
        "![loss and throughput](report.png)",
        "",
    ]
    if report["restarts"]:
        lines += [
            "## Restarts",
            "",
            "| failed after iteration | resumed from | lost iterations | seconds to the resumed iteration |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r['last_iteration']} | {r['resumed_from']} | {r['lost_iterations']} | {r['seconds_to_resumed_iteration']} |"
            for r in report["restarts"]
        ]
        lines.append("")
    if report.get("segments"):
        lines += [
            "## Segments (launch.elastic)",
            "",
            "| nodes | iterations | tokens/s | expected | ratio | lost at its start | loss before -> after |",
            "|---|---|---|---|---|---|---|",
        ]
        for g in report["segments"]:
            tps, exp = g["tokens_per_second"], g["expected"]
            ratio = f"{tps / exp:.2f}" if tps and exp else "-"
            change = "" if g["loss_before"] is None or g["loss_after"] is None else f"{g['loss_before']:.4f} -> {g['loss_after']:.4f}"
            lines.append(
                f"| {g['nodes']} | {g['first']}-{g['last']} | {f'{tps:,.0f}' if tps else '-'} | {f'{exp:,.0f}' if exp else '-'} | {ratio} |"
                f" {g['lost_iterations']} | {change} |"
            )
        lines.append("")
    if report["errors"]:
        lines += ["## Errors in the logs", "", *(f"- `{e}`" for e in report["errors"]), ""]
    lines += ["## Timing", "", *(f"- {k}: {v}" for k, v in report["timing"].items()), ""]
    lines += ["## What each node ran", ""]
    for host, script in report["commands"].items():
        lines += [f"### {host}", "", "```bash", script.rstrip(), "```", ""]
    return "\n".join(lines)


def plot(series: list[Iteration], title: str) -> bytes:
    """Loss and tokens/s against the iteration, one PNG."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [it.iteration for it in series]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    top.plot(xs, [it.loss if it.loss is not None else float("nan") for it in series], color="tab:blue")
    top.set_ylabel("lm loss")
    top.set_title(title)
    top.grid(alpha=0.3)
    bottom.plot(xs, [it.tokens_per_second or float("nan") for it in series], color="tab:green")
    bottom.set_ylabel("tokens/s")
    bottom.set_xlabel("iteration")
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    plt.close(fig)
    return png.getvalue()


def write_report(directory: Path, report: dict[str, Any], series: list[Iteration]) -> dict[str, Path]:
    paths = {"json": directory / "report.json", "markdown": directory / "report.md", "plot": directory / "report.png"}
    # Everything is rendered first, as this process is: under the cluster user's uid neither the interpreter's
    # modules (a root-only venv) nor matplotlib's cache may be readable.
    texts = {"json": json.dumps(report, indent=2) + "\n", "markdown": render_markdown(report)}
    png = plot(series, f"{report['job']['name']}: {report['verdict']}")
    with as_owner_of(directory):  # the job directory is the cluster user's (root is squashed on the share)
        for key, text in texts.items():
            paths[key].write_text(text)
        tmp = paths["plot"].with_name(f".{paths['plot'].name}.tmp")
        tmp.write_bytes(png)
        tmp.replace(paths["plot"])
    return paths

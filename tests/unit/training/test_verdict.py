"""The verdict: the loss trend test (Mann-Kendall and Theil-Sen) against hand-derived statistics, the nan, throughput,
GPU and liveness checks, the slow-node evidence, and the report files."""

import json
import math
import random
from collections import Counter

import pytest

from megaprov.training import follow, trainer, verdict


def feed_run(log, host, iterations, now, loss=lambda i: 6.0 - 0.05 * i):
    """Iteration lines as the lab trainer prints them (Megatron-LM's format; test_follow.py reads them like Megatron's)."""
    for i in iterations:
        log.feed(host, trainer.log_line(i, 60, i * 8, 50.0, 0.1, 1e-3, 8, loss(i), 1.0, 0, 0), now)


def series(losses, ms=50.0, attempt=0):
    return [
        follow.Iteration(i + 1, len(losses), loss=x, ms_per_iteration=ms, tokens_per_second=1000.0, attempt=attempt) for i, x in enumerate(losses)
    ]


def test_loss_trend_passes_a_noisy_falling_curve_and_fails_a_flat_one():
    rng = random.Random(7)
    falling = [5.0 * math.exp(-i / 40) + 2.0 + rng.gauss(0, 0.15) for i in range(60)]
    flat = [5.5 + rng.gauss(0, 0.15) for _ in range(60)]
    assert verdict.loss_check(series(falling), 20).status == verdict.PASS
    bad = verdict.loss_check(series(flat), 20)
    assert bad.status == verdict.FAIL and "no falling trend" in bad.detail and "train.lr" in bad.detail


def test_loss_trend_is_not_first_versus_last():
    # lower at the end than at the start, yet no trend: one lucky last batch must not pass
    values = [5.0 + 0.2 * ((-1) ** i) for i in range(40)] + [3.0]
    assert verdict.loss_check(series(values), 20).status == verdict.FAIL


def test_loss_trend_needs_the_window():
    check = verdict.loss_check(series([5, 4, 3]), 20)
    assert check.status == verdict.FAIL and "verify.loss_window" in check.detail


def test_mann_kendall_matches_the_textbook_statistic():
    z, tau = verdict.mann_kendall([1.0, 2.0, 3.0, 4.0, 5.0])
    assert tau == 1.0 and z == pytest.approx((10 - 1) / math.sqrt(5 * 4 * 15 / 18))


def one_sided_p(z):
    """P(Z <= z) for a standard normal Z (math.erfc: independent of the code under test)."""
    return 0.5 * math.erfc(-z / math.sqrt(2))


def sawtooth(swaps):
    """48 losses in three runs of 28, 11 and 9 iterations: each run creeps up by 0.01 per iteration and starts below
    every value before it. The first ``swaps`` run boundaries (after iterations 28 and 39) have their two values
    exchanged."""
    runs = [[3.0 + 0.01 * k for k in range(28)], [2.5 + 0.01 * k for k in range(11)], [2.0 + 0.01 * k for k in range(9)]]
    values = [v for run in runs for v in run]
    for boundary in (28, 39)[:swaps]:
        values[boundary - 1], values[boundary] = values[boundary], values[boundary - 1]
    return values


# The sawtooth by hand (Mann-Kendall: S = sum over pairs i < j of sign(x_j - x_i); no ties, so
# var(S) = n(n-1)(2n+5)/18; z = (S+1)/sqrt(var(S)) for S < 0, the continuity correction; p = Phi(z), one-sided):
#   n = 48: 48*47/2 = 1128 pairs. Rising pairs (both in one run): C(28,2)+C(11,2)+C(9,2) = 378+55+36 = 469;
#   falling pairs (across runs): 28*11+28*9+11*9 = 308+252+99 = 659. No swap: S = 469-659 = -190.
#   Exchanging two neighbours flips the order of that pair only: one falling pair becomes rising, S = -190 + 2*swaps.
#   var(S) = 48*47*101/18 = 227856/18 = 12658.667, sqrt = 112.5107.
#   one swap:  S = -188, z = -187/112.5107 = -1.66206, p = 0.04825 (just below 5 %)
#   two swaps: S = -186, z = -185/112.5107 = -1.64429, p = 0.05006 (just above 5 %)
#   Theil-Sen: 659 - swaps of the 1128 pairwise slopes are negative, more than half: the median slope is negative in
#   both, so only the significance decides.
SAWTOOTH_SD = math.sqrt(227856 / 18)


@pytest.mark.parametrize(
    ("swaps", "s", "z", "p", "status"),
    [(1, -188, -1.66206, 0.04825, verdict.PASS), (2, -186, -1.64429, 0.05006, verdict.FAIL)],
)
def test_loss_trend_flips_at_a_one_sided_p_value_of_5_percent(swaps, s, z, p, status):
    values = sawtooth(swaps)
    assert sum((b > a) - (b < a) for i, a in enumerate(values) for b in values[i + 1 :]) == s  # the construction
    assert (s + 1) / SAWTOOTH_SD == pytest.approx(z, abs=1e-5) and one_sided_p(z) == pytest.approx(p, abs=1e-5)
    assert verdict.mann_kendall(values) == (pytest.approx((s + 1) / SAWTOOTH_SD), pytest.approx(s / 1128))
    xs = [float(i) for i in range(1, 49)]
    assert verdict.theil_sen(xs, values) < 0
    check = verdict.loss_check(series(values), 20)
    assert check.status == status, check.detail
    assert f"Mann-Kendall z={z:.2f} (tau {s / 1128:.2f}) over 48 iterations" in check.detail


def test_a_falling_slope_without_a_significant_trend_fails():
    """Two rising runs of 24, the second below the first: rising pairs 2*C(24,2) = 552, falling 24*24 = 576,
    S = -24, z = (-24+1)/112.5107 = -0.204, p = 0.42. The Theil-Sen slope is negative (576 of 1128 pairwise slopes,
    the median among them), yet the trend is far from significant."""
    values = [3.0 + 0.01 * k for k in range(24)] + [2.5 + 0.01 * k for k in range(24)]
    assert verdict.theil_sen([float(i) for i in range(48)], values) < 0
    assert verdict.mann_kendall(values)[0] == pytest.approx(-23 / SAWTOOTH_SD)
    check = verdict.loss_check(series(values), 20)
    assert check.status == verdict.FAIL and "no falling trend" in check.detail


def test_a_significant_trend_on_a_flat_loss_fails_and_ties_shrink_the_variance():
    """Three iterations at 6, thirty-four at 5, three at 4 (n = 40): S = -(3*37 + 34*3) = -213 (every pair that is
    not a tie falls). Ties correction: var(S) = [40*39*85 - 34*33*73 - 2*(3*2*11)]/18 = (132600 - 81906 - 132)/18
    = 2809 = 53^2, z = (-213+1)/53 = -4.0 (p = 3e-5). But 567 of the 780 pairwise slopes are ties (C(34,2)+2*C(3,2)),
    so the Theil-Sen slope is 0: the loss stays flat, it does not fall."""
    values = [6.0] * 3 + [5.0] * 34 + [4.0] * 3
    assert verdict.mann_kendall(values) == (pytest.approx(-4.0), pytest.approx(-213 / 780))
    assert verdict.theil_sen([float(i) for i in range(40)], values) == 0.0
    check = verdict.loss_check(series(values), 20)
    assert check.status == verdict.FAIL and "z=-4.00" in check.detail


def exactly_at_the_critical_value():
    """208 losses: a line falling 0.002 per iteration plus uniform noise of 0 to 2 (seed 7007: random.random() is
    reproducible across Python versions), with four plateaus of 39, 11, 5 and 5 iterations at one value each."""
    rng = random.Random(7007)
    values = [5.0 - 0.002 * i + 2.0 * rng.random() for i in range(208)]
    for start, size in ((40, 39), (120, 11), (150, 5), (180, 5)):
        values[start : start + size] = [round(5.0 - 0.002 * (start + size // 2) + 1.0, 3)] * size
    return values


def test_loss_trend_exactly_at_the_critical_value_passes():
    """z = -1.645 exactly, the boundary itself (p = 0.04998 < 5 %): ``z <= -1.645`` passes it, ``z < -1.645`` would
    not. Ties correction, by hand: var(S) = [208*207*421 - (39*38*83 + 11*10*27 + 2*5*4*15)]/18
    = (18126576 - 123006 - 2970 - 600)/18 = 18000000/18 = 1000000 exactly; with S = -1646 (counted below),
    z = (-1646+1)/1000 = -1.645 in floating point too. The slope: 11179 of the 21528 pairs fall, more than half."""
    values = exactly_at_the_critical_value()
    assert sorted(t for t in Counter(values).values() if t > 1) == [5, 5, 11, 39]  # the construction: four tie groups
    assert sum((b > a) - (b < a) for i, a in enumerate(values) for b in values[i + 1 :]) == -1646
    assert verdict.mann_kendall(values)[0] == -1.645 and one_sided_p(-1.645) == pytest.approx(0.04998, abs=1e-5)
    assert verdict.loss_check(series(values), 20).status == verdict.PASS


def test_mann_kendall_of_tiny_series():
    assert verdict.mann_kendall([]) == (0.0, 0.0) and verdict.mann_kendall([5.0]) == (0.0, 0.0)  # nothing to compare
    assert verdict.mann_kendall([1.0, 2.0]) == (0.0, 1.0)  # var = 2*1*9/18 = 1, z = (1-1)/1 = 0: one pair is no trend
    # 1, 2, 1: S = +1 +0 -1 = 0 with var = (3*2*11 - 2*1*9)/18 = 48/18 > 0: z is 0, not shifted by the correction
    assert verdict.mann_kendall([1.0, 2.0, 1.0]) == (0.0, 0.0)


def test_nan_throughput_gpu_and_alive_checks():
    s = series([5.0, 4.0, 3.0])
    s[1].nan = 1
    assert verdict.nan_check(s).status == verdict.FAIL
    ok, measured = verdict.throughput_check(series([1.0] * 10), 900.0, 0.8, "spec")
    assert ok.status == verdict.PASS and measured == 1000.0
    slow, _ = verdict.throughput_check(series([1.0] * 10), 2000.0, 0.8, "the plan")
    assert slow.status == verdict.FAIL and "too slow" in slow.detail
    assert verdict.gpu_check({}, False, 0.8).detail == "skipped: no GPU (CPU nodes)"
    idle = {"n1": [{"gpu": 0, "util": 30.0, "mem_used": 10.0, "mem_total": 80.0}]}
    assert verdict.gpu_check(idle, True, 0.8).status == verdict.FAIL
    busy = {"n1": [{"gpu": 0, "util": 95.0, "mem_used": 60.0, "mem_total": 80.0}]}
    assert verdict.gpu_check(busy, True, 0.8).status == verdict.PASS
    log = follow.JobLog(seq_length=16)
    feed_run(log, "node2", range(1, 61), 1.0)
    for host, rank in (("node1", 0), ("node2", 1)):
        log.feed(host, f"megaprov: node {host} (node rank {rank}): torchrun starting at 2026-11-30T01:00:00.000Z", 0)
    log.feed("node1", "megaprov: node node1 (node rank 0): torchrun exited with 0 at 2026-11-30T01:00:09.000Z", 0)
    dead = verdict.alive_check(log, ["node1", "node2"])
    assert dead.status == verdict.FAIL and "node2 (running)" in dead.detail
    log.feed("node2", "megaprov: node node2 (node rank 1): torchrun exited with 0 at 2026-11-30T01:00:09.000Z", 0)
    assert verdict.alive_check(log, ["node1", "node2"]).status == verdict.PASS


def test_steady_skips_the_first_iterations_of_each_attempt():
    s = series([5.0] * 5) + series([4.0] * 5, attempt=1)
    assert len(verdict.steady(s)) == 6


def test_report_files(tmp_path):
    log = follow.JobLog(seq_length=16)
    feed_run(log, "node2", range(1, 31), 1.0)
    judged = verdict.Verdict(True, [verdict.Check("loss falling", verdict.PASS, "z=-5")])
    job = {"name": "r", "nodes": 2, "gpus_per_node": 1, "trainer": "lab"}
    report = verdict.report_dict(job, judged, log, 1234.0, {"node1": "#!/bin/bash\ntorchrun ...\n"}, {"megaprov_start_to_units_started_s": 4.2})
    paths = verdict.write_report(tmp_path, report, log.series())
    assert json.loads(paths["json"].read_text())["verdict"] == "passed"
    text = paths["markdown"].read_text()
    assert "| loss falling | pass | z=-5 |" in text and "torchrun ..." in text
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---- per-node evidence for the throughput verdict (lines the lab trainer prints, built with its own functions)


def evidence_log(compute_ms, launch=None):
    """Two nodes' logs: iterations on node2, each rank's straggler windows (and start-up GEMM rates) in its own log."""
    log = follow.JobLog(seq_length=128)
    feed_run(log, "node2", range(1, 31), 1.0)
    for rank, (host, ms) in enumerate(compute_ms.items()):
        if launch:
            log.feed(host, trainer.compute_line(rank, launch[host], 1024, 4), 0.5)
        for first in (1, 11, 21):
            log.feed(host, trainer.straggler_line(rank, first, first + 9, ms * (3 if first == 1 else 1), 5.0), 1.0)
    return log


def test_a_slow_node_is_named_with_how_much_slower_it_is():
    log = evidence_log({"node1": 98.0, "node2": 812.0, "node3": 101.0})
    per_node = verdict.node_compute_ms(log.rank_compute)
    assert per_node == {"node1": 98.0, "node2": 812.0, "node3": 101.0}  # the first window (start-up) is left out
    (host, ms, others), *rest = verdict.stragglers(per_node)
    assert (host, ms, others, rest) == ("node2", 812.0, 99.5, [])
    check, _ = verdict.throughput_check(series([1.0] * 10), 5000.0, 0.8, "the plan", verdict.slow_nodes(log, {}), per_node)
    assert check.status == verdict.FAIL
    assert "node2 is 8.2x slower than the median node (812 ms of compute per iteration, others 100 ms)" in check.detail
    assert verdict.stragglers({"node1": 98.0, "node2": 120.0}) == [] and verdict.stragglers({"node1": 900.0}) == []


def test_a_slow_node_among_fast_ones_is_compared_with_their_real_median():
    log = follow.JobLog(seq_length=16)
    log.rank_compute = {"a": [follow.RankCompute(0, 1, 10, 0.4, 0.0)], "b": [follow.RankCompute(1, 1, 10, 2.0, 0.0)]}
    assert verdict.slow_nodes(log, {}) == ["b is 5.0x slower than the median node (2 ms of compute per iteration, others 0 ms)"]


def test_a_node_throttled_since_it_was_measured_is_named():
    log = evidence_log({"node1": 100.0, "node2": 104.0}, launch={"node1": 0.0150, "node2": 0.0016})
    slow = verdict.slow_nodes(log, {"node1": 0.0156, "node2": 0.0166})
    assert slow == ["node2 computed 1.6 GFLOP/s at start-up, 0.10x the 16.6 GFLOP/s it was measured at (throttled or busy)"]
    assert verdict.slow_nodes(log, {}) == []  # nothing stored: nothing to compare with


def test_a_passing_throughput_shows_each_nodes_compute_and_a_uniformly_slow_cluster_says_so():
    per_node = {"node1": 98.0, "node2": 101.0}
    ok, _ = verdict.throughput_check(series([1.0] * 10), 900.0, 0.8, "the plan", [], per_node)
    assert ok.status == verdict.PASS and ok.detail.endswith("compute per iteration: node1 98 ms, node2 101 ms")
    slow, _ = verdict.throughput_check(series([1.0] * 10), 5000.0, 0.8, "the plan", [], per_node)
    assert "no single node stands out" in slow.detail


def test_a_busier_machine_lowers_the_expectation_by_the_median_nodes_start_up_rate():
    stored = {"node1": 0.040, "node2": 0.040, "node3": 0.040}
    busy = {"node1": {0: 0.020}, "node2": {1: 0.022}, "node3": {2: 0.018}}
    assert verdict.launch_factor(busy, stored) == pytest.approx(0.5)
    one_slow = {"node1": {0: 0.041}, "node2": {1: 0.004}, "node3": {2: 0.039}}
    assert verdict.launch_factor(one_slow, stored) == pytest.approx(0.975)  # one slow node does not move the median
    assert verdict.launch_factor({"node1": {0: 0.09}}, stored) == 1.0 and verdict.launch_factor({}, stored) is None
    every_node_throttled = {"node1": {0: 0.004}, "node2": {1: 0.004}, "node3": {2: 0.005}}
    assert verdict.launch_factor(every_node_throttled, stored) == verdict.LOAD_FACTOR_MIN
    log = evidence_log({"node1": 100.0, "node2": 104.0}, launch={"node1": 0.020, "node2": 0.020})
    args = (log, ["node1", "node2"], 3, 30000.0, 0.8, "the plan", False, 0.0, {}, {"node1": 0.040, "node2": 0.040})
    scaled, _ = verdict.judge(*args, follow_load=True)
    tp = next(c for c in scaled.checks if c.name == "throughput")
    assert tp.status == verdict.PASS and "expected 15,000 (the plan; x 0.50: the median node computed at 0.50" in tp.detail
    fixed, _ = verdict.judge(*args, follow_load=False)  # an explicit verify.tokens_per_second is not scaled
    assert next(c for c in fixed.checks if c.name == "throughput").status == verdict.FAIL


def test_a_node_that_holds_the_others_back_fails_the_check_even_above_the_floor():
    # the lab with one node at 10 % of a CPU: above an absolute floor, but the others compute 4x faster and wait
    log = evidence_log({"node1": 270.0, "node2": 1106.0}, launch={"node1": 0.0537, "node2": 0.0056})
    stored = {"node1": 0.0156, "node2": 0.0166}
    per_node = verdict.node_compute_ms(log.rank_compute)
    check, _ = verdict.throughput_check(series([1.0] * 10), 291.0, 0.8, "the plan", verdict.slow_nodes(log, stored), per_node)
    assert check.status == verdict.FAIL and check.detail.startswith("held back by a slow node: median 1,000 tokens/s")
    assert "but the job ran at the pace of node2: the other nodes computed 4.1x faster and waited for it" in check.detail
    assert "node2 is 4.1x slower than the median node" in check.detail and "node2 computed 5.6 GFLOP/s at start-up, 0.34x" in check.detail
    # a node 1.99x slower is named among the slow ones but does not fail the check on its own
    named = verdict.throughput_check(series([1.0] * 10), 291.0, 0.8, "the plan", [], {"node1": 100.0, "node2": 199.0})[0]
    assert named.status == verdict.PASS
    # sub-millisecond compute: the ratio is 2.0/0.5
    tiny = verdict.throughput_check(series([1.0] * 10), 291.0, 0.8, "the plan", [], {"node1": 0.5, "node2": 2.0})[0]
    assert "the other nodes computed 4.0x faster and waited for it" in tiny.detail
    # the same two nodes within 2x of each other (a busy machine's noise) pass
    even = verdict.node_compute_ms(evidence_log({"node1": 626.0, "node2": 931.0}).rank_compute)
    assert verdict.throughput_check(series([1.0] * 10), 291.0, 0.8, "the plan", [], even)[0].status == verdict.PASS


# ---- the report, built from a log whose every field is set by hand


def it(n, loss, tflops=None, attempt=0, tps=None):
    return follow.Iteration(n, 60, loss=loss, tflops_per_gpu=tflops, attempt=attempt, tokens_per_second=tps)


def report_log():
    """Iterations 1, 2, 4 of the first attempt, 3 again after a restart (attempt 1); two restarts, one still open."""
    log = follow.JobLog(seq_length=16, furthest=4, total=60)
    log.iterations = {1: it(1, 5.0, 0.9), 2: it(2, 4.0, 0.8), 3: it(3, 2.9, 0.5, attempt=1), 4: it(4, 3.0, 0.25)}
    log.saves = [4, 2, 2]
    log.restarts = [follow.Restart(10.0, 4, 2, 20.04), follow.Restart(30.0, 9, 9, None)]
    log.errors = ["RuntimeError: boom"]
    return log


JOB = {"name": "r", "nodes": 2, "gpus_per_node": 1, "trainer": "lab"}


def test_report_dict_fields():
    judged = verdict.Verdict(False, [verdict.Check("loss falling", verdict.PASS, "z=-5"), verdict.Check("no nan", verdict.FAIL, "1 nan")])
    report = verdict.report_dict(JOB, judged, report_log(), 1234.4, {"node1": "run"}, {"a_s": 4.2})
    assert report == {
        "job": JOB,
        "verdict": "failed",
        "checks": [{"name": "loss falling", "status": "pass", "detail": "z=-5"}, {"name": "no nan", "status": "fail", "detail": "1 nan"}],
        "iterations": {"logged": 4, "last": 4, "total": 60},
        # losses in iteration order 5.0, 4.0, 2.9, 3.0
        "loss": {"first": 5.0, "last": 3.0, "min": 2.9},
        # steady: the first two of each attempt left out, so only iteration 4 (attempt 0's third) counts
        "throughput": {"tokens_per_second_median": 1234.4, "tflops_per_gpu_median": 0.25},
        "checkpoints": [2, 4],
        "restarts": [
            {"last_iteration": 4, "resumed_from": 2, "lost_iterations": 2, "seconds_to_resumed_iteration": 10.0},
            {"last_iteration": 9, "resumed_from": 9, "lost_iterations": 0, "seconds_to_resumed_iteration": None},
        ],
        "errors": ["RuntimeError: boom"],
        "timing": {"a_s": 4.2},
        "commands": {"node1": "run"},
    }
    assert verdict.report_dict(JOB, verdict.Verdict(True), report_log(), 0.0, {}, {})["verdict"] == "passed"
    holes = follow.JobLog(seq_length=16)
    holes.iterations = {1: it(1, float("nan")), 2: it(2, 4.0), 3: it(3, None), 4: it(4, 3.0), 5: it(5, float("inf"))}
    assert verdict.report_dict(JOB, verdict.Verdict(False), holes, 0.0, {}, {})["loss"] == {"first": 4.0, "last": 3.0, "min": 3.0}
    empty = verdict.report_dict(JOB, verdict.Verdict(True), follow.JobLog(seq_length=16), 0.0, {}, {})
    assert empty["loss"] == {"first": None, "last": None, "min": None} and empty["throughput"]["tflops_per_gpu_median"] is None


def test_report_markdown():
    judged = verdict.Verdict(False, [verdict.Check("loss falling", verdict.PASS, "z=-5"), verdict.Check("no nan", verdict.FAIL, "1 nan")])
    report = verdict.report_dict(JOB, judged, report_log(), 1234.4, {"node1": "#!/bin/bash\ntorchrun ...\n"}, {"a_s": 4.2})
    assert verdict.render_markdown(report) == (
        "# megaprov job r: FAILED\n"
        "\n"
        "2 node(s) x 1 process(es), trainer lab, 4/60 iterations.\n"
        "\n"
        "| check | result | detail |\n"
        "|---|---|---|\n"
        "| loss falling | pass | z=-5 |\n"
        "| no nan | fail | 1 nan |\n"
        "\n"
        "Loss 5.0 -> 3.0 (min 2.9); median 1,234 tokens/s, 0.25 TFLOP/s per GPU.\n"
        "\n"
        "![loss and throughput](report.png)\n"
        "\n"
        "## Restarts\n"
        "\n"
        "| failed after iteration | resumed from | lost iterations | seconds to the resumed iteration |\n"
        "|---|---|---|---|\n"
        "| 4 | 2 | 2 | 10.0 |\n"
        "| 9 | 9 | 0 | None |\n"
        "\n"
        "## Errors in the logs\n"
        "\n"
        "- `RuntimeError: boom`\n"
        "\n"
        "## Timing\n"
        "\n"
        "- a_s: 4.2\n"
        "\n"
        "## What each node ran\n"
        "\n"
        "### node1\n"
        "\n"
        "```bash\n"
        "#!/bin/bash\n"
        "torchrun ...\n"
        "```\n"
    )
    plain = verdict.report_dict(JOB, verdict.Verdict(True), follow.JobLog(seq_length=16, total=60), 10.0, {}, {})
    text = verdict.render_markdown(plain)
    assert text.startswith("# megaprov job r: PASSED\n") and "Loss None -> None (min None); median 10 tokens/s.\n" in text
    assert "## Restarts" not in text and "## Errors" not in text and text.endswith("## Timing\n\n\n## What each node ran\n")  # no timing, no node


def test_plot_draws_loss_and_tokens_per_second_against_the_iteration(monkeypatch):
    import matplotlib.pyplot as plt

    kept = []
    monkeypatch.setattr(plt, "close", kept.append)  # keep the figure to look at it
    # a site's matplotlibrc may save PDFs at 50 dpi by default: the report's PNG does not depend on it
    monkeypatch.setitem(plt.rcParams, "savefig.format", "pdf")
    monkeypatch.setitem(plt.rcParams, "savefig.dpi", 50)
    s = [it(1, 5.0, tps=100.0), it(2, None, tps=None), it(5, 3.0, tps=300.0)]
    png = verdict.plot(s, "job-a: passed")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")) == (800, 600)  # 8x6 inches at 100 dpi
    top, bottom = kept[0].axes
    assert top.get_shared_x_axes().joined(top, bottom)  # one iteration axis for both
    assert (top.get_title(), top.get_ylabel(), bottom.get_ylabel(), bottom.get_xlabel()) == ("job-a: passed", "lm loss", "tokens/s", "iteration")
    (loss,), (rate,) = top.get_lines(), bottom.get_lines()
    assert list(loss.get_xdata()) == [1, 2, 5] and list(rate.get_xdata()) == [1, 2, 5]
    y = list(loss.get_ydata())
    assert y[0] == 5.0 and math.isnan(y[1]) and y[2] == 3.0
    r = list(rate.get_ydata())
    assert r[0] == 100.0 and math.isnan(r[1]) and r[2] == 300.0
    assert (loss.get_color(), rate.get_color()) == ("tab:blue", "tab:green")
    for axes in (top, bottom):  # a faint grid
        line = axes.get_yaxis().get_gridlines()[0]
        assert line.get_visible() and line.get_alpha() == 0.3


def test_write_report_writes_three_files_without_temporaries(tmp_path):
    report = verdict.report_dict(JOB, verdict.Verdict(True), report_log(), 10.0, {"node1": "run\n"}, {})
    paths = verdict.write_report(tmp_path, report, report_log().series())
    assert paths == {"json": tmp_path / "report.json", "markdown": tmp_path / "report.md", "plot": tmp_path / "report.png"}
    assert paths["json"].read_text() == json.dumps(report, indent=2) + "\n"
    assert paths["markdown"].read_text() == verdict.render_markdown(report)
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "report.md", "report.png"]


def test_the_plot_is_titled_with_the_job_and_its_verdict(tmp_path, monkeypatch):
    titles = []
    monkeypatch.setattr(verdict, "plot", lambda s, title: titles.append(title) or b"png")
    report = verdict.report_dict(JOB, verdict.Verdict(False), report_log(), 10.0, {}, {})
    verdict.write_report(tmp_path, report, [])
    assert titles == ["r: failed"] and (tmp_path / "report.png").read_bytes() == b"png"


# ---- each check's thresholds and the sentence it writes


def test_loss_check_detail_window_and_the_losses_it_counts():
    falling = series([10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0])
    # n = 10 strictly falling: S = -45, var = 10*9*25/18 = 125, z = -44/sqrt(125) = -3.94, tau = -1, slope -1;
    # head and tail are the medians of the first and last three (a fifth of 10 is less than 3)
    expected = "Mann-Kendall z=-3.94 (tau -1.00) over 10 iterations, Theil-Sen slope -1/iteration, median loss 9.000 -> 2.000"
    assert verdict.loss_check(falling, 10) == verdict.Check("loss falling", verdict.PASS, expected)
    short = verdict.loss_check(falling, 11)
    assert short == verdict.Check("loss falling", verdict.FAIL, "only 10 iteration(s) with a loss, the trend test needs 11 (verify.loss_window)")
    # None and non-finite losses are not points: 10 finite ones remain, one short of a window of 11
    holes = falling + series([None, float("nan"), float("inf")])
    assert verdict.loss_check(holes, 11).detail.startswith("only 10 iteration(s) with a loss")
    rising = verdict.loss_check(series([float(x) for x in range(10)]), 10)
    assert (
        rising.name == "loss falling"
        and rising.status == verdict.FAIL
        and rising.detail
        == (
            "no falling trend: Mann-Kendall z=3.94 (tau 1.00) over 10 iterations, Theil-Sen slope 1/iteration, median loss 1.000 -> 8.000;"
            " check the learning rate (train.lr) and the data"
        )
    )


def test_a_long_run_is_thinned_to_401_points_keeping_both_ends():
    """1,000 iterations of loss 1000 - k: above 400 points, every 2.5th is kept (indices int(2.5 i), i < 400) and
    the last one. Head: the median of the first 401 // 5 = 80 kept, indices 0..197, the middle two 97 and 100:
    loss 901.5. Tail: the last 80 kept, indices 802..997 and 999, the middle two 900 and 902: loss 99."""
    long = [follow.Iteration(k + 1, 1000, loss=1000.0 - k) for k in range(1000)]
    detail = verdict.loss_check(long, 20).detail
    assert "(tau -1.00) over 401 iterations, Theil-Sen slope -1/iteration, median loss 901.500 -> 99.000" in detail
    # the last iteration is always kept: 999 losses of 5.0 and a last one of 1.0. Kept: 400 fives and the 1.0, S = -400
    # (each five before it), var = [401*400*807 - 400*399*805]/18 = 53600, z = -399/sqrt(53600) = -1.72
    drop = [follow.Iteration(k + 1, 1000, loss=5.0 if k < 999 else 1.0) for k in range(1000)]
    assert "Mann-Kendall z=-1.72 (tau -0.00) over 401 iterations" in verdict.loss_check(drop, 20).detail
    # exactly 400 points are kept as they are; head and tail are the first and last 80 (losses 400..321 and 80..1): 360.5 and 40.5
    assert "over 400 iterations, Theil-Sen slope -1/iteration, median loss 360.500 -> 40.500" in verdict.loss_check(long[600:], 20).detail


def test_mann_kendall_of_a_constant_and_of_a_rising_series():
    assert verdict.mann_kendall([2.0] * 8) == (0.0, 0.0)  # every pair tied: var(S) = 0, no trend
    # 1, 3, 2, 4: S = +1+1+1 -1+1 +1 = 4, var = 4*3*13/18 = 26/3, z = (4-1)/sqrt(26/3), tau = 4/6
    assert verdict.mann_kendall([1.0, 3.0, 2.0, 4.0]) == (pytest.approx(3 / math.sqrt(26 / 3)), pytest.approx(4 / 6))
    # 2, 1, 1, 0: S = -1-1-1 +0-1 -1 = -5, ties {1: 2}: var = (4*3*13 - 2*1*9)/18 = 138/18, z = (-5+1)/sqrt(138/18)
    assert verdict.mann_kendall([2.0, 1.0, 1.0, 0.0]) == (pytest.approx(-4 / math.sqrt(138 / 18)), pytest.approx(-5 / 6))


def test_theil_sen_is_the_median_pairwise_slope_and_skips_equal_x():
    # pairs: (0,1) 2, (0,2) 1.5, (1,2) 1: median 1.5; a repeated x adds no slope
    assert verdict.theil_sen([0.0, 1.0, 2.0], [0.0, 2.0, 3.0]) == 1.5
    assert verdict.theil_sen([0.0, 1.0, 1.0], [0.0, 2.0, 9.0]) == pytest.approx((2.0 + 9.0) / 2)
    assert verdict.theil_sen([3.0, 3.0], [1.0, 2.0]) == 0.0 and verdict.theil_sen([], []) == 0.0


def test_nan_check_counts_megatrons_counter_and_non_finite_losses():
    s = series([5.0, 4.0, float("inf"), None, 3.0])
    assert verdict.nan_check(s) == verdict.Check(
        "no nan", verdict.FAIL, "0 nan iteration(s) reported; first non-finite loss at iteration 3: lower train.lr, use bf16, check the data"
    )
    s = series([5.0, 4.0, None, 3.0])
    s[1].nan, s[3].nan = 1, 2
    assert verdict.nan_check(s).detail == "3 nan iteration(s) reported: lower train.lr, use bf16, check the data"
    assert verdict.nan_check(series([5.0, None, 3.0])) == verdict.Check("no nan", verdict.PASS, "0 nan iterations in 3 logged")


def test_steady_iterations():
    s = series([5.0] * 4) + series([4.0] * 3, attempt=1)
    assert [(x.iteration, x.attempt) for x in verdict.steady(s)] == [(3, 0), (4, 0), (3, 1)]
    assert [x.iteration for x in verdict.steady(s, skip=3)] == [4]
    assert verdict.steady(s[:2]) == s[:2]  # nothing steady yet: every iteration rather than none


def test_node_compute_is_the_slowest_ranks_median_without_its_first_window():
    w = follow.RankCompute
    windows = {
        "node1": [w(0, 1, 10, 900.0, 1.0), w(0, 11, 20, 100.0, 1.0), w(0, 21, 30, 120.0, 1.0), w(1, 1, 10, 90.0, 1.0)],
        "node2": [w(2, 1, 10, 80.0, 1.0), w(2, 11, 20, 70.0, 1.0)],
        "node3": [],
    }
    # node1: rank 0's windows after the first, median of 100 and 120 = 110; rank 1's only window 90; the slowest 110
    assert verdict.node_compute_ms(windows) == {"node1": 110.0, "node2": 70.0}


def test_stragglers_threshold_and_order():
    assert verdict.stragglers({"a": 150.0, "b": 100.0}) == [("a", 150.0, 100.0)]  # exactly 1.5x is named
    assert verdict.stragglers({"a": 149.0, "b": 100.0}) == []
    assert verdict.stragglers({"a": 199.0, "b": 100.0}, verdict.STRAGGLER_FAIL) == []
    # a is 3x the median of the others (100), d 10x: the slowest first
    assert verdict.stragglers({"a": 300.0, "b": 100.0, "c": 100.0, "d": 1000.0}) == [("d", 1000.0, 100.0), ("a", 300.0, 100.0)]
    # by how many times slower: d (11 ms, others 5.5: 2.0x) before c (10, others 6: 1.67x)
    five = {"a": 1.0, "b": 1.0, "c": 10.0, "d": 11.0, "e": 100.0}
    assert verdict.stragglers(five) == [("e", 100.0, 5.5), ("d", 11.0, 5.5), ("c", 10.0, 6.0)]
    # y is 10/4 = 2.5x the others' median, x 8/5 = 1.6x (their times x the others' are both 40): y first
    assert verdict.stragglers({"idle": 0.0, "x": 8.0, "y": 10.0}) == [("y", 10.0, 4.0), ("x", 8.0, 5.0)]


def test_throttled_nodes():
    launch = {"n2": {0: 0.49, 1: 0.9}, "n1": {2: 0.2}, "n3": {3: 0.5}, "n4": {}, "n5": {4: 0.1}, "n6": {5: 0.1}}
    stored = {"n1": 1.0, "n2": 1.0, "n3": 1.0, "n4": 1.0, "n6": 0.0}
    # n3 exactly at half its stored rate is not named; n4 has no rate, n5 no stored one, n6 a stored 0
    assert verdict.throttled(launch, stored) == [("n1", 0.2, 1.0), ("n2", 0.49, 1.0)]
    assert verdict.throttled(launch, stored, below=0.1) == []


def test_launch_factor_bounds():
    stored = {"a": 1.0, "b": 1.0, "c": 1.0}
    assert verdict.launch_factor({"a": {0: 0.7, 1: 0.9}, "b": {2: 0.8}, "c": {}}, stored) == pytest.approx(0.75)  # median of 0.7, 0.8
    assert verdict.launch_factor({"a": {0: 0.51}}, stored) == pytest.approx(0.51)
    assert verdict.launch_factor({"a": {0: 0.2}}, stored) == 0.5 and verdict.launch_factor({"x": {0: 0.2}}, stored) is None


def test_rates_are_written_in_the_unit_that_reads():
    assert verdict._tf(0.0152) == "15.2 GFLOP/s" and verdict._tf(0.9994) == "999.4 GFLOP/s" and verdict._tf(1.0) == "1.0 TFLOP/s"


def test_throughput_check_floor_and_details():
    at_floor, measured = verdict.throughput_check(series([1.0] * 10), 1250.0, 0.8, "spec")
    assert at_floor == verdict.Check("throughput", verdict.PASS, "median 1,000 tokens/s, expected 1,250 (spec) x 0.8 = 1,000") and measured == 1000.0
    s = series([1.0] * 5)
    for x, rate in zip(s, [10.0, 10.0, 900.0, 1100.0, 1000.0], strict=True):
        x.tokens_per_second = rate
    # the first two (start-up) left out: the median of 900, 1100, 1000
    below, measured = verdict.throughput_check(s, 1251.0, 0.8, "spec")
    assert measured == 1000.0 and below == verdict.Check(
        "throughput", verdict.FAIL, "too slow: median 1,000 tokens/s, expected 1,251 (spec) x 0.8 = 1,001"
    )
    none = series([1.0] * 3)
    for x in none:
        x.tokens_per_second = None
    assert verdict.throughput_check(none, 1.0, 0.8, "spec") == (
        verdict.Check("throughput", verdict.FAIL, "no iteration reported its time (elapsed time per iteration)"),
        0.0,
    )
    slow = ["node2 is 4.0x slower", "node2 computed less"]
    held, _ = verdict.throughput_check(series([1.0] * 10), 500.0, 0.8, "spec", slow, {"node2": 400.0, "node1": 100.0})
    assert held.detail == (
        "held back by a slow node: median 1,000 tokens/s, expected 500 (spec) x 0.8 = 400, but the job ran at the pace of node2: the other"
        " nodes computed"
        " 4.0x faster and waited for it; node2 is 4.0x slower; node2 computed less"
    )


def test_gpu_check_thresholds_and_details():
    name = "GPU utilisation and memory"
    rows = {"n1": [{"util": 70.0, "mem_used": 970.0, "mem_total": 1000.0}], "n2": [{"util": 90.0, "mem_used": 10.0, "mem_total": 1000.0}]}
    # mean utilisation (70+90)/2 = 80 % meets 80 %; the fullest GPU 970/1000 = 97 % is under the 98 % limit
    assert verdict.gpu_check(rows, True, 0.8) == verdict.Check(
        name, verdict.PASS, "mean utilisation 80% over 2 samples (needs 80%), peak memory 970/1000 MiB"
    )
    assert verdict.gpu_check(rows, True, 0.81) == verdict.Check(
        name, verdict.FAIL, "GPUs idle too much: mean utilisation 80% over 2 samples (needs 81%), peak memory 970/1000 MiB"
    )
    rows["n1"][0]["mem_used"] = 980.0
    assert verdict.gpu_check(rows, True, 0.8) == verdict.Check(
        name, verdict.FAIL, "memory at the limit: mean utilisation 80% over 2 samples (needs 80%), peak memory 980/1000 MiB"
    )
    unknown_total = {"n1": [{"util": 100.0, "mem_used": 0.5, "mem_total": 0.0}]}  # nvidia-smi gave 0 MiB: 0.5/max(0, 1)
    assert verdict.gpu_check(unknown_total, True, 0.8).status == verdict.PASS
    # the fullest GPU is the highest fraction (1.5/max(0, 1) = 150 %), not the most MiB (800/1000)
    mixed = {"n1": [{"util": 100.0, "mem_used": 800.0, "mem_total": 1000.0}, {"util": 100.0, "mem_used": 1.5, "mem_total": 0.0}]}
    assert verdict.gpu_check(mixed, True, 0.8).detail == "memory at the limit: mean utilisation 100% over 2 samples (needs 80%), peak memory 2/0 MiB"
    sizes = {"n1": [{"util": 100.0, "mem_used": 900.0, "mem_total": 1000.0}, {"util": 100.0, "mem_used": 950.0, "mem_total": 2000.0}]}
    assert verdict.gpu_check(sizes, True, 0.8).detail.endswith("peak memory 900/1000 MiB")
    assert verdict.gpu_check({"n1": []}, True, 0.0) == verdict.Check(
        name, verdict.SKIP, "skipped: no nvidia-smi sample while iterations ran and verify.gpu_utilization is 0"
    )
    assert verdict.gpu_check({"n1": []}, True, 0.1) == verdict.Check(
        name, verdict.FAIL, "no nvidia-smi samples from the nodes (logs/gpu-*.csv): is nvidia-smi on PATH?"
    )
    assert verdict.gpu_check(rows, False, 0.8) == verdict.Check(name, verdict.SKIP, "skipped: no GPU (CPU nodes)")


def node_line(host, rank, rc=None):
    what = "starting" if rc is None else f"exited with {rc}"
    return f"megaprov: node {host} (node rank {rank}): torchrun {what} at 2026-11-30T01:00:00.000Z"


def test_alive_check_details():
    log = follow.JobLog(seq_length=16)
    feed_run(log, "node2", range(1, 31), 1.0)
    assert verdict.alive_check(log, ["node2"]) == verdict.Check("every rank alive", verdict.FAIL, "stopped at iteration 30 of 60")
    feed_run(log, "node2", range(31, 61), 1.0)
    log.feed("node1", node_line("node1", 0, 3), 0)
    assert verdict.alive_check(log, ["node1", "node2"]).detail == "torchrun did not finish cleanly on node1 (failed-3), node2 (waiting)"
    log.feed("node1", node_line("node1", 0, 0), 0)
    log.feed("node2", node_line("node2", 1, 0), 0)
    assert verdict.alive_check(log, ["node1", "node2"]) == verdict.Check(
        "every rank alive", verdict.PASS, "all 60 iterations; torchrun exited 0 on 2 node(s)"
    )
    log.restarts = [follow.Restart(1.0, 20, 10), follow.Restart(2.0, 30, 20)]
    assert verdict.alive_check(log, ["node1", "node2"]).detail.endswith("on 2 node(s), 2 restart(s) resumed from checkpoints")
    nothing = follow.JobLog(seq_length=16)  # no iteration logged: no total to fall short of, the nodes decide
    assert verdict.alive_check(nothing, []).detail == "all 0 iterations; torchrun exited 0 on 0 node(s)"


def test_judge_runs_every_check_and_passes_only_without_a_failure():
    log = evidence_log({"node1": 100.0, "node2": 104.0}, launch={"node1": 0.010, "node2": 0.010})
    log.feed("node1", node_line("node1", 0, 0), 0)
    log.feed("node2", node_line("node2", 1, 0), 0)
    feed_run(log, "node2", range(31, 61), 2.0)
    # 8 sequences of 128 tokens in 50 ms: 20,480 tokens/s
    judged, measured = verdict.judge(log, ["node1", "node2"], 20, 20000.0, 1.0, "the plan", False, 0.9, {}, {"node1": 0.02, "node2": 0.02})
    assert measured == pytest.approx(20480.0)
    # follow_load defaults to off: the expectation is the one given, not scaled by the start-up rates
    assert (
        judged.checks[2].detail
        == "median 20,480 tokens/s, expected 20,000 (the plan) x 1 = 20,000; compute per iteration: node1 100 ms, node2 104 ms"
    )
    assert [(c.name, c.status) for c in judged.checks] == [
        ("loss falling", verdict.PASS),
        ("no nan", verdict.PASS),
        ("throughput", verdict.PASS),
        ("GPU utilisation and memory", verdict.SKIP),
        ("every rank alive", verdict.PASS),
    ]
    assert judged.passed and judged.reasons() == []
    # the same nodes measured at twice the rate they started at: the expectation follows them down to half
    halved, _ = verdict.judge(log, ["node1", "node2"], 20, 40000.0, 1.0, "the plan", False, 0.9, {}, {"node1": 0.02, "node2": 0.02}, True)
    assert halved.passed and "expected 20,000 (the plan; x 0.50: the median node computed at 0.50 of its stored rate" in halved.checks[2].detail
    as_stored, _ = verdict.judge(log, ["node1", "node2"], 20, 20000.0, 1.0, "the plan", True, 0.0, {}, {"node1": 0.01, "node2": 0.01}, True)
    assert as_stored.checks[2].detail.startswith("median 20,480 tokens/s, expected 20,000 (the plan) x 1 = 20,000;")  # a factor of 1: not named
    assert as_stored.checks[3] == verdict.Check(
        "GPU utilisation and memory", verdict.SKIP, "skipped: no nvidia-smi sample while iterations ran and verify.gpu_utilization is 0"
    )
    throttled, _ = verdict.judge(log, ["node1", "node2"], 20, 41000.0, 1.0, "spec", False, 0.9, {}, {"node1": 0.01, "node2": 0.05})
    assert throttled.checks[2].detail.endswith(
        "; node2 computed 10.0 GFLOP/s at start-up, 0.20x the 50.0 GFLOP/s it was measured at (throttled or busy)"
    )
    failed, _ = verdict.judge(log, ["node1", "node2", "node3"], 20, 41000.0, 1.0, "spec", True, 0.9, {}, None, True)
    assert not failed.passed and failed.reasons() == [
        "throughput: too slow: median 20,480 tokens/s, expected 41,000 (spec) x 1 = 41,000; no single node stands out (compute per iteration:"
        " node1 100 ms, node2 104 ms): the whole cluster is slower than measured",
        "GPU utilisation and memory: no nvidia-smi samples from the nodes (logs/gpu-*.csv): is nvidia-smi on PATH?",
        "every rank alive: torchrun did not finish cleanly on node3 (waiting)",
    ]

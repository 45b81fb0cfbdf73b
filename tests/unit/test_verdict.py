"""The verdict: the loss trend test (Mann-Kendall and Theil-Sen) against hand-derived statistics, the nan, throughput,
GPU and liveness checks, the slow-node evidence, and the report files."""

import json
import math
import random

import pytest

from megaprov import follow, trainer, verdict


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
    assert check.status == verdict.FAIL
    assert "but the job ran at the pace of node2: the other nodes computed 4.1x faster and waited for it" in check.detail
    assert "node2 is 4.1x slower than the median node" in check.detail and "node2 computed 5.6 GFLOP/s at start-up, 0.34x" in check.detail
    # the same two nodes within 2x of each other (a busy machine's noise) pass
    even = verdict.node_compute_ms(evidence_log({"node1": 626.0, "node2": 931.0}).rank_compute)
    assert verdict.throughput_check(series([1.0] * 10), 291.0, 0.8, "the plan", [], even)[0].status == verdict.PASS

# ruff: noqa: UP030, UP032  (the lines are built with the format strings exactly as Megatron-LM writes them)
"""The follower's parser on lines built from Megatron-LM's own format strings (several versions), its state
machine (restarts, node exits), metrics files, and the verdict's statistics."""

import json
import math
import random
from datetime import datetime

import pytest

from megaprov import follow, trainer, verdict


def megatron_v04_line(it, total, consumed, ms, lr, batch, loss, grad, skipped, nan):
    """core_v0.4.0 megatron/training.py training_log: no timestamp, no throughput, lr with 3 decimals."""
    s = " iteration {:8d}/{:8d} |".format(it, total)
    s += " consumed samples: {:12d} |".format(consumed)
    s += " elapsed time per iteration (ms): {:.1f} |".format(ms)
    s += " learning rate: {:.3E} |".format(lr)
    s += " global batch size: {:5d} |".format(batch)
    s += " {}: {:.6E} |".format("lm loss", loss)
    s += " loss scale: {:.1f} |".format(65536.0)
    s += " grad norm: {:.3f} |".format(grad)
    s += " number of skipped iterations: {:3d} |".format(skipped)
    s += " number of nan iterations: {:3d} |".format(nan)
    return s


def megatron_v08_line(it, total, consumed, ms, tflops, lr, batch, loss, grad):
    """core_v0.8.0 megatron/training/training.py: timestamp to the second, throughput with --log-throughput."""
    s = f" [{datetime.now().strftime('%Y-%m-%d %H:%M:%S')}]"
    s += " iteration {:8d}/{:8d} |".format(it, total)
    s += " consumed samples: {:12d} |".format(consumed)
    s += " elapsed time per iteration (ms): {:.1f} |".format(ms)
    s += f" throughput per GPU (TFLOP/s/GPU): {tflops:.1f} |"
    s += " learning rate: {:.6E} |".format(lr)
    s += " global batch size: {:5d} |".format(batch)
    s += " {}: {:.6E} |".format("lm loss", loss)
    s += " loss scale: {:.1f} |".format(1.0)
    s += " grad norm: {:.3f} |".format(grad)
    s += " number of skipped iterations: {:3d} |".format(0)
    s += " number of nan iterations: {:3d} |".format(0)
    return s


def megatron_v016_line(it, total, consumed, ms, tflops, lr, batch, loss, grad):
    """core_v0.16.1: microsecond timestamp, energy/power fields with --log-energy, num zeros as given."""
    s = f" [{datetime.now().strftime('%Y-%m-%d %H:%M:%S.%f')}]"
    s += " iteration {:8d}/{:8d} |".format(it, total)
    s += " consumed samples: {:12d} |".format(consumed)
    s += " elapsed time per iteration (ms): {:.1f} |".format(ms)
    s += f" throughput per GPU (TFLOP/s/GPU): {tflops:.1f} |"
    s += f" energy per GPU (J/iter/GPU): {812.5:.1f} |"
    s += f" power per GPU (W/GPU): {650.0:.1f} |"
    s += f" learning rate: {lr:.6E} |"
    s += f" global batch size: {batch:5d} |"
    s += " {}: {:.6E} |".format("lm loss", loss)
    s += f" loss scale: {1.0:.1f} |"
    s += f" grad norm: {grad:.3f} |"
    s += f" num zeros: {12} |"
    s += " number of skipped iterations: {:3d} |".format(0)
    s += " number of nan iterations: {:3d} |".format(0)
    return s


def test_parses_core_v0_4_lines():
    it = follow.parse_iteration(megatron_v04_line(10, 100, 80, 1234.5, 3e-4, 8, 5.4321, 1.25, 1, 2))
    assert (it.iteration, it.total, it.consumed_samples, it.global_batch) == (10, 100, 80, 8)
    assert it.ms_per_iteration == 1234.5 and it.lr == pytest.approx(3e-4) and it.loss == pytest.approx(5.4321)
    assert (it.grad_norm, it.skipped, it.nan, it.tflops_per_gpu, it.logged_at) == (1.25, 1, 2, None, None)


def test_parses_core_v0_8_and_v0_16_lines():
    a = follow.parse_iteration(megatron_v08_line(7, 20, 56, 88.0, 312.4, 1.5e-4, 8, 7.25, 3.5))
    b = follow.parse_iteration(megatron_v016_line(7, 20, 56, 88.0, 312.4, 1.5e-4, 8, 7.25, 3.5))
    for it in (a, b):
        assert (it.iteration, it.tflops_per_gpu, it.loss, it.grad_norm) == (7, 312.4, 7.25, 3.5)
        assert it.logged_at is not None
    assert "." in b.logged_at


def test_lab_trainer_line_is_read_like_megatrons():
    line = trainer.log_line(3, 60, 24, 52.5, 0.1, 1e-3, 8, 4.5, 0.75, 0, 0)
    it = follow.parse_iteration(line)
    assert (it.iteration, it.total, it.consumed_samples, it.ms_per_iteration, it.loss, it.grad_norm) == (3, 60, 24, 52.5, 4.5, 0.75)


def test_nan_loss_and_prefixed_lines():
    line = "[default0]:" + megatron_v04_line(4, 10, 32, 10.0, 1e-4, 8, float("nan"), 0.0, 1, 1)
    it = follow.parse_iteration(line)
    assert it.iteration == 4 and math.isnan(it.loss) and it.nan == 1
    assert follow.parse_iteration("iteration counts are logged below") is None


def feed_run(log, host, iterations, now, loss=lambda i: 6.0 - 0.05 * i):
    for i in iterations:
        log.feed(host, megatron_v016_line(i, 60, i * 8, 50.0, 0.1, 1e-3, 8, loss(i), 1.0), now)


def test_restart_found_by_the_iterations_going_back():
    log = follow.JobLog(seq_length=128)
    log.feed("node1", "megaprov: node node1 (node rank 0): torchrun starting at 2026-11-30T01:00:00.000Z", 0.0)
    feed_run(log, "node2", range(1, 28), 1.0)
    log.feed("node1", "  [2026-11-30 01:00:01.000000] successfully saved checkpoint from iteration      20 to /shared/c [ t 1/1, p 1/1 ]", 1.0)
    log.feed("node1", "  successfully loaded checkpoint from /shared/c [ t 1/1, p 1/1 ] at iteration 20", 5.0)
    feed_run(log, "node2", range(21, 61), 9.5)
    assert len(log.restarts) == 1
    r = log.restarts[0]
    assert (r.seen, r.last_iteration, r.resumed_from, r.lost_iterations, r.first_iteration_seen) == (1.0, 27, 20, 7, 9.5)
    assert log.saves == [20] and log.loads == [20] and log.furthest == 60
    assert log.iterations[21].attempt == 1 and log.iterations[19].attempt == 0
    assert log.iterations[5].tokens_per_second == pytest.approx(8 * 128 / 0.05)


def test_restart_that_resumes_where_it_stopped_is_counted_from_the_start_line():
    log = follow.JobLog(seq_length=16)
    start = "megaprov: node node2 (node rank 1): torchrun starting at 2026-11-30T01:00:00.000Z"
    log.feed("node2", start, 0.5)
    feed_run(log, "node2", range(1, 21), 1.0)
    log.feed("node1", start.replace("node2", "node1").replace("rank 1", "rank 0"), 1.5)  # another node: not the iterations' log
    log.feed("node2", start, 2.0)
    log.feed("node1", "  successfully loaded checkpoint from /c [ t 1/1, p 1/1 ] at iteration 20", 2.5)
    feed_run(log, "node2", range(21, 23), 3.0)
    assert [(r.seen, r.last_iteration, r.resumed_from, r.lost_iterations, r.first_iteration_seen) for r in log.restarts] == [(1.0, 20, 20, 0, 3.0)]
    assert log.loads == [20]


def test_node_states_from_the_script_lines():
    log = follow.JobLog(seq_length=16)
    start = "megaprov: node {h} (node rank {r}): torchrun starting at 2026-11-30T01:00:00.000Z"
    end = "megaprov: node {h} (node rank {r}): torchrun exited with {rc} at 2026-11-30T01:00:09.000Z"
    assert log.node_state("node1") == "waiting"
    log.feed("node1", start.format(h="node1", r=0), 0)
    assert log.node_state("node1") == "running"
    log.feed("node1", end.format(h="node1", r=0, rc=1), 0)
    assert log.node_state("node1") == "failed-1"
    log.feed("node1", start.format(h="node1", r=0), 0)
    log.feed("node1", end.format(h="node1", r=0, rc=0), 0)
    assert log.node_state("node1") == "exited-0"
    log.feed("node1", "megaprov.trainer: checkpoint /c iteration 6 has hidden_size=64, this job 96; use another checkpoint directory", 0)
    log.feed("node1", "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", 0)
    assert log.errors[0].startswith("megaprov.trainer: checkpoint /c iteration 6 has hidden_size=64")


def test_log_reader_returns_complete_lines_only(tmp_path):
    path = tmp_path / "node.log"
    reader = follow.LogReader(path)
    assert reader.lines() == []
    path.write_text("one\ntw")
    assert reader.lines() == ["one"]
    with path.open("a") as handle:
        handle.write("o\nthree\n")
    assert reader.lines() == ["two", "three"]


def test_metrics_files(tmp_path):
    log = follow.JobLog(seq_length=128)
    feed_run(log, "node2", range(1, 6), 1.0)
    log.feed("node2", megatron_v04_line(6, 60, 48, 50.0, 1e-3, 8, float("nan"), 0.0, 1, 1), 1.0)
    follow.write_metrics(tmp_path, "job-a", log, "running")
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [1, 2, 3, 4, 5, 6] and records[-1]["loss"] == "nan"
    prom = (tmp_path / "metrics.prom").read_text()
    assert 'megaprov_job_iteration{job_name="job-a"} 6' in prom and "# TYPE megaprov_job_restarts_total counter" in prom
    assert not list(tmp_path.glob(".*.tmp"))
    # while following, only what is new is appended; a re-logged iteration after a restart comes again, later wins
    (tmp_path / "metrics.jsonl").write_text("")
    follow.append_metrics(tmp_path, "job-a", log.series()[:5], log, "running")
    again = follow.Iteration(5, 60, loss=1.5, attempt=1)
    follow.append_metrics(tmp_path, "job-a", [again], log, "running")
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["iteration"], r.get("attempt")) for r in rows] == [(1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (5, 1)]
    assert {r["iteration"]: r["loss"] for r in rows}[5] == 1.5


def test_gpu_samples_skip_unreadable_rows(tmp_path):
    path = tmp_path / "gpu.csv"
    path.write_text(
        "2026/11/30 01:00:00.000, 0, 97, 40000, 81559\n2026/11/30 01:00:05.000, 1, [N/A], 1, 2\ntorn, 1\n2026/11/30 01:09:00.000, 0, 3, 9, 81559\n"
    )
    rows = follow.gpu_samples(path)
    assert [(r["gpu"], r["util"], r["mem_used"], r["mem_total"]) for r in rows] == [(0.0, 97.0, 40000.0, 81559.0), (0.0, 3.0, 9.0, 81559.0)]
    log = follow.JobLog(seq_length=16)
    log.feed("n", " [2026-11-30 00:59:58.000000] iteration 1/ 2 | lm loss: 5.0 |", 0)
    log.feed("n", " [2026-11-30 01:00:02.000000] iteration 2/ 2 | lm loss: 4.0 |", 0)
    assert [r["util"] for r in follow.during(rows, follow.training_window(log))] == [97.0]  # the idle sample after the run is left out


# ---- verdict


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


def test_the_trainers_evidence_lines_are_parsed_per_node():
    line = trainer.straggler_line(1, 11, 20, 812.4, 3.25)
    assert follow.parse_iteration(line) is None
    kind, fields = follow.parse_evidence(line)
    assert kind == "straggler"
    assert follow.parse_rank_compute(fields) == follow.RankCompute(1, 11, 20, 812.4, 3.25)
    log = evidence_log({"node1": 98.0, "node2": 812.0}, launch={"node1": 0.0152, "node2": 0.0017})
    assert log.launch_rates == {"node1": {0: 0.0152}, "node2": {1: 0.0017}}
    assert [w.first for w in log.rank_compute["node2"]] == [1, 11, 21] and log.errors == []
    assert follow.parse_evidence("megaprov.trainer: something failed") is None


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

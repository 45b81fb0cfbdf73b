# ruff: noqa: UP030, UP032  (the lines are built with the format strings exactly as Megatron-LM writes them)
"""The follower's parser on lines built from Megatron-LM's own format strings (several versions), its state
machine (restarts, node exits) and its metrics files. The verdict's tests are in test_verdict.py."""

import json
import math
import re
import time
from datetime import UTC, datetime

import pytest

from megaprov.training import follow, trainer


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


def test_restart_that_resumes_at_the_last_logged_iteration_is_a_restart():
    """Iterations 1..21 logged (``--log-interval 1``), the last checkpoint at 20, the ranks die after 21; they load
    iteration 20 and the next line logged is iteration 21 again: the same iteration as the last one logged before
    the failure, not a lower one. Here no megaprov start line marks the restart (a log from another launcher, or
    torchrun restarting its workers itself, which megaprov's ``--max-restarts 0`` does not do), so the iterations
    alone must show it. One iteration's work was lost."""
    log = follow.JobLog(seq_length=128)
    feed_run(log, "node2", range(1, 22), 1.0)
    log.feed("node1", "  successfully saved checkpoint from iteration      20 to /shared/c [ t 1/1, p 1/1 ]", 1.0)
    log.feed("node1", "  successfully loaded checkpoint from /shared/c [ t 1/1, p 1/1 ] at iteration 20", 4.0)
    feed_run(log, "node2", [21], 6.0, loss=lambda i: 1.5)
    assert [(r.seen, r.last_iteration, r.resumed_from, r.lost_iterations, r.first_iteration_seen) for r in log.restarts] == [(1.0, 21, 20, 1, 6.0)]
    assert log.iterations[21].attempt == 1 and log.iterations[21].loss == 1.5 and log.iterations[20].attempt == 0
    assert (log.furthest, log.current, log.saves, log.loads) == (21, 21, [20], [20])


def test_restart_at_the_last_logged_iteration_after_a_start_line():
    """The same failure as megaprov's node units see it: systemd starts the node script again, which prints its start
    line on the iterations' node before the ranks log iteration 21 again."""
    log = follow.JobLog(seq_length=128)
    start = "megaprov: node node2 (node rank 1): torchrun starting at 2026-11-30T01:00:00.000Z"
    log.feed("node2", start, 0.5)
    feed_run(log, "node2", range(1, 22), 1.0)
    log.feed("node2", start, 3.0)
    feed_run(log, "node2", [21], 6.0)
    assert [(r.seen, r.last_iteration, r.resumed_from, r.lost_iterations, r.first_iteration_seen) for r in log.restarts] == [(1.0, 21, 20, 1, 6.0)]
    assert log.iterations[21].attempt == 1


LOADED = "  successfully loaded checkpoint from /shared/c [ t 1/1, p 1/1 ] at iteration {it}"


def test_a_restart_under_log_interval_5_resumes_from_the_checkpoint_not_the_logged_iteration_before():
    """--log-interval 5: iterations 5, 10, .. 25 logged, the checkpoint at 20, the ranks die after 25. The first line
    after the restart is iteration 25 again: training resumed from 20 (25 - 5), and 5 iterations were lost, not 1."""
    log = follow.JobLog(seq_length=128, log_interval=5)
    feed_run(log, "node2", range(5, 26, 5), 1.0)
    feed_run(log, "node2", [25], 6.0)
    assert [(r.last_iteration, r.resumed_from, r.lost_iterations, r.first_iteration) for r in log.restarts] == [(25, 20, 5, 25)]


@pytest.mark.parametrize("load_first", [True, False], ids=["load-line-read-first", "load-line-read-after"])
def test_rank_0s_load_line_gives_the_exact_checkpoint_in_either_order(load_first):
    """--log-interval 5 with a checkpoint at 18 (not a logged iteration): the first iteration logged after the restart
    is 20, so the interval alone says 15; rank 0's "loaded checkpoint ... at iteration 18" says 18, whether its node's
    file is read before or after the iterations' node's. A load line that cannot be this restart's (below 20 - 5)
    changes nothing."""
    log = follow.JobLog(seq_length=128, log_interval=5)
    start = "megaprov: node node2 (node rank 1): torchrun starting at 2026-11-30T01:00:00.000Z"
    log.feed("node2", start, 0.5)
    feed_run(log, "node2", range(5, 26, 5), 1.0)
    log.feed("node2", start, 3.0)
    if load_first:
        log.feed("node1", LOADED.format(it=18), 4.0)
    feed_run(log, "node2", [20], 6.0)
    if not load_first:
        log.feed("node1", LOADED.format(it=18), 7.0)
    log.feed("node1", LOADED.format(it=10), 8.0)
    assert [(r.last_iteration, r.resumed_from, r.lost_iterations) for r in log.restarts] == [(25, 18, 7)]
    assert log.loads == [18, 10]


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
    reader = follow.LogReader(path, tmp_path)
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
    assert 'megaprov_job_iteration{job="job-a",node="node2"} 6' in prom and "# TYPE megaprov_job_restarts_total counter" in prom
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
    rows = follow.gpu_samples(path, tmp_path)
    assert [(r["gpu"], r["util"], r["mem_used"], r["mem_total"]) for r in rows] == [(0.0, 97.0, 40000.0, 81559.0), (0.0, 3.0, 9.0, 81559.0)]
    log = follow.JobLog(seq_length=16)
    log.feed("n", " [2026-11-30 00:59:58.000000] iteration 1/ 2 | lm loss: 5.0 |", 0)
    log.feed("n", " [2026-11-30 01:00:02.000000] iteration 2/ 2 | lm loss: 4.0 |", 0)
    assert [r["util"] for r in follow.during(rows, follow.training_window(log))] == [97.0]  # the idle sample after the run is left out


def test_the_trainers_evidence_lines_are_parsed_per_node():
    line = trainer.straggler_line(1, 11, 20, 812.4, 3.25)
    assert follow.parse_iteration(line) is None
    kind, fields = follow.parse_evidence(line)
    assert kind == "straggler"
    assert follow.parse_rank_compute(fields) == follow.RankCompute(1, 11, 20, 812.4, 3.25)
    # each rank's lines go into its own node's log: node1 carries rank 0, node2 rank 1
    log = follow.JobLog(seq_length=128)
    feed_run(log, "node2", range(1, 31), 1.0)
    for rank, (host, rate) in enumerate({"node1": 0.0152, "node2": 0.0017}.items()):
        log.feed(host, trainer.compute_line(rank, rate, 1024, 4), 0.5)
        for first in (1, 11, 21):
            log.feed(host, trainer.straggler_line(rank, first, first + 9, 100.0, 5.0), 1.0)
    assert log.launch_rates == {"node1": {0: 0.0152}, "node2": {1: 0.0017}}
    assert [w.first for w in log.rank_compute["node2"]] == [1, 11, 21] and log.errors == []
    assert follow.parse_evidence("megaprov.trainer: something failed") is None


# ---- field by field


def test_every_field_lands_in_its_attribute_with_its_type():
    it = follow.parse_iteration(megatron_v04_line(10, 100, 80, 1234.5, 3e-4, 8, 5.4321, 1.25, 1, 2))
    assert it.loss_scale == 65536.0
    for name in ("consumed_samples", "global_batch", "skipped", "nan"):
        assert type(getattr(it, name)) is int, name  # counters stay integers (metrics.jsonl writes 80, not 80.0)
    assert type(it.ms_per_iteration) is float and type(it.iteration) is int and type(it.total) is int
    assert follow.parse_iteration(" iteration 3/ 9 | lm loss: abc | learning rate | grad norm: 2.0 | color: 1 |") == follow.Iteration(
        3, 9, grad_norm=2.0
    )
    stamped = follow.parse_iteration(" [2026-11-30 01:02:03] iteration 3/ 9 |")
    assert (stamped.logged_at, stamped.iteration, stamped.total) == ("2026-11-30 01:02:03", 3, 9)


def test_evidence_fields():
    assert follow.parse_evidence("x megaprov compute | rank: 3 | rate (TFLOP/s): 1.5 | noise |") == (
        "compute",
        {"rank": "3", "rate (TFLOP/s)": "1.5"},
    )
    assert follow.parse_evidence("megaprov compute | device: cuda:0 |") == ("compute", {"device": "cuda:0"})  # split at the first colon
    base = {"rank": "2", "iterations": "11-20", "compute time per iteration (ms)": "81.5"}
    assert follow.parse_rank_compute(base) == follow.RankCompute(2, 11, 20, 81.5, 0.0)  # no wait field: 0
    assert follow.parse_rank_compute({**base, "iterations": "7"}) == follow.RankCompute(2, 7, 7, 81.5, 0.0)  # one iteration
    assert follow.parse_rank_compute({**base, "rank": "two"}) is None
    assert follow.parse_rank_compute({k: v for k, v in base.items() if k != "iterations"}) is None


def test_feed_keeps_the_iterations_host_throughput_and_counters():
    log = follow.JobLog(seq_length=100)
    assert log.feed("node2", " iteration 1/ 9 | elapsed time per iteration (ms): 200.0 | global batch size: 4 |", 5.0).iteration == 1
    log.feed("node1", " iteration 2/ 9 | elapsed time per iteration (ms): 200.0 |", 6.0)  # no batch size: no rate
    log.feed("node2", " iteration 3/ 10 | global batch size: 4 |", 7.0)  # no time: no rate
    assert log.iteration_host == "node2"
    assert log.iterations[1].tokens_per_second == 4 * 100 / 0.2 and log.iterations[1].seen == 5.0
    assert log.iterations[2].tokens_per_second is None and log.iterations[3].tokens_per_second is None
    assert (log.furthest, log.current, log.last_seen, log.total, log.restarts) == (3, 3, 7.0, 10, [])
    assert [x.iteration for x in log.series()] == [1, 2, 3]


def test_a_restart_opened_by_the_start_line_is_closed_by_the_iteration_that_goes_back():
    log = follow.JobLog(seq_length=16)
    start = "megaprov: node node2 (node rank 1): torchrun starting at 2026-11-30T01:00:00.000Z"
    log.feed("node2", start, 0.0)  # before any iteration: the first start, not a restart
    feed_run(log, "node2", range(1, 28), 1.0)
    assert log.restarts == []
    log.feed("node2", start, 2.0)  # opened: failed after 27, resuming from where it stopped so far
    feed_run(log, "node2", [21], 3.0)  # goes back: the same restart, resumed from 20
    feed_run(log, "node2", [22], 4.0)
    assert [(r.seen, r.last_iteration, r.resumed_from, r.first_iteration_seen) for r in log.restarts] == [(1.0, 27, 20, 3.0)]
    assert (log.iterations[22].attempt, log.furthest, log.current) == (1, 27, 22)
    feed_run(log, "node2", [10], 5.0)  # back again, without a start line (torchrun restarted its workers)
    assert [(r.seen, r.last_iteration, r.resumed_from, r.first_iteration_seen) for r in log.restarts][1] == (4.0, 22, 9, 5.0)
    assert log.iterations[10].attempt == 2


def test_start_lines_open_one_restart_at_a_time_on_the_iterations_node_only():
    log = follow.JobLog(seq_length=16)
    start = "megaprov: node {h} (node rank {r}): torchrun starting at 2026-11-30T01:00:0{s}.000Z"
    log.feed("node2", start.format(h="node2", r=1, s=0), 0.0)
    feed_run(log, "node2", [1], 1.0)
    log.feed("node1", start.format(h="node1", r=0, s=1), 1.5)  # another node starting: not the iterations' log
    assert log.restarts == []
    log.feed("node2", start.format(h="node2", r=1, s=2), 2.0)  # after one iteration: a restart, open until one is logged
    assert [(r.last_iteration, r.resumed_from, r.lost_iterations, r.first_iteration_seen) for r in log.restarts] == [(1, 1, 0, None)]
    log.feed("node2", start.format(h="node2", r=1, s=3), 2.5)  # torchrun failed again before logging: still that restart
    assert len(log.restarts) == 1
    feed_run(log, "node2", [2, 3], 3.0)
    log.feed("node2", start.format(h="node2", r=1, s=4), 4.0)  # a second restart, after the first was closed
    feed_run(log, "node2", [4], 5.0)
    assert [(r.seen, r.last_iteration, r.resumed_from, r.first_iteration_seen) for r in log.restarts] == [(1.0, 1, 1, 3.0), (3.0, 3, 3, 5.0)]
    assert log.starts == {
        "node2": ["2026-11-30T01:00:00.000Z", "2026-11-30T01:00:02.000Z", "2026-11-30T01:00:03.000Z", "2026-11-30T01:00:04.000Z"],
        "node1": ["2026-11-30T01:00:01.000Z"],
    }


def test_evidence_checkpoint_sigterm_and_error_lines():
    log = follow.JobLog(seq_length=16)
    assert log.feed("node1", " megaprov compute | rank: 0 | rate (TFLOP/s): fast |", 0) is None
    log.feed("node1", " megaprov compute | rank: 0 |", 0)
    log.feed("node1", " megaprov straggler | rank: 0 | iterations: 1-10 |", 0)
    assert (log.launch_rates, log.rank_compute) == ({}, {})
    log.feed("node1", "  successfully saved checkpoint at iteration      30 to /c", 0)
    log.feed("node1", "  successfully loaded checkpoint from /c [ t 1/1 ] at iteration 30", 0)
    assert (log.saves, log.loads) == ([30], [30])
    log.feed("node1", "megaprov: node node1 (node rank 0): torchrun exited with -9 at 2026-11-30T01:00:09.000Z", 0)
    assert log.node_state("node1") == "failed--9"
    assert not log.sigterm
    log.feed("node1", "[rank0]: exiting program after receiving SIGTERM.", 0)
    assert log.sigterm
    for i in range(12):
        log.feed("node1", f"  RuntimeError: failure {i}  ", 0)
    log.feed("node1", "RuntimeError: failure 11", 0)  # once only
    assert log.errors == [f"RuntimeError: failure {i}" for i in range(2, 12)]  # the last ten


def test_log_reader_keeps_its_place_and_replaces_undecodable_bytes(tmp_path):
    path = tmp_path / "node.log"
    path.write_bytes(b"a\xff\n")
    reader = follow.LogReader(path, tmp_path)
    assert reader.lines() == ["a\ufffd"] and reader.lines() == []
    with path.open("ab") as handle:
        handle.write(b"b\nc")
    assert reader.lines() == ["b"] and reader.offset == 6 and reader.partial == b"c"


def test_gpu_sample_times_and_the_training_window(tmp_path):
    assert follow.gpu_samples(tmp_path / "absent.csv", tmp_path) == []
    path = tmp_path / "gpu.csv"
    path.write_bytes(b"2026/11/30 01:00:00.000, 0, 97, 40000, 81559\nwhenever, 1, 50, 1, 2\n\xff\xfe torn\n")  # a torn write
    rows = follow.gpu_samples(path, tmp_path)
    assert rows[0]["at"] == datetime(2026, 11, 30, 1, 0, 0).timestamp() and "at" not in rows[1]
    log = follow.JobLog(seq_length=16)
    log.feed("n", " [2026-11-30 01:00:00.250000] iteration 1/ 3 |", 0)
    assert follow.training_window(log) is None  # one time is no window
    log.feed("n", " [2026-11-30 01:00:10] iteration 2/ 3 |", 0)
    log.feed("n", " iteration 3/ 3 |", 0)
    start = datetime(2026, 11, 30, 1, 0, 0).timestamp()
    assert follow.training_window(log) == (start, start + 11.0)  # to the end of the last second logged
    log.iterations[2].logged_at, log.iterations[3].logged_at = "2026-13-45 99:00:00", "2026-11-30 01:00:20"  # not a time: skipped
    assert follow.training_window(log) == (start, start + 21.0)
    window = (start, start + 11.0)
    samples = [{"at": start - 0.5}, {"at": start}, {"at": start + 11.0}, {"at": start + 11.5}, {"util": 1.0}]
    assert follow.during(samples, window) == [{"at": start}, {"at": start + 11.0}, {"util": 1.0}]
    assert follow.during(samples, None) == samples


def test_metrics_record_and_the_prometheus_text():
    record = follow.metrics_record(follow.Iteration(4, 60, loss=float("inf"), grad_norm=float("nan"), lr=1e-3))
    assert record == {"iteration": 4, "total": 60, "seen": 0.0, "lr": 1e-3, "loss": "inf", "grad_norm": "nan", "skipped": 0, "nan": 0, "attempt": 0}
    log = follow.JobLog(seq_length=16)
    log.feed(
        "n",
        " iteration 7/ 60 | elapsed time per iteration (ms): 250.0 | throughput per GPU (TFLOP/s/GPU): 2.5 | global batch size: 2 | lm loss: 4.5 |",
        0,
    )
    log.saves = [5, 3]
    log.restarts = [follow.Restart(0.0, 7, 5)]
    targets = follow.Targets(
        expected_tokens_per_second=150.0, tokens_per_second_floor=120.0, save_interval=5, gpu_utilization_floor=0.8, log_interval=2
    )
    text = follow.prometheus_text("job-a", log, "running", targets)
    samples = {line.split("{")[0]: line for line in text.splitlines() if not line.startswith("#")}
    lab = '{job="job-a",node="n"}'
    assert samples == {
        name: f"{name}{lab} {value}"
        for name, value in {
            "megaprov_job_iteration": "7",
            "megaprov_job_train_iterations": "60",
            "megaprov_job_restarts_total": "1",
            "megaprov_job_checkpoint_iteration": "5",
            "megaprov_job_running": "1",
            "megaprov_job_expected_tokens_per_second": "150.0",
            "megaprov_job_tokens_per_second_floor": "120.0",
            "megaprov_job_save_interval_iterations": "5",
            "megaprov_job_gpu_utilization_floor_ratio": "0.8",
            "megaprov_job_stall_after_seconds": "60.0",  # 10 x 2 x 0.25 s is below the floor
            "megaprov_job_loss": "4.5",
            "megaprov_job_tokens_per_second": "128.0",
            "megaprov_job_tflops_per_gpu": "2.5",
            "megaprov_job_iteration_seconds": "0.25",
        }.items()
    }  # no last-progress time: the line was read at time 0
    assert "# TYPE megaprov_job_restarts_total counter\n" in text and "# TYPE megaprov_job_loss gauge\n" in text
    assert text.count("# HELP ") == text.count("# TYPE ") == len(samples)
    slow = follow.JobLog(seq_length=16)
    for i in range(1, 8):
        slow.feed("n2", f" iteration {i}/ 60 | elapsed time per iteration (ms): {9000.0 + i} | lm loss: nan |", 1000.0 + i)
    slow_text = follow.prometheus_text("j", slow, "running", follow.Targets(log_interval=1))
    assert 'megaprov_job_stall_after_seconds{job="j",node="n2"} 90.04\n' in slow_text  # 10 x the median 9.004 s
    assert 'megaprov_job_last_progress_timestamp_seconds{job="j",node="n2"} 1007.0\n' in slow_text
    assert 'megaprov_job_loss{job="j",node="n2"} NaN\n' in slow_text
    empty = follow.prometheus_text("j", follow.JobLog(seq_length=16), "finished")
    assert 'megaprov_job_running{job="j",node="unknown"} 0\n' in empty and 'megaprov_job_checkpoint_iteration{job="j",node="unknown"} 0\n' in empty
    assert "megaprov_job_loss" not in empty and "iteration_seconds" not in empty
    untimed = follow.JobLog(seq_length=16)
    untimed.feed("n", " iteration 1/ 60 | lm loss: 4.5 |", 0)  # no time logged: 0 s, not a made-up one
    assert 'megaprov_job_iteration_seconds{job="j",node="n"} 0.0\n' in follow.prometheus_text("j", untimed, "running")


def test_metrics_go_into_a_new_directory_and_append_writes_nothing_new_when_nothing_is(tmp_path):
    log = follow.JobLog(seq_length=16)
    feed_run(log, "n", [1, 2], 1.0)
    target = tmp_path / "a" / "metrics"
    follow.write_metrics(target, "j", log, "running")
    assert 'megaprov_job_running{job="j",node="n"} 1' in (target / "metrics.prom").read_text()
    assert [json.loads(line)["iteration"] for line in (target / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    follow.append_metrics(target, "j", [], log, "running")
    assert 'megaprov_job_running{job="j",node="n"} 1' in (target / "metrics.prom").read_text()
    follow.append_metrics(target, "j", [], log, "finished")
    assert len((target / "metrics.jsonl").read_text().splitlines()) == 2
    assert 'megaprov_job_running{job="j",node="n"} 0' in (target / "metrics.prom").read_text()
    assert sorted(p.name for p in target.iterdir()) == ["metrics.jsonl", "metrics.prom"]


def test_utc_now_is_an_iso_time_in_utc(monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Kolkata")  # a local time 5:30 ahead of UTC must not leak in
    time.tzset()
    try:
        before = datetime.now(UTC).replace(microsecond=0)
        stamp = follow.utc_now()
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp)
        assert before <= datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) <= datetime.now(UTC)
    finally:
        monkeypatch.undo()
        time.tzset()

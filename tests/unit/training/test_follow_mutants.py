"""The follower's bookkeeping of an elastic job, edge by edge: which runs of torchrun it records and what each keeps,
when two runs make a change and what the change says (the checkpoint it resumed from, the losses it compares), and
the restart and checkpoint lines at the edges of their windows. The broad stories are in test_follow.py and
test_elastic.py."""

import math

import pytest

from megaprov import untrusted
from megaprov.training import follow
from tests.unit.training.test_elastic import node_lines

START = "megaprov: node {h} (node rank {r}): torchrun starting at 2026-12-05T20:00:00.000Z on {n} nodes"


def stamped(i, loss, second=None, total=100):
    """A Megatron iteration line with the node's timestamp (second ``second``, default the iteration)."""
    s = i if second is None else second
    return f" [2026-12-05 20:{s // 60:02d}:{s % 60:02d}.000000] iteration {i:8d}/ {total} | lm loss: {loss} |"


def plain(i, loss, total=100):
    return f" iteration {i:8d}/ {total} | lm loss: {loss} |"


def fed(lines, log=None):
    """(host, line) pairs folded in order into a log (a new one with seq_length 128 unless given)."""
    log = log or follow.JobLog(128)
    for host, line in lines:
        log.feed(host, line, 0.0)
    return log


def change_fields(c):
    return (c.nodes_before, c.nodes_after, c.last_iteration, c.last_loss, c.first_iteration, c.first_loss, c.same_iteration_loss, c.resumed_from)


# ---- runs


def test_each_run_of_torchrun_that_logs_iterations_is_recorded_as_read():
    lines = [
        ("node2", plain(1, 9.0)),  # before any start line (a log from elsewhere): a run of its own, count unknown
        ("node2", START.format(h="node2", r=1, n=3)),
        ("node2", stamped(1, 5.0, 10)),
        ("node2", stamped(2, 4.5, 11)),
        ("node1", START.format(h="node1", r=0, n=3)),  # logs no iteration: no run
        ("node2", START.format(h="node2", r=1, n=2)),
        ("node2", stamped(2, 4.4, 30)),
        ("node2", stamped(3, 4.2, 31)),
        ("node2", stamped(4, 4.0, 32)),
    ]
    log = fed(lines)
    got = [(r.host, r.nodes, r.order, r.first, r.first_loss, r.first_at, r.last, r.last_loss, list(r.tail)) for r in log.runs]
    assert got == [
        ("node2", None, 0, 1, 9.0, None, 1, 9.0, [(1, 9.0)]),
        ("node2", 3, 1, 1, 5.0, "2026-12-05 20:00:10.000000", 2, 4.5, [(1, 5.0), (2, 4.5)]),
        ("node2", 2, 2, 2, 4.4, "2026-12-05 20:00:30.000000", 4, 4.0, [(2, 4.4), (3, 4.2), (4, 4.0)]),
    ]
    assert list(log.open_runs) == ["node2", "node1"] and log.open_runs["node1"].nodes == 3 and log.open_runs["node2"] is log.runs[2]
    assert [log.iterations[k].nodes for k in (1, 2, 3)] == [3, 2, 2]


def test_a_start_line_indented_by_the_launcher_is_still_a_start():
    log = fed([("node2", "  " + START.format(h="node2", r=1, n=2) + "\r")])
    assert (log.node_state("node2"), log.nodes_of, log.starts) == ("running", {"node2": 2}, {"node2": ["2026-12-05T20:00:00.000Z"]})


def test_a_run_keeps_only_its_last_run_tail_losses():
    log = fed([("n", START.format(h="n", r=0, n=2))] + [("n", plain(i, 1000.0 - i)) for i in range(1, follow.RUN_TAIL + 3)])
    [run] = log.runs
    assert len(run.tail) == follow.RUN_TAIL and run.tail[0] == (3, 997.0) and (run.first, run.last) == (1, follow.RUN_TAIL + 2)


# ---- which line of an iteration stands


def test_a_line_logged_in_the_same_second_as_one_read_earlier_replaces_it():
    log = fed([("node3", stamped(5, 4.0, 40)), ("node2", stamped(5, 3.0, 40))])
    assert log.iterations[5].loss == 3.0


def test_an_older_runs_line_read_late_is_returned_but_does_not_replace_the_newer():
    log = fed([("node2", stamped(5, 3.0, 41))])
    old = log.feed("node3", stamped(5, 4.0, 40), 7.0)
    assert old is not None and (old.iteration, old.loss, old.seen) == (5, 4.0, 7.0)
    assert log.iterations[5].loss == 3.0 and log.last_seen == 0.0
    unstamped = fed([("node2", stamped(5, 3.0, 41)), ("node3", plain(5, 4.0))])  # no time to compare: the later read stands
    assert unstamped.iterations[5].loss == 4.0


# ---- changes


def test_a_new_run_on_the_same_node_count_is_no_change():
    lines = [("node2", START.format(h="node2", r=1, n=3))] + [("node2", stamped(i, 5.0 - i / 10)) for i in range(1, 11)]
    lines += [("node2", START.format(h="node2", r=1, n=3))] + [("node2", stamped(i, 5.0 - i / 10, 100 + i)) for i in range(6, 11)]
    log = fed(lines)
    assert len(log.runs) == 2 and log.changes == []
    lines += [("node2", START.format(h="node2", r=1, n=2))] + [("node2", stamped(i, 5.0 - i / 10, 200 + i)) for i in range(9, 12)]
    assert [(c.nodes_before, c.nodes_after, c.last_iteration, c.first_iteration) for c in fed(lines).changes] == [(3, 2, 10, 9)]


def test_a_run_of_unknown_node_count_takes_no_part_in_the_changes():
    lines = [("node2", stamped(i, 6.0)) for i in (1, 2)]  # before any start line: count unknown
    lines += [("node2", START.format(h="node2", r=1, n=3))] + [("node2", stamped(i, 5.0)) for i in (3, 4)]
    lines += [("node2", START.format(h="node2", r=1, n=2))] + [("node2", stamped(i, 4.0, 10 + i)) for i in (4, 5)]
    assert [(c.nodes_before, c.nodes_after, c.last_iteration, c.first_iteration) for c in fed(lines).changes] == [(3, 2, 4, 4)]


def test_unstamped_runs_are_ordered_as_read_and_stamped_ones_by_their_first_time():
    """node3 (3 nodes, iterations 1-5) and node2 (2 nodes, 4-8), node2's file read first. Without timestamps the
    order they were read in is all there is: 2 -> 3 nodes. With them, node3's run came first: 3 -> 2."""
    node3 = [("node3", START.format(h="node3", r=2, n=3))]
    node2 = [("node2", START.format(h="node2", r=1, n=2))]
    untimed = fed(node2 + [("node2", plain(i, 5.0 - i / 10)) for i in range(4, 9)] + node3 + [("node3", plain(i, 5.0 - i / 10)) for i in range(1, 6)])
    assert [(c.nodes_before, c.nodes_after, c.last_iteration, c.first_iteration) for c in untimed.changes] == [(2, 3, 8, 1)]
    timed = fed(
        node2
        + [("node2", stamped(i, 5.0 - i / 10, 100 + i)) for i in range(4, 9)]
        + node3
        + [("node3", stamped(i, 5.0 - i / 10)) for i in range(1, 6)]
    )
    assert [(c.nodes_before, c.nodes_after, c.last_iteration, c.first_iteration) for c in timed.changes] == [(3, 2, 5, 4)]
    # one run without a time: the read order decides for all of them
    mixed = fed(node2 + [("node2", stamped(i, 5.0, 100 + i)) for i in range(4, 9)] + node3 + [("node3", plain(i, 5.0)) for i in range(1, 6)])
    assert [(c.nodes_before, c.nodes_after) for c in mixed.changes] == [(2, 3)]


def test_stamped_runs_that_started_in_the_same_second_keep_their_read_order():
    lines = [("a", START.format(h="a", r=0, n=2)), ("a", stamped(1, 5.0, 7))]
    lines += [("b", START.format(h="b", r=1, n=3)), ("b", stamped(1, 5.0, 7))]
    lines += [("c", START.format(h="c", r=2, n=4)), ("c", stamped(1, 5.0, 6))]
    assert [(c.nodes_before, c.nodes_after) for c in fed(lines).changes] == [(4, 2), (2, 3)]


def test_a_change_names_both_sides_losses_and_the_checkpoint():
    """3 nodes log 1-27, 2 nodes go on from the checkpoint at 20 (rank 0's load line) and log 21-30."""
    lines = [("node3", line) for line in node_lines("node3", 2, 3, "x", range(1, 28), loss=lambda i: 10.0 - i / 4)]
    lines += [("node1", "  successfully loaded checkpoint from /c [ t 1/1 ] at iteration 20")]
    lines += [("node2", line) for line in node_lines("node2", 1, 2, "x", range(21, 31), loss=lambda i: 9.0 - i / 4, stamp=100)]
    [c] = fed(lines).changes
    assert change_fields(c) == (3, 2, 27, 3.25, 21, 3.75, 4.75, 20) and c.lost_iterations == 7
    assert c.before == tuple((k, 10.0 - k / 4) for k in range(1, 28))  # fewer than 40: all of them, oldest first


def test_the_checkpoint_a_change_resumed_from_is_the_last_load_in_its_window():
    """log_interval 5: the new run's first logged iteration is 25, so it resumed from 20 to 24. Loads read: 19 (too
    early), 22, 21 and 25 (not before it): the last that fits, 21."""

    def log_with(loads):
        lines = [("node3", line) for line in node_lines("node3", 2, 3, "x", range(5, 31, 5))]
        lines += [("node1", f"  successfully loaded checkpoint from /c [ t 1/1 ] at iteration {x}") for x in loads]
        lines += [("node2", line) for line in node_lines("node2", 1, 2, "x", range(25, 41, 5), stamp=100)]
        return fed(lines, follow.JobLog(128, log_interval=5))

    assert [(c.first_iteration, c.resumed_from, c.lost_iterations) for c in log_with([19, 22, 21, 25]).changes] == [(25, 21, 9)]
    assert log_with([20]).changes[0].resumed_from == 20  # the window's first iteration fits
    assert log_with([22, 20]).changes[0].resumed_from == 20  # and is the last read
    assert log_with([25, 19]).changes[0].resumed_from == 20  # none fits: the interval says 20
    assert log_with([]).changes[0].resumed_from == 20


def test_a_change_whose_new_run_starts_from_scratch_resumed_from_0():
    lines = [("node3", line) for line in node_lines("node3", 2, 3, "x", range(1, 11))]
    lines += [("node2", line) for line in node_lines("node2", 1, 2, "x", range(1, 11), stamp=100)]
    [c] = fed(lines).changes
    assert (c.first_iteration, c.resumed_from, c.last_iteration, c.lost_iterations, c.same_iteration_loss) == (1, 0, 10, 10, pytest.approx(4.98))


def test_the_losses_before_a_change_are_the_last_40_finite_ones():
    losses = {i: 100.0 - i for i in range(1, 46)}
    losses[44] = float("nan")
    lines = [("node3", START.format(h="node3", r=2, n=3))] + [("node3", stamped(i, losses[i])) for i in range(1, 46)]
    lines += [("node3", stamped(46, "abc"))]  # no loss logged: not a point either
    lines += [("node2", START.format(h="node2", r=1, n=2)), ("node2", stamped(47, 50.0, 100))]
    [c] = fed(lines).changes
    assert [k for k, _ in c.before] == [*range(7, 44), 45] and all(math.isfinite(v) for _, v in c.before)
    assert (c.last_iteration, c.last_loss, c.first_loss, c.same_iteration_loss) == (46, None, 50.0, None)


# ---- restarts and checkpoint lines at the edges


def restarted(first, loads_before=(), loads_after=(), interval=5):
    """Iterations 5..25 every 5 on node2, a start line (the restart), then iteration ``first``, with load lines read
    before and after it."""
    log = follow.JobLog(128, log_interval=interval)
    lines = [("node2", START.format(h="node2", r=1, n=2))] + [("node2", plain(i, 5.0)) for i in range(5, 26, 5)]
    lines += [("node2", START.format(h="node2", r=1, n=2))]
    lines += [("node1", f"  successfully loaded checkpoint from /c [ t 1/1 ] at iteration {x}") for x in loads_before]
    lines += [("node2", plain(first, 5.0))]
    lines += [("node1", f"  successfully loaded checkpoint from /c [ t 1/1 ] at iteration {x}") for x in loads_after]
    return fed(lines, log)


@pytest.mark.parametrize(
    ("loads", "resumed"),
    [
        ((17,), 17),
        ((19,), 19),
        ((20,), 15),  # the iteration itself cannot be its checkpoint
        ((14,), 15),  # too early for a first line at 20
        ((16, 18), 18),  # the latest load read before it
    ],
)
def test_a_load_line_read_before_the_first_iteration_fits_it_or_not(loads, resumed):
    assert [(r.last_iteration, r.resumed_from, r.first_iteration) for r in restarted(20, loads_before=loads).restarts] == [(25, resumed, 20)]


@pytest.mark.parametrize(
    ("loads", "resumed"),
    [
        ((15,), 15),
        ((19,), 19),
        ((20,), 15),
        ((14,), 15),
        ((18, 16), 16),  # each fitting load line refines it: the latest read stands
        ((18, 15), 15),
    ],
)
def test_a_load_line_read_after_the_first_iteration_fits_it_or_not(loads, resumed):
    assert [(r.last_iteration, r.resumed_from, r.first_iteration) for r in restarted(20, loads_after=loads).restarts] == [(25, resumed, 20)]


def test_a_load_line_without_a_restart_is_only_counted():
    log = fed([("node1", "  successfully loaded checkpoint from /c [ t 1/1 ] at iteration 20")])
    assert (log.loads, log.restarts) == ([20], [])


def test_a_restart_from_the_first_iterations_resumed_from_0():
    log = fed([("n", plain(i, 5.0)) for i in (1, 2, 3)] + [("n", plain(1, 5.0))], follow.JobLog(128, log_interval=2))
    assert [(r.last_iteration, r.resumed_from, r.first_iteration, r.lost_iterations) for r in log.restarts] == [(3, 0, 1, 3)]


# ---- metrics


@pytest.mark.parametrize("write", ["append", "write"])
def test_the_metrics_files_export_the_jobs_targets(tmp_path, write):
    log = fed([("n", plain(1, 5.0))])
    targets = follow.Targets(expected_tokens_per_second=150.0, tokens_per_second_floor=120.0, save_interval=5, gpu_utilization_floor=0.8)
    if write == "append":
        follow.append_metrics(tmp_path, "j", log.series(), log, "running", targets)
    else:
        follow.write_metrics(tmp_path, "j", log, "running", targets)
    prom = (tmp_path / "metrics.prom").read_text()
    assert prom == follow.prometheus_text("j", log, "running", targets)
    assert 'megaprov_job_expected_tokens_per_second{job="j",node="n"} 150.0\n' in prom
    assert 'megaprov_job_save_interval_iterations{job="j",node="n"} 5\n' in prom


def test_infinite_values_are_written_as_prometheus_spells_them():
    for loss, written in ((float("inf"), "+Inf"), (float("-inf"), "-Inf")):
        log = fed([("n", plain(1, loss))])
        assert f'megaprov_job_loss{{job="j",node="n"}} {written}\n' in follow.prometheus_text("j", log, "running")


def timed(*ms):
    return fed([("n", f" iteration {i:8d}/ 100 | elapsed time per iteration (ms): {x} |") for i, x in enumerate(ms, 1)])


def test_the_stall_threshold_is_ten_logged_intervals_of_the_recent_median_step():
    assert follow.stall_after(follow.JobLog(128), 10) == 60.0  # nothing timed yet: the floor, whatever the interval
    assert follow.stall_after(timed(9000.0), 2) == 180.0  # 10 x 2 logged iterations x 9 s
    assert follow.stall_after(timed(9000.0), 0) == 90.0  # an interval below 1 counts as 1
    # the last 20 iterations only: 10 at 8 s and 10 at 12 s (the upper median, 12 s); the first, at 1 s, is left out
    assert follow.stall_after(timed(1000.0, *[8000.0] * 10, *[12000.0] * 10), 1) == 120.0


def test_a_long_gpu_sample_file_is_read_from_its_end(tmp_path, monkeypatch):
    path = tmp_path / "gpu.csv"
    row = "2026/11/30 01:00:0{s}.000, 0, {u}, 40000, 81559\n"
    path.write_text("".join(row.format(s=s, u=90 + s) for s in range(5)))
    monkeypatch.setattr(follow, "MAX_CSV_BYTES", len(row.format(s=0, u=90)) * 2 + 5)  # the last two rows and a torn one
    assert [r["util"] for r in follow.gpu_samples(path, tmp_path)] == [93.0, 94.0]


def test_a_link_in_place_of_the_gpu_samples_is_refused(tmp_path):
    real = tmp_path / "elsewhere.csv"
    real.write_text("2026/11/30 01:00:00.000, 0, 97, 40000, 81559\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "gpu.csv").symlink_to(real)
    with pytest.raises(untrusted.BadEntry):
        follow.gpu_samples(tmp_path / "logs" / "gpu.csv", tmp_path / "logs")
    assert len(follow.gpu_samples(tmp_path / "logs" / "gpu.csv", None)) == 1  # a file the operator named: followed


def test_the_prometheus_text_in_full():
    """Every series with its HELP and TYPE lines, as node-exporter's textfile collector serves them to Prometheus."""
    log = follow.JobLog(16)
    line = " iteration 7/ 60 | elapsed time per iteration (ms): 250.0 | throughput per GPU (TFLOP/s/GPU): 2.5 | global batch size: 2 | lm loss: 4.5 |"
    log.feed("n", line, 1700000000.25)
    log.saves, log.restarts = [5], [follow.Restart(0.0, 7, 5)]
    targets = follow.Targets(expected_tokens_per_second=150.0, tokens_per_second_floor=120.0, save_interval=5, gpu_utilization_floor=0.8)
    lab = '{job="a",node="n"}'
    expected = [
        ("megaprov_job_iteration", "Latest training iteration logged", "gauge", "7"),
        ("megaprov_job_train_iterations", "Iterations the job trains for", "gauge", "60"),
        ("megaprov_job_restarts_total", "Restarts that resumed from a checkpoint", "counter", "1"),
        ("megaprov_job_checkpoint_iteration", "Latest iteration saved in a checkpoint", "gauge", "5"),
        ("megaprov_job_running", "1 while the job runs", "gauge", "0"),
        ("megaprov_job_expected_tokens_per_second", "Throughput the verdict expects", "gauge", "150.0"),
        ("megaprov_job_tokens_per_second_floor", "Throughput below which the job is too slow", "gauge", "120.0"),
        ("megaprov_job_save_interval_iterations", "Iterations between two checkpoints", "gauge", "5"),
        ("megaprov_job_gpu_utilization_floor_ratio", "GPU utilisation the job must keep", "gauge", "0.8"),
        ("megaprov_job_stall_after_seconds", "Seconds without an iteration that make it stalled", "gauge", "60.0"),
        ("megaprov_job_last_progress_timestamp_seconds", "When the latest iteration was read (unix time)", "gauge", "1700000000.25"),
        ("megaprov_job_loss", "lm loss of the latest iteration", "gauge", "4.5"),
        ("megaprov_job_tokens_per_second", "Cluster throughput of the latest iteration", "gauge", "128.0"),
        ("megaprov_job_tflops_per_gpu", "TFLOP/s per GPU of the latest iteration", "gauge", "2.5"),
        ("megaprov_job_iteration_seconds", "Time per iteration", "gauge", "0.25"),
    ]
    text = "".join(f"# HELP {n} {h}\n# TYPE {n} {t}\n{n}{lab} {v}\n" for n, h, t, v in expected)
    assert follow.prometheus_text("a", log, "finished", targets) == text


def test_times_in_the_prometheus_text_are_rounded_to_the_millisecond():
    log = follow.JobLog(16)
    log.feed("n", " iteration 1/ 60 | elapsed time per iteration (ms): 9123.4567 |", 12.3456)
    text = follow.prometheus_text("a", log, "running")
    assert 'megaprov_job_stall_after_seconds{job="a",node="n"} 91.235\n' in text  # 10 x 9.1234567 s
    assert 'megaprov_job_last_progress_timestamp_seconds{job="a",node="n"} 12.346\n' in text


# ---- the log reader


def test_a_log_truncated_or_replaced_is_read_again_from_its_start(tmp_path):
    path = tmp_path / "node.log"
    path.write_text("aaaa\nbb")
    reader = follow.LogReader(path, tmp_path)
    assert reader.lines() == ["aaaa"] and (reader.offset, reader.partial) == (7, b"bb")
    path.write_text("x\ny\n")  # shorter than what was read: a new file, its torn line forgotten
    assert reader.lines() == ["x", "y"] and (reader.offset, reader.partial) == (4, b"")


def test_a_large_backlog_is_read_over_several_looks(tmp_path, monkeypatch):
    monkeypatch.setattr(follow, "MAX_READ", 4)
    path = tmp_path / "node.log"
    path.write_text("abc\ndef\n")
    reader = follow.LogReader(path, tmp_path)
    assert [reader.lines(), reader.lines(), reader.lines()] == [["abc"], ["def"], []]


def test_a_line_without_an_end_is_taken_as_it_is_once_longer_than_the_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(follow, "MAX_PARTIAL", 3)
    path = tmp_path / "node.log"
    path.write_text("abc")
    reader = follow.LogReader(path, tmp_path)
    assert reader.lines() == [] and reader.partial == b"abc"  # at the bound: still waiting for its end
    with path.open("a") as handle:
        handle.write("d")
    assert reader.lines() == ["abcd"] and reader.partial == b""
    with path.open("a") as handle:
        handle.write("e\n")
    assert reader.lines() == ["e"]

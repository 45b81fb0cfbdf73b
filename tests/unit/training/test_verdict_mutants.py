"""The elastic part of the verdict, number by number: how the final series is cut into segments and which change
each one came in by, the continuity bound (a Theil-Sen line and the MAD of its residuals, worked out by hand on
losses that are exact binary fractions), the sample-order and per-segment throughput sentences at their thresholds,
when judge swaps the whole-run throughput for the segments', and the changes and segments in the report. The
non-elastic checks are in test_verdict.py, the log side in test_follow_mutants.py."""

import pytest

from megaprov.training import follow, verdict
from tests.unit.training.test_elastic import elastic_logs, feed, node_lines
from tests.unit.training.test_verdict import series

JOB = {"name": "x", "nodes": 3, "gpus_per_node": 1, "trainer": "lab"}


def its(first, last, nodes, tps=None):
    return [follow.Iteration(i, 100, nodes=nodes, tokens_per_second=tps(i) if tps else None) for i in range(first, last + 1)]


def change(nodes_before, nodes_after, first_iteration, **fields):
    """A change into ``nodes_after`` at ``first_iteration``; the other fields as given, else neutral."""
    defaults = {"last_iteration": first_iteration + 4, "last_loss": None, "first_loss": None, "same_iteration_loss": None}
    return follow.Change(nodes_before, nodes_after, first_iteration=first_iteration, **{"resumed_from": first_iteration - 1, **defaults, **fields})


# ---- segments


def test_segments_follow_the_node_count_of_each_iteration_and_find_the_change_into_each():
    rates = {2: 10.0, 3: 20.0, 4: 300.0, 5: 400.0, 9: 500.0, 10: 700.0}
    logged = its(1, 1, None) + its(2, 5, 3, rates.get) + its(6, 8, 2) + its(9, 10, 3, rates.get) + its(11, 11, None)
    changes = [
        change(2, 3, 2, last_iteration=90),  # would match the first segment: the first has no change into it
        change(2, 3, 9, last_iteration=70),  # an older change into the same segment: the latest one stands
        change(3, 2, 6, last_iteration=8, last_loss=4.5, first_loss=4.4, same_iteration_loss=4.6, resumed_from=5),
        change(3, 2, 7, last_iteration=99),  # the right count but not where the segment starts
        change(2, 3, 9, last_iteration=12, resumed_from=8),
        change(3, 4, 9, last_iteration=99),  # where it starts but another count
    ]
    parts = verdict.segments(logged, changes, {3: 300.0})
    assert parts == [
        # 10 and 20 are its start-up iterations: the median of 300 and 400
        verdict.Segment(3, 2, 5, 350.0, 300.0),
        verdict.Segment(2, 6, 8, None, None, 3, 4.5, 4.4, 4.6),  # nothing measured, nothing expected of 2 nodes
        verdict.Segment(3, 9, 10, 600.0, 300.0, 4),  # two iterations only: both count
    ]


def test_a_segment_keeps_the_count_it_was_logged_with():
    assert verdict.segments(its(1, 1, 0), [], {0: 5.0, 1: 7.0}) == [verdict.Segment(0, 1, 1, None, 5.0)]
    assert verdict.segments(its(1, 2, None), [], {}) == []
    # a count that changed with no change read for it (its runs' lines lost): nothing lost, no losses to show
    assert verdict.segments(its(1, 1, 3) + its(2, 2, 2), [], {}) == [verdict.Segment(3, 1, 1, None, None), verdict.Segment(2, 2, 2, None, None)]


# ---- continuity


def stairs(first, last):
    """Losses 10 - k/4 with noise +1/8 at odd k and -1/8 at even k: exact binary fractions. Of the pairwise slopes
    of 20 such points, the 90 of equal parity are -1/4 exactly, 55 lie above and 45 below (or the other way round):
    the Theil-Sen slope is -1/4; every y + k/4 is 10 +- 1/8, so the intercept is 10 and every residual 1/8: noise
    1.4826/8 = 0.185325, bound 4 x that = 0.7413 (+ 1e-6 x the reference)."""
    return tuple((k, 10.0 - k / 4 + (0.125 if k % 2 else -0.125)) for k in range(first, last + 1))


def test_continuity_holds_the_first_loss_to_the_same_iteration_before_within_the_runs_noise():
    c = change(3, 2, 22, last_iteration=25, resumed_from=20, first_loss=4.6, same_iteration_loss=4.5, before=stairs(1, 25))
    assert verdict.continuity_check([], [c]) == verdict.Check(
        "elastic continuity",
        verdict.PASS,
        "3->2 nodes at iteration 22 (resumed from 20, 5 lost): loss 4.6000 vs 4.5000 from the same iteration before the change"
        " (|d| 0.1000, bound 0.7413)",
    )


def test_continuity_without_the_same_iteration_holds_it_to_the_trend_of_the_last_20():
    # only the last 20 (6-25) count: iterations 1-5 far off the line would move neither the slope nor the noise
    before = tuple((k, 50.0) for k in range(1, 6)) + stairs(6, 25)
    c = change(3, 2, 22, last_iteration=25, resumed_from=20, first_loss=5.3, before=before)
    # the trend at 22: 10 - 22/4 = 4.5; 0.8 away is beyond 0.7413
    assert verdict.continuity_check([], [c]) == verdict.Check(
        "elastic continuity",
        verdict.FAIL,
        "the loss jumped at a change: 3->2 nodes at iteration 22 (resumed from 20, 5 lost): loss 5.3000 vs 4.5000 from the trend of"
        " iterations 6-25 (|d| 0.8000, bound 0.7413)",
    )
    inside = change(3, 2, 22, last_iteration=25, resumed_from=20, first_loss=5.2, before=before)
    assert verdict.continuity_check([], [inside]).status == verdict.PASS  # 0.7 is within


def test_on_a_noiseless_curve_the_bound_is_a_millionth_of_the_loss():
    line = tuple((k, 30.0 - k / 2) for k in range(1, 21))  # noise 0; the trend at 22 is 19
    near = change(3, 2, 22, first_loss=19.0 + 1.5e-5, before=line)  # bound 1.9e-5
    far = change(3, 2, 22, first_loss=19.0 + 2.5e-5, before=line)
    assert [verdict.continuity_check([], [c]).status for c in (near, far)] == [verdict.PASS, verdict.FAIL]
    # a loss exactly on a curve that reached 0: a bound of 0, and a difference of 0 is no jump
    to_zero = tuple((k, 20.0 - k) for k in range(1, 21))
    exact = change(3, 2, 20, first_loss=0.0, same_iteration_loss=0.0, before=to_zero)
    assert verdict.continuity_check([], [exact]).status == verdict.PASS


def test_continuity_needs_five_losses_before_and_one_after():
    five = change(3, 2, 22, first_loss=4.5, same_iteration_loss=4.5, resumed_from=20, last_iteration=25, before=stairs(21, 25))
    four = change(2, 3, 40, first_loss=4.5, resumed_from=39, last_iteration=41, before=stairs(22, 25))
    none_after = change(3, 2, 50, first_loss=None, resumed_from=49, last_iteration=51, before=stairs(1, 25))
    check = verdict.continuity_check([], [five, four, none_after])
    assert check.status == verdict.PASS
    parts = check.detail.split("; ")
    assert parts[0].startswith("3->2 nodes at iteration 22 (resumed from 20, 5 lost): loss 4.5000 vs 4.5000 from the same iteration")
    assert parts[1:] == [
        "2->3 nodes at iteration 40 (resumed from 39, 2 lost): too few losses to compare",
        "3->2 nodes at iteration 50 (resumed from 49, 2 lost): too few losses to compare",
    ]


def test_every_jump_is_named_and_only_the_jumps():
    good = change(3, 2, 22, last_iteration=25, resumed_from=20, first_loss=4.6, same_iteration_loss=4.5, before=stairs(1, 25))
    bad = change(2, 3, 30, last_iteration=31, resumed_from=29, first_loss=9.0, same_iteration_loss=2.5, before=stairs(1, 25))
    worse = change(3, 1, 40, last_iteration=40, resumed_from=39, first_loss=1.0, same_iteration_loss=2.5, before=stairs(1, 25))
    assert verdict.continuity_check([], [good, bad, worse]) == verdict.Check(
        "elastic continuity",
        verdict.FAIL,
        "the loss jumped at a change: 2->3 nodes at iteration 30 (resumed from 29, 2 lost): loss 9.0000 vs 2.5000 from the same"
        " iteration before the change (|d| 6.5000, bound 0.7413); 3->1 nodes at iteration 40 (resumed from 39, 1 lost): loss 1.0000"
        " vs 2.5000 from the same iteration before the change (|d| 1.5000, bound 0.7413)",
    )
    assert verdict.continuity_check([], []) == verdict.Check("elastic continuity", verdict.SKIP, "skipped: the node count never changed")


# ---- sample order and the segments' throughput


def test_sample_order_sentences():
    logged = [follow.Iteration(i, 100, consumed_samples=i * 12) for i in range(1, 11)] + [follow.Iteration(11, 100)]
    assert verdict.sample_order_check(logged, 12) == verdict.Check(
        "sample order", verdict.PASS, "consumed samples = iteration x 12 at all 10 logged iterations"
    )
    logged[5].consumed_samples, logged[8].consumed_samples = 84, 96
    assert verdict.sample_order_check(logged, 12) == verdict.Check(
        "sample order", verdict.FAIL, "iteration 6 had consumed 84 samples, not 72 (iteration x global batch 12): 2 iteration(s) off"
    )
    assert verdict.sample_order_check([follow.Iteration(1, 100)], 12) == verdict.Check(
        "sample order", verdict.SKIP, "skipped: no iteration logged its consumed samples"
    )


def test_segment_throughput_sentences_and_the_threshold():
    parts = [
        verdict.Segment(3, 1, 20, None, 300.0),
        verdict.Segment(2, 21, 50, 1000.0, 2000.0),  # exactly 0.5 x: enough
        verdict.Segment(4, 51, 60, 1500.0, None),
    ]
    assert verdict.segment_throughput_check(parts, 0.5) == verdict.Check(
        "segment throughput",
        verdict.PASS,
        "3 nodes (iterations 1-20): no measure; 2 nodes (iterations 21-50): 1,000 tokens/s of 2,000 expected (0.50x);"
        " 4 nodes (iterations 51-60): no measure",
    )
    parts += [verdict.Segment(3, 61, 70, 2999.0, 6000.0), verdict.Segment(2, 71, 80, 100.0, 4000.0)]
    assert verdict.segment_throughput_check(parts, 0.5) == verdict.Check(
        "segment throughput",
        verdict.FAIL,
        "below 0.5 x its expectation: 3 nodes (iterations 61-70): 2,999 tokens/s of 6,000 expected (0.50x); 2 nodes (iterations 71-80):"
        " 100 tokens/s of 4,000 expected (0.03x)",
    )


# ---- judge


def judged(log, expected, **kw):
    return verdict.judge(log, ["node1", "node2", "node3"], 20, 30_000.0, 0.8, "test", False, 0.0, {}, elastic=(expected, 12), **kw)[0]


def test_one_segment_on_the_full_count_keeps_the_whole_runs_throughput_check():
    log = feed({"node3": node_lines("node3", 2, 3, "x", range(1, 61))})
    check = judged(log, {3: 20_000.0, 2: 15_000.0}).checks[2]
    assert check.name == "throughput" and check.detail.startswith("too slow: median 15,360 tokens/s, expected 30,000 (test)")
    two = feed({"node3": node_lines("node3", 2, 3, "x", range(1, 28)), "node2": node_lines("node2", 1, 2, "x", range(21, 61), stamp=100)})
    check = judged(two, {3: 15_000.0, 2: 15_000.0}).checks[2]
    assert check == verdict.Check(
        "segment throughput",
        verdict.PASS,
        "3 nodes (iterations 1-20): 15,360 tokens/s of 15,000 expected (1.02x); 2 nodes (iterations 21-60): 15,360 tokens/s of 15,000"
        " expected (1.02x)",
    )


def test_a_busier_machine_lowers_each_segments_expectation_too():
    log = feed(elastic_logs())
    log.launch_rates = {"node2": {1: 0.01}, "node3": {2: 0.01}}
    stored = {"node1": 0.02, "node2": 0.02, "node3": 0.02}
    expected = {3: 30_000.0, 2: 20_000.0}
    scaled = judged(log, expected, stored_rates=stored, follow_load=True)
    assert scaled.checks[2] == verdict.Check(
        "segment throughput",
        verdict.PASS,
        "3 nodes (iterations 1-20): 15,360 tokens/s of 15,000 expected (1.02x); 2 nodes (iterations 21-50): 15,360 tokens/s of 10,000"
        " expected (1.54x); 3 nodes (iterations 51-100): 15,360 tokens/s of 15,000 expected (1.02x)",
    )
    assert judged(log, expected, stored_rates=stored).checks[2].status == verdict.FAIL  # not scaled: 0.51x of 30,000
    assert scaled.checks[5].status == verdict.PASS and scaled.checks[5].detail.startswith("3->2 nodes at iteration 21 (resumed from 20, 7 lost)")
    assert scaled.checks[6] == verdict.Check("sample order", verdict.PASS, "consumed samples = iteration x 12 at all 100 logged iterations")


def test_a_run_exactly_at_the_floor_but_held_back_is_not_called_too_slow():
    check, measured = verdict.throughput_check(series([1.0] * 10), 1250.0, 0.8, "spec", [], {"a": 100.0, "b": 400.0})
    assert measured == 1000.0 and check.status == verdict.FAIL
    assert check.detail.startswith("held back by a slow node: median 1,000 tokens/s, expected 1,250 (spec) x 0.8 = 1,000, but the job ran")


# ---- the report


def test_the_report_lists_each_change_and_segment():
    log = feed(elastic_logs())
    parts = verdict.segments(log.series(), log.changes, {3: 300.0})
    report = verdict.report_dict(JOB, verdict.Verdict(True), log, 1.0, {}, {}, parts)
    assert report["changes"] == [
        {
            "nodes_before": 3,
            "nodes_after": 2,
            "last_iteration": 27,
            "resumed_from": 20,
            "lost_iterations": 7,
            "first_iteration": 21,
            "loss_before": pytest.approx(4.46),
            "loss_after": pytest.approx(4.58),
            "loss_before_same_iteration": pytest.approx(4.58),
        },
        {
            "nodes_before": 2,
            "nodes_after": 3,
            "last_iteration": 60,
            "resumed_from": 50,
            "lost_iterations": 10,
            "first_iteration": 51,
            "loss_before": pytest.approx(3.8),
            "loss_after": pytest.approx(3.98),
            "loss_before_same_iteration": pytest.approx(3.98),
        },
    ]
    assert report["segments"][1] == {
        "nodes": 2,
        "first": 21,
        "last": 50,
        "tokens_per_second": pytest.approx(15_360.0),
        "expected": None,
        "lost_iterations": 7,
        "loss_before": pytest.approx(4.46),
        "loss_after": pytest.approx(4.58),
        "same_iteration_before": pytest.approx(4.58),
    }
    assert list(report)[-5:] == ["changes", "segments", "errors", "timing", "commands"]
    empty = verdict.report_dict(JOB, verdict.Verdict(True), follow.JobLog(128), 1.0, {}, {}, [])
    assert (empty["changes"], empty["segments"]) == ([], [])


def test_the_segments_table_marks_what_is_not_known():
    parts = [
        verdict.Segment(3, 1, 20, 1500.4, None),
        verdict.Segment(2, 21, 50, None, 200.0, 7, 4.46, 4.58),
        verdict.Segment(3, 51, 60, 300.0, 200.0, 1, 4.0, None),
        verdict.Segment(2, 61, 70, 300.0, 200.0, 1, None, 3.5),
    ]
    report = verdict.report_dict(JOB, verdict.Verdict(True), follow.JobLog(128), 1.0, {}, {}, parts)
    text = verdict.render_markdown(report)
    table = text.split("## Segments (launch.elastic)\n\n", 1)[1].split("\n\n", 1)[0]
    assert table.splitlines() == [
        "| nodes | iterations | tokens/s | expected | ratio | lost at its start | loss before -> after |",
        "|---|---|---|---|---|---|---|",
        "| 3 | 1-20 | 1,500 | - | - | 0 |  |",
        "| 2 | 21-50 | - | 200 | - | 7 | 4.4600 -> 4.5800 |",
        "| 3 | 51-60 | 300 | 200 | 1.50 | 1 |  |",
        "| 2 | 61-70 | 300 | 200 | 1.50 | 1 |  |",
    ]
    # the section follows the summary and the restarts, it does not replace them
    assert text.startswith("# megaprov job x: PASSED\n\n3 node(s) x 1 process(es), trainer lab, 0/0 iterations.\n")
    assert text.index("![loss and throughput](report.png)") < text.index("## Segments") < text.index("## Timing")
    none = verdict.render_markdown(verdict.report_dict(JOB, verdict.Verdict(True), follow.JobLog(128), 1.0, {}, {}, []))
    assert "## Segments" not in none


def test_tflops_per_gpu_keeps_two_significant_digits_only_below_a_tenth():
    assert [verdict._tflops_per_gpu(x) for x in (0.004, 0.0999, 0.1, 0.5, 1.234, 312.456, 0.0)] == [
        "0.004",
        "0.1",  # 0.0999 to two significant digits
        "0.10",
        "0.50",
        "1.23",
        "312.46",
        "0.00",
    ]

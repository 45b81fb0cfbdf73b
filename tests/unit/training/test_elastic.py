"""launch.elastic: the policy in the spec, the node counts the planner lets a job continue on, what the launchers
render for it (the Slurm batch script run for real by bash with Slurm's commands stood in), the log's segments and
changes whatever order the nodes' files are read in, and the verdict's continuity, sample-order and per-segment checks."""

import os
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from megaprov.errors import UsageError
from megaprov.training import elastic, follow, jobmeta, jobview, nodefacts, planner, render, verdict
from megaprov.training.jobspec import JobSpecError, parse

ROOT = Path(__file__).resolve().parents[3]
LAB = (ROOT / "examples" / "jobs" / "lab-elastic.yml").read_text()


def lab_spec(**changes):
    s = parse(LAB)
    for section, values in changes.items():
        s = s.model_copy(update={section: getattr(s, section).model_copy(update=values)})
    return s


def cpu_cluster(nodes=3, shared="/shared"):
    return nodefacts.KnownCluster(nodes, 1, planner.GPUS["cpu"], shared, tuple(f"node{i + 1}" for i in range(nodes)), stack=nodefacts.ROLE_DEFAULTS)


def refusal(text, world=None, gpus=None):
    s = parse(text)
    problems = planner.spec_problems(s, world, gpus)
    return [p.message + "; " + p.fix for p in problems]


# ---- the policy


def test_the_example_continues_on_two_of_its_three_nodes_with_the_same_global_batch():
    s = parse(LAB)
    assert s.launch.elastic is not None and s.launch.elastic.min_nodes == 2
    assert planner.spec_problems(s, 3, 1) == []
    assert planner.elastic_counts(s, 3, 1) == [3, 2]
    planned = planner.plan(s, cpu_cluster())
    assert (planned.data_parallel, planned.microbatches_per_step, planned.min_nodes) == (3, 2, 2)
    [two] = planned.continuations
    assert (two.nodes, two.data_parallel, two.microbatches_per_step) == (2, 2, 3)  # 2 x 2 x 3 = 12 = 2 x 3 x 2
    assert two.tokens_per_second < planned.tokens_per_second
    text = jobview.elastic_text(planned)
    assert text.startswith("elastic: runs on 3 nodes (DP 3 x 2 micro-batches); after a node is lost continues on 2 (DP 2 x 3,")
    assert text.endswith("the global batch 12 kept")
    assert jobview.plan_dict(planned)["continues_on"][0]["nodes"] == 2


def test_without_the_policy_nothing_changes():
    s = lab_spec(launch={"elastic": None})
    assert planner.elastic_counts(s, 3, 1) == [3]
    planned = planner.plan(s, cpu_cluster())
    assert planned.continuations == () and planned.min_nodes is None


def test_min_nodes_above_the_job_is_refused_in_one_line():
    text = LAB.replace("min_nodes: 2", "min_nodes: 4")
    assert refusal(text) == ["launch.elastic.min_nodes=4 is larger than the job's launch.nodes=3; use a min_nodes from 1 to 3"]


def test_a_checkpoint_that_does_not_reshard_is_refused():
    text = LAB.replace("format: torch_dist", "format: torch")
    [message] = refusal(text)
    assert message.startswith("launch.elastic needs checkpoint.format=torch_dist (a torch checkpoint does not reshard")
    assert message.endswith("set checkpoint.format: torch_dist, or drop launch.elastic")
    assert refusal(LAB.replace("  format: torch_dist", "  resume: never\n  format: torch_dist")) == [
        "launch.elastic needs checkpoint.resume=auto (it continues from the latest checkpoint); set resume: auto"
    ]


def test_a_min_nodes_whose_layout_cannot_keep_the_global_batch_is_refused_naming_the_counts_that_can():
    text = LAB.replace("global_batch_size: 12", "global_batch_size: 6")  # 3 x 2 = 6; 2 nodes: 2 x 2 = 4 does not divide 6
    assert refusal(text, 3, 1) == [
        "launch.elastic.min_nodes=2: on 2 node(s) (2 GPUs) the layout cannot keep train.global_batch_size=6 (micro_batch_size x data"
        " parallel must divide it); use min_nodes 1"
    ]
    # checked where the world is known: without it the spec alone is valid
    assert refusal(text) == []


def test_counts_between_that_cannot_keep_the_batch_are_skipped_not_refused():
    s = lab_spec(launch={"nodes": 4}, train={"global_batch_size": 8})  # 4 nodes x micro 2: DP 4; 3 nodes: 6 does not divide 8
    s = s.model_copy(update={"launch": s.launch.model_copy(update={"elastic": s.launch.elastic.model_copy(update={"min_nodes": 2})})})
    assert planner.spec_problems(s, 4, 1) == []
    assert planner.elastic_counts(s, 4, 1) == [4, 2]
    planned = planner.plan(s, cpu_cluster(4))
    assert [c.nodes for c in planned.continuations] == [2]
    assert "not on 3 (the layout cannot keep the global batch there)" in jobview.elastic_text(planned)


@pytest.mark.parametrize(
    ("world", "tp", "pp", "vp", "micro", "batch", "keeps"),
    [
        (8, 2, 2, None, 1, 8, True),  # DP 2
        (6, 2, 2, None, 1, 8, False),  # 6 is not a multiple of TP x PP = 4
        (12, 2, 2, None, 1, 8, False),  # DP 3 does not divide 8
        (2, 2, 2, None, 1, 8, False),  # fewer GPUs than one model replica
        (8, 1, 2, 2, 1, 8, True),  # DP 4, 2 micro-batches per step: a multiple of PP 2
        (16, 1, 2, 2, 1, 8, False),  # DP 8, 1 micro-batch: the interleaved schedule needs a multiple of PP
    ],
)
def test_keeps_batch(world, tp, pp, vp, micro, batch, keeps):
    s = lab_spec(parallel={"tensor": tp, "pipeline": pp, "virtual_stages": vp}, train={"micro_batch_size": micro, "global_batch_size": batch})
    assert planner.keeps_batch(s, world) is keeps


def test_a_count_that_does_not_fit_memory_is_not_used():
    doc = yaml.safe_load((ROOT / "examples" / "jobs" / "llama-8b-2nodes.yml").read_text())
    doc["launch"].update({"nodes": 4, "elastic": {"min_nodes": 1}})
    doc["checkpoint"]["format"] = "torch_dist"
    s = parse(yaml.safe_dump(doc))
    base = planner.without_elastic(s)
    h100 = planner.GPUS["H100-SXM"]
    need = {n: planner.plan(base, nodefacts.KnownCluster(n, 8, h100, "/shared", stack=nodefacts.ROLE_DEFAULTS)).memory.total for n in (4, 2, 1)}
    # the distributed optimizer's shard grows as data parallelism shrinks: fewer nodes need more memory per GPU
    assert need[4] < need[2] < need[1]
    # a GPU with room for 4 and 2 nodes' needs but not for 1 node's
    gib = (need[2] + need[1]) / 2 / planner.GIB
    gpu = replace(h100, name="test-gpu", memory_gib=gib)
    cluster = nodefacts.KnownCluster(4, 8, gpu, "/shared", tuple(f"node{i + 1}" for i in range(4)), stack=nodefacts.ROLE_DEFAULTS)
    planned = planner.plan(s, cluster)
    # 3 nodes do not keep the global batch (DP 12 does not divide it); 1 node does not fit
    assert planned.fits and [(c.nodes, c.fits) for c in planned.continuations] == [(2, True), (1, False)]
    assert 1 not in planner.usable_counts(s, cluster)
    assert "not on 1 (does not fit memory)" in jobview.elastic_text(planned)
    loop = next(line for line in render.sbatch_script(s, cluster).splitlines() if line.startswith("use=0; for n in"))
    assert loop.startswith("use=0; for n in 4 2; do")


# ---- what the launchers render


def test_the_systemd_start_line_carries_the_node_count_only_with_the_policy():
    s = parse(LAB)
    out = render.render(s, cpu_cluster(2), [("node1", "10.0.0.1"), ("node2", "10.0.0.2")])
    assert 'torchrun starting at $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ) on 2 nodes"' in out.nodes[0].script
    assert out.nodes[0].argv[out.nodes[0].argv.index("--nnodes") + 1] == "2"
    plain = render.render(lab_spec(launch={"elastic": None}), cpu_cluster(2), [("node1", "10.0.0.1"), ("node2", "10.0.0.2")])
    assert "on 2 nodes" not in plain.nodes[0].script


def test_the_parser_files_each_iteration_under_the_node_count_of_its_run():
    line = "megaprov: node node2 (node rank 1): torchrun starting at 2026-12-05T20:01:48.546Z on 2 nodes"
    log = follow.JobLog(128)
    log.feed("node2", line, 0)
    it = log.feed("node2", " [2026-12-05 20:01:55.144377] iteration       27/     120 | consumed samples: 324 | lm loss: 2.36 |", 1)
    assert it is not None and it.nodes == 2 and log.node_state("node2") == "running"
    # a start line without the count (an older megaprov, a job without the policy) is read as before
    log.feed("node3", "megaprov: node node3 (node rank 2): torchrun starting at 2026-12-05T20:01:48.546Z", 0)
    assert log.node_state("node3") == "running" and "node3" not in log.nodes_of


# ---- the Slurm batch script, run by bash with Slurm's commands stood in


STUBS = {
    "scontrol": 'printf "%s\\n" $STUB_NODES',
    "srun": 'echo "$@" >>"$STUB_DIR/srun.log"; while [ "${STUB_SRUN_WAIT:-0}" = 1 ] && [ ! -e "$STUB_DIR/scancelled" ]; do sleep 0.05; done;'
    ' exit "${STUB_SRUN_RC:-1}"',
    "sbatch": 'echo "$@" >>"$STUB_DIR/sbatch.log"; echo 4243',
    "scancel": 'echo "$@" >>"$STUB_DIR/scancel.log"; touch "$STUB_DIR/scancelled"',
}


def batch_run(tmp_path, s, nodes, allocation, srun_rc=1, wait=False):
    """Render s's batch script for a cluster of ``nodes`` with the shared directory under tmp_path, and start it under
    bash with an allocation of ``allocation`` nodes; returns the process and the stub directory."""
    shared = tmp_path / "shared"
    cluster = cpu_cluster(nodes, str(shared))
    script = render.sbatch_script(s, cluster)
    jdir = shared / "jobs" / s.name
    (jdir / "launch").mkdir(parents=True)
    (jdir / "logs").mkdir()
    (jdir / "launch" / "job.sbatch").write_text(script)
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name, body in STUBS.items():
        (stubs / name).write_text(f"#!/bin/bash\n{body}\n")
        (stubs / name).chmod(0o755)
    names = " ".join(f"node{i + 1}" for i in range(allocation))
    env = {
        **os.environ,
        "PATH": f"{stubs}:{os.environ['PATH']}",
        "STUB_DIR": str(tmp_path),
        "STUB_NODES": names,
        "STUB_SRUN_RC": str(srun_rc),
        "STUB_SRUN_WAIT": "1" if wait else "0",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": f"node[1-{allocation}]",
        "SLURM_JOB_NUM_NODES": str(allocation),
    }
    proc = subprocess.Popen(["bash", str(jdir / "launch" / "job.sbatch")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, jdir


def test_the_batch_script_asks_for_the_node_range_and_outlives_a_failed_node():
    head = [line for line in render.sbatch_script(parse(LAB), cpu_cluster()).splitlines() if line.startswith("#SBATCH")]
    # a range from the first submission (a requeue keeps the request); no tasks per node (with a range Slurm would then
    # allocate the minimum); --no-kill: a failed node ends the step, not the job, and the continuation follows at once
    assert "#SBATCH --nodes=2-3" in head and "#SBATCH --no-kill" in head
    assert not any(line.startswith("#SBATCH --ntasks-per-node") for line in head)
    plain = render.sbatch_script(lab_spec(launch={"elastic": None}), cpu_cluster()).splitlines()
    assert "#SBATCH --nodes=3" in plain and "#SBATCH --ntasks-per-node=1" in plain and "#SBATCH --no-kill" not in plain


def test_a_failed_elastic_allocation_continues_asking_for_the_node_range(tmp_path):
    proc, jdir = batch_run(tmp_path, parse(LAB), 3, 3)
    assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""
    srun = (tmp_path / "srun.log").read_text()
    assert "--nodes=3 --nodelist=node1,node2,node3" in srun
    sbatch = (tmp_path / "sbatch.log").read_text().split()
    assert sbatch[:3] == ["--parsable", "--nodes=2-3", "--dependency=afterany:4242"]
    events = (jdir / "logs" / "slurm.log").read_text()
    assert "running on node[1-3] (training on 3 of its 3 nodes)" in events
    assert "failed with status 1 (restart 1 of 3): continues as slurm job 4243" in events
    assert (jdir / "launch" / "nodes").read_text().split() == ["node1", "node2", "node3"]


def test_an_allocation_of_fewer_nodes_trains_on_the_largest_count_that_keeps_the_batch(tmp_path):
    s = lab_spec(launch={"nodes": 4, "launcher": "slurm"}, train={"global_batch_size": 8})  # counts 4 and 2, not 3
    proc, jdir = batch_run(tmp_path, s, 4, 3, srun_rc=0)
    assert proc.wait(timeout=30) == 0
    assert "--nodes=2 --nodelist=node1,node2" in (tmp_path / "srun.log").read_text()
    assert (jdir / "launch" / "nodes").read_text().split() == ["node1", "node2"]
    assert "(training on 2 of its 3 nodes)" in (jdir / "logs" / "slurm.log").read_text()
    assert "finished" in (jdir / "logs" / "slurm.log").read_text()


def test_an_allocation_below_min_nodes_ends_with_its_reason(tmp_path):
    proc, jdir = batch_run(tmp_path, parse(LAB), 3, 1)
    assert proc.wait(timeout=30) == 1
    assert not (tmp_path / "srun.log").exists()
    assert "got 1 node(s), below launch.elastic.min_nodes=2" in (jdir / "logs" / "slurm.log").read_text()


@pytest.mark.parametrize(("grow", "reason"), [(True, "grows (saved; asks for 2-3 nodes)"), (False, "reached its time limit (saved)")])
def test_usr1_continues_in_a_new_allocation_as_a_grow_or_at_the_time_limit(tmp_path, grow, reason):
    proc, jdir = batch_run(tmp_path, parse(LAB), 3, 2, srun_rc=143, wait=True)
    deadline = time.monotonic() + 20
    while not (tmp_path / "srun.log").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if grow:
        (jdir / "launch" / "grow").write_text("grow requested\n")
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(timeout=30) == 0
    assert (tmp_path / "scancel.log").read_text().split() == ["--signal=TERM", "4242"]  # the steps, not the batch script
    events = (jdir / "logs" / "slurm.log").read_text()
    assert f"slurm job 4242 {reason}: continues as slurm job 4243" in events
    assert not (jdir / "launch" / "grow").exists()
    assert not (jdir / "launch" / "failures").exists()  # neither is a failure
    assert "--nodes=2-3" in (tmp_path / "sbatch.log").read_text()


def test_the_slurm_node_script_takes_its_node_count_from_the_step():
    s = lab_spec(launch={"launcher": "slurm"})
    node = render.slurm_node_script(s, cpu_cluster())
    assert '--nnodes "$SLURM_STEP_NUM_NODES"' in node
    assert 'torchrun starting at $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ) on $SLURM_STEP_NUM_NODES nodes"' in node
    plain = render.slurm_node_script(lab_spec(launch={"launcher": "slurm", "elastic": None}), cpu_cluster())
    assert "--nnodes 3 " in plain and "SLURM_STEP_NUM_NODES" not in plain


# ---- the log: runs, changes and segments


def node_lines(host, rank, nodes, at, iterations, loss=lambda i: 5.0 - 0.02 * i, stamp=0):
    lines = [f"megaprov: node {host} (node rank {rank}): torchrun starting at {at} on {nodes} nodes"]
    for i in iterations:
        ts = f"2026-12-05 20:{(stamp + i) // 60:02d}:{(stamp + i) % 60:02d}.000000"
        lines.append(
            f" [{ts}] iteration {i:8d}/     100 | consumed samples: {i * 12:10d} | elapsed time per iteration (ms): 100.0 |"
            f" global batch size: 12 | lm loss: {loss(i):.6E} |"
        )
    return lines


def elastic_logs():
    """node3 logs 1-27 on 3 nodes (checkpoint 20); node3 lost; node2 logs 21-60 on 2 nodes; node3 back, logs 51-100 on 3."""
    node3 = node_lines("node3", 2, 3, "2026-12-05T20:00:00.000Z", range(1, 28)) + node_lines("node3", 2, 3, "x", range(51, 101), stamp=200)
    node2 = node_lines("node2", 1, 3, "x", []) + node_lines("node2", 1, 2, "x", range(21, 61), stamp=100) + node_lines("node2", 1, 3, "x", [])
    return {"node2": node2, "node3": node3}


@pytest.mark.parametrize("order", [["node2", "node3"], ["node3", "node2"]])
def test_changes_and_segments_do_not_depend_on_the_order_the_files_are_read_in(order):
    logs = elastic_logs()
    log = follow.JobLog(128)
    for host in order:
        for line in logs[host]:
            log.feed(host, line, 0)
    changes = [(c.nodes_before, c.nodes_after, c.last_iteration, c.first_iteration, c.resumed_from, c.lost_iterations) for c in log.changes]
    assert changes == [(3, 2, 27, 21, 20, 7), (2, 3, 60, 51, 50, 10)]
    first = log.changes[0]
    assert first.same_iteration_loss == pytest.approx(5.0 - 0.02 * 21)  # what the 3 nodes logged at 21, before node3 was lost
    assert [k for k, _ in first.before][-1] == 27
    # the final series keeps the later run's lines where two runs logged the same iteration
    assert [it.nodes for it in log.series()[19:22]] == [3, 2, 2] and log.iterations[55].nodes == 3
    parts = verdict.segments(log.series(), log.changes, {3: 300.0, 2: 200.0})
    assert [(g.nodes, g.first, g.last, g.lost_iterations) for g in parts] == [(3, 1, 20, 0), (2, 21, 50, 7), (3, 51, 100, 10)]
    assert parts[1].loss_before == pytest.approx(5.0 - 0.02 * 27) and parts[1].loss_after == pytest.approx(5.0 - 0.02 * 21)
    assert parts[1].tokens_per_second == pytest.approx(12 * 128 / 0.1) and parts[1].expected == 200.0


def feed(logs):
    log = follow.JobLog(128)
    for host, lines in logs.items():
        for line in lines:
            log.feed(host, line, 0)
    return log


def noisy(i):
    return 5.0 - 0.02 * i + (0.01 if i % 2 else -0.01)


def test_continuity_passes_a_resumed_curve_and_fails_a_jump():
    logs = {
        "node3": node_lines("node3", 2, 3, "x", range(1, 28), noisy),
        "node2": node_lines("node2", 1, 2, "x", range(21, 61), noisy, stamp=100),
    }
    good = verdict.continuity_check([], feed(logs).changes)
    assert good.status == verdict.PASS and "3->2 nodes at iteration 21 (resumed from 20, 7 lost)" in good.detail
    assert "from the same iteration before the change" in good.detail
    # the 2 nodes start again from a fresh model: the loss is back where the run began
    logs["node2"] = node_lines("node2", 1, 2, "x", range(21, 61), lambda i: noisy(i) + 1.5, stamp=100)
    bad = verdict.continuity_check([], feed(logs).changes)
    assert bad.status == verdict.FAIL and bad.detail.startswith("the loss jumped at a change: 3->2 nodes at iteration 21")
    # no overlap (the lost node's stop saved a checkpoint at the last iteration): held to the trend before
    logs = {
        "node3": node_lines("node3", 2, 3, "x", range(1, 28), noisy),
        "node2": node_lines("node2", 1, 2, "x", range(28, 61), noisy, stamp=100),
    }
    held = verdict.continuity_check([], feed(logs).changes)
    assert held.status == verdict.PASS and "from the trend of iterations 8-27" in held.detail
    assert verdict.continuity_check([], []).status == verdict.SKIP


def test_a_skipped_or_repeated_batch_fails_the_sample_order():
    series = [follow.Iteration(i, 100, consumed_samples=i * 12) for i in range(1, 11)]
    assert verdict.sample_order_check(series, 12).status == verdict.PASS
    series[5].consumed_samples += 12  # a change that started one global batch too far
    check = verdict.sample_order_check(series, 12)
    assert check.status == verdict.FAIL and check.detail.startswith("iteration 6 had consumed 84 samples, not 72")


def test_each_segment_is_held_to_its_own_expectation():
    parts = [verdict.Segment(3, 1, 20, 290.0, 300.0), verdict.Segment(2, 21, 50, 150.0, 200.0)]
    check = verdict.segment_throughput_check(parts, 0.8)
    assert check.status == verdict.FAIL and "2 nodes (iterations 21-50): 150 tokens/s of 200 expected (0.75x)" in check.detail
    assert "3 nodes" not in check.detail.split(":", 1)[1]
    parts[1] = verdict.Segment(2, 21, 50, 190.0, 200.0)
    assert verdict.segment_throughput_check(parts, 0.8).status == verdict.PASS


def test_the_report_of_an_elastic_run_has_its_segments():
    log = feed(elastic_logs())
    judged, _ = verdict.judge(log, ["node1", "node2", "node3"], 20, 300.0, 0.5, "test", False, 0.0, {}, elastic=({3: 300.0, 2: 200.0}, 12))
    names = [c.name for c in judged.checks]
    assert names == [
        "loss falling",
        "no nan",
        "segment throughput",
        "GPU utilisation and memory",
        "every rank alive",
        "elastic continuity",
        "sample order",
    ]
    parts = verdict.segments(log.series(), log.changes, {3: 300.0, 2: 200.0})
    report = verdict.report_dict({"name": "x", "nodes": 3, "gpus_per_node": 1, "trainer": "lab"}, judged, log, 1.0, {}, {}, parts)
    assert [g["nodes"] for g in report["segments"]] == [3, 2, 3] and len(report["changes"]) == 2
    text = verdict.render_markdown(report)
    assert "## Segments (launch.elastic)" in text and "| 2 | 21-50 | 15,360 | 200 | 76.80 | 7 | 4.4600 -> 4.5800 |" in text
    # a job without the policy reports as before
    plain = verdict.report_dict({"name": "x", "nodes": 3, "gpus_per_node": 1, "trainer": "lab"}, judged, log, 1.0, {}, {})
    assert "segments" not in plain and "changes" not in plain


# ---- the systemd follower's side


def test_continue_on_the_largest_count_that_keeps_the_batch():
    s = lab_spec(launch={"nodes": 4}, train={"global_batch_size": 8})
    counts = elastic.counts_of(s, cpu_cluster(4))
    assert counts == [4, 2]  # 3 would not keep the batch of 8
    assert elastic.continue_on(counts, ["node1", "node2", "node4"]) == ["node1", "node2"]
    assert elastic.continue_on(counts, ["node1"]) == []
    assert elastic.continue_on(elastic.counts_of(parse(LAB), cpu_cluster()), ["node1", "node3"]) == ["node1", "node3"]


def test_the_follower_asks_the_nodes_on_a_failure_an_early_end_or_a_silence(monkeypatch):
    watch = elastic.Watch.__new__(elastic.Watch)
    watch.asked = 0.0
    log = follow.JobLog(128)
    log.total, log.furthest = 100, 30
    assert watch.due(log, ["running", "failed-1"], 0.0)
    assert watch.due(log, ["exited-0", "exited-0"], 0.0)  # every node ended short of the last iteration
    assert not watch.due(log, ["running", "running"], 5.0)
    assert watch.due(log, ["running", "running"], elastic.QUIET_MIN_S + 1)
    log.furthest = 100
    assert not watch.due(log, ["exited-0", "exited-0"], 0.0)  # finished
    watch.asked = time.monotonic()
    assert not watch.due(log, ["running", "failed-1"], 0.0)  # asked a moment ago


# ---- job.json


def meta_text(**extra):
    import json

    doc = {
        "name": "el",
        "hosts": ["node1", "node2"],
        "shared_dir": "/shared",
        "job_dir": "/shared/jobs/el",
        "checkpoint_dir": "/shared/checkpoints/el",
        "state": "running",
        **extra,
    }
    return json.dumps(doc)


def test_job_json_keeps_every_node_and_the_segments():
    meta = jobmeta.parse(
        meta_text(job_hosts=["node1", "node2", "node3"], segments=[{"hosts": ["node1", "node2", "node3"], "started": "t", "why": "started"}]),
        "job.json",
        "el",
    )
    assert meta.job_hosts == ("node1", "node2", "node3") and meta.segments[0].why == "started"
    assert jobmeta.parse(meta_text(), "job.json", "el").job_hosts == ("node1", "node2")  # an older job.json


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"job_hosts": ["node1"]}, "hosts ['node1', 'node2'] are not among job_hosts ['node1']"),
        ({"job_hosts": ["node1", "node2", "../x"]}, "job_hosts[2]"),
        ({"segments": [{"hosts": ["node1;reboot"], "started": "t", "why": "w"}]}, "segments[0].hosts"),
        ({"segments": "all"}, "segments must be a list of at most 1000"),
    ],
)
def test_job_json_refuses_what_the_cluster_user_could_plant(extra, message):
    with pytest.raises(UsageError) as info:
        jobmeta.parse(meta_text(**extra), "job.json", "el")
    assert message in str(info.value)


def test_elastic_refusals_are_spec_errors_with_the_field():
    text = LAB.replace("min_nodes: 2", "min_nodes: 0")
    with pytest.raises(JobSpecError) as info:
        parse(text)
    assert "launch.elastic.min_nodes" in str(info.value)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--rampup-batch-size", "4", "4", "1000"], "--rampup-batch-size, whose batch ramp-up counts data-parallel ranks"),
        (["--dataloader-type", "cyclic"], "--dataloader-type cyclic, whose sample order depends on the data-parallel size"),
        (["--dataloader-type=cyclic"], "--dataloader-type=cyclic, whose sample order depends on the data-parallel size"),
        (["--num-distributed-optimizer-instances", "2"], "optimizer instances divide the data-parallel ranks"),
    ],
)
def test_arguments_that_tie_the_run_to_its_data_parallel_size_are_refused(extra, words):
    text = LAB.replace("  elastic:\n", "  extra_args: " + yaml.safe_dump(extra, default_flow_style=True).strip() + "\n  elastic:\n")
    [message] = refusal(text)
    assert words in message and message.endswith("drop it, or drop launch.elastic")
    assert refusal(text.replace("  elastic:\n    min_nodes: 2\n", "")) == []  # without the policy they are the operator's


def test_the_gradient_buckets_keep_the_full_jobs_size():
    """Megatron-LM sizes its gradient buckets from the data-parallel size (max(40M, 1M x DP) with overlap_grad_reduce)
    and a dp_reshardable checkpoint holds one tensor per bucket: an elastic job fixes the full job's size."""
    doc = yaml.safe_load((ROOT / "examples" / "jobs" / "llama-8b-2nodes.yml").read_text())
    doc["launch"].update({"nodes": 16, "elastic": {"min_nodes": 12}})
    doc["checkpoint"]["format"] = "torch_dist"
    args = render.megatron_args(parse(yaml.safe_dump(doc)))
    assert args[args.index("--ddp-bucket-size") + 1] == str(1_000_000 * 16 * 8 // 2)  # DP 64 at TP 2
    doc["launch"]["nodes"] = 2
    doc["launch"]["elastic"] = {"min_nodes": 1}
    args = render.megatron_args(parse(yaml.safe_dump(doc)))
    assert args[args.index("--ddp-bucket-size") + 1] == "40000000"  # Megatron's floor
    del doc["launch"]["elastic"]
    assert "--ddp-bucket-size" not in render.megatron_args(parse(yaml.safe_dump(doc)))  # without the policy: Megatron's own


def test_one_task_per_gpu_runs_its_step_on_the_chosen_nodes():
    s = lab_spec(launch={"launcher": "slurm", "gpus_per_node": 4, "slurm": parse(LAB).launch.slurm.model_copy(update={"shape": "per-gpu"})})
    s = s.model_copy(update={"train": s.train.model_copy(update={"global_batch_size": 24})})
    cluster = nodefacts.KnownCluster(3, 4, planner.GPUS["cpu"], "/shared", tuple(f"node{i + 1}" for i in range(3)), stack=nodefacts.ROLE_DEFAULTS)
    text = render.sbatch_script(s, cluster)
    assert 'srun --kill-on-bad-exit=1 --ntasks-per-node=4 --nodes="$use" --nodelist="$(paste -sd, "$nodes")"' in text
    assert "#SBATCH --ntasks-per-node" not in text
    node = render.slurm_node_script(s, cluster)
    assert "export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS" in node  # the step's, not the job's


def test_a_run_that_stayed_on_fewer_nodes_is_held_to_its_own_count():
    """A Slurm job that started on min_nodes (the others busy), or one that lost a node before its first iteration:
    one segment, on 2 of 3 nodes, held to the 2-node plan, not to the 3-node one."""
    log = feed({"node2": node_lines("node2", 1, 2, "x", range(1, 61))})  # 15,360 tokens/s
    judged, _ = verdict.judge(log, ["node1", "node2"], 20, 20_000.0, 0.8, "test", False, 0.0, {}, elastic=({3: 20_000.0, 2: 15_000.0}, 12))
    check = next(c for c in judged.checks if c.name in ("throughput", "segment throughput"))
    assert check.name == "segment throughput" and check.status == verdict.PASS
    assert "2 nodes (iterations 1-60): 15,360 tokens/s of 15,000 expected" in check.detail


# ---- the follower's decision, with the nodes' answers and the relaunch stood in


def _watch(tmp_path, monkeypatch, answers, state="running"):
    """A Watch over a 3-node systemd job whose probes answer ``answers`` in turn; the relaunch is recorded."""
    from types import SimpleNamespace

    from megaprov.training import jobs

    job = SimpleNamespace(
        name="el", hosts=["node1", "node2", "node3"], every_host=["node1", "node2", "node3"], local_dir=tmp_path, inventory=tmp_path / "inventory.ini"
    )
    (tmp_path / "logs").mkdir(exist_ok=True)
    asked, relaunched = [], []
    monkeypatch.setattr(elastic, "probe", lambda job, since, hosts=None: asked.append(hosts) or answers[min(len(asked), len(answers)) - 1])
    monkeypatch.setattr(elastic, "relaunch", lambda *a, **k: relaunched.append((a, k)))
    monkeypatch.setattr(elastic.time, "sleep", lambda s: None)
    monkeypatch.setattr(elastic.jobdir, "push", lambda *a: None)
    monkeypatch.setattr(elastic, "as_owner_of", lambda d: __import__("contextlib").nullcontext())
    monkeypatch.setattr(jobs, "job_state", lambda job: state)
    monkeypatch.setattr(jobs, "segment_hosts", lambda job: list(job.hosts))
    watch = elastic.Watch(job, parse(LAB), None, cpu_cluster())
    log = follow.JobLog(128)
    log.saves, log.current = [20], 27
    return watch, log, asked, relaunched


def test_a_node_unreachable_twice_is_lost_and_the_others_continue_killed_and_restarted(tmp_path, monkeypatch):
    lost = elastic.Probe({}, {"node3": "unreachable"})
    watch, log, asked, relaunched = _watch(tmp_path, monkeypatch, [lost, lost])
    line = watch.check(log)
    assert line is not None and line.startswith(
        "megaprov: job el lost node3 (unreachable): continues on 2 node(s) (node1, node2) from the checkpoint at iteration 20"
    )
    [(args, kwargs)] = relaunched
    assert args[2] == ["node1", "node2"] and args[5] == ["node1", "node2"] and kwargs == {"kill": True}
    assert len(asked) == 2  # asked again before it counted
    assert (tmp_path / "logs" / "elastic.log").read_text().strip() == line


def test_one_ssh_hiccup_reshapes_nothing(tmp_path, monkeypatch):
    watch, log, asked, relaunched = _watch(tmp_path, monkeypatch, [elastic.Probe({}, {"node3": "unreachable"}), elastic.Probe({}, {})])
    assert watch.check(log) is None and relaunched == [] and len(asked) == 2


def test_a_node_doctor_flagged_is_stopped_with_the_others(tmp_path, monkeypatch):
    flagged = elastic.Probe({}, {"node2": "error findings of megaprov doctor"})
    watch, log, asked, relaunched = _watch(tmp_path, monkeypatch, [flagged])
    assert watch.check(log) is not None and len(asked) == 1  # a finding is not a hiccup: no second question
    [(args, _)] = relaunched
    assert args[2] == ["node1", "node3"] and args[5] == ["node1", "node2", "node3"]  # node2 still answers: its unit stops too


def test_fewer_than_min_nodes_left_is_said_once_and_nothing_restarts(tmp_path, monkeypatch):
    two = elastic.Probe({}, {"node2": "unreachable", "node3": "unreachable"})
    watch, log, _, relaunched = _watch(tmp_path, monkeypatch, [two])
    first = watch.check(log)
    assert first is not None and "1 node(s) left, fewer than launch.elastic.min_nodes=2; it cannot continue" in first
    assert watch.check(log) is None and relaunched == []  # the same news is not repeated


def test_the_follower_leaves_a_grow_from_another_shell_alone(tmp_path, monkeypatch):
    watch, log, asked, relaunched = _watch(tmp_path, monkeypatch, [elastic.Probe({}, {"node3": "unreachable"})], state="reshaping")
    assert watch.check(log) is None and asked == [] and relaunched == []


def test_a_unit_that_gave_up_while_others_run_is_its_nodes_failure():
    units = {
        "node1": {"ActiveState": "activating", "NRestarts": "2"},
        "node2": {"ActiveState": "failed", "Result": "start-limit-hit", "NRestarts": "4"},
        "node3": {"ActiveState": "active"},
    }
    assert elastic.gave_up_units(units) == {"node2": "its unit gave up (start-limit-hit, 4 restarts)"}
    # every unit gave up: the job failed, no node stands out
    assert elastic.gave_up_units({h: {"ActiveState": "failed"} for h in units}) == {}
    assert elastic.gave_up_units({}) == {}


def test_a_restart_takes_a_returned_node_back_in(tmp_path, monkeypatch):
    answer_units = elastic.Probe({"node1": {}, "node2": {}}, {})
    back = elastic.Probe({"node3": {"ActiveState": "inactive"}}, {})
    watch, log, asked, relaunched = _watch(tmp_path, monkeypatch, [answer_units, back])
    watch.job.hosts = ["node1", "node2"]  # node3 was lost earlier
    log.total, log.furthest = 100, 60
    assert watch.due(log, ["failed-1", "exited-0"], 0.0) and watch.restarting
    line = watch.check(log)
    assert line is not None and "grows back to 3 nodes (node1, node2, node3) at its restart: node3 answer again" in line
    assert asked == [None, ["node3"]]  # the segment's nodes, then the missing one
    [(args, kwargs)] = relaunched
    assert args[2] == ["node1", "node2", "node3"] and args[5] == ["node1", "node2", "node3"] and kwargs == {"kill": True}


def test_a_quiet_job_is_not_grown_and_a_still_lost_node_stays_out(tmp_path, monkeypatch):
    fine = elastic.Probe({"node1": {}, "node2": {}}, {})
    still_down = elastic.Probe({}, {"node3": "unreachable"})
    watch, log, asked, relaunched = _watch(tmp_path, monkeypatch, [fine, fine, still_down])
    watch.job.hosts = ["node1", "node2"]
    log.total, log.furthest = 100, 60
    watch.restarting = False  # asked because no iteration came for a while: training may be fine, nothing restarts
    assert watch.check(log) is None and asked == [None]
    watch.restarting = True
    assert watch.check(log) is None and asked == [None, None, ["node3"]] and relaunched == []


def test_the_systemd_launchers_story_is_the_elastic_events(tmp_path, monkeypatch):
    """What the follower and `job grow` write is what the launcher tells reasons and reports (read as the cluster
    user's file: other lines are not the launcher's, control characters are shown)."""
    from types import SimpleNamespace

    from megaprov.training.launchers import systemd

    job = SimpleNamespace(name="el", local_dir=tmp_path)
    (tmp_path / "logs").mkdir()
    monkeypatch.setattr(elastic.jobdir, "push", lambda *a: None)
    monkeypatch.setattr(elastic, "as_owner_of", lambda d: __import__("contextlib").nullcontext())
    assert systemd.SystemdLauncher().events(job) == []
    line = elastic.event(job, "job el lost node3 (unreachable): continues on 2 node(s)\x1b[2J")
    with (tmp_path / "logs" / "elastic.log").open("a") as fh:
        fh.write("planted by the cluster user\n")
    [said] = systemd.SystemdLauncher().events(job)
    assert said == line.removeprefix("megaprov: ") and "\x1b" not in said and said.startswith("job el lost node3 (unreachable)")

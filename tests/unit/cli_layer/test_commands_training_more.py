"""More of the command layer of `megaprov train`, `plan`, `job check|attach|grow|logs|status|stop` and `jobs`
(megaprov.commands.training), called in-process through the real parser (megaprov.commands.build_parser, or
megaprov.cli.main where the exit code and the JSON envelope matter), beside test_commands_training_mutants.py: what the
operator reads where a path, a directory or a node name holds '[' (printed as is, never read as markup), the spec's
file and line in its problems on a cluster's world and nodes, every fix of a job that does not fit, the plan at a given
MFU, the operator's debug variables in the launch, the launch timing to the hundredth, the progress said while train
follows, the node of `job logs -f`, the inventory of `train --resume` and of `job status`, the age of doctor's
findings; and the parsers: each flag's default and bound, each command's --help, the command a JSON refusal names.

Everything is real (specs from examples/jobs, the planner, the render, doctor's findings file under tmp_path) except
the layer below the command at its edge: megaprov.training.jobs' start/follow_job/find/follow_log/unit_states, stood
in by recorders that answer real objects, and /proc and the clock where the launch timing is read."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from megaprov import output
from megaprov.cli import main
from megaprov.commands import training
from megaprov.errors import ExitCode, UsageError
from megaprov.ops.doctor import health
from megaprov.training import jobs, jobspec, jobview, planner
from tests.cli.test_job_cli import cpu_inventory
from tests.unit.cli_layer.test_commands_training_mutants import JOBS, Clock, Follower, _plain_job, handle, parse, shown, usage
from tests.unit.training.test_jobs_follow import good_logs, make_job


@pytest.fixture(autouse=True)
def _state(tmp_path, monkeypatch):
    """megaprov's state of this test alone, no inventory by default, plain text at a fixed width."""
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    monkeypatch.delenv("MEGAPROV_INVENTORY", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.delenv("MEGAPROV_STRATEGY", raising=False)  # read when the parser is built: train's --strategy default
    for name in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "TORCH_DISTRIBUTED_DEBUG", "TORCH_NCCL_ASYNC_ERROR_HANDLING"):
        monkeypatch.delenv(name, raising=False)


def _bracketed(tmp_path: Path) -> Path:
    """An example spec copied to a file whose name holds what rich would read as a style tag."""
    path = tmp_path / "spec[b]x.yml"
    path.write_text((JOBS / "lab-tiny.yml").read_text())
    return path


# ---- job check


def test_job_check_names_the_spec_file_in_its_cross_field_problems(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text((JOBS / "lab-tiny.yml").read_text().replace("global_batch_size: 8", "global_batch_size: 6"))
    with pytest.raises(jobspec.JobSpecError) as info:
        handle("job", "check", "-f", bad)
    assert info.value.source == str(bad)
    assert str(bad) in info.value.message
    assert {o["file"] for o in info.value.objects()} == {str(bad)}


def test_job_check_prints_a_spec_path_with_brackets_as_it_is(tmp_path, capsys):
    path = _bracketed(tmp_path)
    outcome = handle("job", "check", "-f", path)
    assert shown(outcome, capsys) == f"{path}: valid job lab-tiny (-i INVENTORY or --gpu also checks its fit)\n"
    outcome = handle("job", "check", "-f", path, "--nodes", "1")
    assert shown(outcome, capsys) == f"{path}: valid job lab-tiny on 1 GPUs\n"


def test_job_check_of_a_job_that_does_not_fit_lists_every_fix(tmp_path):
    path = JOBS / "llama-8b-2nodes.yml"
    outcome = handle("job", "check", "-f", path, "--gpu", "A100-40GB")
    spec = jobspec.parse(path.read_text())
    planned = planner.plan(spec, planner.Cluster(spec.launch.nodes, spec.launch.gpus_per_node, planner.GPUS["A100-40GB"]))
    need, have = planned.memory.total / planner.GIB, planned.memory.capacity / planner.GIB
    assert outcome.code == ExitCode.VERDICT_FAILED
    assert outcome.error == (
        f"llama-8b does not fit A100-40GB: {need:.1f} GiB per GPU of {have:.1f}; fixes: "
        "parallel.tensor=4 (30.6 GiB); train.recompute=full (34.7 GiB); parallel.pipeline=4 (37.2 GiB)"
    )


def test_job_check_on_a_cluster_judges_the_batch_on_its_world_at_the_line_of_the_file(tmp_path):
    path = tmp_path / "tiny.yml"
    path.write_text((JOBS / "lab-tiny.yml").read_text())
    with pytest.raises(jobspec.JobSpecError) as info:
        handle("job", "check", "-f", path, "--nodes", "3")
    assert info.value.source == str(path)
    assert info.value.message == (
        f"{path}:21: train.global_batch_size=8 is not a multiple of micro_batch_size x data parallel = 4x3; "
        "use 12 (or change micro_batch_size or the parallel sizes)"
    )


def test_job_check_on_a_cluster_keeps_tensor_parallelism_inside_its_nodes(tmp_path):
    path = tmp_path / "tp2.yml"
    path.write_text((JOBS / "lab-tiny.yml").read_text().replace("  tensor: 1", "  tensor: 2"))
    handle("job", "check", "-f", path)  # alone, the spec is valid
    with pytest.raises(jobspec.JobSpecError) as info:
        handle("job", "check", "-f", path, "--gpu", "cpu", "--nodes", "2", "--gpus-per-node", "1")
    assert info.value.message == f"{path}:18: parallel.tensor=2 spans more than the 1 GPUs of a node; keep tensor parallelism inside a node: use 1"


# ---- the cluster's shape: its bounds


def test_gpus_per_node_is_at_most_64_and_nodes_at_most_10000():
    assert parse("plan", "-f", "x.yml", "--gpus-per-node", "64", "--nodes", "10000").gpus_per_node == 64
    for flag, value, high in (("--gpus-per-node", "65", "64"), ("--nodes", "10001", "10,000")):
        with pytest.raises(UsageError) as info:
            parse("plan", "-f", "x.yml", flag, value)
        assert (info.value.message, info.value.hint) == (
            f"megaprov plan: argument {flag}: '{value}' is more than {high}",
            "see `megaprov plan --help`",
        )


# ---- plan


def test_plan_suggest_ranks_the_layouts_at_the_given_mfu(capsys):
    path = JOBS / "gpt-345m-1node.yml"
    spec = jobspec.parse(path.read_text())
    found = planner.Cluster(1, 8, planner.GPUS["H100-SXM"])
    outcome = handle("plan", "-f", path, "--gpu", "H100-SXM", "--suggest", "--top", "3", "--mfu", "0.25")
    at_quarter = jobview.candidates_dict(planner.suggest(spec, found, 0.25, 3))
    assert outcome.result["layouts"] == at_quarter
    assert at_quarter != jobview.candidates_dict(planner.suggest(spec, found, None, 3))


# ---- train --dry-run


def test_dry_run_into_a_directory_writes_the_plan_and_names_a_directory_with_brackets_as_it_is(tmp_path, capsys):
    inv = cpu_inventory(tmp_path)
    out_dir = tmp_path / "out[b]x"
    outcome = handle("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run", "--dir", out_dir)
    assert json.loads((out_dir / "plan.json").read_text()) == outcome.result["plan"]
    assert outcome.result["plan"]["job"] == "lab-tiny"
    written = outcome.result["written"]
    assert shown(outcome, capsys).endswith(f"\ntrain: wrote {len(written)} file(s) into {out_dir}\n")


def test_the_operators_debug_variables_reach_every_ranks_launch(tmp_path, monkeypatch):
    inv = cpu_inventory(tmp_path)
    outcome = handle("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run")
    assert all("NCCL_DEBUG" not in dict(n.env) for n in outcome.result["launch"].nodes)
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("UNRELATED_SECRET", "x")
    outcome = handle("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run")
    for node in outcome.result["launch"].nodes:
        env = dict(node.env)
        assert env["NCCL_DEBUG"] == "INFO" and "UNRELATED_SECRET" not in env
        assert "export NCCL_DEBUG=INFO" in node.script.splitlines()


# ---- train --exclude-unhealthy, with doctor's real findings file


def _findings(inventory: Path, nodes: list[str], age: float) -> None:
    path = health.findings_file(inventory)
    path.parent.mkdir(parents=True, exist_ok=True)
    findings = [{"node": n, "severity": "error", "check": "gpu"} for n in nodes]
    path.write_text(json.dumps({"at": time.time() - age, "findings": findings}))


def test_exclude_unhealthy_says_how_old_a_stale_doctor_run_is_in_hours(tmp_path):
    inv = cpu_inventory(tmp_path, nodes=3)
    _findings(inv, ["node1"], 25.5 * 3600 + 10)  # 25.503 h: 26 h, where an hour of 3601 s would say 25
    message, hint = usage("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run", "--exclude-unhealthy")
    assert (message, hint) == ("--exclude-unhealthy: the last doctor run is 26 h old", f"run `megaprov doctor -i {inv}` again")


def test_exclude_unhealthy_names_every_node_it_leaves_out_and_the_runs_age_in_minutes(tmp_path, capsys):
    inv = cpu_inventory(tmp_path, nodes=4)
    _findings(inv, ["node2", "node1"], 3000)  # 50 min, where a minute of 61 s would say 49
    outcome = handle("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run", "--exclude-unhealthy")
    assert [n.host for n in outcome.result["launch"].nodes] == ["node3", "node4"]
    assert capsys.readouterr().err == "train: leaving out node1, node2 (error findings of megaprov doctor 50 min ago)\n"


def test_exclude_unhealthy_prints_a_node_name_from_the_findings_file_as_it_is(tmp_path, capsys):
    inv = cpu_inventory(tmp_path, nodes=3)
    _findings(inv, ["node[b]1"], 600)
    outcome = handle("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run", "--exclude-unhealthy")
    assert [n.host for n in outcome.result["launch"].nodes] == ["node1", "node2"]
    assert capsys.readouterr().err == "train: leaving out node[b]1 (error findings of megaprov doctor 10 min ago)\n"


# ---- train: the start, the follow, --resume


@pytest.fixture
def started(monkeypatch, tmp_path):
    """jobs.start, find and follow_job stood in (recorded); the real verdict over a job directory under tmp_path."""
    rec = SimpleNamespace(calls=[], found=[], concluded=[], follower=Follower(), job=make_job(tmp_path))
    monkeypatch.setattr(jobs, "start", lambda *a: rec.calls.append(a) or rec.job)
    monkeypatch.setattr(jobs, "find", lambda name, inventory: rec.found.append((name, inventory)) or rec.job)
    monkeypatch.setattr(jobs, "follow_job", lambda *a, **k: rec.follower(*a, **k))
    real = jobs.conclude
    monkeypatch.setattr(jobs, "conclude", lambda *a: rec.concluded.append(a) or real(*a))
    monkeypatch.setattr(training, "process_started", lambda: 1000.0)
    return rec


def test_train_times_the_launch_to_the_hundredth_of_a_second(tmp_path, started, monkeypatch):
    started.job.inventory = cpu_inventory(tmp_path)
    good_logs(started.job)
    monkeypatch.setattr(training, "time", Clock(1010.0, 1012.3456))
    outcome = handle("train", "--resume", "lab-tiny")
    assert outcome.code == ExitCode.OK
    assert started.concluded[0][5] == {"megaprov_start_to_units_started_s": 12.35}


def test_train_says_the_progress_of_the_job_it_follows(tmp_path, started, monkeypatch, capsys):
    inv = cpu_inventory(tmp_path)
    good_logs(started.job)
    p = jobs.Progress("lab-tiny", 3, 60, 5.5, 1200.0, 1.5, 30.0, 0, 0)
    started.follower = Follower(progress=[p], waiting=["node2 not started yet"])
    monkeypatch.setattr(training, "time", Clock(1010.0, 1012.0))
    outcome = handle("train", "-f", JOBS / "lab-tiny.yml", "-i", inv)
    assert (outcome.command, outcome.code) == ("train", ExitCode.OK)
    assert started.follower.calls[0][3]["report"] is output.SHOWN
    err = capsys.readouterr().err.splitlines()
    assert err[1:3] == [jobview.progress_text(p), "train: node2 not started yet"]


def test_train_resume_looks_for_the_job_in_the_given_inventory(tmp_path, started, monkeypatch):
    inv = cpu_inventory(tmp_path)
    started.job = make_job(tmp_path / "j")
    monkeypatch.setattr(jobs, "start", lambda *a: started.calls.append(a) or _plain_job())
    handle("train", "--resume", "lab-tiny", "-i", inv, "--detach")
    assert started.found == [("lab-tiny", str(inv))]
    assert started.calls[0][6] == str(inv)


# ---- job logs -f, job status


@pytest.fixture
def running(monkeypatch, tmp_path):
    cpu_inventory(tmp_path)  # the inventory the job was started with
    rec = SimpleNamespace(job=make_job(tmp_path), found=[], followed=[], states=[])
    monkeypatch.setattr(jobs, "find", lambda name, inventory: rec.found.append((name, inventory)) or rec.job)

    def follow_log(job, node, lines, emit):
        rec.followed.append((job, node, lines))
        emit("a [b]line")
        return node or "node2"

    def unit_states(job):
        rec.states.append(job)
        return {h: {"unit": "active"} for h in job.hosts}

    monkeypatch.setattr(jobs, "follow_log", follow_log)
    monkeypatch.setattr(jobs, "unit_states", unit_states)
    return rec


def test_job_logs_follow_prints_the_given_nodes_lines(running, capsys):
    outcome = handle("job", "logs", "lab-tiny", "-f", "--node", "node1", "--lines", "5")
    assert running.followed == [(running.job, "node1", 5)]
    assert capsys.readouterr().out == "a [b]line\n"
    assert outcome.result == {"job": "lab-tiny", "node": "node1"}


def test_job_status_reads_the_units_of_the_job_found(running, capsys):
    good_logs(running.job)
    outcome = handle("job", "status", "lab-tiny", "-i", "/inv.ini")
    assert running.found == [("lab-tiny", "/inv.ini")] and running.states == [running.job]
    meta, status = jobview.job_status(running.job, {"node1": {"unit": "active"}, "node2": {"unit": "active"}})
    assert outcome.result == {**meta, **status}


# ---- the parsers: flags, their defaults and bounds, and what --help says

# the options every command has, and those of the commands that take a cluster's shape (train, plan, job check)
GLOBAL_OPTIONS = [
    "-h, --help show this help message and exit",
    "--debug show tracebacks",
    "-o, --output {text,json} text (default) or json: one JSON document on stdout",
]
SHAPE_OPTIONS = [
    "-i, --inventory INVENTORY cluster inventory: training nodes are [gpu_nodes]",
    "--nodes NODES nodes (default: the spec's launch.nodes)",
    "--gpus-per-node GPUS_PER_NODE GPUs per node (default: inventory, then launch.gpus_per_node)",
    "--gpu GPU GPU model, e.g. H100-SXM, H200, A100-80GB, or as nvidia-smi names it (default: the inventory's megaprov_gpu_model)",
]


HELP = {
    "job": [
        "usage: megaprov job [-h] [--debug] [-o {text,json}] ACTION ...",
        "Job spec (schema, check) and running jobs (status, logs, stop).",
        "positional arguments:",
        "ACTION",
        "status state, progress and verdict of a job",
        "logs print a node's log",
        "stop stop a job on every node",
        "schema print the JSON Schema of gpt.yml",
        "check validate a job spec (and, with -i, --gpu or --nodes, its fit on a cluster, as plan and train judge it)",
        "attach follow a running job's live progress again (after --detach or a lost terminal), to its verdict",
        "grow bring a job with launch.elastic back onto its nodes that returned (it saves a checkpoint and continues on more)",
        "options:",
        *GLOBAL_OPTIONS,
        "examples:",
        "megaprov job check -f gpt.yml --gpu H100-SXM --nodes 2",
        "megaprov job status NAME",
        "megaprov job logs NAME -f",
    ],
    "job status": [
        "usage: megaprov job status [-h] [--debug] [-o {text,json}] [-i INVENTORY] [NAME]",
        "State, progress and verdict of a job.",
        "positional arguments:",
        "NAME the job's name",
        "options:",
        *GLOBAL_OPTIONS,
        "-i, --inventory INVENTORY the cluster's inventory (default: the one the job was started with)",
        "examples:",
        "megaprov job status gpt-lab",
        "megaprov job status gpt-lab -o json",
    ],
    "job logs": [
        "usage: megaprov job logs [-h] [--debug] [-o {text,json}] [-i INVENTORY] [--node NODE] [--lines LINES] [-f] [NAME]",
        "Print a node's log.",
        "positional arguments:",
        "NAME the job's name",
        "options:",
        *GLOBAL_OPTIONS,
        "-i, --inventory INVENTORY the cluster's inventory (default: the one the job was started with)",
        "--node NODE this node's log (default: the last node, where the last rank prints)",
        "--lines LINES last N lines",
        "-f, --follow keep printing new lines until the job ends (Ctrl-C stops following)",
        "examples:",
        "megaprov job logs gpt-lab",
        "megaprov job logs gpt-lab --node node2 --lines 200",
        "megaprov job logs gpt-lab -f",
    ],
    "job stop": [
        "usage: megaprov job stop [-h] [--debug] [-o {text,json}] [-i INVENTORY] [NAME]",
        "Stop a job on every node.",
        "positional arguments:",
        "NAME the job's name",
        "options:",
        *GLOBAL_OPTIONS,
        "-i, --inventory INVENTORY the cluster's inventory (default: the one the job was started with)",
        "examples:",
        "megaprov job stop gpt-lab",
    ],
    "job schema": [
        "usage: megaprov job schema [-h] [--debug] [-o {text,json}]",
        "Print the JSON Schema of gpt.yml.",
        "options:",
        *GLOBAL_OPTIONS,
        "examples:",
        "megaprov job schema > gpt.schema.json",
    ],
    "job check": [
        (
            "usage: megaprov job check [-h] [--debug] [-o {text,json}] [-f JOB.yml] [-i INVENTORY] [--nodes NODES] [--gpus-per-node "
            "GPUS_PER_NODE] [--gpu GPU]"
        ),
        "Validate a job spec (and, with -i, --gpu or --nodes, its fit on a cluster, as plan and train judge it).",
        "options:",
        *GLOBAL_OPTIONS,
        "-f, --job JOB.yml the job spec",
        *SHAPE_OPTIONS,
        "examples:",
        "megaprov job check -f gpt.yml",
        "megaprov job check -f gpt.yml -i inventory.ini",
        "megaprov job check -f llama-8b.yml --gpu A100-40GB --nodes 2",
    ],
    "plan": [
        (
            "usage: megaprov plan [-h] [--debug] [-o {text,json}] -f JOB.yml [-i INVENTORY] [--nodes NODES] [--gpus-per-node "
            "GPUS_PER_NODE] [--gpu GPU] [--mfu MFU] [--suggest] [--top TOP]"
        ),
        "Parallelism, parameters, FLOPs, memory per GPU, fit, step time and the run's length.",
        "options:",
        *GLOBAL_OPTIONS,
        "-f, --job JOB.yml the job spec",
        *SHAPE_OPTIONS,
        "--mfu MFU share of the per-GPU rate a large GEMM sustains in training (default 0.77 of a measured GEMM rate, else of the isolated rate)",
        "--suggest rank the splits that fit by estimated step time and say why the best wins",
        "--top TOP layouts to list with --suggest",
        "examples:",
        "megaprov plan -f gpt.yml -i inventory.ini",
        "megaprov plan -f gpt.yml --gpu 'NVIDIA H100 80GB HBM3' --nodes 4",
        "megaprov plan -f gpt.yml --gpu H200 --suggest --top 5",
    ],
    "train": [
        (
            "usage: megaprov train [-h] [--debug] [-o {text,json}] [-f JOB.yml] [-i INVENTORY] [--nodes NODES] [--gpus-per-node "
            "GPUS_PER_NODE] [--gpu GPU] [--name NAME] [--resume NAME] [--detach] [--stall-timeout STALL_TIMEOUT] [--dry-run] [--node "
            "NODE] [--all-nodes] [--dir DIR] [--exclude-unhealthy] [--strategy {linear,free,mitogen}]"
        ),
        "Start a training job on the cluster, follow it and judge it.",
        "options:",
        *GLOBAL_OPTIONS,
        "-f, --job JOB.yml the job spec",
        *SHAPE_OPTIONS,
        "--name NAME job name (default: the spec's name)",
        "--resume NAME start an existing job again; it continues from its latest checkpoint",
        "--detach start and return; `megaprov job attach NAME` follows it later",
        "--stall-timeout STALL_TIMEOUT seconds without output from any node before giving up (default 600)",
        "--dry-run plan and render, start nothing: the plan, then one node's launch",
        "--node NODE with --dry-run: this node's launch (default: the first)",
        "--all-nodes with --dry-run: every node's launch",
        "--dir DIR with --dry-run: write the plan and every node's launch files into this new directory",
        "--exclude-unhealthy leave out the nodes with error findings in the last `megaprov doctor -i INVENTORY` (within 24 h)",
        "--strategy {linear,free,mitogen} Ansible strategy of the launch (mitogen: faster)",
        "examples:",
        "megaprov train -f gpt.yml -i inventory.ini",
        "megaprov train -f gpt.yml -i inventory.ini --dry-run # the plan, then node 1's launch script",
        "megaprov train -f gpt.yml -i inventory.ini --dry-run --dir out/ # every node's files into out/",
        "megaprov train -f gpt.yml -i inventory.ini --detach && megaprov job attach NAME",
        "megaprov train --resume NAME",
    ],
    "job attach": [
        "usage: megaprov job attach [-h] [--debug] [-o {text,json}] [-i INVENTORY] [--stall-timeout STALL_TIMEOUT] NAME",
        "Follow a running job's live progress again (after --detach or a lost terminal), to its verdict.",
        "positional arguments:",
        "NAME the job's name",
        "options:",
        *GLOBAL_OPTIONS,
        "-i, --inventory INVENTORY the cluster's inventory (default: the one the job was started with)",
        "--stall-timeout STALL_TIMEOUT seconds without output before giving up (default 600)",
        "examples:",
        "megaprov job attach gpt-lab",
        "megaprov job attach gpt-lab -o json",
    ],
    "job grow": [
        "usage: megaprov job grow [-h] [--debug] [-o {text,json}] [-i INVENTORY] NAME",
        "Bring a job with launch.elastic back onto its nodes that returned (it saves a checkpoint and continues on more).",
        "positional arguments:",
        "NAME the job's name",
        "options:",
        *GLOBAL_OPTIONS,
        "-i, --inventory INVENTORY the cluster's inventory (default: the one the job was started with)",
        "examples:",
        "megaprov job grow gpt-lab",
    ],
    "jobs": [
        "usage: megaprov jobs [-h] [--debug] [-o {text,json}] [-i INVENTORY]",
        "List training jobs.",
        "options:",
        *GLOBAL_OPTIONS,
        "-i, --inventory INVENTORY also list the jobs in this cluster's shared directory (default: $MEGAPROV_INVENTORY or the config file's)",
        "examples:",
        "megaprov jobs",
        "megaprov jobs -i inventory.ini -o json",
    ],
}


def test_the_flags_defaults():
    train = parse("train", "-f", "x.yml")
    assert (train.job, train.name, train.resume, train.nodes, train.gpus_per_node, train.gpu, train.inventory) == (
        "x.yml",
        None,
        None,
        None,
        None,
        None,
        None,
    )
    assert (train.detach, train.dry_run, train.all_nodes, train.exclude_unhealthy, train.node, train.dir) == (False, False, False, False, None, None)
    assert (train.stall_timeout, train.strategy) == (600, "linear")
    plan = parse("plan", "-f", "x.yml")
    assert (plan.mfu, plan.suggest, plan.top) == (None, False, 10)
    assert parse("plan", "-f", "x.yml", "--mfu", "0.5", "--suggest").mfu == 0.5
    logs = parse("job", "logs", "gpt-lab")
    assert (logs.name, logs.name_flag, logs.node, logs.lines, logs.follow) == ("gpt-lab", None, None, 50, False)
    assert parse("job", "logs", "--name", "gpt-lab", "--follow").name_flag == "gpt-lab"
    attach = parse("job", "attach", "gpt-lab")
    assert (attach.name, attach.stall_timeout, attach.inventory) == ("gpt-lab", 600, None)
    check = parse("job", "check", "a.yml")
    assert (check.spec, check.job) == ("a.yml", None)
    assert parse("jobs", "-i", "inv.ini").inventory.endswith("/inv.ini")


def test_the_launch_strategy_defaults_to_megaprov_strategy(monkeypatch):
    monkeypatch.setenv("MEGAPROV_STRATEGY", "mitogen")
    assert parse("train", "-f", "x.yml").strategy == "mitogen"
    assert parse("train", "-f", "x.yml", "--strategy", "free").strategy == "free"
    with pytest.raises(UsageError) as info:
        parse("train", "-f", "x.yml", "--strategy", "fast")
    assert info.value.message.startswith("megaprov train: argument --strategy: invalid choice: 'fast'")


@pytest.mark.parametrize(
    "argv, flag, high, shown_high",
    [
        (("job", "logs", "gpt-lab"), "--lines", 1_000_000, "1,000,000"),
        (("plan", "-f", "x.yml"), "--top", 1000, "1,000"),
        (("train", "-f", "x.yml"), "--stall-timeout", 7 * 86400, "604,800"),
        (("job", "attach", "gpt-lab"), "--stall-timeout", 7 * 86400, "604,800"),
    ],
)
def test_each_number_flag_has_its_bound(argv, flag, high, shown_high):
    assert getattr(parse(*argv, flag, str(high)), flag.lstrip("-").replace("-", "_")) == high
    with pytest.raises(UsageError) as info:
        parse(*argv, flag, str(high + 1))
    command = " ".join(argv[:2] if argv[0] == "job" else argv[:1])
    assert info.value.message == f"megaprov {command}: argument {flag}: '{high + 1}' is more than {shown_high}"


def _help_lines(capsys, *argv: str) -> list[str]:
    """A command's --help as the operator reads it, argparse's columns aside: each line stripped and its spaces single,
    blank lines left out, an option's help joined to its flags where it stands on the line below them, and the flags
    written as Python 3.13 writes them (-o, --output X) on every Python."""
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    lines = [re.sub(r"^(-\w) (\S+), (--[\w-]+) \2", r"\1, \3 \2", line.strip()) for line in out.splitlines() if line.strip()]
    joined: list[str] = []
    for line in lines:
        if joined and joined[-1].startswith("-") and "  " not in joined[-1] and not line.startswith(("-", "examples:")):
            joined[-1] += " " + line
        else:
            joined.append(line)
    return [" ".join(line.split()) for line in joined]


@pytest.mark.parametrize("command", list(HELP))
def test_each_command_says_what_it_does_its_flags_and_examples(capsys, command):
    assert _help_lines(capsys, *command.split()) == HELP[command]


@pytest.mark.parametrize(
    "argv, path, message",
    [
        (["job", "check"], "job check", "megaprov job check needs -f JOB.yml"),
        (["plan", "-f", "/nonexistent/gpt.yml"], "plan", "job spec /nonexistent/gpt.yml does not exist"),
        (["train"], "train", "megaprov train needs -f JOB.yml"),
        (["job", "attach", "gone"], "job attach", "no job 'gone' is known on this machine"),
        (["job", "grow", "gone"], "job grow", "no job 'gone' is known on this machine"),
        (["job", "status"], "job status", "megaprov job status needs the job's NAME"),
        (["job", "logs"], "job logs", "megaprov job logs needs the job's NAME"),
        (["job", "stop"], "job stop", "megaprov job stop needs the job's NAME"),
        (["jobs", "-i", "/nonexistent/inventory.ini"], "jobs", "inventory /nonexistent/inventory.ini does not exist"),
    ],
)
def test_a_refusal_with_json_output_names_the_command(capsys, argv, path, message):
    assert main([*argv, "-o", "json"]) == ExitCode.USAGE
    out, err = capsys.readouterr()
    document = json.loads(out)
    assert (document["command"], document["ok"], document["error"]["message"]) == (path, False, message)
    assert err.startswith(f"megaprov: error: {message}: ")

"""The command layer of `megaprov train`, `plan`, `job check|schema|attach|grow|status|logs|stop` and `jobs`
(megaprov.commands.training), called in-process: the real parser (megaprov.cli.build_parser) parses real argv and
the handler runs. Everything is real (specs from examples/jobs, the planner, the render, the verdict and the report
writers over a job directory under tmp_path) except the layer below the command at its edge: megaprov.training.jobs'
start/follow_job/find/listing/settle/stop/logs, the Slurm launcher's plays, elastic's grow, the image probe and the
image checks, doctor's findings, and /proc and the clock where the launch timing is read. The asserts are what the
operator gets: the Outcome (exit code, the one-line error and its fix), the lines printed, the arguments handed down."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from megaprov import output
from megaprov.commands import build_parser, emit, training
from megaprov.errors import ExitCode, UsageError
from megaprov.training import elastic, imagecheck, imagefacts, jobs, jobspec, jobview, nodefacts, planner, target
from megaprov.training import launchers as launchers_pkg
from megaprov.training.launchers import systemd
from megaprov.training.launchers.slurm import SlurmLauncher, SlurmState
from tests.cli.test_job_cli import cpu_inventory
from tests.helpers import container_job
from tests.unit.training.test_jobs_follow import AT, cpu_cluster, good_logs, make_job

ROOT = Path(__file__).resolve().parents[3]
REAL_CLUSTER = target.cluster
JOBS = ROOT / "examples" / "jobs"


@pytest.fixture(autouse=True)
def _state(tmp_path, monkeypatch):
    """megaprov's state (the index of jobs, recorded facts) of this test alone; no inventory by default."""
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    monkeypatch.delenv("MEGAPROV_INVENTORY", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def parse(*argv: Any):
    return build_parser().parse_args([str(a) for a in argv])


def handle(*argv: Any):
    args = parse(*argv)
    return args.handler(args)


def shown(outcome, capsys) -> str:
    capsys.readouterr()
    outcome.text()
    return capsys.readouterr().out


def usage(*argv: Any) -> tuple[str, str | None]:
    with pytest.raises(UsageError) as info:
        handle(*argv)
    return info.value.message, info.value.hint


# ---- job schema


def test_job_schema_is_the_specs_json_schema_printed_as_a_document(capsys):
    outcome = handle("job", "schema")
    schema = jobspec.schema()
    assert (outcome.command, outcome.code, outcome.error, outcome.document) == ("job schema", ExitCode.OK, None, True)
    assert outcome.result == schema
    assert shown(outcome, capsys) == json.dumps(schema, indent=2) + "\n"
    emit(outcome, "json")  # a document: printed as is with -o json too, not in an envelope
    assert json.loads(capsys.readouterr().out) == schema


# ---- job check


def test_job_check_refuses_two_different_specs():
    assert usage("job", "check", "a.yml", "-f", "b.yml") == ("two job specs: a.yml and -f b.yml", "give one, as -f JOB.yml")


def test_job_check_needs_a_spec():
    assert usage("job", "check") == ("megaprov job check needs -f JOB.yml", "give the job spec to check")


def test_job_check_of_the_positional_form_says_it_is_deprecated_and_checks_it(capsys):
    path = JOBS / "lab-tiny.yml"
    outcome = handle("job", "check", path, "-f", path)  # the same file twice is one spec
    assert capsys.readouterr().err == f"megaprov: note: `megaprov job check JOB.yml` is deprecated and goes in the next release: write -f {path}\n"
    assert outcome.result == {"job": "lab-tiny", "valid": True, "world": None, "fits": None}
    outcome = handle("job", "check", path)
    assert "deprecated" in capsys.readouterr().err
    assert outcome.result["job"] == "lab-tiny"


def test_job_check_without_a_cluster_validates_the_spec_alone(capsys):
    path = JOBS / "lab-tiny.yml"
    outcome = handle("job", "check", "-f", path)
    assert (outcome.command, outcome.code, outcome.error) == ("job check", ExitCode.OK, None)
    assert outcome.result == {"job": "lab-tiny", "valid": True, "world": None, "fits": None}
    assert shown(outcome, capsys) == f"{path}: valid job lab-tiny (-i INVENTORY or --gpu also checks its fit)\n"
    assert capsys.readouterr().err == ""


def test_job_check_of_an_elastic_spec_says_the_cluster_also_checks_its_node_counts(capsys):
    path = JOBS / "lab-elastic.yml"
    outcome = handle("job", "check", "-f", path)
    assert shown(outcome, capsys) == (
        f"{path}: valid job lab-elastic (-i INVENTORY or --gpu also checks its fit, and the node counts launch.elastic continues on)\n"
    )


def test_job_check_of_a_spec_with_a_cross_field_problem_raises_it(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text((JOBS / "lab-tiny.yml").read_text().replace("global_batch_size: 8", "global_batch_size: 6"))
    with pytest.raises(jobspec.JobSpecError):
        handle("job", "check", "-f", bad)


def test_job_check_on_a_gpu_says_the_fit(capsys):
    path = JOBS / "gpt-345m-1node.yml"
    outcome = handle("job", "check", "-f", path, "--gpu", "H100-SXM")
    spec = jobspec.parse(path.read_text())
    planned = planner.plan(spec, planner.Cluster(1, 8, planner.GPUS["H100-SXM"]))
    assert (outcome.command, outcome.code, outcome.error) == ("job check", ExitCode.OK, None)
    assert outcome.result == {"job": "gpt-345m", "valid": True, "world": 8, "fits": True, "plan": jobview.plan_dict(planned)}
    need, have = planned.memory.total / planner.GIB, planned.memory.capacity / planner.GIB
    assert shown(outcome, capsys) == f"{path}: valid job gpt-345m on 8 GPUs, fits {need:.1f} of {have:.1f} GiB per H100-SXM\n"


@pytest.mark.parametrize("flags", [["--nodes", "1"], ["--gpus-per-node", "1"], ["--gpu", "cpu"], ["-i", "INV"]])
def test_each_cluster_flag_makes_job_check_judge_the_fit(capsys, tmp_path, flags):
    flags = [str(cpu_inventory(tmp_path)) if f == "INV" else f for f in flags]
    path = JOBS / "lab-tiny.yml"
    outcome = handle("job", "check", "-f", path, *flags)
    world = 1 if flags[0] == "--nodes" else 2
    assert outcome.result["world"] == world and outcome.result["fits"] is None and "plan" in outcome.result
    assert shown(outcome, capsys) == f"{path}: valid job lab-tiny on {world} GPUs\n"  # CPU nodes: no memory to fit


def test_job_check_of_an_elastic_job_on_a_cluster_says_where_it_continues(capsys):
    path = JOBS / "lab-elastic.yml"
    outcome = handle("job", "check", "-f", path, "--nodes", "3")
    spec = jobspec.parse(path.read_text())
    planned = planner.plan(spec, planner.Cluster(3, 1, planner.GPUS["cpu"]))
    assert shown(outcome, capsys) == f"{path}: valid job lab-elastic on 3 GPUs\n{jobview.elastic_text(planned)}\n"


def test_job_check_of_a_job_that_does_not_fit_exits_6_with_the_fit_line(capsys):
    path = JOBS / "llama-8b-2nodes.yml"
    outcome = handle("job", "check", "-f", path, "--gpu", "A10")
    spec = jobspec.parse(path.read_text())
    found = planner.Cluster(spec.launch.nodes, spec.launch.gpus_per_node, planner.GPUS["A10"])
    planned = planner.plan(spec, found)
    assert (outcome.command, outcome.code) == ("job check", ExitCode.VERDICT_FAILED)
    assert outcome.result == {"job": "llama-8b", "valid": True, "world": found.world, "fits": False, "plan": jobview.plan_dict(planned)}
    need, have = planned.memory.total / planner.GIB, planned.memory.capacity / planner.GIB
    fixes = "; ".join(f.render() for f in planned.fixes)
    assert fixes and outcome.error == f"llama-8b does not fit A10: {need:.1f} GiB per GPU of {have:.1f}; fixes: {fixes}"
    assert outcome.text is None


def test_the_fit_line_without_a_fix_points_at_plan_suggest():
    spec = jobspec.parse((JOBS / "llama-8b-2nodes.yml").read_text())
    found = planner.Cluster(2, 8, planner.GPUS["A10"])
    planned = dataclasses.replace(planner.plan(spec, found), fixes=[])
    line = training.fit_error(spec, planned, found)
    assert line.startswith("llama-8b does not fit A10: ") and line.endswith(" GiB per GPU of 22.0; fixes: none alone: run megaprov plan --suggest")


# ---- plan


def test_plan_of_a_fitting_job_is_the_plan_at_the_default_mfu(capsys):
    spec = jobspec.parse((JOBS / "gpt-345m-1node.yml").read_text())
    found = planner.Cluster(1, 8, planner.GPUS["H100-SXM"])
    outcome = handle("plan", "-f", JOBS / "gpt-345m-1node.yml", "--gpu", "H100-SXM")
    planned = planner.plan(spec, found, planner.default_mfu(found))
    assert (outcome.command, outcome.code, outcome.error) == ("plan", ExitCode.OK, None)
    assert outcome.result == jobview.plan_dict(planned)
    assert shown(outcome, capsys).startswith("plan: gpt-345m on 1 x 8 H100-SXM")


def test_plan_at_a_given_mfu(capsys):
    spec = jobspec.parse((JOBS / "gpt-345m-1node.yml").read_text())
    found = planner.Cluster(1, 8, planner.GPUS["H100-SXM"])
    outcome = handle("plan", "-f", JOBS / "gpt-345m-1node.yml", "--gpu", "H100-SXM", "--mfu", "0.25")
    assert outcome.result == jobview.plan_dict(planner.plan(spec, found, 0.25))
    assert outcome.result != jobview.plan_dict(planner.plan(spec, found, planner.default_mfu(found)))


def test_plan_of_a_job_that_does_not_fit_exits_6_with_the_fit_line(capsys):
    outcome = handle("plan", "-f", JOBS / "llama-8b-2nodes.yml", "--gpu", "A10")
    assert (outcome.command, outcome.code) == ("plan", ExitCode.VERDICT_FAILED)
    assert outcome.error.startswith("llama-8b does not fit A10: ") and "; fixes: " in outcome.error
    assert "DOES NOT FIT" in shown(outcome, capsys)


def test_plan_suggest_ranks_the_layouts_and_times_itself(capsys, monkeypatch):
    clock = iter([100.0, 102.5])
    monkeypatch.setattr(training.time, "perf_counter", lambda: next(clock))
    spec = jobspec.parse((JOBS / "gpt3-175b-128nodes.yml").read_text())
    found = planner.Cluster(128, 8, planner.GPUS["H100-SXM"])
    outcome = handle("plan", "-f", JOBS / "gpt3-175b-128nodes.yml", "--gpu", "H100-SXM", "--suggest", "--top", "3")
    ranked = planner.suggest(spec, found, planner.default_mfu(found), 3)
    assert (outcome.command, outcome.code, outcome.error) == ("plan", ExitCode.OK, None)
    assert outcome.result == {"layouts": jobview.candidates_dict(ranked), "seconds": 2.5}
    assert len(outcome.result["layouts"]) == 3
    text = shown(outcome, capsys)
    capsys.readouterr()
    jobview.render_suggest(ranked, 2.5)
    assert text == capsys.readouterr().out


def test_plan_suggest_with_no_fitting_layout_exits_6(capsys):
    outcome = handle("plan", "-f", JOBS / "llama-8b-2nodes.yml", "--gpu", "A10", "--nodes", "1", "--gpus-per-node", "2", "--suggest")
    assert (outcome.command, outcome.code, outcome.error) == ("plan", ExitCode.VERDICT_FAILED, "llama-8b: no layout fits 2 x A10")
    assert outcome.result["layouts"] == []
    assert outcome.text is not None


# ---- when this process started (/proc)


class FakeProc:
    """Path, with /proc/self/stat and /proc/stat read from given texts (this node's /proc, stood in)."""

    def __init__(self, stat: str | None, boot: str | None):
        self.files = {"/proc/self/stat": stat, "/proc/stat": boot}

    def __call__(self, name: str):
        files = self.files

        class P:
            def read_text(self) -> str:
                text = files[name]
                if text is None:
                    raise FileNotFoundError(name)
                return text

        return P()


STAT = "4242 (my) proc (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 123456 1000 10 18446744073709551615"
BOOT = "cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 99\n"


def test_process_started_is_boot_time_plus_the_start_ticks(monkeypatch):
    monkeypatch.setattr(training, "Path", FakeProc(STAT, BOOT))
    assert training.process_started() == 1700000000 + 123456 / training.os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize(
    ("stat", "boot"),
    [
        (None, BOOT),
        (STAT, None),
        (STAT, "cpu 1 2 3\n"),  # no btime line
        (STAT, "btime soon\n"),
        ("4242 (x) S 1", BOOT),  # too short
        (STAT.replace("123456", "later"), BOOT),
    ],
)
def test_process_started_is_none_where_proc_says_nothing_usable(monkeypatch, stat, boot):
    monkeypatch.setattr(training, "Path", FakeProc(stat, boot))
    assert training.process_started() is None


def test_process_started_on_this_machine_is_before_now():
    started = training.process_started()
    assert started is not None and time.time() - 86400 * 30 < started <= time.time()


# ---- train: its flags, --dry-run


def test_dry_run_flags_need_dry_run(tmp_path):
    inv = cpu_inventory(tmp_path)
    for flag in (["--node", "node1"], ["--all-nodes"], ["--dir", str(tmp_path / "out")]):
        assert usage("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, *flag) == (
            "--node, --all-nodes and --dir choose what --dry-run shows",
            "add --dry-run, or drop them",
        )


def test_train_refusals_of_its_flags(tmp_path):
    inv = cpu_inventory(tmp_path)
    assert usage("train", "-i", inv) == ("megaprov train needs -f JOB.yml", "or --resume NAME to continue a job")
    hint = "drop --job/--name, or start a new job without --resume"
    assert usage("train", "--resume", "x", "-f", JOBS / "lab-tiny.yml") == ("--resume NAME takes the spec stored with the job", hint)
    assert usage("train", "--resume", "x", "--name", "y") == ("--resume NAME takes the spec stored with the job", hint)
    assert usage("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--name", "Bad") == (
        "--name 'Bad' is not a job name",
        "use lowercase letters, digits, '.', '_' and '-' (up to 63), starting with a letter or digit",
    )


def test_train_needs_an_inventory(tmp_path):
    message, _ = usage("train", "-f", JOBS / "lab-tiny.yml", "--dry-run")
    assert message == "megaprov train needs -i INVENTORY"


def test_dry_run_shows_the_plan_and_the_first_nodes_launch(tmp_path, capsys):
    inv = cpu_inventory(tmp_path, nodes=3)
    outcome = handle("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run")
    assert (outcome.command, outcome.code, outcome.error) == ("train", ExitCode.OK, None)
    assert outcome.result["written"] == [] and outcome.result["plan"]["job"] == "lab-tiny"
    assert [n.host for n in outcome.result["launch"].nodes] == ["node1", "node2"]
    out = shown(outcome, capsys)
    assert out.startswith("plan: lab-tiny on 2 x 1 cpu") and "# ---- node1 (node rank 0)" in out and "# ---- node2" not in out
    assert "wrote" not in out


def test_dry_run_of_one_node_and_of_all(tmp_path, capsys):
    inv = cpu_inventory(tmp_path, nodes=2)
    out = shown(handle("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run", "--node", "node2"), capsys)
    assert "# ---- node2 (node rank 1)" in out and "# ---- node1" not in out
    out = shown(handle("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run", "--all-nodes"), capsys)
    assert out.index("# ---- node1 (node rank 0)") < out.index("# ---- node2 (node rank 1)")


def test_dry_run_of_a_node_not_in_the_job_is_refused(tmp_path):
    inv = cpu_inventory(tmp_path, nodes=3)
    assert usage("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run", "--node", "node3") == (
        "--node node3 is not a node of this job",
        "use one of node1, node2",
    )


def test_dry_run_into_a_directory_writes_every_nodes_files_and_says_so(tmp_path, capsys):
    inv = cpu_inventory(tmp_path)
    out_dir = tmp_path / "out"
    outcome = handle("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run", "--dir", out_dir)
    written = outcome.result["written"]
    assert written and all(Path(p).is_file() and Path(p).parent.is_relative_to(out_dir) for p in written)
    assert shown(outcome, capsys).endswith(f"train: wrote {len(written)} file(s) into {out_dir}\n")


def test_train_name_renames_the_job(tmp_path):
    inv = cpu_inventory(tmp_path)
    outcome = handle("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run", "--name", "other")
    assert outcome.result["plan"]["job"] == "other"


def test_train_of_a_job_that_does_not_fit_exits_6_before_anything_starts(tmp_path, monkeypatch):
    from tests.cli.test_job_cli import gpu_inventory

    monkeypatch.setattr(jobs, "start", lambda *a: pytest.fail("started"))
    outcome = handle("train", "-f", JOBS / "llama-8b-2nodes.yml", "-i", gpu_inventory(tmp_path, "A10"))
    assert (outcome.command, outcome.code) == ("train", ExitCode.VERDICT_FAILED)
    assert outcome.error.startswith("llama-8b does not fit A10: ") and outcome.result["fits"] is False


# ---- train --exclude-unhealthy


@pytest.fixture
def doctor(monkeypatch):
    from megaprov.ops.doctor import health

    rec = SimpleNamespace(answer=([], None), asked=[])
    monkeypatch.setattr(health, "unhealthy_nodes", lambda inventory: rec.asked.append(inventory) or rec.answer)
    return rec


def test_exclude_unhealthy_needs_a_doctor_run(tmp_path, doctor):
    inv = cpu_inventory(tmp_path)
    assert usage("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run", "--exclude-unhealthy") == (
        "--exclude-unhealthy: megaprov doctor has not checked this cluster",
        f"run `megaprov doctor -i {inv}` first",
    )
    assert doctor.asked == [str(inv)]


def test_exclude_unhealthy_needs_a_recent_doctor_run(tmp_path, doctor):
    from megaprov.ops.doctor import health

    inv = cpu_inventory(tmp_path)
    doctor.answer = ([], health.FINDINGS_VALID_S + 1)
    assert usage("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run", "--exclude-unhealthy") == (
        f"--exclude-unhealthy: the last doctor run is {(health.FINDINGS_VALID_S + 1) / 3600:.0f} h old",
        f"run `megaprov doctor -i {inv}` again",
    )
    doctor.answer = (["node1"], health.FINDINGS_VALID_S)  # at the limit: still valid
    handle("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run", "--exclude-unhealthy", "--nodes", "1")


def test_exclude_unhealthy_leaves_the_nodes_out_and_says_so(tmp_path, doctor, capsys):
    inv = cpu_inventory(tmp_path, nodes=3)
    doctor.answer = (["node1"], 600.0)
    outcome = handle("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run", "--exclude-unhealthy")
    assert [n.host for n in outcome.result["launch"].nodes] == ["node2", "node3"]
    assert capsys.readouterr().err == "train: leaving out node1 (error findings of megaprov doctor 10 min ago)\n"
    outcome = handle("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run", "--exclude-unhealthy", "-o", "json")
    assert [n.host for n in outcome.result["launch"].nodes] == ["node2", "node3"]
    assert capsys.readouterr().err == ""


def test_without_exclude_unhealthy_doctor_is_not_asked(tmp_path, doctor, capsys):
    inv = cpu_inventory(tmp_path, nodes=3)
    doctor.answer = (["node1"], 600.0)
    outcome = handle("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run")
    assert [n.host for n in outcome.result["launch"].nodes] == ["node1", "node2"] and doctor.asked == []
    assert capsys.readouterr().err == ""


# ---- train: the start, its line, --detach


class Clock:
    """training.time stood in: time() answers the given instants in turn."""

    def __init__(self, *instants: float):
        self.instants = list(instants)

    def time(self) -> float:
        return self.instants.pop(0)

    def perf_counter(self) -> float:
        return 0.0


@pytest.fixture
def launch(monkeypatch, tmp_path):
    """jobs.start stood in: records its arguments, answers the job (a job directory under tmp_path)."""
    rec = SimpleNamespace(calls=[], job=None)

    def fake_start(*a):
        rec.calls.append(a)
        return rec.job

    monkeypatch.setattr(jobs, "start", fake_start)
    monkeypatch.setattr(training, "process_started", lambda: 1000.0)
    return rec


def _plain_job(launcher="systemd"):
    return jobs.Job(
        "lab-tiny",
        Path("/inv"),
        ["node1", "node2"],
        "/shared",
        "/shared/jobs/lab-tiny",
        Path("/nowhere"),
        "/shared/checkpoints/lab-tiny",
        "megaprov-job-lab-tiny.service",
        launcher,
        "4242" if launcher == "slurm" else "",
        "head" if launcher == "slurm" else "",
    )


def test_train_detach_starts_the_job_says_where_and_returns(tmp_path, launch, monkeypatch, capsys):
    inv = cpu_inventory(tmp_path)
    launch.job = _plain_job()
    monkeypatch.setattr(training, "time", Clock(1010.0, 1013.25))
    monkeypatch.setattr(jobs, "follow_job", lambda *a, **k: pytest.fail("followed"))
    args = parse("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--detach", "--strategy", "mitogen")
    outcome = args.handler(args)
    [call] = launch.calls
    spec, text, found, planned, plan, rendered, inventory, resume, say, strategy = call
    assert spec.name == "lab-tiny" and text == (JOBS / "lab-tiny.yml").read_text()
    assert found.hosts == ("node1", "node2") and plan == jobview.plan_dict(planned) and [n.host for n in rendered.nodes] == ["node1", "node2"]
    assert (inventory, resume, say, strategy) == (str(inv), False, output.SHOWN, "mitogen")
    assert capsys.readouterr().err == (
        f"train: job lab-tiny started on node1, node2 (restarts: up to {spec.launch.max_restarts}, after {systemd.RESTART_SEC} s) "
        "in 13.2 s; job directory /shared/jobs/lab-tiny\n"
    )
    assert (outcome.command, outcome.code, outcome.error) == ("train", ExitCode.OK, None)
    assert outcome.result == {"job": "lab-tiny", "job_dir": "/shared/jobs/lab-tiny", "state": "running", "slurm_job_id": None}
    assert shown(outcome, capsys) == (
        "job lab-tiny runs detached: `megaprov job attach lab-tiny` follows it, `megaprov job logs lab-tiny -f`, `megaprov job stop lab-tiny`\n"
    )


def test_the_start_is_counted_from_the_process_start_but_no_more_than_30_s_back(tmp_path, launch, monkeypatch, capsys):
    inv = cpu_inventory(tmp_path)
    launch.job = _plain_job()
    monkeypatch.setattr(training, "time", Clock(1100.0, 1101.0))  # the process started 100 s ago: counted from 30 s
    handle("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--detach")
    assert " in 31.0 s; " in capsys.readouterr().err
    monkeypatch.setattr(training, "process_started", lambda: None)  # off Linux: from now
    monkeypatch.setattr(training, "time", Clock(1100.0, 1102.0))
    handle("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--detach")
    assert " in 2.0 s; " in capsys.readouterr().err


def test_a_slurm_job_says_its_slurm_id_and_host(tmp_path, launch, monkeypatch, capsys):
    inv = cpu_inventory(tmp_path)
    launch.job = _plain_job("slurm")
    monkeypatch.setattr(training, "time", Clock(1010.0, 1012.0))
    outcome = handle("train", "-f", JOBS / "lab-tiny-slurm.yml", "-i", inv, "--detach", "-o", "json")
    assert capsys.readouterr().err == ""  # -o json: nothing beside the document
    assert launch.calls[0][8] is output.SILENT
    assert outcome.result["slurm_job_id"] == "4242"
    launch.calls.clear()
    monkeypatch.setattr(training, "time", Clock(1010.0, 1012.0))
    handle("train", "-f", JOBS / "lab-tiny-slurm.yml", "-i", inv, "--detach")
    spec = jobspec.parse((JOBS / "lab-tiny-slurm.yml").read_text())
    assert capsys.readouterr().err == (
        "train: job lab-tiny submitted to Slurm as job 4242 on head (continued in a new allocation after a failure, "
        f"up to {spec.launch.max_restarts} times, and at its time limit) in 12.0 s; job directory /shared/jobs/lab-tiny\n"
    )


def test_train_name_is_written_into_the_stored_spec(tmp_path, launch, monkeypatch):
    inv = cpu_inventory(tmp_path)
    launch.job = _plain_job()
    handle("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--detach", "--name", "renamed")
    spec, text = launch.calls[0][:2]
    assert spec.name == "renamed" and jobspec.parse(text).name == "renamed"
    assert text == jobview.renamed((JOBS / "lab-tiny.yml").read_text(), "renamed")


def test_train_resume_takes_the_jobs_stored_spec_and_inventory(tmp_path, launch, monkeypatch):
    job = make_job(tmp_path, "lab-tiny.yml")
    inv = cpu_inventory(tmp_path)
    job.inventory = inv
    found = []
    monkeypatch.setattr(jobs, "find", lambda name, inventory: found.append((name, inventory)) or job)
    launch.job = _plain_job()
    handle("train", "--resume", "lab-tiny", "--detach")
    assert found == [("lab-tiny", None)]
    spec, text, _, _, _, _, inventory, resume = launch.calls[0][:8]
    assert (spec.name, text, inventory, resume) == ("lab-tiny", (job.local_dir / "spec.yml").read_text(), str(inv), True)


def test_train_resume_with_an_inventory_keeps_it(tmp_path, launch, monkeypatch):
    job = make_job(tmp_path, "lab-tiny.yml")
    job.inventory = tmp_path / "elsewhere.ini"
    inv = cpu_inventory(tmp_path)
    monkeypatch.setattr(jobs, "find", lambda name, inventory: job)
    launch.job = _plain_job()
    handle("train", "--resume", "lab-tiny", "-i", inv, "--detach")
    assert launch.calls[0][6] == str(inv)


def test_the_stored_spec_of_a_resumed_job_is_read_as_the_cluster_users_file(tmp_path, launch, monkeypatch):
    job = make_job(tmp_path, "lab-tiny.yml")
    job.inventory = cpu_inventory(tmp_path)
    (job.local_dir / "spec.yml").unlink()
    (job.local_dir / "spec.yml").symlink_to(JOBS / "lab-tiny.yml")  # a link out of the job directory: refused
    monkeypatch.setattr(jobs, "find", lambda name, inventory: job)
    with pytest.raises(Exception) as info:
        handle("train", "--resume", "lab-tiny", "--detach")
    assert "link" in str(info.value) or "spec" in str(info.value)
    assert launch.calls == []


# ---- train in a container: the inventory, the image probe, the checks in the image


@pytest.fixture
def boxed(monkeypatch, tmp_path, launch):
    """A container job and its inventory; the probe and the checks in the image stood in (recorded)."""
    rec = SimpleNamespace(probes=[], checks=[], launch=launch, stack=nodefacts.NodeStack(source="image", image=container_job.IMAGE, hosts=("node1",)))
    launch.job = _plain_job()

    def probe(*a):
        rec.probes.append(a)
        return rec.stack

    monkeypatch.setattr(imagefacts, "probe", probe)
    monkeypatch.setattr(imagecheck, "check", lambda *a: rec.checks.append(a) or "ok")

    def write(launcher="torchrun", lab=False, nodes=3):
        spec = tmp_path / "boxed.yml"
        spec.write_text(container_job.SPEC.replace("LAUNCHER", launcher).replace("gpus_per_node: 4", "gpus_per_node: 1"))
        inv = cpu_inventory(tmp_path, nodes=nodes)
        # the job's first node decides whether its units may raise their limits (a lab node cannot)
        lab_node = "node1" if lab else "node2"
        inv.write_text(inv.read_text().replace(f"{lab_node} ansible_host", f"{lab_node} megaprov_lab=true ansible_host"))
        with inv.open("a") as f:
            f.write('megaprov_container_mount_roots=["/scratch"]\n')
        return spec, inv

    rec.write = write
    return rec


def test_a_container_job_probes_its_image_on_its_first_node_and_checks_it_on_its_nodes(tmp_path, boxed, capsys):
    spec_path, inv = boxed.write()
    handle("train", "-f", spec_path, "-i", inv, "--detach")
    [probe] = boxed.probes
    spec = probe[0]
    assert spec.launch.container.image == container_job.IMAGE
    assert probe[1:] == (Path(inv), "/shared", "node1", False, None, output.SHOWN)
    [check] = boxed.checks
    assert check[0] is spec and check[1:] == (Path(inv), "/shared", ["node1", "node2"], False, None, ["LimitMEMLOCK=infinity"], output.SHOWN)
    found = boxed.launch.calls[0][2]
    assert found.stack is boxed.stack and found.hosts == ("node1", "node2", "node3")


def test_a_lab_nodes_image_checks_run_without_the_units_limits(tmp_path, boxed):
    spec_path, inv = boxed.write(lab=True)
    handle("train", "-f", spec_path, "-i", inv, "--detach", "-o", "json")
    assert boxed.probes[0][6] is output.SILENT
    assert boxed.checks[0][6:] == ([], output.SILENT)


def test_a_slurm_container_job_is_probed_and_checked_through_the_submit_host(tmp_path, boxed):
    spec_path, inv = boxed.write("slurm")
    handle("train", "-f", spec_path, "-i", inv, "--detach")
    assert boxed.probes[0][3:6] == ("node1", False, "head")
    assert boxed.checks[0][3:6] == (["node1", "node2"], False, "head")


def test_an_image_already_probed_is_not_probed_again(tmp_path, boxed, monkeypatch):
    spec_path, inv = boxed.write()
    monkeypatch.setattr(imagefacts, "known", lambda inventory, image: boxed.stack)
    handle("train", "-f", spec_path, "-i", inv, "--detach")
    assert boxed.probes == [] and len(boxed.checks) == 1
    assert boxed.launch.calls[0][2].stack is boxed.stack


def test_a_container_dry_run_probes_and_checks_nothing(tmp_path, boxed):
    spec_path, inv = boxed.write()
    handle("train", "-f", spec_path, "-i", inv, "--dry-run")
    assert boxed.probes == [] and boxed.checks == [] and boxed.launch.calls == []


def test_a_job_without_a_container_probes_and_checks_nothing(tmp_path, boxed):
    _, inv = boxed.write()
    handle("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--detach")
    assert boxed.probes == [] and boxed.checks == [] and len(boxed.launch.calls) == 1


def test_the_container_cluster_is_the_inventory_and_the_slurm_submit_host(tmp_path, boxed):
    spec_path, inv = boxed.write("slurm")
    args = parse("train", "-f", spec_path, "-i", inv)
    loaded, submit = training._container_cluster(args, container_job.spec("slurm"))
    assert submit == "head" and loaded.hosts_of("gpu_nodes") == ["node1", "node2", "node3"]
    assert loaded.host_var("node1", "megaprov_container_mount_roots", None) == ["/scratch"]  # the cluster's defaults and vars
    loaded, submit = training._container_cluster(args, container_job.spec())
    assert submit is None and loaded.path == Path(inv)


def test_the_probe_on_a_gpu_cluster_asks_for_gpus(tmp_path, boxed):
    found = dataclasses.replace(container_job.cluster(), stack=nodefacts.ROLE_DEFAULTS)
    args = parse("train", "-f", "x.yml", "-i", tmp_path / "inv.ini")
    probed = training._probe_image(args, container_job.spec(), found, [("n1", "10.0.0.1"), ("n2", "10.0.0.2")], "ctl")
    assert boxed.probes[0][1:] == (tmp_path / "inv.ini", "/shared", "n1", True, "ctl", output.SHOWN)
    assert probed == dataclasses.replace(found, stack=boxed.stack)


# ---- following a job: train and job attach end the same way


class Follower:
    """jobs.follow_job stood in: records its arguments, says the given progress and waits, and answers the job's
    outcome with the log its directory holds."""

    def __init__(self, state="finished", reason="", progress=(), waiting=()):
        self.state, self.reason, self.progress, self.waiting = state, reason, list(progress), list(waiting)
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, job, seq_length, on_progress, stall, **kw):
        self.calls.append((job, seq_length, stall, kw))
        for p in self.progress:
            on_progress(p)
        for text in self.waiting:
            kw["on_waiting"](text)
        return jobs.Outcome(self.state, jobs.read_log(job, seq_length, kw["log_interval"]), self.reason)


@pytest.fixture
def concluded(monkeypatch):
    """jobs.conclude, real, with its arguments recorded."""
    calls = []
    real = jobs.conclude
    monkeypatch.setattr(jobs, "conclude", lambda *a: calls.append(a) or real(*a))
    return calls


@pytest.fixture
def attach(monkeypatch, tmp_path, concluded):
    """job attach of a job directory under tmp_path, the cluster of its inventory stood in."""
    rec = SimpleNamespace(found=[], shapes=[], cluster=cpu_cluster(2), concluded=concluded, follower=Follower())
    monkeypatch.setattr(jobs, "follow_job", lambda *a, **k: rec.follower(*a, **k))

    def find(name, inventory):
        rec.found.append((name, inventory))
        return rec.job

    monkeypatch.setattr(jobs, "find", find)
    monkeypatch.setattr(target, "cluster", lambda spec, inventory, shape: rec.shapes.append((spec.name, inventory, shape)) or (rec.cluster, []))
    return rec


def test_attach_follows_a_running_job_and_its_verdict_passes(tmp_path, attach, capsys):
    attach.job = make_job(tmp_path)
    good_logs(attach.job)
    outcome = handle("job", "attach", "lab-tiny", "--stall-timeout", "42")
    assert attach.found == [("lab-tiny", None)]
    assert attach.shapes == [("lab-tiny", str(attach.job.inventory), target.Shape(2))]
    [(job, seq, stall, kw)] = attach.follower.calls
    spec = jobs.job_spec(attach.job)
    planned = planner.plan(spec, attach.cluster)
    assert (job, seq, stall) == (attach.job, 128, 42.0) and isinstance(stall, float)
    assert kw["log_interval"] == spec.train.log_interval and kw["report"] is output.SHOWN and kw["watch"] is None
    assert kw["targets"] == jobs.metrics_targets(spec, planned)
    [args] = attach.concluded
    assert args[0] is attach.job and args[1] == spec and args[2] == planned and args[3].state == "finished"
    assert args[4:] == (False, {}, attach.cluster)
    report = json.loads((attach.job.local_dir / "report.json").read_text())
    assert (outcome.command, outcome.code, outcome.error) == ("job attach", ExitCode.OK, None)
    d = attach.job.local_dir
    assert outcome.result == {
        "job": "lab-tiny",
        "verdict": "passed",
        "report": {"json": str(d / "report.json"), "markdown": str(d / "report.md"), "plot": str(d / "report.png")},
        "checks": report["checks"],
    }
    lines = shown(outcome, capsys).splitlines()
    assert lines[0] == "verdict for job lab-tiny: PASSED"
    assert lines[-1] == f"report: {d / 'report.md'} (also report.json, report.png)"


def test_a_failed_verdict_exits_6_naming_each_reason(tmp_path, attach, capsys):
    attach.job = make_job(tmp_path)
    good_logs(attach.job, ms=1200.0)  # below the throughput expected
    attach.follower = Follower("stalled", "no output from any node for 600 s")
    outcome = handle("job", "attach", "lab-tiny")
    assert attach.follower.calls[0][2] == 600.0
    assert (outcome.command, outcome.code) == ("job attach", ExitCode.VERDICT_FAILED)
    report = json.loads((attach.job.local_dir / "report.json").read_text())
    assert outcome.result["verdict"] == "failed" and outcome.result["checks"] == report["checks"]
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert [c["name"] for c in failed] == ["throughput", "run"]
    assert outcome.error == "job lab-tiny failed its verdict: " + "; ".join(f"{c['name']}: {c['detail']}" for c in failed)
    assert outcome.error.endswith("; run: stalled: no output from any node for 600 s")
    assert shown(outcome, capsys).splitlines()[0] == "verdict for job lab-tiny: FAILED"


def test_progress_and_waiting_are_said_on_stderr(tmp_path, attach, capsys):
    attach.job = make_job(tmp_path)
    good_logs(attach.job)
    p = jobs.Progress("lab-tiny", 3, 60, 5.5, 1200.0, 1.5, 30.0, 0, 0)
    attach.follower = Follower(progress=[p], waiting=["slurm job 7 PENDING (Resources)"])
    handle("job", "attach", "lab-tiny")
    assert capsys.readouterr().err.splitlines()[:2] == [jobview.progress_text(p), "job attach: slurm job 7 PENDING (Resources)"]


def test_a_detached_follower_leaves_the_job_running_and_exits_130(tmp_path, attach, capsys):
    attach.job = make_job(tmp_path)
    attach.follower = Follower("detached")
    outcome = handle("job", "attach", "lab-tiny")
    assert (outcome.command, outcome.code, outcome.error, outcome.text) == ("job attach", ExitCode.INTERRUPTED, None, None)
    assert outcome.result == {"job": "lab-tiny", "state": "running"}
    assert capsys.readouterr().err == (
        "job attach: detached; job lab-tiny keeps running: `megaprov job attach lab-tiny` or `megaprov job stop lab-tiny`\n"
    )
    assert attach.concluded == [] and not (attach.job.local_dir / "report.json").exists()


def test_an_elastic_systemd_job_is_followed_with_a_watch(tmp_path, attach):
    attach.job = make_job(tmp_path, "lab-elastic.yml", hosts=("node1", "node2", "node3"))
    attach.cluster = cpu_cluster(3)
    attach.follower = Follower("detached")
    handle("job", "attach", "lab-elastic", "-o", "json")
    assert attach.shapes[0][2] == target.Shape(3)
    watch = attach.follower.calls[0][3]["watch"]
    assert isinstance(watch, elastic.Watch)
    spec = jobs.job_spec(attach.job)
    assert (watch.job, watch.spec, watch.report, watch.counts) == (attach.job, spec, output.SILENT, elastic.counts_of(spec, attach.cluster))


def test_an_elastic_slurm_job_is_followed_without_a_watch(tmp_path, attach):
    attach.job = make_job(tmp_path, "lab-elastic.yml", hosts=("node1", "node2", "node3"), launcher="slurm")
    attach.cluster = cpu_cluster(3)
    attach.follower = Follower("detached")
    handle("job", "attach", "lab-elastic")
    assert attach.shapes[0][2] == target.Shape(None)  # Slurm's allocation decides the nodes
    assert attach.follower.calls[0][3]["watch"] is None


def test_the_verdict_on_gpu_nodes_is_judged_with_their_samples(tmp_path, attach):
    attach.job = make_job(tmp_path)
    good_logs(attach.job)
    attach.cluster = dataclasses.replace(cpu_cluster(2), gpu=planner.GPUS["H100-SXM"])
    handle("job", "attach", "lab-tiny", "-o", "json")
    assert attach.concluded[0][4] is True


@pytest.mark.parametrize("state", ["starting", "running", "submitted"])
def test_attach_follows_a_job_that_runs(tmp_path, attach, state):
    attach.job = make_job(tmp_path, state=state)
    attach.follower = Follower("detached")
    assert handle("job", "attach", "lab-tiny", "-i", tmp_path / "inv.ini").code == ExitCode.INTERRUPTED
    assert attach.found == [("lab-tiny", str(tmp_path / "inv.ini"))]
    assert attach.shapes[0][1] == str(tmp_path / "inv.ini")


def test_attach_refuses_a_job_that_ended(tmp_path, attach):
    attach.job = make_job(tmp_path, state="finished")
    assert usage("job", "attach", "lab-tiny") == ("job lab-tiny is finished, not running", "`megaprov job status lab-tiny` shows its verdict")


def test_train_follows_the_started_job_and_times_its_launch(tmp_path, launch, attach, monkeypatch):
    inv = cpu_inventory(tmp_path)
    launch.job = attach.job = make_job(tmp_path)
    good_logs(attach.job)
    monkeypatch.setattr(target, "cluster", REAL_CLUSTER)
    start_epoch = time.mktime(time.strptime(AT[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
    monkeypatch.setattr(training, "process_started", lambda: start_epoch - 5.0)
    monkeypatch.setattr(training, "time", Clock(start_epoch - 4.0, start_epoch - 2.0))
    outcome = handle("train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--stall-timeout", "77")
    assert (outcome.command, outcome.code) == ("train", ExitCode.OK)
    assert attach.follower.calls[0][2] == 77.0
    timing = attach.concluded[0][5]
    assert sorted(timing) == [
        "megaprov_start_to_units_started_s",
        "megaprov_to_torchrun_start_s",
        "megaprov_to_torchrun_started_everywhere_s",
        "torchrun_start_to_first_iteration_s",
    ]
    assert (timing["megaprov_start_to_units_started_s"], timing["megaprov_to_torchrun_start_s"]) == (3.0, 5.0)


def test_a_resumed_train_does_not_time_the_earlier_attempts(tmp_path, launch, attach, monkeypatch):
    launch.job = attach.job = make_job(tmp_path)
    attach.job.inventory = cpu_inventory(tmp_path)
    good_logs(attach.job)
    monkeypatch.setattr(target, "cluster", REAL_CLUSTER)
    monkeypatch.setattr(training, "time", Clock(1010.0, 1012.0))
    outcome = handle("train", "--resume", "lab-tiny")
    assert outcome.command == "train" and attach.concluded[0][5] == {"megaprov_start_to_units_started_s": 12.0}


# ---- job grow


def _elastic_job(tmp_path, launcher="systemd", state="running", hosts=("node1", "node2")):
    job = make_job(tmp_path, "lab-elastic.yml", hosts=hosts, launcher=launcher, job_hosts=("node1", "node2", "node3"), state=state)
    if launcher == "slurm":
        text = (JOBS / "lab-elastic.yml").read_text().replace("launcher: torchrun", "launcher: slurm\n  slurm: {partition: gpu}")
        (job.local_dir / "spec.yml").write_text(text)
    return job


@pytest.fixture
def grow(monkeypatch):
    rec = SimpleNamespace(job=None, found=[], grown=[], answer=(["node1", "node2"], ["node1", "node2", "node3"]))
    monkeypatch.setattr(jobs, "find", lambda name, inventory: rec.found.append((name, inventory)) or rec.job)
    monkeypatch.setattr(elastic, "grow_systemd", lambda *a: rec.grown.append(a) or rec.answer)
    return rec


def test_grow_of_a_systemd_job_takes_its_nodes_back(tmp_path, grow, capsys):
    grow.job = _elastic_job(tmp_path)
    outcome = handle("job", "grow", "lab-elastic", "-i", tmp_path / "inv.ini")
    assert grow.found == [("lab-elastic", str(tmp_path / "inv.ini"))]
    assert grow.grown == [(grow.job, jobs.job_spec(grow.job), output.SHOWN)]
    assert (outcome.command, outcome.code, outcome.error) == ("job grow", ExitCode.OK, None)
    assert outcome.result == {"job": "lab-elastic", "before": ["node1", "node2"], "after": ["node1", "node2", "node3"]}
    assert shown(outcome, capsys) == "job lab-elastic: grew from 2 to 3 nodes (node1, node2, node3); it continues from its latest checkpoint\n"


def test_grow_with_json_output_says_nothing_while_it_works(tmp_path, grow):
    grow.job = _elastic_job(tmp_path)
    handle("job", "grow", "lab-elastic", "-o", "json")
    assert grow.grown[0][2] is output.SILENT


def test_grow_refuses_a_job_without_launch_elastic(tmp_path, grow):
    grow.job = make_job(tmp_path)
    assert usage("job", "grow", "lab-tiny") == (
        "job lab-tiny has no launch.elastic: it runs on its 2 nodes or not at all",
        "give a new job launch.elastic",
    )


@pytest.mark.parametrize("state", ["starting", "running", "submitted"])
def test_grow_grows_a_job_that_runs(tmp_path, grow, state):
    grow.job = _elastic_job(tmp_path, state=state)
    assert handle("job", "grow", "lab-elastic").code == ExitCode.OK


def test_grow_refuses_a_job_that_ended(tmp_path, grow):
    grow.job = _elastic_job(tmp_path, state="failed")
    assert usage("job", "grow", "lab-elastic") == (
        "job lab-elastic is failed, not running",
        "`megaprov train --resume lab-elastic` starts it again on all its nodes",
    )
    assert grow.grown == []


class SlurmAnswers(SlurmLauncher):
    """The Slurm launcher with its plays stood in: what the controller says of the job, recorded questions."""

    def __init__(self, on, state="RUNNING", idle=("node3",)):
        self.on, self.now, self.idle, self.asked = list(on), state, list(idle), []

    def log_hosts(self, job):
        self.asked.append(("log_hosts", job))
        return self.on

    def state(self, job, report=output.SILENT):
        self.asked.append(("state", job))
        return SlurmState("7", self.now, "Resources" if self.now == "PENDING" else "")

    def grow(self, job, partition, report):
        self.asked.append(("grow", job, partition, report))
        return self.idle

    def current_id(self, job):
        self.asked.append(("current_id", job))
        return "9"


@pytest.fixture
def slurm_grow(monkeypatch, grow):
    grow.launcher = SlurmAnswers(["node1", "node2"])
    monkeypatch.setattr(launchers_pkg, "of", lambda name: grow.launcher if name == "slurm" else pytest.fail(name))
    return grow


def test_grow_of_a_slurm_job_asks_its_allocation_to_continue_on_more(tmp_path, slurm_grow, capsys):
    slurm_grow.job = _elastic_job(tmp_path, "slurm")
    outcome = handle("job", "grow", "lab-elastic")
    job = slurm_grow.job
    assert slurm_grow.launcher.asked == [("log_hosts", job), ("state", job), ("grow", job, "gpu", output.SHOWN), ("current_id", job)]
    assert slurm_grow.grown == []
    assert (outcome.command, outcome.code, outcome.error) == ("job grow", ExitCode.OK, None)
    assert outcome.result == {"job": "lab-elastic", "idle": ["node3"]}
    assert shown(outcome, capsys) == (
        "job lab-elastic: Slurm job 9 saves a checkpoint and continues in a new allocation of 2-3 nodes (idle now: node3)\n"
    )


def test_grow_of_a_slurm_job_names_every_idle_node(tmp_path, slurm_grow, capsys):
    slurm_grow.job = _elastic_job(tmp_path, "slurm")
    slurm_grow.launcher.idle = ["node3", "node4"]
    outcome = handle("job", "grow", "lab-elastic", "-o", "json")
    assert slurm_grow.launcher.asked[-2][3] is output.SILENT
    assert shown(outcome, capsys).endswith("(idle now: node3, node4)\n")


def test_grow_of_a_slurm_job_on_all_its_nodes_is_refused(tmp_path, slurm_grow):
    slurm_grow.job = _elastic_job(tmp_path, "slurm")
    slurm_grow.launcher.on = ["node1", "node2", "node3"]
    assert usage("job", "grow", "lab-elastic") == ("job lab-elastic runs on all 3 of its nodes (node1, node2, node3)", "nothing to grow")
    assert [a[0] for a in slurm_grow.launcher.asked] == ["log_hosts"]


def test_grow_of_a_waiting_slurm_job_is_refused(tmp_path, slurm_grow):
    slurm_grow.job = _elastic_job(tmp_path, "slurm")
    slurm_grow.launcher.now = "PENDING"
    assert usage("job", "grow", "lab-elastic") == (
        "job lab-elastic: slurm job 7 PENDING (Resources)",
        "grow it while it runs: a waiting job gets the nodes Slurm has when it starts",
    )
    assert [a[0] for a in slurm_grow.launcher.asked] == ["log_hosts", "state"]


# ---- jobs


@pytest.fixture
def listed(monkeypatch):
    rec = SimpleNamespace(rows=[], listings=[], settled=[], found=[], settle=lambda job: False, again=None)

    def listing(inventory):
        rec.listings.append(inventory)
        return rec.again if rec.again is not None and len(rec.listings) > 1 else rec.rows

    monkeypatch.setattr(jobs, "listing", listing)
    monkeypatch.setattr(jobs, "find", lambda name, inventory: rec.found.append((name, inventory)) or name)
    monkeypatch.setattr(jobs, "settle", lambda job: rec.settled.append(job) or rec.settle(job))
    return rec


def _row(name, state="running", verdict=None, **extra):
    return {"name": name, "state": state, "verdict": verdict, "nodes": 2, "started": AT, "job_dir": f"/shared/jobs/{name}", **extra}


def test_jobs_without_any_is_one_line(listed, capsys):
    outcome = handle("jobs")
    assert listed.listings == [None]
    assert (outcome.command, outcome.code, outcome.result) == ("jobs", ExitCode.OK, {"jobs": []})
    assert shown(outcome, capsys) == "no jobs known here (pass -i INVENTORY to look in a cluster's shared directory)\n"


def test_jobs_reads_the_default_inventory(listed, monkeypatch, tmp_path):
    monkeypatch.setenv("MEGAPROV_INVENTORY", str(tmp_path / "inv.ini"))
    handle("jobs")
    assert listed.listings == [str(tmp_path / "inv.ini")]
    handle("jobs", "-i", tmp_path / "other.ini")
    assert listed.listings[-1] == str(tmp_path / "other.ini")


def test_jobs_lists_each_job_on_one_line(listed, capsys):
    listed.rows = [_row("a", "finished", "passed"), _row("b", "submitted", slurm_job_id="42")]
    outcome = handle("jobs")
    assert outcome.result == {"jobs": listed.rows} and listed.settled == []
    assert shown(outcome, capsys) == (
        f"a: finished, verdict passed, 2 node(s), started {AT}, /shared/jobs/a\n"
        f"b: submitted, verdict -, 2 node(s), started {AT}, Slurm job 42, /shared/jobs/b\n"
    )


def test_jobs_judges_the_jobs_that_ended_unfollowed_and_lists_them_again(listed, capsys, tmp_path):
    listed.rows = [_row("a", "running"), _row("b", "starting"), _row("c", "running", "failed"), _row("d", "submitted")]
    listed.settle = lambda job: job == "a"
    listed.again = [_row("a", "finished", "passed"), _row("b", "starting")]
    outcome = handle("jobs", "-i", tmp_path / "inv.ini")
    assert listed.found == [("a", str(tmp_path / "inv.ini")), ("b", str(tmp_path / "inv.ini"))] and listed.settled == ["a", "b"]
    assert listed.listings == [str(tmp_path / "inv.ini")] * 2
    assert outcome.result == {"jobs": listed.again}
    assert shown(outcome, capsys).splitlines()[0] == f"a: finished, verdict passed, 2 node(s), started {AT}, /shared/jobs/a"


def test_jobs_names_one_jobs_bad_files_and_lists_the_others(listed, capsys):
    listed.rows = [_row("a", "running"), _row("b", "running")]

    def settle(job):
        if job == "a":
            raise UsageError("no spec.yml in /shared/jobs/a", "x")
        return False

    listed.settle = settle
    outcome = handle("jobs")
    assert len(listed.listings) == 1 and listed.settled == ["a", "b"]
    assert outcome.result["jobs"][0]["problem"] == "no spec.yml in /shared/jobs/a" and "problem" not in outcome.result["jobs"][1]
    assert shown(outcome, capsys) == (
        f"a: running, verdict -, 2 node(s), started {AT}, /shared/jobs/a (no spec.yml in /shared/jobs/a)\n"
        f"b: running, verdict -, 2 node(s), started {AT}, /shared/jobs/b\n"
    )


# ---- job status, logs, stop


@pytest.fixture
def running(monkeypatch, tmp_path):
    cpu_inventory(tmp_path)
    rec = SimpleNamespace(job=make_job(tmp_path), found=[], stopped=[], logs=[], followed=[])
    monkeypatch.setattr(jobs, "find", lambda name, inventory: rec.found.append((name, inventory)) or rec.job)
    monkeypatch.setattr(jobs, "stop", lambda job, say: rec.stopped.append((job, say)))
    monkeypatch.setattr(jobs, "node_log", lambda job, node, lines: rec.logs.append((job, node, lines)) or ("node2", ["one", "two\x1b[31m"]))

    def follow_log(job, node, lines, emit):
        rec.followed.append((job, node, lines))
        emit("live\x07")
        return "node1"

    monkeypatch.setattr(jobs, "follow_log", follow_log)
    monkeypatch.setattr(jobs, "unit_states", lambda job: {"node1": {"unit": "active"}, "node2": {"unit": "active"}})
    return rec


@pytest.mark.parametrize("action", ["status", "logs", "stop"])
def test_a_job_command_needs_one_name(running, action):
    assert usage("job", action) == (f"megaprov job {action} needs the job's NAME", "`megaprov jobs` lists them")
    assert usage("job", action, "a", "--name", "b") == ("two job names: a and --name b", "give one")
    handle("job", action, "--name", "lab-tiny", "-i", "/inv.ini")
    handle("job", action, "lab-tiny", "--name", "lab-tiny")
    assert running.found == [("lab-tiny", "/inv.ini"), ("lab-tiny", None)]


def test_job_stop_stops_it_everywhere_and_says_how_to_continue(running, capsys):
    outcome = handle("job", "stop", "lab-tiny")
    assert running.stopped == [(running.job, output.SHOWN)]
    assert (outcome.command, outcome.code, outcome.result) == ("job stop", ExitCode.OK, {"job": "lab-tiny", "state": "stopped"})
    assert shown(outcome, capsys) == (
        "job lab-tiny: stopped on node1, node2 (ranks save a checkpoint on SIGTERM; `megaprov train --resume lab-tiny` continues)\n"
    )


def test_job_stop_of_a_slurm_job_names_its_slurm_id(running, capsys, tmp_path):
    running.job = make_job(tmp_path / "s", launcher="slurm")
    outcome = handle("job", "stop", "lab-tiny", "-o", "json")
    assert running.stopped[0][1] is output.SILENT
    assert shown(outcome, capsys).startswith("job lab-tiny: stopped on Slurm job 7 (")


def test_job_logs_prints_the_nodes_last_lines_escaped(running, capsys):
    outcome = handle("job", "logs", "lab-tiny", "--node", "node2", "--lines", "7")
    assert running.logs == [(running.job, "node2", 7)]
    assert (outcome.command, outcome.result, outcome.document) == (
        "job logs",
        {"job": "lab-tiny", "node": "node2", "lines": ["one", "two\x1b[31m"]},
        False,
    )
    assert shown(outcome, capsys) == "one\ntwo\\x1b[31m\n"
    handle("job", "logs", "lab-tiny")
    assert running.logs[-1] == (running.job, None, 50)


def test_job_logs_follow_prints_lines_as_they_come(running, capsys):
    outcome = handle("job", "logs", "lab-tiny", "-f", "--lines", "3")
    assert running.followed == [(running.job, None, 3)] and running.logs == []
    assert capsys.readouterr().out == "live\\x07\n"
    assert (outcome.command, outcome.result, outcome.document, outcome.text) == ("job logs", {"job": "lab-tiny", "node": "node1"}, True, None)


def test_job_logs_follow_refuses_json(running):
    assert usage("job", "logs", "lab-tiny", "-f", "-o", "json") == (
        "job logs -f prints lines as they come",
        "drop -o json, or drop -f for one JSON document",
    )
    assert running.followed == []


def test_job_status_is_its_meta_and_status(running, capsys):
    good_logs(running.job)
    outcome = handle("job", "status", "lab-tiny")
    meta, status = jobview.job_status(running.job, jobs.unit_states(running.job))
    assert (outcome.command, outcome.code) == ("job status", ExitCode.OK)
    assert outcome.result == {**meta, **status}
    text = shown(outcome, capsys)
    capsys.readouterr()
    jobview.render_job_status(meta, status)
    assert text == capsys.readouterr().out and "lab-tiny" in text

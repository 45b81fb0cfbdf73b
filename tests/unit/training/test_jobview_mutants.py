"""What the operator reads from megaprov.training.jobview (issue 36): `job status` gathered from a real job directory
(job.json, spec.yml from examples/jobs, node logs, report.json) and printed for systemd and Slurm jobs, the verdict
lines, `plan --suggest`'s table cell by cell, `data prepare`'s progress and prefixes, `train`'s progress line and its
ETA, the renamed spec, run lengths, and `train --dry-run` printed and written to a directory.

Nothing is stood in but the terminal (pytest's capsys, at a fixed width) and megaprov's state directory (under
tmp_path); the planner, the log reader, settle and the verdict writer are real."""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from megaprov.errors import UsageError
from megaprov.training import data, jobs, jobview, planner, render, verdict
from megaprov.training.throughput import StepTime
from tests.unit.training.test_jobs_start import FAILED_LOGS, ended_job, iterations, node_lines

ROOT = Path(__file__).resolve().parents[3]
JOBS = ROOT / "examples" / "jobs"


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    """megaprov's state (the index of jobs) and the staging area of this test alone; a wide terminal."""
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.delenv("NO_COLOR", raising=False)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return tmp_path / "state"


@pytest.fixture
def mnt(tmp_path) -> Path:
    (tmp_path / "mnt").mkdir()
    return tmp_path / "mnt"


def lines(capsys) -> list[str]:
    return capsys.readouterr().out.splitlines()


def cells(text_lines: list[str]) -> list[list[str]]:
    """The rows of a rich table as printed: each line with column separators, split into its stripped cells."""
    return [[c.strip() for c in re.split("[│┃]", line)[1:-1]] for line in text_lines if len(re.findall("[│┃]", line)) >= 2]


# ---- run lengths, SI numbers, the ETA


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (45.2, "45 s"),
        (89.4, "89 s"),
        (90, "2 min"),
        (12 * 60 + 10, "12 min"),
        (90 * 60 - 1, "90 min"),
        (90 * 60, "1.5 h"),
        (3.24 * 3600, "3.2 h"),
        (48 * 3600 - 1, "48.0 h"),
        (48 * 3600, "2.0 days"),
        (57.04 * 86400, "57.0 days"),
    ],
)
def test_a_run_s_length_reads_in_the_unit_that_fits_it(seconds, said):
    assert jobview.duration(seconds) == said


@pytest.mark.parametrize(
    ("value", "unit", "said"),
    [
        (1.5e18, "FLOP", "1.50 EFLOP"),
        (2e15, "FLOP", "2.00 PFLOP"),
        (3.25e12, "", "3.25 T"),
        (1e9, "", "1.00 G"),
        (999_999, "", "1000.00 k"),
        (12_345, "", "12.35 k"),
        (1000, "", "1.00 k"),
        (999.5, "", "999.50"),
        (5, "B", "5.00 B"),
        (-2e6, "", "-2.00 M"),
    ],
)
def test_si_numbers_take_the_largest_prefix_the_value_reaches(value, unit, said):
    assert jobview._si(value, unit) == said


def train_progress(**changes) -> jobs.Progress:
    base = jobs.Progress("lab-tiny", 30, 60, 2.345678, 12345.6, 1.25, None, 20, 0)
    return replace(base, **changes)


def test_train_progress_says_every_figure_it_has():
    p = train_progress(eta_seconds=4200.7, restarts=2)
    assert jobview.progress_text(p) == (
        "lab-tiny: iteration 30/60 | loss 2.3457 | 12,346 tokens/s | 1.2 TFLOP/s/GPU | ETA 1:10:00 | checkpoint 20 | restarts 2"
    )


def test_train_progress_leaves_out_what_it_does_not_know_yet():
    p = jobs.Progress("lab-tiny", 0, 60, None, None, None, None, 0, 0)
    assert jobview.progress_text(p) == "lab-tiny: iteration 0/60 | checkpoint -"


@pytest.mark.parametrize(
    ("eta", "said"),
    [(59.9, "0:00:59"), (3599, "0:59:59"), (4200.5, "1:10:00"), (7200, "2:00:00"), (3 * 3600 + 61, "3:01:01"), (0.0, "0:00:00")],
)
def test_the_eta_reads_hours_minutes_seconds(eta, said):
    assert jobview.progress_text(train_progress(eta_seconds=eta)).split(" | ")[4] == f"ETA {said}"


# ---- data prepare


def test_data_progress_before_the_start_up_is_over_counts_from_the_start():
    p = data.Progress(docs=2000, tokens=1_000_000, bytes_in=1_450_001, seconds=4.0)
    assert jobview.progress_line(p) == "data: 2,000 docs, 1,000,000 tokens, 1.5 MB in 4.0 s (500 docs/s, 250,000 tokens/s)"


def test_data_progress_after_the_start_up_says_the_rates_are_from_then_on():
    p = data.Progress(docs=2000, tokens=1_000_000, bytes_in=3_000_000, seconds=4.0, startup_seconds=1.5, startup_docs=500, startup_tokens=100_000)
    assert jobview.progress_line(p) == ("data: 2,000 docs, 1,000,000 tokens, 3.0 MB in 4.0 s (600 docs/s, 360,000 tokens/s after 1.5 s of start-up)")


def prepared(skipped: int = 0) -> data.PrepareResult:
    progress = data.Progress(docs=1500, tokens=30_000, bytes_in=2_000_000, seconds=2.0, skipped_empty=skipped)
    prefixes = {"text": "data/lab_text_document", "[b]title[/b]": "data/lab_title_document"}
    return data.PrepareResult(prefixes, ["corpus.jsonl"], "byte", 256, 0, 2, progress)


def test_data_prepare_says_the_progress_the_skipped_documents_and_each_prefix(capsys):
    jobview.render_prepare(prepared(skipped=1234))
    assert lines(capsys) == [
        "data: 1,500 docs, 30,000 tokens, 2.0 MB in 2.0 s (750 docs/s, 15,000 tokens/s)",
        "data: skipped 1,234 empty document(s)",
        "data: text: prefix data/lab_text_document (list it under data.prefixes)",
        "data: [b]title[/b]: prefix data/lab_title_document (list it under data.prefixes)",
    ]


def test_data_prepare_without_empty_documents_does_not_mention_them(capsys):
    jobview.render_prepare(prepared())
    assert [line for line in lines(capsys) if "skipped" in line] == []


# ---- the renamed spec


def test_renaming_replaces_the_first_top_level_name_only():
    text = "# a spec\nmodel:\n  name: inner\nname: old\ntrain:\n  x: 1\nname: again\n"
    assert jobview.renamed(text, "new-job") == "# a spec\nmodel:\n  name: inner\nname: new-job\ntrain:\n  x: 1\nname: again\n"


def test_renaming_the_example_keeps_everything_else():
    text = (JOBS / "lab-tiny.yml").read_text()
    out = jobview.renamed(text, "lab-tiny-2")
    assert out.splitlines() == [("name: lab-tiny-2" if line == "name: lab-tiny" else line) for line in text.splitlines()]
    assert out.count("name: lab-tiny-2") == 1


def test_renaming_a_spec_without_a_name_leaves_it():
    assert jobview.renamed("model:\n  name: x\n", "y") == "model:\n  name: x\n"


# ---- plan --suggest


def step(**seconds: float) -> StepTime:
    names = ("gemm", "attention", "elementwise", "logits", "recompute", "tensor_parallel", "context_parallel", "bubble")
    names += ("pipeline_sends", "data_parallel", "contention", "optimizer")
    return StepTime(**{n: seconds.get(n, 0.0) for n in names})


def layout(**changes) -> planner.Layout:
    base = planner.Layout(2, 4, 1, None, 1, "selective", True, True)
    return replace(base, **changes)


FOUND = [
    planner.Candidate(layout(vp=2), 8, 61.234, 0.41234, 1.23456, 2_345_678.0, step(gemm=1.0, bubble=0.2, data_parallel=0.03456)),
    planner.Candidate(layout(tp=4, pp=2, cp=2, micro_batch=2, recompute="full", distributed_optimizer=False), 4, 70.05, 0.3, 1.5, 999.0),
]


def test_suggest_prints_each_layout_as_a_row_best_first(capsys):
    jobview.render_suggest(FOUND, 0.0123)
    out = lines(capsys)
    assert out[0].strip() == "layouts that fit, best estimated throughput first (12 ms)"
    rows = cells(out)
    assert rows[0] == ["#", "TP", "PP", "VP", "CP", "DP", "micro", "recompute", "dist-opt", "GiB/GPU", "est. MFU", "s/iter", "tokens/s"]
    assert rows[1:] == [
        ["1", "2", "4", "2", "1", "8", "1", "selective", "yes", "61.2", "41.2 %", "1.23", "2.35 M"],
        ["2", "4", "2", "-", "2", "4", "2", "full", "no", "70.0", "30.0 %", "1.5", "999.00"],
    ]
    # the reasons follow the table, as planner.why gives them
    assert out[-1:] == planner.why(FOUND)
    assert out[-1].startswith("#1 TP=2 PP=4 VP=2 CP=1 micro=1 recompute=selective SP dist-opt: 1.23 s per iteration; GEMMs 81%")


def test_suggest_cells_are_right_aligned(capsys):
    jobview.render_suggest(FOUND, 1.0)
    out = lines(capsys)
    header = next(line for line in out if "recompute" in line)
    row = next(line for line in out if "selective" in line)
    # right-justified: each cell ends where its column's header ends
    assert row.index("selective") + len("selective") == header.index("recompute") + len("recompute")
    assert row.index("2.35 M") + len("2.35 M") == header.index("tokens/s") + len("tokens/s")
    assert "(1000 ms)" in out[0]


def test_suggest_with_nothing_that_fits_says_what_to_change(capsys):
    jobview.render_suggest([], 0.5)
    out = lines(capsys)
    assert out[0].strip() == "layouts that fit, best estimated throughput first (500 ms)"
    assert cells(out) == [["#", "TP", "PP", "VP", "CP", "DP", "micro", "recompute", "dist-opt", "GiB/GPU", "est. MFU", "s/iter", "tokens/s"]]
    assert out[-1] == "no layout fits: use more GPUs, a GPU with more memory, or a smaller model / sequence"


def test_suggest_with_layouts_does_not_say_none_fits(capsys):
    jobview.render_suggest(FOUND[1:], 0.5)  # no time by mechanism: no reasons either
    out = lines(capsys)
    assert not [line for line in out if "no layout fits" in line]
    assert out[-1].startswith("└")


def test_suggested_layouts_as_json():
    [first, second] = jobview.candidates_dict(FOUND)
    assert first == {
        "tensor": 2,
        "pipeline": 4,
        "context": 1,
        "virtual_stages": 2,
        "data": 8,
        "micro_batch": 1,
        "recompute": "selective",
        "sequence_parallel": True,
        "distributed_optimizer": True,
        "memory_gib": 61.234,
        "mfu": 0.4123,
        "step_seconds": 1.23456,
        "tokens_per_second": 2_345_678.0,
        "seconds_by_mechanism": {
            **dict.fromkeys(step().seconds(), 0.0),
            "GEMMs": 1.0,
            "pipeline bubble": 0.2,
            "data-parallel communication": 0.03456,
        },
    }
    assert second["seconds_by_mechanism"] is None and second["virtual_stages"] is None and second["distributed_optimizer"] is False


# ---- the verdict


def test_the_verdict_names_each_check_each_restart_and_the_report(capsys, tmp_path):
    judged = verdict.Verdict(False, [verdict.Check("loss", verdict.PASS, "fell [b]3.1[/b]"), verdict.Check("run", verdict.FAIL, "failed")])
    report = {
        "job": {"name": "lab-[i]x[/i]"},
        "restarts": [
            {"last_iteration": 25, "resumed_from": 20, "lost_iterations": 5, "seconds_to_resumed_iteration": 12.5},
            {"last_iteration": 41, "resumed_from": 40, "lost_iterations": 1, "seconds_to_resumed_iteration": 3},
        ],
    }
    paths = {"markdown": tmp_path / "report.md", "json": tmp_path / "report.json", "plot": tmp_path / "loss.png"}
    jobview.render_verdict(judged, report, paths)
    assert lines(capsys) == [
        "verdict for job lab-[i]x[/i]: FAILED",
        f"  {verdict.PASS:7s} loss: fell [b]3.1[/b]",
        f"  {verdict.FAIL:7s} run: failed",
        "  restart: failed after iteration 25, resumed from 20 (5 iteration(s) lost, 12.5 s to the resumed iteration)",
        "  restart: failed after iteration 41, resumed from 40 (1 iteration(s) lost, 3 s to the resumed iteration)",
        f"report: {tmp_path / 'report.md'} (also report.json, loss.png)",
    ]


def test_a_passed_verdict_says_passed(capsys, tmp_path):
    report = {"job": {"name": "[b]j[/b]"}, "restarts": []}
    jobview.render_verdict(verdict.Verdict(True), report, {"markdown": Path("[b]r.md"), "json": Path("a/r.json"), "plot": Path("a/p.png")})
    assert lines(capsys) == ["verdict for job [b]j[/b]: PASSED", "report: [b]r.md (also r.json, p.png)"]


# ---- job status: gathered


def test_job_status_of_a_job_still_running(tmp_path, mnt):
    logs = {
        "node1": node_lines("node1", 0, "starting"),
        "node2": node_lines("node2", 1, "starting")
        + iterations(25)
        + "  successfully saved checkpoint from iteration      20 to /shared/ck/x [ t 1/1, p 1/1 ]\n"
        + "RuntimeError: one\nRuntimeError: two\n",
    }
    job = ended_job(tmp_path, mnt, logs)
    meta, status = jobview.job_status(job, {"node1": {"ActiveState": "active", "SubState": "running"}, "node9": {"ActiveState": "x"}})
    assert meta == json.loads((job.local_dir / "job.json").read_text())
    assert meta["state"] == "running"
    assert status == {
        "iteration": 25,
        "total": 60,
        "loss": pytest.approx(6.0 - 0.05 * 25, abs=1e-5),
        "checkpoint": 20,
        "restarts": 0,
        "nodes": {"node1": {"log": "running", "ActiveState": "active", "SubState": "running"}, "node2": {"log": "running"}},
        "verdict": None,
        "errors": ["RuntimeError: one", "RuntimeError: two"],
    }
    assert "loss" in status and isinstance(status["loss"], float)


def test_job_status_before_any_iteration_has_no_loss_and_no_checkpoint(tmp_path, mnt):
    job = ended_job(tmp_path, mnt, {"node1": "", "node2": ""})
    _, status = jobview.job_status(job, {})
    assert status == {
        "iteration": 0,
        "total": 0,
        "loss": None,
        "checkpoint": 0,
        "restarts": 0,
        "nodes": {"node1": {"log": "waiting"}, "node2": {"log": "waiting"}},
        "verdict": None,
        "errors": [],
    }


def test_job_status_judges_a_job_whose_units_gave_up(tmp_path, mnt):
    job = ended_job(tmp_path, mnt, FAILED_LOGS)
    units = {"node1": {"ActiveState": "inactive"}, "node2": {"ActiveState": "failed", "NRestarts": "3"}}
    meta, status = jobview.job_status(job, units)
    assert (meta["state"], status["verdict"]) == ("failed", "failed")
    assert status["nodes"] == {
        "node1": {"log": "exited-0", "ActiveState": "inactive"},
        "node2": {"log": "failed-1", "ActiveState": "failed", "NRestarts": "3"},
    }


def test_job_status_of_a_slurm_job_passes_slurm_s_answer_on(tmp_path, mnt):
    job = ended_job(tmp_path, mnt, {"node1": node_lines("node1", 0, "starting"), "node2": node_lines("node2", 1, "starting")})
    answer = {"slurm_job_id": "7", "state": "RUNNING", "reason": "None", "nodes": "node[1-2]", "restarts": "0", "position": "", "pending": "0"}
    _, status = jobview.job_status(job, {"slurm": answer})
    assert status["slurm"] == answer
    assert status["nodes"] == {"node1": {"log": "running"}, "node2": {"log": "running"}}
    _, plain = jobview.job_status(job, {"node1": {"ActiveState": "active"}})
    assert "slurm" not in plain


def test_job_status_reads_the_verdict_from_the_report(tmp_path, mnt):
    job = ended_job(tmp_path, mnt, {"node1": "", "node2": ""}, state="failed")
    (job.local_dir / "report.json").write_text(json.dumps({"verdict": "failed"}))
    meta, status = jobview.job_status(job, {})
    assert status["verdict"] == "failed" and meta["state"] == "failed"


def test_job_status_of_a_job_with_a_restart(tmp_path, mnt):
    logs = {
        "node1": node_lines("node1", 0, "starting"),
        "node2": node_lines("node2", 1, "starting")
        + iterations(25)
        + "  successfully saved checkpoint from iteration      20 to /shared/ck/x [ t 1/1, p 1/1 ]\n"
        + "  successfully saved checkpoint from iteration      10 to /shared/ck/x [ t 1/1, p 1/1 ]\n"
        + "".join(line + "\n" for line in iterations(23).splitlines()[20:]),
    }
    job = ended_job(tmp_path, mnt, logs)
    _, status = jobview.job_status(job, {})
    assert (status["restarts"], status["iteration"], status["checkpoint"]) == (1, 25, 20)


# ---- job status: printed


def status_of(**changes) -> dict:
    base = {
        "iteration": 25,
        "total": 60,
        "loss": 4.567891,
        "checkpoint": 20,
        "restarts": 1,
        "nodes": {
            "node1": {"log": "running", "ActiveState": "active", "SubState": "running", "NRestarts": "2"},
            "[b]node2[/b]": {"log": "exited-0"},
        },
        "verdict": "passed",
        "errors": ["e1", "e2", "[b]e3[/b]", "e4"],
    }
    return {**base, **changes}


META = {"name": "lab-[b]tiny[/b]", "state": "running", "job_dir": "/shared/jobs/[b]lab-tiny"}


def test_job_status_of_a_systemd_job_says_each_node_s_unit_and_the_last_errors(capsys):
    jobview.render_job_status(META, status_of())
    assert lines(capsys) == [
        "job lab-[b]tiny[/b]: running, iteration 25/60, loss 4.5679, checkpoint 20, restarts 1, verdict passed",
        "  node1: torchrun running, unit active/running, 2 unit restart(s)",
        "  [b]node2[/b]: torchrun exited-0, unit ?/?, ? unit restart(s)",
        "  error in the logs: e2",
        "  error in the logs: [b]e3[/b]",
        "  error in the logs: e4",
        "  job directory: /shared/jobs/[b]lab-tiny",
    ]


def test_job_status_without_loss_checkpoint_verdict_or_state_says_so(capsys):
    meta = {"name": "j", "job_dir": "/d"}
    jobview.render_job_status(meta, status_of(loss=None, checkpoint=0, verdict=None, nodes={}, errors=["only"]))
    assert lines(capsys) == [
        "job j: ?, iteration 25/60, checkpoint -, restarts 1, verdict -",
        "  error in the logs: only",
        "  job directory: /d",
    ]


def test_a_zero_loss_is_still_a_loss(capsys):
    jobview.render_job_status({"name": "j", "state": "s", "job_dir": "/d"}, status_of(loss=0.0, nodes={}, errors=[]))
    assert lines(capsys)[0] == "job j: s, iteration 25/60, loss 0.0000, checkpoint 20, restarts 1, verdict passed"


SLURM = {"slurm_job_id": "4242", "state": "PENDING", "reason": "Priority", "nodes": "", "restarts": "", "position": "2", "pending": "5"}


def test_job_status_of_a_pending_slurm_job_says_its_place_in_the_queue(capsys):
    jobview.render_job_status(META, status_of(slurm=SLURM, errors=[]))
    assert lines(capsys) == [
        "job lab-[b]tiny[/b]: running, iteration 25/60, loss 4.5679, checkpoint 20, restarts 1, verdict passed",
        "  slurm job 4242 PENDING (Priority, 2 of 5 in the queue)",
        "  node1: torchrun running",
        "  [b]node2[/b]: torchrun exited-0",
        "  job directory: /shared/jobs/[b]lab-tiny",
    ]


def test_a_pending_slurm_job_without_a_place_says_only_its_reason(capsys):
    jobview.render_job_status(META, status_of(slurm={**SLURM, "position": "", "pending": "", "reason": "[b]Resources[/b]"}, nodes={}, errors=[]))
    assert lines(capsys)[1] == "  slurm job 4242 PENDING ([b]Resources[/b])"


def test_a_running_slurm_job_says_its_nodes_and_requeues(capsys):
    running = {**SLURM, "state": "RUNNING", "nodes": "node[1-2]", "restarts": "3", "position": None, "pending": "0"}
    jobview.render_job_status(META, status_of(slurm=running, nodes={}, errors=[]))
    assert lines(capsys)[1] == "  slurm job 4242 RUNNING on node[1-2], requeued 3 time(s)"


# ---- plan and dry run


def lab_plan(**changes) -> planner.Plan:
    from megaprov.training import nodefacts
    from megaprov.training.jobspec import parse

    spec = parse((JOBS / "lab-tiny.yml").read_text())
    cluster = nodefacts.KnownCluster(2, 1, planner.GPUS["cpu"], "/shared", ("node1", "node2"), stack=nodefacts.ROLE_DEFAULTS)
    return replace(planner.plan(spec, cluster), **changes)


def test_the_plan_table_and_its_warnings(capsys):
    planned = lab_plan(warnings=("[b]careful[/b]",))
    jobview.render_plan(planned)
    out = lines(capsys)
    rows = {r[0]: r[1] for r in cells(out) if len(r) == 2}
    lay = planned.layout
    assert out[0].strip() == f"plan: lab-tiny on 2 x 1 {planned.gpu} (2 ranks)"
    assert rows["parallelism"] == f"TP {lay.tp} x PP {lay.pp} x CP {lay.cp} x DP 2"
    assert rows["batch"] == f"micro 4 x 1 micro-batches x DP 2 = 8 sequences, {8 * 128:,} tokens"
    assert rows["verdict"] == "not checked (CPU nodes)"
    assert rows["run"].startswith("60 iterations: ")
    assert out[-1] == "warning: [b]careful[/b]"


def rendered_of(slurm_node: str | None = None, sbatch: str | None = None) -> render.Rendered:
    nodes = tuple(render.NodeLaunch(h, r, (), (), f"#!/bin/bash\necho [b]{r}[/b]\n") for r, h in enumerate(("node1", "node2", "node3")))
    return render.Rendered("lab-tiny", "/shared/jobs/lab-tiny", "/shared/ck/lab-tiny", ("--a", "1"), nodes, sbatch, slurm_node=slurm_node)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_train_dry_run_writes_plan_and_each_node_s_script_with_their_modes(tmp_path):
    out = tmp_path / "out"
    written = jobview.write_dry_run(out, {"job": "lab-tiny"}, rendered_of())
    names = ["plan.json", "megatron-args.txt", "launch/node1.sh", "launch/node2.sh", "launch/node3.sh"]
    assert written == [out / n for n in names]
    assert (out / "plan.json").read_text() == '{\n  "job": "lab-tiny"\n}\n'
    assert (out / "megatron-args.txt").read_text() == "--a\n1\n"
    assert (out / "launch" / "node2.sh").read_text() == "#!/bin/bash\necho [b]1[/b]\n"
    umask = os.umask(0)
    os.umask(umask)
    assert mode(out / "launch" / "node1.sh") == 0o755 & ~umask
    assert mode(out / "plan.json") == 0o644 & ~umask
    assert mode(out / "launch") == 0o755 & ~umask
    assert sorted(p.name for p in (out / "launch").iterdir()) == ["node1.sh", "node2.sh", "node3.sh"]


def test_a_slurm_dry_run_writes_the_node_script_and_the_batch_script(tmp_path):
    out = tmp_path / "out"
    written = jobview.write_dry_run(out, {}, rendered_of(slurm_node="#!/bin/bash\nsrun-node\n", sbatch="#!/bin/bash\n#SBATCH\n"))
    assert written == [out / n for n in ("plan.json", "megatron-args.txt", "launch/slurm-node.sh", "launch/job.sbatch")]
    assert (out / "launch" / "slurm-node.sh").read_text() == "#!/bin/bash\nsrun-node\n"
    assert (out / "launch" / "job.sbatch").read_text() == "#!/bin/bash\n#SBATCH\n"
    umask = os.umask(0)
    os.umask(umask)
    assert mode(out / "launch" / "job.sbatch") == 0o644 & ~umask


def test_a_dry_run_goes_into_an_empty_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    assert len(jobview.write_dry_run(tmp_path / "empty", {}, rendered_of())) == 5


def test_a_dry_run_never_writes_over_another_directory_or_a_file(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    (tmp_path / "file").write_text("")
    for target in ("full", "file"):
        with pytest.raises(UsageError) as caught:
            jobview.write_dry_run(tmp_path / target, {}, rendered_of())
        assert (caught.value.message, caught.value.hint) == (f"--dir {tmp_path / target} exists and is not empty", "give a new directory")
    with pytest.raises(UsageError) as caught:
        jobview.write_dry_run(tmp_path / "no" / "out", {}, rendered_of())
    assert (caught.value.message, caught.value.hint) == (
        f"--dir {tmp_path / 'no' / 'out'}: {tmp_path / 'no'} does not exist",
        "create the parent directory first",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "full", "tmp"]


def test_the_dry_run_shows_the_chosen_nodes_and_says_how_many_more(capsys):
    jobview.render_dry_run(rendered_of(sbatch="#SBATCH [b]x[/b]\n"), ["node2"])
    assert capsys.readouterr().out == (
        "\n# job lab-tiny: job directory /shared/jobs/lab-tiny, checkpoints /shared/ck/lab-tiny\n"
        "\n# ---- node2 (node rank 1)\n"
        "#!/bin/bash\necho [b]1[/b]\n"
        "\n# (2 more node(s) differ in their node rank: --all-nodes shows them, --dir DIR writes them)\n"
        "\n# ---- launch/job.sbatch (submitted on the Slurm controller)\n"
        "#SBATCH [b]x[/b]\n"
    )


def test_the_dry_run_shows_every_node_by_default(capsys):
    jobview.render_dry_run(rendered_of())
    out = capsys.readouterr().out
    assert out == (
        "\n# job lab-tiny: job directory /shared/jobs/lab-tiny, checkpoints /shared/ck/lab-tiny\n"
        + "".join(f"\n# ---- node{r + 1} (node rank {r})\n#!/bin/bash\necho [b]{r}[/b]\n" for r in range(3))
    )


def test_a_slurm_dry_run_shows_the_one_node_script(capsys):
    jobview.render_dry_run(rendered_of(slurm_node="srun [b]node[/b]\n", sbatch="sb\n"), ["node1"])
    assert capsys.readouterr().out == (
        "\n# job lab-tiny: job directory /shared/jobs/lab-tiny, checkpoints /shared/ck/lab-tiny\n"
        "\n# ---- launch/slurm-node.sh (srun runs it on every node of the allocation)\n"
        "srun [b]node[/b]\n"
        "\n# ---- launch/job.sbatch (submitted on the Slurm controller)\n"
        "sb\n"
    )

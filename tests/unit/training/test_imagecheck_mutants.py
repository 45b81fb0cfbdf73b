"""The node checks of a job in a container image (megaprov/training/imagecheck.py), beyond test_imagecheck.py (issue
36): the exact commands image_check.yml is handed (systemd-run's options, the srun's job name, the shared directory's
jobs path), the play it runs and with what, the error a failed play becomes, how the answers are read (per host, or
srun's lines, at most four a node), each problem line in full as the operator reads it, and the summary line for
answers that lack or garble a field.

Only the Ansible play is stood in (plays.run, answering with a RunResult as the runner folds image_check.yml's
set_stats); the job spec, the container options, plays.failure and the error objects are real."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from megaprov.cluster import runner
from megaprov.errors import ExitCode, RunFailed
from megaprov.training import imagecheck
from megaprov.training.launchers import systemd
from tests.helpers.container_job import IMAGE, spec

HOSTS = ["n1", "n2"]
GOOD = {"host": "n1", "torch": "2.9.0", "cuda": True, "gpus": 4, "nccl": "2.27.7", "memlock": ["unlimited", "unlimited"]}
GOOD |= {"infiniband": ["rdma_cm", "uverbs0"], "writable": True}
ARTIFACTS = Path("/state/runs/image_check-1")
GPU_LINE = (
    ": check the node's CDI spec (`nvidia-ctk cdi list`; `megaprov bootstrap --tags containers` regenerates it)"
    " and that the image's CUDA runs on the node's driver"
)
MEMLOCK_TAIL = (
    ", not unlimited: NCCL over InfiniBand cannot register its buffers (the job's unit sets LimitMEMLOCK=infinity;"
    " under Slurm, slurmd's own limit and PropagateResourceLimits)"
)


def answer(host: str = "n1", ib: bool | None = True, **fields: object) -> imagecheck.Answer:
    return imagecheck.Answer(host, {**GOOD, "host": host, **fields}, ib)


def summary_of(**fields: object) -> str:
    """The summary line of two nodes that answered alike (n1's answer is the one summed up)."""
    return imagecheck.judge(spec(), HOSTS, [answer("n1", **fields), answer("n2", **fields)], False)[1]


# ---- what image_check.yml is handed


def test_under_systemd_the_check_runs_through_systemd_run_waiting_on_its_piped_output_then_the_units_limits():
    limits = systemd.unit_limits(False)
    vars_ = imagecheck.check_vars(spec(), "/shared", HOSTS, True, None, limits)
    pairs = [x for limit in limits for x in ("-p", limit)]
    assert vars_["wrap"] == ["systemd-run", "--quiet", "--wait", "--pipe", "--collect", "--service-type=exec", *pairs]
    assert set(vars_) == {"hosts", "wrap", "argv", "image", "name"} and vars_["hosts"] == HOSTS


def test_a_shared_directory_written_with_a_trailing_slash_gives_one_jobs_path():
    vars_ = imagecheck.check_vars(spec(), "/shared/", HOSTS, True, None, [])
    assert vars_["image"] == [IMAGE, "/usr/bin/python", "-", "/shared/jobs"]
    ending_in_x = imagecheck.check_vars(spec(), "/srv/BOX/", HOSTS, True, None, [])
    assert ending_in_x["image"][-1] == "/srv/BOX/jobs"  # only slashes are trimmed
    slurm = imagecheck.check_vars(spec("slurm"), "/shared/", HOSTS, True, "head", [])
    assert slurm["argv"][-3:] == ["/usr/bin/python", "-", "/shared/jobs"]


def test_under_slurm_the_check_is_one_named_srun_asked_of_the_first_host_when_no_submit_host_is_set():
    vars_ = imagecheck.check_vars(spec("slurm"), "/shared", HOSTS, True, None, [])
    assert set(vars_) == {"submit", "hosts", "argv"}
    assert vars_["submit"] == "n1" and vars_["hosts"] == HOSTS
    assert "--job-name=megaprov-image-check" in vars_["argv"]  # what squeue and sacct show the operator


# ---- the play, and a play that failed


class Recorder:
    """The operator's terminal: the lines said, in order."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def say(self, text: str) -> None:
        self.lines.append(text)


def result(data: dict | None = None, failures: list[runner.Failure] | None = None, rc: int = 0) -> runner.RunResult:
    return runner.RunResult("successful" if rc == 0 else "failed", rc, [], failures or [], [], ARTIFACTS, 3.0, data=data or {}, stats_seen=True)


@pytest.fixture
def play(monkeypatch):
    """plays.run stood in: records each call and answers with what the test puts in ``answer``."""
    calls: list[tuple] = []
    state = {"answer": result({"image_check": {h: {"fact": {**GOOD, "host": h}, "ib": True} for h in HOSTS}})}

    def run(*args, **kwargs):
        calls.append((args, kwargs))
        return state["answer"]

    monkeypatch.setattr(imagecheck.plays, "run", run)
    return calls, state


def test_the_check_runs_image_check_yml_on_the_inventory_with_its_vars_and_says_what_it_checks_and_found(play):
    calls, _ = play
    report = Recorder()
    inventory = Path("/etc/megaprov/inventory.yml")
    limits = systemd.unit_limits(False)
    summary = imagecheck.check(spec(), inventory, "/shared", HOSTS, True, None, limits, report)
    want = imagecheck.check_vars(spec(), "/shared", HOSTS, True, None, limits)
    assert calls == [(("image_check.yml", inventory, {"megaprov_check": want}, report, 2), {})]
    assert calls[0][0][3] is report
    assert summary == "torch 2.9.0, 4 GPU(s), NCCL 2.27.7 (the image's), memlock unlimited, InfiniBand devices 2, shared directory writable"
    assert report.lines == [
        f"train: checking image {IMAGE} on n1, n2, as the job will run it (GPUs, NCCL, InfiniBand, memlock, shared directory)",
        f"train: image checked on 2 node(s): {summary}",
    ]


def test_under_slurm_the_play_is_handed_the_submit_host_and_the_gpu_request(play):
    calls, state = play
    state["answer"] = result({"image_check": {"lines": [json.dumps({**GOOD, "host": h}) for h in ("gpu-a1", "gpu-a2")]}})
    imagecheck.check(spec("slurm"), Path("inv"), "/shared", HOSTS, True, "head", [], Recorder())
    handed = calls[0][0][2]["megaprov_check"]
    assert handed["submit"] == "head" and "--gpus-per-node=4" in handed["argv"]
    cpu = imagecheck.check(spec("slurm"), Path("inv"), "/shared", HOSTS, False, "head", [], Recorder())
    assert not [a for a in calls[1][0][2]["megaprov_check"]["argv"] if a.startswith("--gpus")]
    assert cpu.startswith("torch 2.9.0, 4 GPU(s)")


def test_a_failed_play_is_the_first_failed_task_on_its_node_and_where_its_output_is(play):
    _, state = play
    failed = runner.Failure(
        "n2", "Run the check in the image, as the job's unit would", "Check the job's image on every node (podman)", "non-zero return code", False
    )
    state["answer"] = result(failures=[failed], rc=2)
    report = Recorder()
    with pytest.raises(RunFailed) as err:
        imagecheck.check(spec(), Path("inv"), "/shared", HOSTS, True, None, [], report)
    assert err.value.message == (
        f"checking image {IMAGE}: n2: task 'Run the check in the image, as the job's unit would' failed: non-zero return code"
    )
    assert err.value.hint == f"see {ARTIFACTS}/stdout" and err.value.exit_code == ExitCode.RUN_FAILED
    assert len(report.lines) == 1  # no "image checked" line


def test_a_play_that_handed_nothing_back_is_no_answer_from_every_node(play):
    _, state = play
    state["answer"] = result({})
    with pytest.raises(imagecheck.ChecksFailed) as err:
        imagecheck.check(spec(), Path("inv"), "/shared", HOSTS, True, None, [], Recorder())
    assert err.value.message == f"image {IMAGE} failed its checks on the nodes: n1: the check in the image gave no answer (see the output above)"
    assert err.value.details == ["n2: the check in the image gave no answer (see the output above)"]


# ---- reading the answers


def test_sruns_lines_that_are_not_json_objects_are_no_answers():
    lines = [None, 7, ["{"], " " + json.dumps(GOOD), "srun: error: task 1 exited", "{garbled", json.dumps({**GOOD, "host": "n2"})]
    found = imagecheck.answers_of({"lines": lines}, HOSTS * 4)
    assert [a.host for a in found] == ["n2"]


def test_at_most_four_of_sruns_lines_a_node_are_read():
    lines = [json.dumps({**GOOD, "host": f"gpu-{i}"}) for i in range(12)]
    found = imagecheck.answers_of({"lines": lines}, HOSTS)
    assert [a.host for a in found] == [f"gpu-{i}" for i in range(8)]


def test_answers_that_are_not_a_mapping_are_none():
    assert imagecheck.answers_of(["n1"], HOSTS) == [] and imagecheck.answers_of(None, HOSTS) == []
    assert imagecheck.answers_of({"n1": {"fact": "{}"}, "n2": {"fact": GOOD}}, HOSTS) == [imagecheck.Answer("n2", GOOD, False)]


# ---- each problem, as the operator reads it


def test_a_node_without_torch_says_why_or_no_torch_and_clips_the_reason():
    problems, summary = imagecheck.judge(
        spec(), HOSTS, [answer("n1", torch=None, torch_error=None), answer("n2", torch="", torch_error="E" * 300)], True
    )
    assert problems == [
        "n1: the image's /usr/bin/python cannot import torch (no torch): check launch.container.python",
        f"n2: the image's /usr/bin/python cannot import torch ({'E' * 200}): check launch.container.python",
    ]
    assert summary == ""  # the first node has no torch to sum up


def test_every_node_is_judged_after_one_that_gave_no_answer_or_has_no_torch():
    problems, _ = imagecheck.judge(spec(), ["n0", "n1", "n2"], [answer("n1", torch=None), answer("n2", gpus=1)], True)
    assert problems == [
        "n0: the check in the image gave no answer (see the output above)",
        "n1: the image's /usr/bin/python cannot import torch (no torch): check launch.container.python",
        f"n2: torch in the image sees 1 GPU(s), the job needs 4{GPU_LINE}",
    ]


@pytest.mark.parametrize(
    ("gpus", "seen"),
    [("4", 0), (4.0, 0), (True, 0), (None, 0), (-1, 0), (0, 0), (1024, 1024), (1025, 0)],
)
def test_a_gpu_count_that_is_not_a_whole_number_up_to_1024_counts_as_none(gpus, seen):
    problems, _ = imagecheck.judge(spec(), HOSTS, [answer("n1", gpus=gpus), answer("n2")], True)
    assert problems == ([] if seen >= 4 else [f"n1: torch in the image sees {seen} GPU(s), the job needs 4{GPU_LINE}"])
    assert summary_of(gpus=gpus).startswith(f"torch 2.9.0, {seen} GPU(s), NCCL")


@pytest.mark.parametrize(
    ("memlock", "said"),
    [
        ([65536, "unlimited"], "65536"),
        (["1" * 60, "unlimited"], "1" * 40),
        (None, "None"),
        ([], "None"),
        ("unlimited", "None"),
    ],
)
def test_memlock_is_judged_by_its_soft_limit_and_said_in_full(memlock, said):
    problems, _ = imagecheck.judge(spec(), HOSTS, [answer("n1", memlock=memlock), answer("n2")], True)
    assert problems == [f"n1: memlock in the container is {said}{MEMLOCK_TAIL}"]


def test_a_soft_memlock_unlimited_under_a_finite_hard_one_passes():
    assert imagecheck.judge(spec(), HOSTS, [answer("n1", memlock=["unlimited", 65536]), answer("n2")], True)[0] == []


def test_an_unwritable_shared_directory_says_the_error_clipped_or_nothing():
    problems, _ = imagecheck.judge(
        spec(), HOSTS, [answer("n1", writable=False, write_error="PermissionError: " + "x" * 300), answer("n2", writable=False)], True
    )
    assert problems == [
        f"n1: the cluster user cannot write the shared directory's jobs directory in the container (PermissionError: {'x' * 183})",
        "n2: the cluster user cannot write the shared directory's jobs directory in the container ()",
    ]


def test_under_slurm_every_node_answering_is_no_problem_and_no_answer_at_all_no_summary():
    both = [answer("gpu-a1"), answer("gpu-a2")]
    assert imagecheck.judge(spec("slurm"), HOSTS, both, True) == (
        [],
        "torch 2.9.0, 4 GPU(s), NCCL 2.27.7 (the image's), memlock unlimited, InfiniBand devices 2, shared directory writable",
    )
    assert imagecheck.judge(spec("slurm"), HOSTS, [], True) == (["the check in the image answered from 0 of 2 node(s) (see the output above)"], "")


# ---- the summary line


def test_the_summary_says_no_nccl_without_cuda_and_clips_what_the_image_says():
    assert summary_of(nccl=None) == (
        "torch 2.9.0, 4 GPU(s), NCCL none (no CUDA) (the image's), memlock unlimited, InfiniBand devices 2, shared directory writable"
    )
    long = summary_of(torch="t" * 50, nccl="n" * 30, memlock=["m" * 30, "unlimited"])
    assert long == f"torch {'t' * 40}, 4 GPU(s), NCCL {'n' * 20} (the image's), memlock {'m' * 20}, InfiniBand devices 2, shared directory writable"


@pytest.mark.parametrize(
    ("fields", "tail"),
    [
        ({"memlock": None}, "memlock ?, InfiniBand devices 2, shared directory writable"),
        ({"memlock": []}, "memlock ?, InfiniBand devices 2, shared directory writable"),
        ({"memlock": [8388608, "unlimited"]}, "memlock 8388608, InfiniBand devices 2, shared directory writable"),
        ({"infiniband": None}, "memlock unlimited, InfiniBand none, shared directory writable"),
        ({"writable": None}, "memlock unlimited, InfiniBand devices 2, shared directory not checked"),
        ({"writable": False}, "memlock unlimited, InfiniBand devices 2, shared directory NOT writable"),
    ],
)
def test_the_summary_says_each_field_the_answer_lacks(fields, tail):
    assert summary_of(**fields) == f"torch 2.9.0, 4 GPU(s), NCCL 2.27.7 (the image's), {tail}"


def test_no_summary_when_the_first_node_gave_no_answer_or_no_torch():
    assert imagecheck.judge(spec(), HOSTS, [answer("n2")], True)[1] == ""
    assert imagecheck.judge(spec(), HOSTS, [answer("n1", torch=None), answer("n2")], True)[1] == ""
    assert imagecheck.judge(spec(), [], [], True) == ([], "")

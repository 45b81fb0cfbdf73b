"""The node checks of a job in a container image (megaprov/training/imagecheck.py and the container_toolkit role's
check_in_image.py): the check run for real by this machine's Python and torch, the commands that run it as the job
will, and the judgement of the answers, each problem one line naming the node and what to do."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from megaprov.training import container, imagecheck, jobspec, render
from megaprov.training.launchers import systemd
from tests.helpers.container_job import IMAGE, SPEC, cluster, spec

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "ansible_collections/megaprov/cluster/roles/container_toolkit/files/check_in_image.py"
HOSTS = ["n1", "n2"]
GOOD = {"host": "n1", "torch": "2.9.0", "cuda": True, "gpus": 4, "nccl": "2.27.7", "memlock": ["unlimited", "unlimited"]}
GOOD |= {"infiniband": ["rdma_cm", "uverbs0"], "writable": True}


def run_check(target):
    torch = pytest.importorskip("torch")  # the check imports the image's torch; here this machine's
    done = subprocess.run([sys.executable, "-", str(target)], input=SCRIPT.read_text(), capture_output=True, text=True, timeout=120, check=True)
    return torch, json.loads(done.stdout.splitlines()[-1])


def test_the_check_reports_what_this_python_sees(tmp_path):
    torch, fact = run_check(tmp_path)
    assert fact["torch"] == torch.__version__ and fact["gpus"] == torch.cuda.device_count() and fact["cuda"] is torch.cuda.is_available()
    assert fact["writable"] is True and not list(tmp_path.iterdir())  # its probe file is gone
    assert fact["infiniband"] == (sorted(os.listdir("/dev/infiniband")) if os.path.isdir("/dev/infiniband") else None)
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    assert fact["memlock"] == ["unlimited" if v == resource.RLIM_INFINITY else v for v in (soft, hard)]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_the_check_says_a_directory_the_user_cannot_write(tmp_path):
    tmp_path.chmod(0o555)
    _, fact = run_check(tmp_path)
    assert fact["writable"] is False and "Permission denied" in fact["write_error"]


def test_the_check_runs_in_the_jobs_own_container_under_its_units_limits():
    s = spec()
    vars_ = imagecheck.check_vars(s, "/shared", HOSTS, True, None, systemd.unit_limits(False))
    assert vars_["hosts"] == HOSTS and "submit" not in vars_
    assert vars_["wrap"][0] == "systemd-run" and ("-p", "LimitMEMLOCK=infinity") in set(zip(vars_["wrap"], vars_["wrap"][1:], strict=False))
    assert vars_["image"] == [IMAGE, "/usr/bin/python", "-", "/shared/jobs"]
    # the options of the job's own podman line (its node script), then --rm -i: the same container the ranks get
    job = render.render(s, cluster(), [("n1", "a"), ("n2", "b")])
    line = next(x for x in job.nodes[0].script.splitlines() if x.startswith("podman=("))
    assert vars_["argv"] == [*shlex.split(line[len("podman=(") : line.index(" --rm")]), "--rm", "--replace", "--name", "megaprov-check-boxed", "-i"]
    assert vars_["name"] == "megaprov-check-boxed"  # removed after the check (image_check.yml)
    lab = imagecheck.check_vars(s, "/shared", HOSTS, False, None, systemd.unit_limits(True))
    assert "LimitMEMLOCK=infinity" not in lab["wrap"] and "nvidia.com/gpu=all" not in lab["argv"]


def test_under_slurm_one_srun_asks_for_what_the_jobs_batch_script_asks_and_does_not_wait():
    text = SPEC.replace("LAUNCHER", "slurm") + "  slurm: {partition: gpu, account: proj1, qos: high}\n"
    vars_ = imagecheck.check_vars(jobspec.parse(text), "/shared", HOSTS, True, "head", [])
    assert vars_["submit"] == "head"
    argv = vars_["argv"]
    assert argv[:5] == ["srun", "--nodes=2", "--ntasks-per-node=1", "--exclusive", f"--immediate={container.SRUN_WAIT_S}"]
    assert {"--gpus-per-node=4", "--partition=gpu", "--account=proj1", "--qos=high", "--input=all"} <= set(argv)
    assert not [a for a in argv if a.startswith("--nodelist")]  # Slurm picks the nodes, as for the job
    assert "--container-image=nvcr.io#nvidia/pytorch:25.01-py3" in argv and argv[-3:] == ["/usr/bin/python", "-", "/shared/jobs"]
    cpu = imagecheck.check_vars(spec("slurm"), "/shared", HOSTS, False, "head", [])["argv"]
    assert not [a for a in cpu if a.startswith(("--gpus", "--partition"))]


def test_under_slurm_the_nodes_are_those_that_answered_and_each_must():
    """Slurm picks the check's nodes: they are judged by the names their answers carry (SLURMD_NODENAME), and fewer
    answers than nodes is a problem."""
    found = [imagecheck.Answer("gpu-a07", {**GOOD, "host": "gpu-a07", "gpus": 2})]
    problems, _ = imagecheck.judge(spec("slurm"), HOSTS, found, True)
    assert problems == [
        "the check in the image answered from 1 of 2 node(s) (see the output above)",
        "gpu-a07: torch in the image sees 2 GPU(s), the job needs 4: check the node's CDI spec (`nvidia-ctk cdi list`;"
        " `megaprov bootstrap --tags containers` regenerates it) and that the image's CUDA runs on the node's driver",
    ]


def answers(**changes):
    return [
        imagecheck.Answer("n1", {**GOOD, **changes.get("n1", {})}, True),
        imagecheck.Answer("n2", {**GOOD, "host": "n2", **changes.get("n2", {})}, True),
    ]


def test_healthy_nodes_pass_and_the_summary_says_what_the_image_has():
    problems, summary = imagecheck.judge(spec(), HOSTS, answers(), True)
    assert problems == []
    assert summary == ("torch 2.9.0, 4 GPU(s), NCCL 2.27.7 (the image's), memlock unlimited, InfiniBand devices 2, shared directory writable")


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"n2": {"gpus": 2}}, "n2: torch in the image sees 2 GPU(s), the job needs 4"),
        ({"n1": {"infiniband": None}}, "n1: /dev/infiniband is on the node but not in the container"),
        ({"n2": {"memlock": [65536, 65536]}}, "n2: memlock in the container is 65536, not unlimited"),
        ({"n1": {"writable": False, "write_error": "PermissionError: [Errno 13] Permission denied"}}, "n1: the cluster user cannot write"),
        ({"n2": {"torch": None, "torch_error": "ModuleNotFoundError: No module named 'torch'"}}, "n2: the image's /usr/bin/python cannot"),
    ],
)
def test_each_problem_is_one_line_naming_its_node(changes, expected):
    problems, _ = imagecheck.judge(spec(), HOSTS, answers(**changes), True)
    assert len(problems) == 1 and problems[0].startswith(expected), problems
    assert "\n" not in problems[0]


def test_a_cpu_cluster_needs_no_gpus_and_a_node_without_infiniband_no_memlock():
    quiet = [imagecheck.Answer(h, {**GOOD, "host": h, "gpus": 0, "infiniband": None, "memlock": [8388608, 8388608]}, False) for h in HOSTS]
    assert imagecheck.judge(spec(), HOSTS, quiet, False)[0] == []


def test_a_node_that_did_not_answer_is_a_problem():
    problems, _ = imagecheck.judge(spec(), HOSTS, answers()[:1], True)
    assert problems == ["n2: the check in the image gave no answer (see the output above)"]


def test_answers_are_read_per_host_or_from_sruns_lines_and_their_text_stays_data():
    per_host = imagecheck.answers_of({"n1": {"fact": GOOD, "ib": True}, "n2": "nonsense", "n9": {"fact": GOOD}}, HOSTS)
    assert [(a.host, a.host_ib) for a in per_host] == [("n1", True)]
    evil = {**GOOD, "host": "n2", "torch": None, "torch_error": "boom \x1b]52;c;ZXZpbA==\x07"}
    lines = ["srun: warning", json.dumps(GOOD), json.dumps(evil), json.dumps({**GOOD, "host": "elsewhere"}), "{not json"]
    found = imagecheck.answers_of({"lines": [*lines, json.dumps({**GOOD, "host": "../../etc"})]}, HOSTS)
    assert [a.host for a in found] == ["n1", "n2", "elsewhere"]  # any node Slurm gave, by a host name only
    problems, _ = imagecheck.judge(spec("slurm"), HOSTS, found, True)
    assert len(problems) == 1 and "\x1b" not in problems[0] and "\\x1b" in problems[0], problems


def test_a_failed_check_stops_the_launch_with_exit_6_and_every_problem(monkeypatch):
    class Result:
        ok = True
        data = {"image_check": {"n1": {"fact": {**GOOD, "gpus": 1}, "ib": True}, "n2": {"fact": {**GOOD, "writable": False}, "ib": True}}}

    monkeypatch.setattr(imagecheck.plays, "run", lambda *a, **k: Result())

    class Say:
        def say(self, text):
            pass

    with pytest.raises(imagecheck.ChecksFailed) as err:
        imagecheck.check(spec(), Path("inv"), "/shared", HOSTS, True, None, [], Say())
    assert err.value.exit_code == 6 and "n1: torch in the image sees 1 GPU(s)" in err.value.message
    assert err.value.hint == "nothing was started" and err.value.details[0].startswith("n2: the cluster user cannot write")

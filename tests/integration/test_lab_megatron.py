"""Megatron-LM's own training code on the lab: the README run's bootstrap checked out the real tree at
core_v0.16.1 (from the upstream snapshot, MEGAPROV_MEGATRON_LM), built its dataset helpers and ran the role's model
check as the cluster user on every node; here every example job's rendered arguments go through Megatron-LM's own
parse_args and validate_args on a lab node, as the cluster user, and build the model (shrunk: the lab has no GPU),
and the README run's job imported the checkout's compiled helpers."""

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, podman_exec

from megaprov.training import jobspec, nodefacts, render
from tests.fixtures import upstream
from tests.helpers.megatron import as_the_refusals_fix_it

pytestmark = pytest.mark.lab

JOBS = ROOT / "examples" / "jobs"
MEGATRON_JOBS = sorted(p.stem for p in JOBS.glob("*.yml") if jobspec.load(p).launch.trainer == "megatron-lm")
CHECK = "/opt/megaprov/lib/megatron_build_check.py"
PY = "/opt/megaprov/venv/bin/python"
JOB_PATH = "/opt/megaprov/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@pytest.fixture(scope="module")
def lab(bootstrapped):
    upstream.need_megatron()
    return bootstrapped


def node_stack(container: str) -> nodefacts.NodeStack:
    fact = json.loads(podman_exec(container, "cat", "/etc/ansible/facts.d/megaprov_python.fact").stdout)
    stack = nodefacts.node_from_fact(fact)
    assert stack is not None, fact
    return dataclasses.replace(stack, hosts=(container,))


def test_every_node_checked_out_the_real_tree_and_ran_its_training_code_as_the_cluster_user(lab):
    for node in lab["nodes"]:
        container = node["container"]
        head = podman_exec(container, "git", "-C", "/opt/megatron-lm", "-c", "safe.directory=*", "describe", "--tags", "--exact-match")
        assert head.stdout.strip() == "core_v0.16.1", head.stderr
        assert podman_exec(container, "test", "-f", "/opt/megatron-lm/megatron/training/training.py").returncode == 0
        proof = json.loads(podman_exec(container, "cat", "/var/lib/megaprov/proofs/megatron_model.json").stdout)
        result = json.loads([line for line in proof["result"]["stdout_lines"] if line.startswith("{")][-1])
        assert (result["mode"], result["imports"], result["parse"], result["validate"], result["model"]) == (
            "megatron-lm",
            "ok",
            True,
            True,
            "built",
        ), (container, result)
        fact = json.loads(podman_exec(container, "cat", "/etc/ansible/facts.d/megaprov_python.fact").stdout)
        assert fact["megatron"]["checkout"] == "0.16.1" and fact["megatron"]["helpers_built"] is True, fact


@pytest.mark.parametrize("name", MEGATRON_JOBS)
def test_an_example_job_parses_validates_and_builds_with_megatron_lms_code_on_a_lab_node(lab, name):
    """The job as megaprov renders it for the lab's nodes (their recorded fact), shrunk to 2 layers and a small hidden
    size by the check script, through Megatron-LM's parse_args and validate_args at the job's world size."""
    container = lab["nodes"][1]["container"]
    stack = node_stack(container)
    spec = jobspec.load(JOBS / f"{name}.yml")
    spec, _ = as_the_refusals_fix_it(spec, stack)  # what the job keeps on these nodes, as the refusals' fixes leave it
    world = spec.launch.nodes * spec.launch.gpus_per_node
    argv = render.megatron_args(spec, "/shared", stack)
    run = podman_exec(
        container, "runuser", "-u", "megaprov", "--", "env", f"PATH={JOB_PATH}", "HOME=/tmp",
        *(f"{k}={v}" for k, v in render.BASE_ENV.items()),  # the job's environment (CUDA_DEVICE_MAX_CONNECTIONS=1, ...)
        PY, CHECK, "/opt/megatron-lm", "--world-size", str(world), "--shrink", "--", *argv,
    )  # fmt: skip
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    assert lines, run.stderr[-2000:]
    result = json.loads(lines[-1])
    assert result["mode"] == "megatron-lm" and result["imports"] == "ok", result
    assert result["parse"] is True and result["validate"] is True, result
    assert result["transformer_impl"] == "local" == render.selected_impl(spec, stack)
    assert result["model"] == "built" and run.returncode == 0, result


def test_the_readme_runs_job_imported_the_checkouts_compiled_helpers(lab):
    shared = Path(yaml.safe_load((Path(lab["inventory"]).parent / "group_vars" / "all.yml").read_text())["megaprov_controller_shared_dir"])
    logs = sorted((shared / "jobs").glob("lab-tiny-*/logs/*.log"))
    assert logs, f"no README job logs under {shared / 'jobs'}"
    text = "\n".join(path.read_text(errors="replace") for path in logs)
    assert "> megatron.core from /opt/megatron-lm, dataset helpers /opt/megatron-lm/megatron/core/datasets/helpers_cpp" in text, text[-2000:]

"""Jobs in container images (launch.container): what the spec accepts and refuses, and what each launcher runs."""

import json
import shlex
import subprocess

import pytest

from megaprov import values
from megaprov.errors import UsageError
from megaprov.training import container, jobspec, nodefacts, render
from megaprov.training.jobspec import JobSpecError
from megaprov.training.planner import GPUS

SPEC = """\
name: boxed
model: {num_layers: 2, hidden_size: 64, num_attention_heads: 4, seq_length: 128, vocab_size: 512}
train: {global_batch_size: 4, train_iters: 10, lr: 0.001}
data: {mock: true}
launch:
  nodes: 2
  gpus_per_node: 4
  launcher: LAUNCHER
  container:
    image: IMAGE
    mounts:
      - {source: /scratch/cache, target: /cache}
      - {source: /scratch/tok, target: /tok, readonly: false}
    env: {TRANSFORMERS_CACHE: /cache/hf}
"""
NGC = "nvcr.io/nvidia/pytorch:25.01-py3"


def spec(launcher="torchrun", image=NGC, text=SPEC):
    return jobspec.parse(text.replace("LAUNCHER", launcher).replace("IMAGE", image), "gpt.yml")


def problems(text):
    with pytest.raises(JobSpecError) as err:
        jobspec.parse(text, "gpt.yml")
    return [p.render("gpt.yml") for p in err.value.problems]


def cluster(s, roots=("/scratch",), gpu="H100-SXM"):
    return nodefacts.KnownCluster(s.launch.nodes, s.launch.gpus_per_node, GPUS[gpu], "/shared", ("n1", "n2"), container_roots=roots)


HOSTS = [("n1", "10.0.0.1"), ("n2", "10.0.0.2")]


@pytest.mark.parametrize(
    ("ref", "enroot"),
    [
        (NGC, "nvcr.io#nvidia/pytorch:25.01-py3"),
        ("localhost:5000/lab/train:1", "localhost:5000#lab/train:1"),
        ("head:5000/nvcr.io/nvidia/pytorch:25.01-py3", "head:5000#nvcr.io/nvidia/pytorch:25.01-py3"),
        ("ubuntu:22.04", "ubuntu:22.04"),  # Docker Hub: no registry part, enroot reads it as such
        ("megaprov/train", "megaprov/train"),  # a Docker Hub namespace, not a registry (no '.', ':' or localhost)
        ("ghcr.io/a/b@sha256:" + "0" * 64, "ghcr.io#a/b@sha256:" + "0" * 64),
        ("/shared/images/pt.sqsh", "/shared/images/pt.sqsh"),
    ],
)
def test_an_image_reference_is_kept_and_pyxis_gets_enroots_form(ref, enroot):
    assert values.image_reference(ref, "f") == ref
    assert values.enroot_image(ref) == enroot


@pytest.mark.parametrize(
    ("ref", "problem"),
    [
        ("nvcr.io/nvidia/pytorch:25.01 py3", "is not an image reference"),
        ("nvcr.io/nvidia/pytorch\n:latest", "contains the control character \\n"),
        ("me:hunter2@nvcr.io/nvidia/pytorch:25.01-py3", "holds credentials"),
        ("me@nvcr.io/nvidia/pytorch", "holds credentials"),
        ("docker://nvcr.io/nvidia/pytorch:25.01-py3", "has a scheme"),
        ("nvcr.io/NVIDIA/pytorch", "is not an image reference"),  # names are lower-case
        ("nvcr.io/nvidia/pytorch:" + "t" * 129, "is not an image reference"),
        ("/shared/images/pt.tar", "is not a squashfs image path"),
        ("/shared/images/a,b.sqsh", "is not a squashfs image path"),
        ("/shared/../etc/x.sqsh", "contains '..'"),
        ("", "is empty"),
    ],
)
def test_a_bad_image_is_refused_in_one_line(ref, problem):
    text = SPEC.replace("LAUNCHER", "slurm").replace("image: IMAGE", "image: " + json.dumps(ref))
    (line,) = problems(text)
    assert line.startswith("gpt.yml:10: launch.container.image=") and problem in line, line


def test_credentials_in_an_image_are_refused_without_echoing_them_as_a_reference():
    (line,) = problems(SPEC.replace("LAUNCHER", "slurm").replace("IMAGE", "me:hunter2@nvcr.io/nvidia/pytorch:1"))
    assert "enroot_credentials" in line and "vault" in line


@pytest.mark.parametrize(
    ("env", "where"),
    [("{HF_TOKEN: abc}", "container"), ("{WANDB_API_KEY: abc}", "container"), ("{AWS_SECRET_ACCESS_KEY: x}", "launch")],
)
def test_a_secret_in_the_environment_is_refused(env, where):
    text = SPEC.replace("LAUNCHER", "slurm").replace("IMAGE", NGC)
    if where == "container":
        text = text.replace("env: {TRANSFORMERS_CACHE: /cache/hf}", f"env: {env}")
    else:
        text = text.replace("  launcher: slurm\n", f"  launcher: slurm\n  env: {env}\n")
    (line,) = problems(text)
    assert "names a secret" in line and "keep secrets out of the job spec" in line, line


@pytest.mark.parametrize(
    ("mount", "problem"),
    [
        ("{source: relative/dir}", "is not an absolute path"),
        ("{source: '/data:/x'}", "is not a plain path"),
        ("{source: '/data,x'}", "is not a plain path"),
        ("{source: /data, target: /proc/x}", "is provided by the container runtime"),
        ("{source: /data, target: /}", "is provided by the container runtime"),
        ("{source: /data, target: /dev}", "is provided by the container runtime"),
        ("{source: /data, readonly: sure}", "is not true or false"),
    ],
)
def test_a_bad_mount_is_refused_in_one_line(mount, problem):
    text = SPEC.replace("LAUNCHER", "slurm").replace("IMAGE", NGC).replace("- {source: /scratch/cache, target: /cache}", f"- {mount}")
    (line,) = problems(text)
    assert "launch.container.mounts[0]" in line and problem in line, line


def test_two_mounts_on_one_target_are_refused():
    second = "{source: /scratch/tok, target: /tok, readonly: false}"
    text = SPEC.replace("LAUNCHER", "slurm").replace("IMAGE", NGC).replace(second, "{source: /scratch/b, target: /cache}")
    (line,) = problems(text)
    assert "is the target of two mounts" in line


def test_a_mount_outside_the_allowed_roots_is_refused_before_launch():
    s = spec()
    with pytest.raises(JobSpecError) as err:
        render.render(s, cluster(s, roots=()), HOSTS)
    problem, second = err.value.problems
    assert (problem.path, second.path) == ("launch.container.mounts[0].source", "launch.container.mounts[1].source")
    assert "/scratch/cache is outside the roots a job may mount (/shared)" in problem.message
    assert "megaprov_container_mount_roots" in problem.fix
    render.render(s, cluster(s), HOSTS)  # allowed where the inventory names /scratch


def test_a_mount_over_the_shared_directory_or_the_checkout_is_refused():
    second = "{source: /scratch/tok, target: /tok, readonly: false}"
    text = SPEC.replace("target: /cache", "target: /shared/x").replace(second, "{source: /scratch/m, target: /opt}")
    s = spec(text=text)
    with pytest.raises(JobSpecError) as err:
        render.render(s, cluster(s), HOSTS)
    assert [p.path for p in err.value.problems] == ["launch.container.mounts[0].target", "launch.container.mounts[1].target"]


def test_a_squashfs_image_is_for_pyxis_and_on_the_shared_directory():
    s = spec(image="/shared/images/pt.sqsh")
    with pytest.raises(JobSpecError) as err:
        render.render(s, cluster(s), HOSTS)
    assert "only pyxis reads" in err.value.problems[0].message
    s = spec("slurm", image="/scratch/pt.sqsh")
    with pytest.raises(JobSpecError) as err:
        render.render(s, cluster(s), HOSTS)
    assert "is not under the shared directory /shared" in err.value.problems[0].message
    render.render(spec("slurm", image="/shared/images/pt.sqsh"), cluster(s), HOSTS)


def test_the_inventorys_mount_roots_are_checked():
    from megaprov.training.target import mount_roots

    assert mount_roots(["/scratch", "/raid/"], "inv") == ("/scratch", "/raid")
    for bad, what in (("/scratch", "not a list"), (["rel"], "not an absolute path"), (["/"], "the whole node"), (["/a:b"], "not a plain path")):
        with pytest.raises(UsageError) as err:
            mount_roots(bad, "inv")
        assert what in str(err.value)


def _words(line):
    """The words of a bash array assignment NAME=(...)."""
    return shlex.split(line[line.index("(") + 1 : line.rindex(")")])


def test_systemd_runs_torchrun_in_the_image_with_podman():
    s = spec()
    r = render.render(s, cluster(s), HOSTS)
    script = r.nodes[1].script
    lines = script.splitlines()
    words = _words(next(line for line in lines if line.startswith("podman=(")))
    assert words[:2] == ["podman", "run"]
    pairs = set(zip(words, words[1:], strict=False))
    for pair in [
        ("--name", "megaprov-job-boxed-1"),
        ("--network", "host"),
        ("--ipc", "host"),
        ("--userns", "keep-id"),
        ("--ulimit", "host"),
        ("--device", "nvidia.com/gpu=all"),
        ("--workdir", "/shared/jobs/boxed"),
        ("--volume", "/shared:/shared"),
        ("--volume", "/opt/megatron-lm:/opt/megatron-lm:ro"),
        ("--volume", "/scratch/cache:/cache:ro"),
        ("--volume", "/scratch/tok:/tok"),
        ("--env", "TRANSFORMERS_CACHE"),
        ("--env", "MEGAPROV_JOB_UNIT"),  # the reaper finds the container's processes by it
        ("--env", "PYTHONPATH"),
    ]:
        assert pair in pairs, pair
    assert ("--env", "PATH") not in pairs  # the image keeps its own
    assert "export TRANSFORMERS_CACHE=/cache/hf" in lines  # values stay in the script, podman gets names only
    assert f"podman+=({NGC})" in lines
    command = script[script.index('"${podman[@]}"') :].split(" &\n", 1)[0]
    argv = shlex.split(command.replace("\\\n", " "))
    assert argv[1:4] == ["/usr/bin/python3", "-m", "torch.distributed.run"]  # the image's interpreter, not launch.python
    assert "--node-rank" in argv and argv[argv.index("--node-rank") + 1] == "1"
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_a_cpu_lab_gets_no_cdi_device():
    s = spec()
    script = render.render(s, cluster(s, gpu="cpu"), HOSTS).nodes[0].script
    assert "nvidia.com/gpu" not in script


def test_a_job_without_a_container_renders_as_before():
    s = jobspec.parse(SPEC.split("  container:")[0].replace("LAUNCHER", "slurm"))
    r = render.render(s, cluster(s), HOSTS)
    assert "podman" not in r.nodes[0].script and "--container" not in r.sbatch
    assert "/opt/megaprov/venv/bin/python" in r.nodes[0].argv[0]


def test_slurm_runs_every_task_in_the_image_with_pyxis():
    s = spec("slurm")
    r = render.render(s, cluster(s), HOSTS)
    lines = r.sbatch.splitlines()
    srun = next(line for line in lines if line.startswith("srun "))
    words = shlex.split(srun.replace('"$mounts"', "MOUNTS").rstrip("&"))
    assert "--container-image=nvcr.io#nvidia/pytorch:25.01-py3" in words
    assert "--container-mounts=MOUNTS" in words and "--container-workdir=/shared/jobs/boxed" in words
    assert "--no-container-mount-home" in words
    assert words[-2:] == ["bash", "$jdir/launch/slurm-node.sh"]
    mounts = shlex.split(next(line for line in lines if line.startswith("mounts="))[len("mounts=") :])[0].split(",")
    assert mounts == ["/shared:/shared", "/opt/megatron-lm:/opt/megatron-lm:ro", "/scratch/cache:/cache:ro", "/scratch/tok:/tok"]
    # the node script runs inside: the image's interpreter, the container's environment exported there
    assert "/usr/bin/python3 -m torch.distributed.run" in r.slurm_node
    assert "export TRANSFORMERS_CACHE=/cache/hf" in r.slurm_node
    subprocess.run(["bash", "-n"], input=r.sbatch, text=True, check=True)


def test_the_nccl_settings_reach_the_container_only_where_the_node_has_them(tmp_path):
    """The batch script's mount list gets /etc/megaprov/nccl.env only if it exists (enroot refuses a missing source)."""
    s = spec("slurm")
    sbatch = render.render(s, cluster(s), HOSTS).sbatch
    lines = [line for line in sbatch.splitlines() if line.startswith(("mounts=", "if [ -r /etc/megaprov/nccl.env ]"))]
    script = "\n".join(lines).replace(container.NCCL_ENV_FILE, str(tmp_path / "nccl.env")) + '\nprintf %s "$mounts"\n'
    without = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    (tmp_path / "nccl.env").write_text("NCCL_IB_HCA=mlx5_0\n")
    with_file = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    assert not without.endswith(":ro" + str(tmp_path)) and str(tmp_path) not in without
    assert with_file == without + f",{tmp_path}/nccl.env:{tmp_path}/nccl.env:ro"


FAKE_PODMAN = """#!/bin/bash
# records each call; `rm` fails while $FAKE_DIR/rm-fails holds a count above zero, `run` ends as a killed torchrun
echo "$*" >>"$FAKE_DIR/calls"
case $1 in
    rm) n=$(cat "$FAKE_DIR/rm-fails" 2>/dev/null || echo 0)
        if [ "$n" -gt 0 ]; then echo $((n - 1)) >"$FAKE_DIR/rm-fails"; echo "invalid internal status" >&2; exit 125; fi ;;
    run) exit 137 ;;
esac
exit 0
"""


def _run_node_script(tmp_path, rm_fails, stop_first=False):
    """The systemd node script of a container job, run by bash with a podman that records its calls."""
    s = spec()
    shared = tmp_path / "shared"
    (shared / "jobs" / "boxed" / "logs").mkdir(parents=True)
    known = nodefacts.KnownCluster(2, 4, GPUS["cpu"], str(shared), ("n1", "n2"), container_roots=("/scratch",))
    script = render.render(s, known, HOSTS).nodes[0].script
    if stop_first:  # the unit's SIGTERM, as soon as the trap is set
        script = script.replace("TERM\n", "TERM\nkill -TERM $$\n", 1)
        assert "kill -TERM $$" in script
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "podman").write_text(FAKE_PODMAN)
    (fake / "podman").chmod(0o755)
    (tmp_path / "rm-fails").write_text(str(rm_fails))
    env = {"PATH": f"{fake}:/usr/bin:/bin", "FAKE_DIR": str(tmp_path)}
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    return done.returncode, [c.split()[:2] for c in calls], (shared / "jobs" / "boxed" / "logs" / "n1.log").read_text()


def test_the_node_script_waits_for_podmans_cleanup_of_its_container_before_the_reap(tmp_path):
    """podman removes a --rm container through a cleanup process of its own; the node script's reaper must not kill
    that half-way (podman's state would then name a container whose processes are gone), so the script waits for
    the container to be gone, by podman's lock, before it reaps. It never resets podman's state itself: a migrate
    in the unit would start the user's pause process there, where the next reap kills it (job_launch.yml does it)."""
    rc, calls, log = _run_node_script(tmp_path, rm_fails=0)
    assert rc == 137  # torchrun's status, killed
    assert calls == [["run", "--pull"], ["rm", "--force"]]
    assert "torchrun exited with 137" in log


def test_a_stop_before_torchrun_starts_exits_143_and_starts_nothing(tmp_path):
    """systemctl stop's SIGTERM can come while the script prepares the run: the trap must not trip on an unset
    $child (set -u), and nothing may start after it."""
    rc, calls, log = _run_node_script(tmp_path, rm_fails=0, stop_first=True)
    assert rc == 143 and calls == [] and "torchrun exited with 143" in log

"""A CPU node's training environment: torch's CPU build and megatron-core 0.16.1 that really train, at the pinned tag."""

import json
import shlex
from pathlib import Path

import yaml

from tests.molecule.inventory import scenario_hosts

testinfra_hosts = list(scenario_hosts().values())  # from Molecule's inventory
PY = "/opt/megaprov/venv/bin/python"


def test_torch_is_the_cpu_build_from_the_wheelhouse(host):
    info = json.loads(host.check_output(f"{PY} -c 'import json, torch; print(json.dumps([torch.__version__, torch.version.cuda]))'"))
    assert info == ["2.13.0+cpu", None]
    # Nothing CUDA came along: no nvidia-* wheels in the environment.
    assert "nvidia" not in host.check_output(f"{PY} -m pip list --format=freeze").lower()


def test_megatron_core_matches_the_checked_out_tag(host):
    core = host.check_output(f"{PY} -c 'from megatron.core import package_info; print(package_info.__version__)'")
    assert core == "0.16.1"
    tag = host.check_output("git -C /opt/megatron-lm -c safe.directory='*' describe --tags --exact-match")
    assert tag == "core_v0.16.1"


def test_megatron_core_builds_a_model_and_trains_a_parallel_layer(host):
    """megatron-core on CPU with Gloo: GPTModel from the local spec builds, a ColumnParallelLinear learns."""
    script = """
import os, torch
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29511", RANK="0", WORLD_SIZE="1")
torch.distributed.init_process_group("gloo")
from megatron.core import parallel_state
parallel_state.initialize_model_parallel(1, 1)
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.tensor_parallel import ColumnParallelLinear
from megatron.core.transformer import TransformerConfig
torch.manual_seed(0)
cfg = TransformerConfig(num_layers=2, hidden_size=16, num_attention_heads=2, use_cpu_initialization=True)
model = GPTModel(config=cfg, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=64, max_sequence_length=8)
params = sum(p.numel() for p in model.parameters())
lin = ColumnParallelLinear(16, 32, config=cfg, init_method=torch.nn.init.xavier_normal_, bias=True, gather_output=True)
opt = torch.optim.Adam(lin.parameters(), lr=1e-2)
x = torch.randn(4, 16)
losses = []
for _ in range(5):
    out, _ = lin(x)
    loss = (out ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step(); losses.append(loss.item())
print(params, losses[-1] < losses[0])
"""
    # 8768 = token (64x16) and position (8x16) embeddings + 2 layers of (QKV, proj, 4h MLP, 2 layer norms) + final norm.
    assert host.check_output(f"{PY} - <<'EOF'\n{script}\nEOF").splitlines()[-1] == "8768 True"


def test_apex_checked_out_but_not_built_without_a_gpu(host):
    tag = host.check_output("git -C /opt/apex -c safe.directory='*' describe --tags --exact-match")
    assert tag == "25.09"
    assert host.run(f"{PY} -c 'import apex'").rc != 0


# The megatron role's own check arguments (megatron_check_args), as one shell-quoted string.
_DEFAULTS = Path(__file__).resolve().parents[3] / "ansible_collections/megaprov/cluster/roles/megatron/defaults/main.yml"
CHECK_ARGS = " ".join(shlex.quote(str(a)) for a in yaml.safe_load(_DEFAULTS.read_text())["megatron_check_args"])
DATASETS = "/opt/megatron-lm/megatron/core/datasets"
JOB_PATH = "/opt/megaprov/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def test_dataset_helpers_were_built_at_install_time_and_the_jobs_make_is_a_no_op(host):
    """Issue 13 item 2: built as root with the venv's python3 and pybind11; the unprivileged job user's `make`
    (Megatron-LM runs it on rank 0 at every start) finds them up to date and writes nothing."""
    suffix = host.check_output(f"{PY} -c 'import sysconfig; print(sysconfig.get_config_var(\"EXT_SUFFIX\"))'")
    built = host.file(f"{DATASETS}/helpers_cpp{suffix}")
    assert built.exists and built.user == "root" and built.group == "root"
    assert host.file("/opt/megatron-lm").user == "root"
    question = host.run(f"runuser -u nobody -- env -i PATH={JOB_PATH} make -q -C {DATASETS}")
    assert question.rc == 0, question.stdout + question.stderr
    # Megatron-LM's own helpers, imported as a job imports them (the checkout first on the path), as the cluster user:
    # the sample index of three 5-token documents in 4-token samples (one token of overlap)
    script = (
        "import numpy as np; from megatron.core.datasets import helpers, helpers_cpp; print(helpers_cpp.__file__); "
        "print(helpers.build_sample_idx(np.array([5, 5, 5], dtype=np.int32), np.array([0, 1, 2], dtype=np.int32), 4, 1, 15).tolist())"
    )
    out = host.check_output(f"cd /tmp && runuser -u megaprov -- env PYTHONPATH=/opt/megatron-lm {PY} -W ignore -c {shlex.quote(script)}")
    assert out.splitlines()[-2] == f"{DATASETS}/helpers_cpp{suffix}"
    assert out.splitlines()[-1] == "[[0, 0], [0, 4], [1, 3], [2, 2]]"
    assert host.run(f"{PY} -m pybind11 --includes").rc == 0


def test_the_python_stage_records_what_the_node_really_has(host):
    """Issue 13 item 1: the fact megaprov renders by (CPU torch, no Transformer Engine, apex not built)."""
    fact = json.loads(host.file("/etc/ansible/facts.d/megaprov_python.fact").content_string)
    assert fact["version"] == 1 and fact["torch"] == "2.13.0+cpu" and fact["torch_cuda"] is None
    assert fact["transformer_engine"] is None
    assert fact["apex"] == {k: False for k in fact["apex"]} and "fused_weight_gradient_mlp_cuda" in fact["apex"]
    megatron = fact["megatron"]
    assert megatron["core"] == "0.16.1" and megatron["checkout"] == "0.16.1"
    assert megatron["helpers_built"] is True and megatron["core_imported"] == "checkout"


def test_the_model_check_uses_the_arguments_megaprov_renders_for_this_node(host):
    """The role's last check, run again here with the role's own script and rules: with the node's fact the rules
    add the local implementation and switch the fused paths off, and the model builds; with no implementation
    arguments (the render before issue 13) Megatron's defaults need Transformer Engine and the build fails."""
    files = Path(__file__).resolve().parents[3] / "ansible_collections" / "megaprov" / "cluster" / "roles" / "megatron" / "files"
    script = (files / "megatron_build_check.py").read_text()
    rules = (files / "impl-core_v0.16.1.json").read_text()
    assert host.run(f"cat > /tmp/megaprov_check.py <<'EOF'\n{script}\nEOF").rc == 0
    args = CHECK_ARGS  # a 2-layer rope/RMSNorm/SwiGLU GPT, complete enough for Megatron-LM's validate_args
    fact = "$(cat /etc/ansible/facts.d/megaprov_python.fact)"
    try:
        new = host.run(f'cd /tmp && {PY} /tmp/megaprov_check.py /opt/megatron-lm --rules {shlex.quote(rules)} --stack "{fact}" -- {args}')
        old = host.run(f"cd /tmp && {PY} /tmp/megaprov_check.py /opt/megatron-lm -- {args}")
    finally:
        host.run("rm -f /tmp/megaprov_check.py")
    result = json.loads(new.stdout.splitlines()[-1])
    assert new.rc == 0 and result["model"] == "built", new.stdout + new.stderr
    assert result["rendered"] == [
        "--transformer-impl",
        "local",
        "--no-gradient-accumulation-fusion",
        "--no-masked-softmax-fusion",
        "--no-persist-layer-norm",
        "--no-rope-fusion",
    ]
    before = json.loads(old.stdout.splitlines()[-1])
    assert old.rc == 1 and before["transformer_impl"] == "transformer_engine" and before["model"] != "built"


def test_the_role_ran_megatron_lms_training_code_as_the_cluster_user(host):
    """Issue 29: the role's model check (its recorded proof) imported pretrain_gpt.py and megatron.training, which need
    pyyaml and pydantic beyond megatron-core, and built the model through Megatron-LM's own code; the installed check
    script runs as the cluster user."""
    proof = json.loads(host.file("/var/lib/megaprov/proofs/megatron_model.json").content_string)
    lines = [line for line in proof["result"]["stdout_lines"] if line.startswith("{")]
    result = json.loads(lines[-1])
    assert result["mode"] == "megatron-lm" and result["imports"] == "ok" and result["model"] == "built", result
    assert result["parse"] is True and result["validate"] is True and result["triton"] == "stand-in (CPU torch)"
    script = host.file("/opt/megaprov/lib/megatron_build_check.py")
    assert script.exists and script.user == "root" and script.mode == 0o644
    local = "--transformer-impl local --no-gradient-accumulation-fusion --no-persist-layer-norm --no-rope-fusion"
    run = host.run(f"cd /tmp && runuser -u megaprov -- {PY} /opt/megaprov/lib/megatron_build_check.py /opt/megatron-lm -- {CHECK_ARGS} {local}")
    assert run.rc == 0 and json.loads(run.stdout.splitlines()[-1])["model"] == "built", run.stdout + run.stderr


def test_uv_installed_the_environment_from_the_wheelhouse(host):
    """Issue 17: pytorch_installer defaults to uv: the pinned uv, installed with pip from the wheelhouse into its own
    environment, installed torch, megatron-core and pybind11 (each distribution records its installer), compiling
    their bytecode as pip does (a module no test imports, torch's model_dump/__main__.py, has its .pyc)."""
    defaults = Path(__file__).resolve().parents[3] / "ansible_collections/megaprov/cluster/roles/pytorch/defaults/main.yml"
    version = yaml.safe_load(defaults.read_text())["pytorch_uv_version"]
    assert host.check_output("/opt/megaprov/uv/bin/uv --version").split()[:2] == ["uv", version]
    dists = ["torch", "megatron-core", "pybind11", "einops"]
    script = f"import importlib.metadata as m, json; print(json.dumps({{d: m.distribution(d).read_text('INSTALLER').strip() for d in {dists}}}))"
    assert json.loads(host.check_output(f'{PY} -c "{script}"')) == dict.fromkeys(dists, "uv")
    site = host.check_output(f"{PY} -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'")
    assert host.file(f"{site}/torch/utils/model_dump/__pycache__/__main__.cpython-311.pyc").exists


def test_the_cold_converge_left_torchs_proof_standing(host):
    """Issue 17: the torch proof recorded by the cold converge held in the idempotence run, though megatron-core and
    apex install into the same environment after it (it watches torch's own files, not the whole site-packages
    listing: watching the listing made every second bootstrap re-run torch's check). A proof that had to run again in
    the second run would be recorded after the megaprov_python fact, which the cold converge wrote once, after torch's
    check and before the probe's record."""
    torch = json.loads(host.file("/var/lib/megaprov/proofs/torch.json").content_string)
    probe = json.loads(host.file("/var/lib/megaprov/proofs/python_stack.json").content_string)
    fact_written = int(host.check_output("stat -c %Y /etc/ansible/facts.d/megaprov_python.fact"))
    epoch = {name: int(host.check_output(f"date -u -d {shlex.quote(doc['verified_at'])} +%s")) for name, doc in (("torch", torch), ("probe", probe))}
    assert epoch["torch"] <= fact_written <= epoch["probe"], (torch["verified_at"], probe["verified_at"], fact_written)
    assert any(key.endswith("/RECORD") and "torch-" in key for key in torch["digests"]), sorted(torch["digests"])

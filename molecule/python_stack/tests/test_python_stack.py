"""A CPU node's training environment: torch's CPU build and megatron-core 0.16.1 that really train, at the pinned tag."""

import json

testinfra_hosts = ["podman://py1"]
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

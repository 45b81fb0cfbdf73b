#!/usr/bin/env bash
# GPU check: on ONE machine with NVIDIA GPUs and their driver already loaded, run megaprov against localhost and
# print what it finds. One script, under 8 minutes on a warm machine (GPU_CHECK_BUDGET seconds, default 480):
#   1. the driver (branch, and the newest CUDA it runs: nvidia-smi's "CUDA Version" is that maximum, not a toolkit)
#      and the CUDA toolkit (nvcc --version, when one is installed); the CUDA megaprov configures is chosen from the
#      compatibility table (the collection's meta/compat.yml) for this driver and torch release, never from nvidia-smi's maximum
#   2. megaprov preflight (GPU count, NVLink/NVSwitch, disk, memory; the inventory is validated before any run)
#   3. megaprov bootstrap --tags preflight,gpu,nccl,python in preinstalled mode: the driver on its branch,
#      persistence, Fabric Manager where NVSwitch is present, CUDA (nvcc if present), NCCL, the PyTorch
#      environment seeing every GPU with NCCL, megatron-core matching Megatron-LM's tag
#   4. torch in that environment: its CUDA build, the GPUs it sees, the NCCL version it loads (what training uses);
#      Megatron-LM's training code: the role's model check (real triton, pretrain_gpt.py's imports) and every
#      example job's rendered arguments through Megatron-LM's parse_args/validate_args and a model build on this GPU
#   5. nccl-tests all_reduce_perf on all local GPUs (when built), with the NCCL version it ran and its bus bandwidth
#   6. `megaprov train` of examples/jobs/gpu-check.yml against localhost: a systemd unit runs pretrain_gpt.py under
#      torchrun on every local GPU, 20 iterations on mock data, followed to the verdict; prints the verdict, the
#      loss and TFLOP/s per GPU from the job's report.json, and the planner's estimate for the same job against it
# and a summary: one line per item above. Exit status: 0 when every step passed, 1 otherwise, 3 without a GPU.
#
# Sources, for a machine without internet (all optional):
#   GPU_CHECK_VENV         an existing venv with CUDA torch (default: the pytorch role builds /opt/megaprov/venv);
#                          its torch version and CUDA build become pytorch_version and pytorch_cuda_tag
#   GPU_CHECK_WHEELHOUSE   a directory of wheels for the pytorch role (CUDA torch + megatron-core)
#   GPU_CHECK_MEGATRON     a Megatron-LM checkout or git remote holding tag core_v0.16.1
#   GPU_CHECK_NCCL_TESTS   an nccl-tests git remote holding tag v2.17.1
#   GPU_CHECK_DRIVER_BRANCH  the installed driver's branch (default: read from nvidia-smi)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
START=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET:-480}
WORK=${GPU_CHECK_WORK:-/tmp/megaprov-gpu-check}
mkdir -p "$WORK/shared"/{opt,megaprov/baselines,jobs,checkpoints,data} "$WORK/inventory/group_vars"  # the nfs_server layout
MEGAPROV=${MEGAPROV:-.venv/bin/megaprov}
PY=${MEGAPROV_PYTHON:-.venv/bin/python}
results=()
failed=0
step() { printf '\n== %s (%ds)\n' "$1" $(($(date +%s) - START)); }
record() { results+=("$1"); printf -- '-> %s\n' "$1"; }
fail() { failed=1; record "$1"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }
# A YAML single-quoted scalar: paths and remotes from the environment are data, whatever they contain.
yq() { local v=${1//\'/\'\'}; printf "'%s'" "$v"; }

step "driver and CUDA"
if ! nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader; then
  echo "gpu-check: nvidia-smi failed: this script needs an NVIDIA GPU with its driver loaded" >&2
  exit 3
fi
GPUS=$(nvidia-smi -L | grep -c '^GPU ')
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
BRANCH=${GPU_CHECK_DRIVER_BRANCH:-${DRIVER%%.*}}
NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
# The planner's model names (megaprov/training/planner.py) and the compatibility table's (the collection's meta/compat.yml). GH200 and
# GB200 first: their names contain H200 and B200.
case "$NAME" in
  *GH200*) MODEL=GH200 ;; *GB200*) MODEL=GB200 ;; *B200*) MODEL=B200 ;; *H200*) MODEL=H200 ;;
  *H100*PCIe*) MODEL=H100-PCIe ;; *H100*) MODEL=H100-SXM ;; *A100*40GB*) MODEL=A100-40GB ;; *A100*) MODEL=A100-80GB ;;
  *L40S*) MODEL=L40S ;; *A10*) MODEL=A10 ;; *L4*) MODEL=L4 ;; *T4*) MODEL=T4 ;; *V100*) MODEL=V100 ;; *) MODEL="" ;;
esac
# nccl-tests is compiled for this machine's GPUs exactly, whatever their model (nvidia-smi's compute capability).
CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
# nvidia-smi's "CUDA Version" is the newest CUDA this driver runs, not an installed toolkit (issue 13, item 13).
DRIVER_MAX_CUDA=$(nvidia-smi | sed -n 's/.*CUDA Version: \([0-9]*\.[0-9]*\).*/\1/p' | head -1)
NVCC=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
NVCC_RELEASE=""
if [ -n "$NVCC" ]; then
  NVCC_RELEASE=$("$NVCC" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p' | head -1)
fi
VENV=${GPU_CHECK_VENV:-/opt/megaprov/venv}
TORCH_VERSION="" TORCH_CUDA=""
if [ -n "${GPU_CHECK_VENV:-}" ] && [ -x "$VENV/bin/python" ]; then
  read -r TORCH_VERSION TORCH_CUDA < <("$VENV/bin/python" -c 'import torch; print(torch.__version__.split("+")[0], torch.version.cuda or "cpu")')
fi
# What megaprov configures, from the table: cuda_method, cuda_version (the toolkit when the driver runs it and torch
# has a build for it, else the CUDA of the newest torch build this driver runs) and the torch build (pytorch_cuda_tag).
read -r CUDA_METHOD CUDA_VERSION TORCH_TAG CHOICE < <(
  "$PY" - "$BRANCH" "$NVCC_RELEASE" "${TORCH_VERSION:-}" "${TORCH_CUDA:-}" <<'PYTHON'
import sys

import yaml

from megaprov.cluster import compat

branch, nvcc, torch, torch_cuda = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
if not torch:
    with open("ansible_collections/megaprov/cluster/roles/pytorch/defaults/main.yml", encoding="utf-8") as f:
        torch = str(yaml.safe_load(f)["pytorch_version"])
builds = compat.torch_builds(torch) or {}
toolkit = nvcc in compat.table()["cuda"] and (compat.toolkit_driver(nvcc) or 9999) <= branch
if torch_cuda and torch_cuda != "cpu":  # the given venv's torch decides the build; the toolkit must share its major
    tag = "cu" + torch_cuda.replace(".", "")
    use_nvcc = toolkit and nvcc.split(".")[0] == torch_cuda.split(".")[0]
    wheel = torch_cuda
else:  # the toolkit decides when the driver runs it and torch has a build for it (compat.derive_tag)
    derived = compat.derive_tag(torch, nvcc) if toolkit else None
    use_nvcc = derived is not None
    if derived is not None:
        tag, wheel = derived, builds[derived]["cuda"]
    else:  # no usable toolkit: the newest build this driver runs in full, else through minor version compatibility
        full = [b["cuda"] for b in builds.values() if (compat.toolkit_driver(b["cuda"]) or 9999) <= branch]
        family = [b["cuda"] for b in builds.values() if (compat.family_driver(b["cuda"]) or 9999) <= branch]
        wheel = max(full or family or ["0.0"], key=lambda v: [int(x) for x in v.split(".")])
        tag = "cu" + wheel.replace(".", "")
if use_nvcc:
    print("preinstalled", nvcc, tag, f"toolkit-{nvcc}")
else:
    print("none", wheel, tag, f"no-usable-toolkit({nvcc or 'none'})")
PYTHON
)
if [ -z "${CUDA_METHOD:-}" ]; then
  echo "gpu-check: cannot choose a CUDA version from the collection's meta/compat.yml for driver branch $BRANCH (is $PY megaprov's venv?)" >&2
  exit 2
fi
record "driver: $DRIVER (branch $BRANCH; runs CUDA <= ${DRIVER_MAX_CUDA:-?} by nvidia-smi, <= $("$PY" -c "from megaprov.cluster import compat; print(compat.max_cuda($BRANCH) or '?')") by the collection's meta/compat.yml), $GPUS x $NAME (model $MODEL)"
record "CUDA: toolkit ${NVCC_RELEASE:-none}; megaprov uses cuda_method=$CUDA_METHOD cuda_version=$CUDA_VERSION, torch build $TORCH_TAG ($CHOICE)"

cat >"$WORK/inventory/inventory.ini" <<INI
[head]
localhost ansible_connection=local ansible_python_interpreter=/usr/bin/python3
[gpu_nodes]
localhost
INI
{
  echo "megaprov_shared_dir: $(yq "$WORK/shared")"
  [ -n "$MODEL" ] && echo "megaprov_gpu_model: $MODEL"
  echo "megaprov_gpus_per_node: $GPUS"
  echo "megaprov_cluster_user: $(yq "$(id -un)")"
  echo "nvidia_driver_method: preinstalled"
  echo "nvidia_driver_branch: \"$BRANCH\""
  echo "cuda_method: $CUDA_METHOD"
  echo "cuda_version: \"$CUDA_VERSION\""
  [ "$CUDA_METHOD" = preinstalled ] && echo "cuda_home: $(yq "$(dirname "$(dirname "$NVCC")")")"
  [ -n "$TORCH_VERSION" ] && echo "pytorch_version: \"$TORCH_VERSION\"" && echo "pytorch_cuda_tag: $TORCH_TAG"
  # nccl-tests against the NCCL training loads (the venv's nvidia-nccl wheel; no system libnccl2 needed)
  echo "nccl_method: none"
  echo "nccl_tests_dir: $(yq "$WORK/shared/opt/nccl-tests")"
  [ -n "$CC" ] && echo "nccl_tests_gencode: \"-gencode=arch=compute_$CC,code=sm_$CC\""
  [ -n "${GPU_CHECK_NCCL_TESTS:-}" ] && echo "nccl_tests_repo: $(yq "$GPU_CHECK_NCCL_TESTS")"
  [ -n "${GPU_CHECK_MEGATRON:-}" ] && echo "megatron_repo: $(yq "$GPU_CHECK_MEGATRON")"
  echo "megatron_dir: $(yq "$WORK/megatron-lm")"
  [ -n "${GPU_CHECK_VENV:-}" ] && echo "pytorch_venv: $(yq "$GPU_CHECK_VENV")"
  if [ -n "${GPU_CHECK_WHEELHOUSE:-}" ]; then
    echo "pytorch_source: wheelhouse"
    echo "pytorch_wheelhouse: $(yq "$GPU_CHECK_WHEELHOUSE")"
  fi
} >"$WORK/inventory/group_vars/all.yml"

step "preflight"
if "$MEGAPROV" preflight "$WORK/inventory/inventory.ini"; then record "preflight: ok"; else fail "preflight: exit $?"; fi

step "bootstrap --tags preflight,gpu,nccl,python (preinstalled driver)"
# nccl-tests is built with the toolkit's nvcc against the training environment's NCCL (the nccl stage follows the
# python stage); without a usable toolkit it is not built. all_reduce_perf runs below, by hand.
SKIP=nccl_check
EXTRA=()
[ "$CUDA_METHOD" = preinstalled ] || EXTRA=(-e nccl_tests=false)
if "$MEGAPROV" bootstrap "$WORK/inventory/inventory.ini" --tags preflight,gpu,nccl,python --skip-tags "$SKIP" "${EXTRA[@]}"; then
  record "bootstrap gpu/nccl/python stages: ok"
else
  fail "bootstrap gpu/nccl/python stages: exit $?"
fi

step "torch on the GPUs"
if line=$("$VENV/bin/python" -c '
import torch
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
nccl = ".".join(map(str, torch.cuda.nccl.version())) if n else "none"
print(f"{torch.__version__} (CUDA build {torch.version.cuda}) sees {n} GPU(s), loads NCCL {nccl}")
'); then
  TORCH_NCCL=$(sed -n 's/.*loads NCCL \([0-9.]*\).*/\1/p' <<<"$line")
  case "$line" in *" sees $GPUS GPU(s)"*) record "torch: $line" ;; *) fail "torch: $line, expected $GPUS GPU(s)" ;; esac
else
  TORCH_NCCL=""
  fail "torch: $VENV/bin/python cannot import torch with CUDA"
fi

step "Megatron-LM's training code on this GPU: the python stage's check and every example job's arguments"
# The megatron role ran its model check (pretrain_gpt.py and megatron.training imported, a model built by Megatron-LM's own
# parse_args, validate_args and model_provider) as the cluster user; here the real triton and GPU generation are used
# (no CPU stand-ins), and each example job as megaprov renders it for this node's fact (refused jobs: what the refusal
# leaves) goes through the same code, shrunk to 2 layers.
if out=$("$PY" - "$VENV/bin/python" "$WORK/megatron-lm" <<'PYTHON'
import json, os, subprocess, sys
from pathlib import Path

from megaprov.training import jobspec, nodefacts, render
from tests.helpers.megatron import as_the_refusals_fix_it  # the fixes the suite applies to refused jobs, the same here

python, checkout = sys.argv[1], sys.argv[2]
script = str(Path(python).parents[2] / "lib" / "megatron_build_check.py")  # the role keeps it beside the venv
proof = json.loads(Path("/var/lib/megaprov/proofs/megatron_model.json").read_text())
role = json.loads([x for x in proof["result"]["stdout_lines"] if x.startswith("{")][-1])
print(f"role check: imports {role.get('imports')}, triton {role.get('triton')}, model {role.get('model')} ({role.get('transformer_impl')})")
bad = role.get("imports") != "ok" or role.get("model") != "built" or role.get("triton") != "installed"
stack = nodefacts.node_from_fact(json.loads(Path("/etc/ansible/facts.d/megaprov_python.fact").read_text()))
for path in sorted(Path("examples/jobs").glob("*.yml")):
    spec = jobspec.load(path)
    if spec.launch.trainer != "megatron-lm":
        continue
    spec, refused = as_the_refusals_fix_it(spec, stack)
    argv = render.megatron_args(spec, "/shared", stack)
    world = spec.launch.nodes * spec.launch.gpus_per_node
    env = {**os.environ, **render.BASE_ENV}  # the job's environment (CUDA_DEVICE_MAX_CONNECTIONS=1, ...)
    cmd = [python, script, checkout, "--world-size", str(world), "--shrink", "--", *argv]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    lines = [x for x in run.stdout.splitlines() if x.startswith("{")]
    r = json.loads(lines[-1]) if lines else {"model": run.stderr.strip()[-200:]}
    bad = bad or r.get("model") != "built"
    print(f"{path.stem}: refused {refused or 'nothing'}; {r.get('transformer_impl')}, model {r.get('model')}")
sys.exit(1 if bad else 0)
PYTHON
); then
  record "megatron-lm code: $(tr '\n' ';' <<<"$out")"
else
  fail "megatron-lm code: $(tr '\n' ';' <<<"$out")"
fi

step "nccl-tests all_reduce_perf on $GPUS GPU(s)"
if [ -x "$WORK/shared/opt/nccl-tests/build/all_reduce_perf" ]; then
  NCCL_DEBUG=VERSION timeout 120 "$WORK/shared/opt/nccl-tests/build/all_reduce_perf" -b 8 -e 4G -f 2 -g "$GPUS" >"$WORK/all_reduce.log" 2>&1
  rc=$?
  grep -E '^#\s*(Out of bounds|Avg bus)' "$WORK/all_reduce.log"
  TESTS_NCCL=$(sed -n 's/.*NCCL version \([0-9.]*\).*/\1/p' "$WORK/all_reduce.log" | head -1)
  AVG=$(sed -n 's/^#\s*Avg bus bandwidth\s*:\s*\([0-9.]*\).*/\1/p' "$WORK/all_reduce.log")
  # Peak out-of-place bus bandwidth (column 8 of the data rows: size count type redop root time algbw busbw ...).
  PEAK=$(awk '!/^#/ && NF >= 8 && $1 ~ /^[0-9]+$/ { if ($8 + 0 > max) max = $8 + 0 } END { print max + 0 }' "$WORK/all_reduce.log")
  same=""
  if [ -n "$TORCH_NCCL" ] && [ "$TESTS_NCCL" != "$TORCH_NCCL" ]; then same=", NOT the NCCL torch loads ($TORCH_NCCL)"; fi
  # The floor the nccl role holds this node to: NVLink SHARP's where the CUDA driver reports multicast on every GPU
  # (and more than 2 GPUs, as NCCL decides), the ring's otherwise (roles/nccl/vars/main.yml, files/nvls_probe.py).
  FLOOR=$("$PY" - "$MODEL" "$GPUS" <<'PYTHON'
import json, subprocess, sys
from pathlib import Path

from tests.helpers.modules import role_vars  # the nccl role's own definition of the floor, templated by Ansible

model, gpus = sys.argv[1], int(sys.argv[2])
role = Path("ansible_collections/megaprov/cluster/roles/nccl")
probe = subprocess.run([sys.executable, str(role / "files/nvls_probe.py")], capture_output=True, text=True)
found = json.loads((probe.stdout.strip().splitlines() or ["{}"])[-1])
facts = {"__nccl_gpus": gpus, "__nccl_nvls_probe": found, "megaprov_gpu_model": model, "ansible_local": {}}
got = role_vars(role, ["__nccl_min_busbw", "__nccl_nvls"], **facts)
print(f"{int(got['__nccl_min_busbw'])} {'nvls' if got['__nccl_nvls'] else 'ring'} {found.get('error') or found.get('multicast')}")
PYTHON
  )
  read -r FLOOR_GBPS FLOOR_ALGO FLOOR_WHY <<<"${FLOOR:-0 ? ?}"
  floor_note="; floor ${FLOOR_GBPS} GB/s (${FLOOR_ALGO}: multicast ${FLOOR_WHY})"
  if [ "$rc" -eq 0 ] && awk -v p="$PEAK" -v f="${FLOOR_GBPS:-0}" 'BEGIN { exit !(p + 0 >= f + 0) }'; then
    record "nccl-tests: all_reduce_perf avg busbw ${AVG:-?} GB/s, peak ${PEAK} GB/s, NCCL ${TESTS_NCCL:-?}$same$floor_note"
  elif [ "$rc" -eq 0 ]; then
    fail "nccl-tests: peak ${PEAK} GB/s below the floor$floor_note, NCCL ${TESTS_NCCL:-?}$same"
  else
    fail "nccl-tests: all_reduce_perf exit $rc (see $WORK/all_reduce.log)"
  fi
else
  record "nccl-tests: skipped: not built (needs a CUDA toolkit that fits the driver and torch's CUDA major)"
fi

step "megaprov train: pretrain_gpt.py, 20 iterations on mock data, on every local GPU"
# The real launch against localhost: a systemd unit running torchrun, followed to the verdict (report.json).
JOB="gpu-check-$(date +%Y%m%d-%H%M%S)"
sed "s#^  python: .*##; s#^launch:#launch:\n  python: $VENV/bin/python\n  megatron_dir: $WORK/megatron-lm#" examples/jobs/gpu-check.yml >"$WORK/gpu-check.yml"
LIMIT=$(left)
[ "$LIMIT" -lt 120 ] && LIMIT=120
timeout "$LIMIT" "$MEGAPROV" train --job "$WORK/gpu-check.yml" -i "$WORK/inventory/inventory.ini" --gpus-per-node "$GPUS" --name "$JOB" --stall-timeout 240
rc=$?
REPORT="$WORK/shared/jobs/$JOB/report.json"
if [ -f "$REPORT" ]; then
  summary=$(
    "$PY" - "$REPORT" <<'PYTHON'
import json
import sys

with open(sys.argv[1], encoding="utf-8") as f:
    r = json.load(f)
t, i, loss = r["throughput"], r["iterations"], r["loss"]
tflops = "?" if t["tflops_per_gpu_median"] is None else f"{t['tflops_per_gpu_median']:.1f}"
print(
    f"verdict {r['verdict']}, {i['last']}/{i['total']} iterations, loss {loss['first']} -> {loss['last']}, "
    f"{tflops} TFLOP/s per GPU, {t['tokens_per_second_median'] or 0:.0f} tokens/s"
)
PYTHON
  )
else
  summary="no report (see $WORK/shared/jobs/$JOB/logs)"
fi
if [ "$rc" -eq 0 ]; then record "train (pretrain_gpt.py): $summary"; else fail "train (pretrain_gpt.py): exit $rc; $summary"; fi
# The planner's estimate for the same job on the same inventory (its measured GEMM rate, or the published peak)
# against the run's measured TFLOP/s per GPU: the step-time model's error on this machine (issue: planner calibration).
if [ -f "$REPORT" ]; then
  "$MEGAPROV" -o json plan --job "$WORK/gpu-check.yml" -i "$WORK/inventory/inventory.ini" --gpus-per-node "$GPUS" >"$WORK/plan.json" 2>"$WORK/plan.err"
  estimate=$(
    "$PY" - "$WORK/plan.json" "$REPORT" <<'PYTHON'
import json
import sys

with open(sys.argv[1], encoding="utf-8") as f:
    plan = json.load(f)["result"]
with open(sys.argv[2], encoding="utf-8") as f:
    measured = json.load(f)["throughput"]["tflops_per_gpu_median"]
e = plan["estimate"]
estimated = e["mfu"] * e["peak_tflops_per_rank"]
parts = sorted((e.get("seconds_by_mechanism") or {}).items(), key=lambda kv: -kv[1])[:3]
where = ", ".join(f"{k} {v / e['step_seconds']:.0%}" for k, v in parts)
ratio = f"{measured / estimated:.2f}" if measured else "?"
print(f"estimate {estimated:.1f} TFLOP/s per GPU (MFU {e['mfu']:.1%} of {e['peak_source']} {e['peak_tflops_per_rank']:.0f}; {where}),"
      f" measured {measured if measured is None else round(measured, 1)}: measured/estimate {ratio}")
PYTHON
  ) && record "planner: $estimate" || fail "planner: no estimate (see $WORK/plan.err)"
fi
"$MEGAPROV" job stop "$JOB" >/dev/null 2>&1 || true

printf '\n== summary (%ds of %ds)\n' $(($(date +%s) - START)) "$BUDGET"
printf '%s\n' "${results[@]}"
exit "$failed"

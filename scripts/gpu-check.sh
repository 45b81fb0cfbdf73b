#!/usr/bin/env bash
# GPU check: on ONE machine with an NVIDIA GPU and its driver already installed, run megaprov against localhost
# and print what it finds. Under 8 minutes on a warm machine:
#   1. megaprov preflight (GPU count, NVLink/NVSwitch, disk, memory)
#   2. megaprov bootstrap --tags preflight,gpu,nccl,python in preinstalled mode: the driver on its branch,
#      persistence, Fabric Manager where NVSwitch is present, CUDA (nvcc if present), NCCL, the PyTorch
#      environment seeing every GPU with NCCL, megatron-core matching Megatron-LM's tag
#   3. nccl-tests all_reduce_perf on all local GPUs (when libnccl-dev and nvcc are there to build it)
#   4. `megaprov train` of examples/jobs/gpu-check.yml against localhost: a systemd unit runs pretrain_gpt.py under
#      torchrun on every local GPU, 20 iterations on mock data, followed to the verdict; prints the verdict, the
#      loss and TFLOP/s per GPU from the job's report.json
#
# Sources, for a machine without internet (all optional):
#   GPU_CHECK_VENV         an existing venv with CUDA torch (default: the pytorch role builds /opt/megaprov/venv)
#   GPU_CHECK_WHEELHOUSE   a directory of wheels for the pytorch role (CUDA torch + megatron-core)
#   GPU_CHECK_MEGATRON     a Megatron-LM checkout or git remote holding tag core_v0.16.1
#   GPU_CHECK_NCCL_TESTS   an nccl-tests git remote holding tag v2.17.1
#   GPU_CHECK_DRIVER_BRANCH  the installed driver's branch (default: read from nvidia-smi)
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
WORK=${GPU_CHECK_WORK:-/tmp/megaprov-gpu-check}
mkdir -p "$WORK/shared" "$WORK/inventory/group_vars"
MEGAPROV=${MEGAPROV:-.venv/bin/megaprov}
results=()
step() { printf '\n== %s (%ds)\n' "$1" $(( $(date +%s) - START )); }
record() { results+=("$1"); printf -- '-> %s\n' "$1"; }

step "GPUs"
if ! nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader; then
  echo "gpu-check: nvidia-smi failed: this script needs an NVIDIA GPU with its driver loaded" >&2; exit 3
fi
GPUS=$(nvidia-smi -L | grep -c '^GPU ')
BRANCH=${GPU_CHECK_DRIVER_BRANCH:-$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 | cut -d. -f1)}
NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$NAME" in *H200*) MODEL=H200 ;; *H100*PCIe*) MODEL=H100-PCIe ;; *H100*) MODEL=H100-SXM ;; *A100*40GB*) MODEL=A100-40GB ;;
  *A100*) MODEL=A100-80GB ;; *B200*) MODEL=B200 ;; *L40S*) MODEL=L40S ;; *) MODEL=H100-SXM ;; esac
record "gpus: $GPUS x $NAME, driver branch $BRANCH (planner model $MODEL)"
CUDA_VERSION=$(nvidia-smi | sed -n 's/.*CUDA Version: \([0-9]*\.[0-9]*\).*/\1/p' | head -1)
HAVE_NVCC=false; command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] && HAVE_NVCC=true

cat > "$WORK/inventory/inventory.ini" <<INI
[head]
localhost ansible_connection=local ansible_python_interpreter=/usr/bin/python3
[gpu_nodes]
localhost
INI
{
  echo "megaprov_shared_dir: $WORK/shared"
  echo "megaprov_gpu_model: $MODEL"
  echo "megaprov_gpus_per_node: $GPUS"
  echo "megaprov_cluster_user: $(id -un)"
  echo "nvidia_driver_method: preinstalled"
  echo "nvidia_driver_branch: \"$BRANCH\""
  echo "cuda_method: $($HAVE_NVCC && echo preinstalled || echo none)"
  echo "cuda_version: \"$CUDA_VERSION\""
  echo "cuda_home: $(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")"
  echo "nccl_method: preinstalled"
  echo "nccl_package_version: \"$(dpkg-query -W -f='${Version}' libnccl2 2>/dev/null || echo none)\""
  echo "nccl_tests_dir: $WORK/shared/nccl-tests"
  [ -n "${GPU_CHECK_NCCL_TESTS:-}" ] && echo "nccl_tests_repo: $GPU_CHECK_NCCL_TESTS"
  [ -n "${GPU_CHECK_MEGATRON:-}" ] && echo "megatron_repo: $GPU_CHECK_MEGATRON"
  echo "megatron_dir: $WORK/megatron-lm"
  if [ -n "${GPU_CHECK_VENV:-}" ]; then echo "pytorch_venv: $GPU_CHECK_VENV"; fi
  if [ -n "${GPU_CHECK_WHEELHOUSE:-}" ]; then echo "pytorch_source: wheelhouse"; echo "pytorch_wheelhouse: $GPU_CHECK_WHEELHOUSE"; fi
} > "$WORK/inventory/group_vars/all.yml"

step "preflight"
$MEGAPROV preflight "$WORK/inventory/inventory.ini"; rc=$?
record "preflight: exit $rc"

step "bootstrap --tags preflight,gpu,nccl,python (preinstalled driver)"
# NCCL from packages is optional on one machine (torch's wheels carry their own): without libnccl2 the nccl stage is
# skipped, without libnccl-dev or nvcc nccl-tests is not built. all_reduce_perf runs below, by hand.
SKIP=nccl_check
dpkg-query -W libnccl2 >/dev/null 2>&1 || SKIP=nccl
EXTRA=()
{ dpkg-query -W libnccl-dev >/dev/null 2>&1 && $HAVE_NVCC; } || EXTRA=(-e nccl_tests=false)
$MEGAPROV bootstrap "$WORK/inventory/inventory.ini" --tags preflight,gpu,nccl,python --skip-tags "$SKIP" "${EXTRA[@]}"; rc=$?
record "bootstrap gpu/nccl/python stages: exit $rc"

VENV=${GPU_CHECK_VENV:-/opt/megaprov/venv}
step "torch on the GPUs"
"$VENV/bin/python" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count(), 'nccl', torch.cuda.nccl.version())"
record "torch: exit $?"

step "nccl-tests all_reduce_perf on $GPUS GPU(s)"
if [ -x "$WORK/shared/nccl-tests/build/all_reduce_perf" ]; then
  NCCL_DEBUG=INFO "$WORK/shared/nccl-tests/build/all_reduce_perf" -b 8 -e 4G -f 2 -g "$GPUS" > "$WORK/all_reduce.log" 2>&1
  rc=$?
  grep -E '^#\s*(Out of bounds|Avg bus)' "$WORK/all_reduce.log"
  record "all_reduce_perf: exit $rc, $(grep -E 'Avg bus bandwidth' "$WORK/all_reduce.log" | tr -s ' ')"
else
  record "all_reduce_perf: skipped: nccl-tests not built (needs libnccl-dev and nvcc on this machine)"
fi

step "megaprov train: pretrain_gpt.py, 20 iterations on mock data, on every local GPU"
# The real launch against localhost: a systemd unit running torchrun, followed to the verdict (report.json).
JOB="gpu-check-$(date +%Y%m%d-%H%M%S)"
sed "s#^  python: .*##; s#^launch:#launch:\n  python: $VENV/bin/python\n  megatron_dir: $WORK/megatron-lm#" examples/jobs/gpu-check.yml > "$WORK/gpu-check.yml"
timeout 420 $MEGAPROV train --job "$WORK/gpu-check.yml" -i "$WORK/inventory/inventory.ini" --gpus-per-node "$GPUS" --name "$JOB" --stall-timeout 240
rc=$?
REPORT="$WORK/shared/jobs/$JOB/report.json"
if [ -f "$REPORT" ]; then
  summary=$("$VENV/bin/python" -c "import json,sys; r=json.load(open(sys.argv[1])); t=r['throughput']; print(f\"verdict {r['verdict']}, {r['iterations']['last']}/{r['iterations']['total']} iterations, loss {r['loss']['first']} -> {r['loss']['last']}, {t['tflops_per_gpu_median']} TFLOP/s per GPU, {t['tokens_per_second_median']:.0f} tokens/s\")" "$REPORT")
else
  summary="no report (see $WORK/shared/jobs/$JOB/logs)"
fi
record "megaprov train: exit $rc; $summary"
$MEGAPROV job stop "$JOB" >/dev/null 2>&1 || true

printf '\n== summary (%ds)\n' $(( $(date +%s) - START ))
printf '%s\n' "${results[@]}"

#!/bin/bash
# megaprov job gpt3-175b: node node00, rank 0 of 128 (Megatron-LM core_v0.16.1)
# Run by the unit megaprov-job-gpt3-175b.service; its output is appended to /shared/jobs/gpt3-175b/logs/node00.log.
# Megatron-LM implementation: transformer_engine (chosen for the nodes); nodes: node facts of node00: Transformer Engine 2.9.0, apex fused gradient accumulation, softmax, layer norm
# Stop grace: 4949 s from SIGTERM to torchrun's SIGKILL (checkpoint ~2444.5 GB at 1000 MB/s, default), the unit's TimeoutStopSec 5009 s
set -uo pipefail
exec >>/shared/jobs/gpt3-175b/logs/node00.log 2>&1  # as the job user (a root-squashed share refuses root)
if [ -r /etc/megaprov/nccl.env ]; then set -a; . /etc/megaprov/nccl.env; set +a; fi
export CUDA_DEVICE_MAX_CONNECTIONS=1
export NCCL_DEBUG=WARN
export OMP_NUM_THREADS=4
export PYTHONPATH=/opt/megatron-lm
export PYTHONUNBUFFERED=1
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=4949
export PATH=/opt/megaprov/venv/bin:"$PATH"
cd /shared/jobs/gpt3-175b
if command -v nvidia-smi >/dev/null 2>&1; then  # GPU utilisation and memory for the verdict, every 2 s
    nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits -lms 2000 >>/shared/jobs/gpt3-175b/logs/gpu-node00.csv 2>/dev/null &
    sampler=$!
    trap 'kill $sampler 2>/dev/null' EXIT
fi
echo "megaprov: node node00 (node rank 0): torchrun starting at $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"
# systemctl stop sends SIGTERM here only (KillMode=mixed): pass it to torchrun, which passes it to the ranks
# (--exit-signal-handler: they save a checkpoint), and wait for them; 143 = stopped on purpose.
stopping=0
trap 'stopping=1; kill -TERM $child 2>/dev/null' TERM
/opt/megaprov/venv/bin/python \
    -m torch.distributed.run \
    --nnodes 128 \
    --nproc-per-node 8 \
    --node-rank 0 \
    --master-addr 10.0.0.1 \
    --master-port 29500 \
    --max-restarts 0 \
    /opt/megatron-lm/pretrain_gpt.py \
    --num-layers 96 \
    --hidden-size 12288 \
    --ffn-hidden-size 49152 \
    --num-attention-heads 96 \
    --seq-length 2048 \
    --max-position-embeddings 2048 \
    --position-embedding-type learned_absolute \
    --normalization LayerNorm \
    --attention-backend auto \
    --init-method-std 0.006 \
    --hidden-dropout 0.1 \
    --attention-dropout 0.1 \
    --make-vocab-size-divisible-by 128 \
    --tensor-model-parallel-size 8 \
    --pipeline-model-parallel-size 16 \
    --context-parallel-size 1 \
    --sequence-parallel \
    --use-distributed-optimizer \
    --overlap-grad-reduce \
    --overlap-param-gather \
    --micro-batch-size 1 \
    --global-batch-size 1536 \
    --train-iters 500000 \
    --lr 6e-05 \
    --min-lr 6e-06 \
    --lr-decay-style cosine \
    --lr-decay-iters 500000 \
    --lr-warmup-iters 2000 \
    --weight-decay 0.1 \
    --adam-beta1 0.9 \
    --adam-beta2 0.95 \
    --clip-grad 1.0 \
    --bf16 \
    --recompute-granularity selective \
    --seed 1234 \
    --data-path 1.0 /shared/data/pile/pile_text_document \
    --split 99,1,0 \
    --tokenizer-type GPT2BPETokenizer \
    --vocab-file /shared/tokenizers/gpt2/vocab.json \
    --merge-file /shared/tokenizers/gpt2/merges.txt \
    --legacy-tokenizer \
    --save /shared/checkpoints/gpt3-175b \
    --load /shared/checkpoints/gpt3-175b \
    --save-interval 1000 \
    --ckpt-format torch_dist \
    --exit-signal-handler \
    --log-interval 10 \
    --log-throughput \
    --eval-interval 2000 \
    --eval-iters 10 \
    --tensorboard-dir /shared/jobs/gpt3-175b/tensorboard \
    --distributed-backend nccl \
    --transformer-impl transformer_engine &
child=$!
wait $child
rc=$?
if [ "$stopping" = 1 ]; then wait $child; rc=143; fi
# Nothing of the job outlives torchrun: the unit restarts RestartSec after a failure, not after TimeoutStopSec.
# (On a stop, the unit's ExecStop waits for this script and reaps after it: it is in the group, left alone here.)
reap_job() {
    local unit=$1 environ pid entry line tries procs=""
    local -a left
    [ -n "$unit" ] || return 0
    while IFS= read -r line; do  # the unit's own group (v1: name=systemd, v2: 0::), when this runs in the unit
        case $line in
            *:name=systemd:*/"$unit") procs=/sys/fs/cgroup/systemd${line#*:name=systemd:}/cgroup.procs ;;
            0::*/"$unit") [ -n "$procs" ] || procs=/sys/fs/cgroup${line#0::}/cgroup.procs ;;
        esac
    done </proc/$$/cgroup
    for ((tries = 0; tries < 50; tries++)); do
        left=()
        for environ in /proc/[0-9]*/environ; do
            pid=${environ#/proc/}
            pid=${pid%/environ}
            [ "$pid" = "$$" ] && continue
            while IFS= read -r -d '' entry; do
                if [ "$entry" = "MEGAPROV_JOB_UNIT=$unit" ]; then left+=("$pid"); break; fi
            done 2>/dev/null <"$environ"
        done 2>/dev/null
        if [ -n "$procs" ] && [ -r "$procs" ]; then
            while IFS= read -r pid; do
                [ "$pid" = "$$" ] || [[ " ${left[*]} " == *" $pid "* ]] || left+=("$pid")
            done <"$procs"
        fi
        [ ${#left[@]} -eq 0 ] && return 0
        [ "$tries" = 0 ] && echo "megaprov: $unit: killing ${#left[@]} process(es) of the job left behind: ${left[*]}"
        kill -KILL "${left[@]}" 2>/dev/null
        sleep 0.2
    done
}
if [ "$stopping" != 1 ]; then reap_job "${MEGAPROV_JOB_UNIT:-}"; fi
echo "megaprov: node node00 (node rank 0): torchrun exited with $rc at $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"
exit $rc

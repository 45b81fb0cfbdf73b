#!/bin/bash
# megaprov job lab-tiny: node node00, rank 0 of 2 (Megatron-LM core_v0.16.1)
# Run by the unit megaprov-job-lab-tiny.service; its output is appended to /shared/jobs/lab-tiny/logs/node00.log.
# Stop grace: 61 s from SIGTERM to torchrun's SIGKILL (checkpoint ~0.0 GB at 1000 MB/s, default), the unit's TimeoutStopSec 121 s
set -uo pipefail
exec >>/shared/jobs/lab-tiny/logs/node00.log 2>&1  # as the job user (a root-squashed share refuses root)
if [ -r /etc/megaprov/nccl.env ]; then set -a; . /etc/megaprov/nccl.env; set +a; fi
export CUDA_DEVICE_MAX_CONNECTIONS=1
export OMP_NUM_THREADS=4
export PYTHONPATH=/opt/megatron-lm
export PYTHONUNBUFFERED=1
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=61
export PATH=/opt/megaprov/venv/bin:"$PATH"
cd /shared/jobs/lab-tiny
if command -v nvidia-smi >/dev/null 2>&1; then  # GPU utilisation and memory for the verdict, every 2 s
    nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits -lms 2000 >>/shared/jobs/lab-tiny/logs/gpu-node00.csv 2>/dev/null &
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
    --nnodes 2 \
    --nproc-per-node 1 \
    --node-rank 0 \
    --master-addr 10.0.0.1 \
    --master-port 29500 \
    --max-restarts 0 \
    /shared/jobs/lab-tiny/bin/megaprov_trainer.py \
    --num-layers 2 \
    --hidden-size 64 \
    --ffn-hidden-size 256 \
    --num-attention-heads 4 \
    --seq-length 128 \
    --max-position-embeddings 128 \
    --position-embedding-type learned_absolute \
    --normalization LayerNorm \
    --attention-backend local \
    --init-method-std 0.02 \
    --hidden-dropout 0.0 \
    --attention-dropout 0.0 \
    --make-vocab-size-divisible-by 128 \
    --tensor-model-parallel-size 1 \
    --pipeline-model-parallel-size 1 \
    --context-parallel-size 1 \
    --micro-batch-size 4 \
    --global-batch-size 8 \
    --train-iters 60 \
    --lr 0.003 \
    --min-lr 0.0003 \
    --lr-decay-style cosine \
    --lr-decay-iters 60 \
    --lr-warmup-iters 5 \
    --weight-decay 0.01 \
    --adam-beta1 0.9 \
    --adam-beta2 0.95 \
    --clip-grad 1.0 \
    --seed 1234 \
    --data-path 1.0 /shared/data/lab_text_document \
    --split 98,2,0 \
    --tokenizer-type NullTokenizer \
    --vocab-size 256 \
    --save /shared/checkpoints/lab-tiny \
    --load /shared/checkpoints/lab-tiny \
    --save-interval 20 \
    --ckpt-format torch \
    --exit-signal-handler \
    --log-interval 1 \
    --log-throughput \
    --eval-interval 1000 \
    --eval-iters 0 \
    --tensorboard-dir /shared/jobs/lab-tiny/tensorboard \
    --distributed-backend gloo &
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

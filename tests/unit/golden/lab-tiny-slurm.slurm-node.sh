#!/bin/bash
# megaprov job lab-tiny-slurm: run by srun on every node of its Slurm allocation (Megatron-LM core_v0.16.1).
set -uo pipefail
host=${SLURMD_NODENAME:-$(hostname -s)}
case $host in ""|.*|*[!A-Za-z0-9._-]*) echo "megaprov: unusable node name $host" >&2; exit 2 ;; esac
rank=${SLURM_NODEID:?}
speaker=1
exec >>/shared/jobs/lab-tiny-slurm/logs/"$host".log 2>&1
if [ -r /etc/megaprov/nccl.env ]; then set -a; . /etc/megaprov/nccl.env; set +a; fi
export CUDA_DEVICE_MAX_CONNECTIONS=1
export OMP_NUM_THREADS=4
export PYTHONPATH=/opt/megatron-lm
export PYTHONUNBUFFERED=1
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=61
export PATH=/opt/megaprov/venv/bin:"$PATH"
cd /shared/jobs/lab-tiny-slurm
if [ "$speaker" = 1 ] && command -v nvidia-smi >/dev/null 2>&1; then  # GPU utilisation and memory, every 2 s
    nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits -lms 2000 >>/shared/jobs/lab-tiny-slurm/logs/gpu-"$host".csv 2>/dev/null &
    sampler=$!
    trap 'kill $sampler 2>/dev/null' EXIT
fi
if [ "$speaker" = 1 ]; then echo "megaprov: node $host (node rank $rank): torchrun starting at $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"; fi
# Slurm's SIGTERM (job stop, the time limit) reaches this script: pass it on, the ranks save and exit (143).
stopping=0
trap 'stopping=1; kill -TERM $child 2>/dev/null' TERM
/opt/megaprov/venv/bin/python -m torch.distributed.run --nnodes 2 --nproc-per-node 1 --node-rank "$rank" --master-addr "$MASTER_ADDR" --master-port 29500 --max-restarts 0 /shared/jobs/lab-tiny-slurm/bin/megaprov_trainer.py --num-layers 2 --hidden-size 64 --ffn-hidden-size 256 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 --position-embedding-type learned_absolute --normalization LayerNorm --attention-backend local --init-method-std 0.02 --hidden-dropout 0.0 --attention-dropout 0.0 --make-vocab-size-divisible-by 128 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --context-parallel-size 1 --micro-batch-size 4 --global-batch-size 8 --train-iters 60 --lr 0.003 --min-lr 0.0003 --lr-decay-style cosine --lr-decay-iters 60 --lr-warmup-iters 5 --weight-decay 0.01 --adam-beta1 0.9 --adam-beta2 0.95 --clip-grad 1.0 --seed 1234 --data-path 1.0 /shared/data/lab_text_document --split 98,2,0 --tokenizer-type NullTokenizer --vocab-size 256 --save /shared/checkpoints/lab-tiny-slurm --load /shared/checkpoints/lab-tiny-slurm --save-interval 20 --ckpt-format torch --exit-signal-handler --log-interval 1 --log-throughput --eval-interval 1000 --eval-iters 0 --tensorboard-dir /shared/jobs/lab-tiny-slurm/tensorboard --distributed-backend gloo &
child=$!
wait $child
rc=$?
if [ "$stopping" = 1 ]; then wait $child; rc=143; fi
if [ "$speaker" = 1 ]; then echo "megaprov: node $host (node rank $rank): torchrun exited with $rc at $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"; fi
exit $rc

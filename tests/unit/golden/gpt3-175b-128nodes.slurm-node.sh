#!/bin/bash
# megaprov job gpt3-175b: run by srun on every node of its Slurm allocation (Megatron-LM core_v0.16.1).
set -uo pipefail
host=${SLURMD_NODENAME:-$(hostname -s)}
case $host in ""|.*|*[!A-Za-z0-9._-]*) echo "megaprov: unusable node name $host" >&2; exit 2 ;; esac
rank=${SLURM_NODEID:?}
speaker=1
exec >>/shared/jobs/gpt3-175b/logs/"$host".log 2>&1
if [ -r /etc/megaprov/nccl.env ]; then set -a; . /etc/megaprov/nccl.env; set +a; fi
export CUDA_DEVICE_MAX_CONNECTIONS=1
export NCCL_DEBUG=WARN
export OMP_NUM_THREADS=4
export PYTHONPATH=/opt/megatron-lm
export PYTHONUNBUFFERED=1
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=4949
export PATH=/opt/megaprov/venv/bin:"$PATH"
cd /shared/jobs/gpt3-175b
if [ "$speaker" = 1 ] && command -v nvidia-smi >/dev/null 2>&1; then  # GPU utilisation and memory, every 2 s
    nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits -lms 2000 >>/shared/jobs/gpt3-175b/logs/gpu-"$host".csv 2>/dev/null &
    sampler=$!
    trap 'kill $sampler 2>/dev/null' EXIT
fi
if [ "$speaker" = 1 ]; then echo "megaprov: node $host (node rank $rank): torchrun starting at $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"; fi
# Slurm's SIGTERM (job stop, the time limit) reaches this script: pass it on, the ranks save and exit (143).
stopping=0
trap 'stopping=1; kill -TERM $child 2>/dev/null' TERM
/opt/megaprov/venv/bin/python -m torch.distributed.run --nnodes 128 --nproc-per-node 8 --node-rank "$rank" --master-addr "$MASTER_ADDR" --master-port 29500 --max-restarts 0 /opt/megatron-lm/pretrain_gpt.py --num-layers 96 --hidden-size 12288 --ffn-hidden-size 49152 --num-attention-heads 96 --seq-length 2048 --max-position-embeddings 2048 --position-embedding-type learned_absolute --normalization LayerNorm --attention-backend auto --init-method-std 0.006 --hidden-dropout 0.1 --attention-dropout 0.1 --make-vocab-size-divisible-by 128 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 --context-parallel-size 1 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --micro-batch-size 1 --global-batch-size 1536 --train-iters 500000 --lr 6e-05 --min-lr 6e-06 --lr-decay-style cosine --lr-decay-iters 500000 --lr-warmup-iters 2000 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --clip-grad 1.0 --bf16 --recompute-granularity selective --seed 1234 --data-path 1.0 /shared/data/pile/pile_text_document --split 99,1,0 --tokenizer-type GPT2BPETokenizer --vocab-file /shared/tokenizers/gpt2/vocab.json --merge-file /shared/tokenizers/gpt2/merges.txt --legacy-tokenizer --save /shared/checkpoints/gpt3-175b --load /shared/checkpoints/gpt3-175b --save-interval 1000 --ckpt-format torch_dist --exit-signal-handler --log-interval 10 --log-throughput --eval-interval 2000 --eval-iters 10 --tensorboard-dir /shared/jobs/gpt3-175b/tensorboard --distributed-backend nccl --transformer-impl transformer_engine &
child=$!
wait $child
rc=$?
if [ "$stopping" = 1 ]; then wait $child; rc=143; fi
if [ "$speaker" = 1 ]; then echo "megaprov: node $host (node rank $rank): torchrun exited with $rc at $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"; fi
exit $rc

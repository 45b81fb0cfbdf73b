#!/usr/bin/env bash
# Produce the failure logs of tests/doctor_corpus/lab/ for real: torchrun and megaprov's lab trainer
# (megaprov/training/trainer.py, the trainer `megaprov train` runs on the lab's nodes, on megatron-core and gloo),
# started with the arguments megaprov renders for the lab job (examples/jobs/lab-tiny.yml), one thing broken per run.
# Each log is torchrun's and the ranks' output together, as a job's node log holds it. From the repository root,
# after scripts/setup.sh:  tests/doctor_corpus/lab/produce.sh [CASE...]   (all cases: about 3 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=tests/doctor_corpus/lab
WORK=$(mktemp -d)
trap 'pkill -9 -f "$WORK" 2>/dev/null || true; rm -rf "$WORK"' EXIT
PY=$PWD/.venv/bin/python
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
$PY -m megaprov data corpus --output-file "$WORK/corpus.jsonl" --documents 400 >/dev/null
$PY -m megaprov data prepare --input "$WORK/corpus.jsonl" --output-prefix "$WORK/lab" --tokenizer byte >/dev/null
cp megaprov/training/trainer.py "$WORK/megaprov_trainer.py"
model() {  # the lab job's model and schedule (megaprov train --dry-run of lab-tiny.yml), with $1 iterations
  echo --num-layers 2 --hidden-size 64 --ffn-hidden-size 256 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 \
    --position-embedding-type learned_absolute --normalization LayerNorm --attention-backend local --init-method-std 0.02 \
    --hidden-dropout 0.0 --attention-dropout 0.0 --make-vocab-size-divisible-by 128 --tensor-model-parallel-size 1 \
    --pipeline-model-parallel-size 1 --context-parallel-size 1 --micro-batch-size 4 --global-batch-size 8 --train-iters "$1" \
    --min-lr 0.0003 --lr-decay-style cosine --lr-decay-iters "$1" --lr-warmup-iters 5 --weight-decay 0.01 \
    --adam-beta1 0.9 --adam-beta2 0.95 --seed 1234 --split 98,2,0 --tokenizer-type NullTokenizer \
    --ckpt-format torch --exit-signal-handler --log-interval 1 --log-throughput --eval-interval 1000 --eval-iters 0 \
    --distributed-backend gloo
}
torchrun() {  # torchrun [torchrun flags...] -- [trainer flags...]
  local flags=() ; while [ "$1" != "--" ]; do flags+=("$1"); shift; done; shift
  "$PY" -m torch.distributed.run "${flags[@]}" --max-restarts 0 "$WORK/megaprov_trainer.py" "$@"
}
wait_for() {  # wait_for FILE PATTERN SECONDS
  for _ in $(seq "$(($3 * 10))"); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; echo "produce: $2 never appeared in $1" >&2; return 1
}
wanted() { [ ${#CASES[@]} -eq 0 ] || [[ " ${CASES[*]} " == *" $1 "* ]] || return 1; rm -f "$OUT/$1.log"; }
CASES=("$@")
one_node=(--nnodes 1 --nproc-per-node 2 --master-addr 127.0.0.1)

if wanted healthy; then
echo "healthy"
torchrun "${one_node[@]}" --master-port 29611 -- $(model 30) --lr 0.003 --clip-grad 1.0 --data-path 1.0 "$WORK/lab_text_document" \
  --save "$WORK/ck-healthy" --load "$WORK/ck-healthy" >"$OUT/healthy.log" 2>&1
fi

if wanted killed_rank; then
echo "killed_rank: SIGKILL to one rank mid-training"
torchrun "${one_node[@]}" --master-port 29612 -- $(model 100000) --lr 0.003 --clip-grad 1.0 --data-path 1.0 "$WORK/lab_text_document" \
  --save "$WORK/ck-killed" --load "$WORK/ck-killed" >"$OUT/killed_rank.log" 2>&1 &
agent=$!
wait_for "$OUT/killed_rank.log" "iteration        5/" 180
# the agent (torchrun's python) is the background shell's child; the ranks are the agent's children
agent_py=$(pgrep -P "$agent" -f torch.distributed.run)
kill -9 "$(pgrep -P "$agent_py" | sort -n | tail -n 1)"
wait "$agent" || true
fi

if wanted port_in_use; then
echo "port_in_use: the master port taken by another listener"
$PY -c 'import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 29613)); s.listen(); time.sleep(120)' &
holder=$!
sleep 1
torchrun "${one_node[@]}" --master-port 29613 -- $(model 30) --lr 0.003 --data-path 1.0 "$WORK/lab_text_document" >"$OUT/port_in_use.log" 2>&1 || true
kill "$holder" || true
fi

if wanted missing_prefix; then
echo "missing_prefix: a data prefix that was never prepared"
torchrun "${one_node[@]}" --master-port 29614 -- $(model 30) --lr 0.003 --data-path 1.0 "$WORK/never_prepared_text_document" \
  >"$OUT/missing_prefix.log" 2>&1 || true
fi

if wanted wrong_vocab; then
echo "wrong_vocab: byte-level token ids (up to 255) into a 64-token vocabulary (padded to 128)"
torchrun "${one_node[@]}" --master-port 29615 -- $(model 30 | sed 's/--make-vocab-size-divisible-by 128/--make-vocab-size-divisible-by 64/') \
  --lr 0.003 --vocab-size 64 --data-path 1.0 "$WORK/lab_text_document" >"$OUT/wrong_vocab.log" 2>&1 || true
fi

if wanted nan_loss; then
echo "nan_loss: learning rate 1e9, no clipping"
torchrun "${one_node[@]}" --master-port 29616 -- $(model 30) --lr 1e9 --clip-grad 0.0 --data-path 1.0 "$WORK/lab_text_document" \
  >"$OUT/nan_loss.log" 2>&1 || true
fi

if wanted rdzv_timeout; then
echo "rdzv_timeout: two nodes expected, one started, a 20-second rendezvous"
torchrun --nnodes 2 --nproc-per-node 1 --node-rank 0 --master-addr 127.0.0.1 --master-port 29617 --rdzv-conf timeout=20 -- \
  $(model 30) --lr 0.003 --data-path 1.0 "$WORK/lab_text_document" >"$OUT/rdzv_timeout.log" 2>&1 || true
fi

if wanted peer_lost; then
echo "peer_lost: node 1 (its torchrun and ranks) killed mid-training; node 0's log"
torchrun --nnodes 2 --nproc-per-node 1 --node-rank 0 --master-addr 127.0.0.1 --master-port 29618 -- $(model 100000) --lr 0.003 \
  --clip-grad 1.0 --data-path 1.0 "$WORK/lab_text_document" >"$OUT/peer_lost.log" 2>&1 &
node0=$!
setsid "$PY" -m torch.distributed.run --nnodes 2 --nproc-per-node 1 --node-rank 1 --master-addr 127.0.0.1 --master-port 29618 \
  --max-restarts 0 "$WORK/megaprov_trainer.py" $(model 100000) --lr 0.003 --clip-grad 1.0 --data-path 1.0 "$WORK/lab_text_document" \
  >"$WORK/peer_lost-node1.log" 2>&1 &
node1=$!
wait_for "$WORK/peer_lost-node1.log" "iteration        5/" 180  # the last rank (on node 1) prints the iterations
# the node dies: its agent and its ranks (torchrun starts each rank in a session of its own) at once
kill -9 $(pgrep -P "$node1") "$node1"
timeout 120 tail --pid="$node0" -f /dev/null || { echo "produce: node 0 did not end within 120 s of losing node 1" >&2; kill "$node0"; }
wait "$node0" || true
fi
# the temporary directory's name is not part of what a user sees: make the logs stable across runs
sed -i "s#$WORK#/shared/jobs/corpus#g" "$OUT"/*.log
echo "produce: done"

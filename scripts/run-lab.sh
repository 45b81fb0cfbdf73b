#!/usr/bin/env bash
# The main job on the local container lab: set up, start the lab nodes, bootstrap them, prepare a small corpus
# into the shared directory and train a tiny GPT across 2 nodes (data parallel) until the verdict.
# MEGAPROV_LAB_NAME names the lab (default: default), NODES its size (default 3). The test suite runs this script
# from a fresh clone (tests/integration/test_readme_run.py).
set -euo pipefail
cd "$(dirname "$0")/.."
MEGAPROV_EXTRAS=lab ./scripts/setup.sh
NODES=${NODES:-3}
LAB=${MEGAPROV_LAB_NAME:-default}
.venv/bin/megaprov lab up --nodes "$NODES" --name "$LAB"
# The lab's inventory lives in megaprov's state directory ($XDG_STATE_HOME/megaprov/lab/NAME, or $MEGAPROV_STATE).
INVENTORY=$(.venv/bin/megaprov lab inventory --name "$LAB")
.venv/bin/megaprov bootstrap -i "$INVENTORY"
CORPUS="$(dirname "$INVENTORY")/corpus.jsonl"
.venv/bin/megaprov data corpus --output-file "$CORPUS" --documents 2000
.venv/bin/megaprov data prepare --input "$CORPUS" --output-prefix data/lab --tokenizer byte -i "$INVENTORY"
# A new name per run: a finished job keeps its directory, and `megaprov train --resume NAME` would continue it.
.venv/bin/megaprov train -f examples/jobs/lab-tiny.yml -i "$INVENTORY" --name "lab-tiny-$(date +%Y%m%d-%H%M%S)"
echo "run-lab: trained on the lab; list jobs with .venv/bin/megaprov jobs, remove the lab with .venv/bin/megaprov lab down --name $LAB"

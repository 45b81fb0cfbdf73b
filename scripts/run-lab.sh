#!/usr/bin/env bash
# The main job on the local container lab: set up, start 3 lab nodes, bootstrap them.
# Later stages (storage, GPU stack, training) join this command as they land.
set -euo pipefail
cd "$(dirname "$0")/.."
MEGAPROV_EXTRAS=${MEGAPROV_EXTRAS:-mitogen} ./scripts/setup.sh
NODES=${NODES:-3}
.venv/bin/megaprov lab up --nodes "$NODES"
.venv/bin/megaprov bootstrap inventories/lab/default/inventory.ini
echo "run-lab: the lab is up and bootstrapped; remove it with: .venv/bin/megaprov lab down"

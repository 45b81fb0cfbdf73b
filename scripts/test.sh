#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: set up, then one pytest session with
# unit and CLI tests, ruff/mypy/ansible-lint, every Molecule scenario and the lab integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export CONTAINERS_CONF="$PWD/megaprov/lab_files/containers.conf"
export PATH="$PWD/.venv/bin:$PATH"
# pytest exits 5 when it collected no test: set -e makes that a failure, never a silent pass.
exec .venv/bin/pytest tests "$@"

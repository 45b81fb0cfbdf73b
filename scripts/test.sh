#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: set up, then one pytest session with
# unit and CLI tests, ruff/mypy/ansible-lint, every Molecule scenario and the lab integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."
MEGAPROV_EXTRAS=test ./scripts/setup.sh
export CONTAINERS_CONF="$PWD/megaprov/cluster/lab_files/containers.conf"
export PATH="$PWD/.venv/bin:$PATH"
# megaprov supports Python 3.11 and 3.12 controllers: where a 3.12 interpreter exists, the unit and CLI
# tests run on it too (the main run below uses the setup's interpreter).
PY312=""
for candidate in python3.12 /usr/bin/python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12; do
  if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; then PY312=$candidate; break; fi
done
if [ -z "${MEGAPROV_SKIP_PY312:-}" ] && [ -n "$PY312" ] && [ "$(.venv/bin/python -c 'import sys; print(sys.version_info[:2] >= (3, 12))')" = False ]; then
  stamp312=".venv312/.megaprov-$(sha256sum pyproject.toml | cut -c1-12)"
  if [ ! -f "$stamp312" ]; then
    [ -x .venv312/bin/python ] || "$PY312" -m venv .venv312
    # No torch here (its CPU wheel on this disk is for 3.11): the data tests skip, saying so.
    .venv312/bin/pip install -q -e ".[mitogen]" pytest hypothesis
    touch "$stamp312"
  fi
  echo "test: unit and CLI tests on $(.venv312/bin/python --version)"
  .venv312/bin/pytest -q -p no:cacheprovider tests/unit tests/cli
else
  echo "test: no Python 3.12 here; the unit and CLI tests run on $(.venv/bin/python --version) only"
fi
# pytest exits 5 when it collected no test: set -e makes that a failure, never a silent pass.
exec .venv/bin/pytest --durations=40 tests "$@"

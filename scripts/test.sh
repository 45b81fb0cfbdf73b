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
  # They run beside the main session (a few minutes of CPU that would otherwise lead it); their output is shown at the end.
  echo "test: unit and CLI tests on $(.venv312/bin/python --version), beside the main run (log: .megaprov/test-py312.log)"
  mkdir -p .megaprov
  .venv312/bin/pytest -q -p no:cacheprovider tests/unit tests/cli >.megaprov/test-py312.log 2>&1 &
  PY312_PID=$!
else
  echo "test: no Python 3.12 here; the unit and CLI tests run on $(.venv/bin/python --version) only"
fi
# The main session in parallel parts (tests/conftest.py): the lab integration tests on one worker, the Molecule
# scenarios on two more, the quick tests wherever a worker is free. MEGAPROV_TEST_WORKERS=1 runs them in one process.
WORKERS=${MEGAPROV_TEST_WORKERS:-3}
XDIST=()
[ "$WORKERS" -gt 1 ] && XDIST=(-n "$WORKERS" --dist loadgroup)
# pytest exits 5 when it collected no test: that is a failure, never a silent pass.
rc=0
.venv/bin/pytest "${XDIST[@]}" --durations=40 tests "$@" || rc=$?
if [ -n "${PY312_PID:-}" ]; then
  rc312=0
  wait "$PY312_PID" || rc312=$?
  echo "test: unit and CLI tests on Python 3.12: $(tail -n 1 .megaprov/test-py312.log)"
  if [ "$rc312" -ne 0 ]; then
    tail -n 60 .megaprov/test-py312.log
    echo "test: the Python 3.12 unit and CLI tests failed (exit $rc312)" >&2
    [ "$rc" -ne 0 ] || rc=$rc312
  fi
fi
exit "$rc"

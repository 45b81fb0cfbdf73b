#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: set up, then unit and CLI tests, ruff/mypy/ansible-lint, every
# Molecule scenario and the lab integration tests, in parallel parts (below).
set -euo pipefail
cd "$(dirname "$0")/.."
MEGAPROV_EXTRAS=test ./scripts/setup.sh
export CONTAINERS_CONF="$PWD/megaprov/cluster/lab_files/containers.conf"
export PATH="$PWD/.venv/bin:$PATH"
# The upstream snapshots beside the checkout (../shared/upstream/, or MEGAPROV_UPSTREAM): Megatron-LM's real tree at
# the pinned tag for the fixtures, the lab (MEGAPROV_MEGATRON_LM) and the tests that run its training code. A user's
# own clone has none: those tests skip, saying so; MEGAPROV_REQUIRE_UPSTREAM=1 (.ci/run) makes the absence a failure.
UPSTREAM=${MEGAPROV_UPSTREAM:-$(cd .. && pwd)/shared/upstream}
MEGATRON_ARCHIVE="$UPSTREAM/megatron-lm-core_v0.16.1.tar.gz"
if [ -f "$MEGATRON_ARCHIVE" ]; then
  export MEGAPROV_UPSTREAM="$UPSTREAM" MEGAPROV_MEGATRON_LM=${MEGAPROV_MEGATRON_LM:-$MEGATRON_ARCHIVE}
elif [ -n "${MEGAPROV_REQUIRE_UPSTREAM:-}" ]; then
  echo "test: no Megatron-LM snapshot at $MEGATRON_ARCHIVE, and MEGAPROV_REQUIRE_UPSTREAM is set" >&2
  exit 1
else
  echo "test: no Megatron-LM snapshot at $MEGATRON_ARCHIVE: the tests that run Megatron-LM's own code skip, and the lab clones it from GitHub"
fi
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
    # grafana-foundation-sdk: tests/tools/test_dashboards.py checks the dashboards against Grafana's schema (the pin of the test extras);
    # jsonschema: test_grammar validates the JSON envelope against its schema
    .venv312/bin/pip install -q -e ".[mitogen]" pytest hypothesis "jsonschema>=4.18" "$(grep -o '"grafana-foundation-sdk==[^"]*"' pyproject.toml | tr -d '"')"
    touch "$stamp312"
  fi
  # promtool and amtool, which setup.sh takes out of Debian's packages, for test_alert_rules
  for tool in promtool amtool; do if [ -x ".venv/bin/$tool" ]; then cp -f ".venv/bin/$tool" .venv312/bin/; fi; done
  # They run beside the main session (a few minutes of CPU that would otherwise lead it); their output is shown at the end.
  echo "test: unit and CLI tests on $(.venv312/bin/python --version), beside the main run (log: .megaprov/test-py312.log)"
  mkdir -p .megaprov
  .venv312/bin/pytest -q -p no:cacheprovider tests/unit tests/cli tests/tools ansible_collections/megaprov/cluster/tests/unit >.megaprov/test-py312.log 2>&1 &
  PY312_PID=$!
else
  echo "test: no Python 3.12 here; the unit and CLI tests run on $(.venv/bin/python --version) only"
fi
# The suite in parallel parts (tests/conftest.py, --part): the lab integration tests on the README run's lab, those
# with labs of their own, the Molecule scenarios in two halves and the quick tests, each its own pytest process, side
# by side; the machine waits on the network and on containers more than on its CPUs. Each part's output goes to .megaprov/test-PART.log and is shown when it ends.
# With arguments (./scripts/test.sh -k NAME ...), or MEGAPROV_TEST_PARTS=0, one pytest process runs everything;
# MEGAPROV_TEST_PARTS="lab quick" runs only those parts.
rc=0
if [ $# -gt 0 ] || [ "${MEGAPROV_TEST_PARTS:-}" = 0 ]; then
  # pytest exits 5 when it collected no test: that is a failure, never a silent pass.
  .venv/bin/pytest --durations=40 tests ansible_collections/megaprov/cluster/tests/unit "$@" || rc=$?
else
  mkdir -p .megaprov
  read -r -a parts <<<"${MEGAPROV_TEST_PARTS:-lab lab-2 molecule-1 molecule-2 quick}"
  declare -A pids started
  # The machine's busy CPU seconds over the run, against what each part's own processes used (scripts/partcpu.py): the
  # rest is the lab's and Molecule's containers. The parts share 2 cores, so the suite's wall time is bounded by the
  # whole CPU work over the cores, whatever the split.
  busy0=$(.venv/bin/python scripts/partcpu.py --machine)
  suite0=$(date +%s)
  for part in "${parts[@]}"; do
    started[$part]=$(date +%s)
    .venv/bin/python scripts/partcpu.py ".megaprov/test-$part.cpu" \
      .venv/bin/pytest -p no:cacheprovider --durations=20 --part "$part" tests ansible_collections/megaprov/cluster/tests/unit >".megaprov/test-$part.log" 2>&1 &
    pids[$part]=$!
  done
  summary=()
  for part in "${parts[@]}"; do
    prc=0
    wait "${pids[$part]}" || prc=$?
    # the part's own wall time (partcpu.py wrote it when the part ended; the parts are waited for in order)
    seconds=$(cut -d' ' -f1 ".megaprov/test-$part.cpu" 2>/dev/null || echo $(($(date +%s) - ${started[$part]})))
    echo "=================== part $part (exit $prc, ${seconds}s): .megaprov/test-$part.log ==================="
    cat ".megaprov/test-$part.log"
    cpu=$(cut -d' ' -f2 ".megaprov/test-$part.cpu" 2>/dev/null || echo "?")
    summary+=("$(printf '%-12s %5ss  cpu %5ss  exit %s  %s' "$part" "$seconds" "$cpu" "$prc" "$(tail -n 1 ".megaprov/test-$part.log")")")
    # exit 5 (no test collected in a part) is a failure like any other
    [ "$prc" -eq 0 ] || [ "$rc" -ne 0 ] || rc=$prc
  done
  # each part's slowest tests again, here at the end, where a cut log's tail still shows them
  echo "=================== slowest tests per part ==================="
  for part in "${parts[@]}"; do
    sed -n '/slowest [0-9]* durations/,/^$/p' ".megaprov/test-$part.log" | grep -E '^[0-9.]+s ' | head -n 8 | sed "s/^/$part  /" || true
  done
  echo "=================== time per part (wall side by side; cpu: the part's own processes) ==================="
  printf '%s\n' "${summary[@]}"
  busy=$(($(.venv/bin/python scripts/partcpu.py --machine) - busy0))
  echo "machine: ${busy} CPU seconds busy in $(($(date +%s) - suite0)) s of wall on $(nproc) cores (parts' own processes above, the rest the containers')"
fi
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

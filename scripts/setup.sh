#!/usr/bin/env bash
# Install what megaprov and its lab need on a fresh Debian 12 / Ubuntu machine (as root or with sudo):
# podman with runc and netavark, debootstrap, a Python venv with megaprov, the Ansible collections
# the tests use (from PyPI), and the lab's node image. Safe to run again: each step is skipped when done.
# python3-fusepy and fuse: the tests mount the lab's root-squashing share (megaprov/cluster/lab_files/rootsquash_fs.py) here too.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
PACKAGES=(podman runc netavark aardvark-dns slirp4netns uidmap iptables debootstrap openssh-client python3-venv python3-pip git ca-certificates gnupg dpkg-dev python3-fusepy fuse build-essential libbsd-dev makeself)
missing=()
for p in "${PACKAGES[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: apt-get install ${missing[*]}"
  mkdir -p .megaprov
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >.megaprov/setup-apt.log 2>&1; then
    echo "setup: apt-get failed; the end of .megaprov/setup-apt.log:" >&2
    tail -n 30 .megaprov/setup-apt.log >&2
    exit 1
  fi
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: create .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
# What "set up" installs is defined once, as extras in pyproject.toml: `lab` is what the README's main command
# needs (scripts/run-lab.sh), `test` is lab plus the test tools (scripts/test.sh). Nothing else chooses packages.
EXTRAS=${MEGAPROV_EXTRAS:-lab}
case "$EXTRAS" in
  lab | test) ;;
  *) echo "setup: MEGAPROV_EXTRAS=$EXTRAS: use lab (run the lab) or test (run the tests)" >&2; exit 2 ;;
esac
# torch first, pinned: megatron-core accepts any torch>=2.6 and pip would otherwise pick a multi-GB CUDA build.
# The lab and CI nodes are CPU-only; point MEGAPROV_TORCH_INDEX at a CPU wheel index (for instance
# https://download.pytorch.org/whl/cpu) where no local CPU wheel is configured for pip.
TORCH=${MEGAPROV_TORCH:-torch==2.13.0}
# uv installs torch and the extras, several times faster than pip; pip installs uv itself (pinned: the pytorch role's
# pytorch_uv_version) and installs everything where uv cannot be installed. MEGAPROV_INSTALLER=pip: pip throughout.
UV_VERSION=0.13.9
INSTALLER=${MEGAPROV_INSTALLER:-uv}
case "$INSTALLER" in
  uv | pip) ;;
  *) echo "setup: MEGAPROV_INSTALLER=$INSTALLER: use uv (default) or pip" >&2; exit 2 ;;
esac
mkdir -p .megaprov
PIP_LOG=.megaprov/setup-pip.log
# pip is quiet unless it fails: its output goes to a log that is shown only then (uv's too).
pip_quiet() {
  if ! .venv/bin/pip install --disable-pip-version-check --no-input "$@" >"$PIP_LOG" 2>&1; then
    echo "setup: pip install $* failed; the end of $PIP_LOG:" >&2
    grep -v "is ignored: it is neither a file nor a directory" "$PIP_LOG" | tail -n 40 >&2
    exit 1
  fi
}
# uv reads no pip configuration: pip's sources as pip itself reports them (`pip config list`: its configuration files
# and PIP_* variables, the variables first, then [install], then [global]) become uv's arguments, so uv finds what pip
# finds, above all the CPU torch wheel a machine's pip is pointed at with find-links. $1: an index URL that replaces
# pip's (MEGAPROV_TORCH_INDEX for torch, as pip's --index-url does), or "". One argument a line; the first line is the
# CA bundle (pip's cert, uv's SSL_CERT_FILE), possibly empty.
uv_sources() {
  .venv/bin/pip config list 2>/dev/null | .venv/bin/python -c '
import ast, sys
found = {}
for line in sys.stdin:
    name, sep, value = line.rstrip("\n").partition("=")
    section, _, key = name.rpartition(".")
    if sep and section in (":env:", "install", "global"):
        rank = {":env:": 0, "install": 1, "global": 2}[section]
        if key not in found or rank < found[key][0]:
            found[key] = (rank, ast.literal_eval(value))
get = lambda key: found.get(key, (0, ""))[1]
args, index = [], sys.argv[1] or get("index-url")
no_index = get("no-index").lower() in ("1", "true", "yes", "on")
if no_index:
    args.append("--no-index")
elif index:
    args += ["--index-url", index]
for key, flag in (("extra-index-url", "--extra-index-url"), ("find-links", "--find-links"), ("constraint", "--constraint")):
    for value in get(key).split() if not (no_index and key == "extra-index-url") else []:
        args += [flag, value]
print(get("cert"))
print("\n".join(args + ["--index-strategy", "unsafe-best-match"]))
' "$1"
}
# uv is quiet unless it fails, as pip is; it installs into .venv and chooses among indexes as pip does.
uv_quiet() {
  local index=$1 sources cert
  shift
  mapfile -t sources < <(uv_sources "$index")
  cert=${sources[0]:-}
  if ! env ${cert:+SSL_CERT_FILE="$cert"} .venv/bin/uv pip install --python .venv/bin/python --no-config --no-progress \
    "${sources[@]:1}" "$@" >"$PIP_LOG" 2>&1; then
    echo "setup: uv pip install $* failed; the end of $PIP_LOG:" >&2
    tail -n 40 "$PIP_LOG" >&2
    exit 1
  fi
}
stamp=".venv/.megaprov-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-12)-$EXTRAS-$INSTALLER"
if [ ! -f "$stamp" ]; then
  if [ "$INSTALLER" = uv ]; then
    case "$(.venv/bin/uv --version 2>/dev/null)" in
      "uv $UV_VERSION" | "uv $UV_VERSION "*) ;;
      *)
        echo "setup: pip install uv==$UV_VERSION"
        if ! .venv/bin/pip install --disable-pip-version-check --no-input "uv==$UV_VERSION" >"$PIP_LOG" 2>&1; then
          echo "setup: uv could not be installed, pip installs instead; the end of $PIP_LOG:" >&2
          grep -v "is ignored: it is neither a file nor a directory" "$PIP_LOG" | tail -n 5 >&2
          INSTALLER=pip
        fi
        ;;
    esac
  fi
  if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
    echo "setup: $INSTALLER install $TORCH (CPU build)"
    if [ "$INSTALLER" = uv ]; then
      uv_quiet "${MEGAPROV_TORCH_INDEX:-}" "$TORCH"
    else
      pip_quiet ${MEGAPROV_TORCH_INDEX:+--index-url "$MEGAPROV_TORCH_INDEX"} "$TORCH"
    fi
  fi
  echo "setup: $INSTALLER install -e .[$EXTRAS]"
  if [ "$INSTALLER" = uv ]; then
    uv_quiet "" -e ".[$EXTRAS]"
  else
    pip_quiet -e ".[$EXTRAS]"
  fi
  # The extras are the contract: fail here, not halfway through the main command, when one did not install.
  .venv/bin/python -W ignore -c 'import torch, megatron.core, tokenizers, ansible_runner, megaprov' || { echo "setup: the $EXTRAS environment is incomplete" >&2; exit 1; }
  rm -f .venv/.megaprov-*
  touch "$stamp"
fi
.venv/bin/python scripts/install-collections.py
# The tests check the observe stage's alert rules and Alertmanager configuration with the tools Prometheus ships
# (promtool test rules, amtool check-config): taken out of Debian's packages into .venv/bin, without installing the
# daemons here (the prometheus package would start one).
if [ "$EXTRAS" = test ] && ! { [ -x .venv/bin/promtool ] && [ -x .venv/bin/amtool ]; }; then
  echo "setup: promtool and amtool from Debian's prometheus and prometheus-alertmanager packages"
  tools=$(mktemp -d)
  if ! (cd "$tools" && apt-get download prometheus prometheus-alertmanager) >.megaprov/setup-apt.log 2>&1; then
    echo "setup: apt-get download prometheus prometheus-alertmanager failed; the end of .megaprov/setup-apt.log:" >&2
    tail -n 20 .megaprov/setup-apt.log >&2
    exit 1
  fi
  for deb in "$tools"/*.deb; do dpkg-deb -x "$deb" "$tools/root"; done
  install -m 0755 "$tools/root/usr/bin/promtool" "$tools/root/usr/bin/amtool" .venv/bin/
  rm -rf "$tools"
fi
.venv/bin/megaprov lab image

#!/usr/bin/env bash
# Install what megaprov and its lab need on a fresh Debian 12 / Ubuntu machine (as root or with sudo):
# podman with runc and netavark, debootstrap, a Python venv with megaprov, the Ansible collections
# the tests use (from PyPI), and the lab's node image. Safe to run again: each step is skipped when done.
# python3-fusepy and fuse: the tests mount the lab's root-squashing share (megaprov/cluster/lab_files/squashfs.py) here too.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
PACKAGES=(podman runc netavark aardvark-dns slirp4netns uidmap iptables debootstrap openssh-client python3-venv python3-pip git ca-certificates gnupg dpkg-dev python3-fusepy fuse)
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
mkdir -p .megaprov
PIP_LOG=.megaprov/setup-pip.log
# pip is quiet unless it fails: its output goes to a log that is shown only then.
pip_quiet() {
  if ! .venv/bin/pip install --disable-pip-version-check --no-input "$@" >"$PIP_LOG" 2>&1; then
    echo "setup: pip install $* failed; the end of $PIP_LOG:" >&2
    grep -v "is ignored: it is neither a file nor a directory" "$PIP_LOG" | tail -n 40 >&2
    exit 1
  fi
}
stamp=".venv/.megaprov-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-12)-$EXTRAS"
if [ ! -f "$stamp" ]; then
  if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
    echo "setup: pip install $TORCH (CPU build)"
    pip_quiet ${MEGAPROV_TORCH_INDEX:+--index-url "$MEGAPROV_TORCH_INDEX"} "$TORCH"
  fi
  echo "setup: pip install -e .[$EXTRAS]"
  pip_quiet -e ".[$EXTRAS]"
  # The extras are the contract: fail here, not halfway through the main command, when one did not install.
  .venv/bin/python -W ignore -c 'import torch, megatron.core, tokenizers, ansible_runner, megaprov' || { echo "setup: the $EXTRAS environment is incomplete" >&2; exit 1; }
  rm -f .venv/.megaprov-*
  touch "$stamp"
fi
.venv/bin/python scripts/install-collections.py
.venv/bin/megaprov lab image

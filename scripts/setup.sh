#!/usr/bin/env bash
# Install what megaprov and its lab need on a fresh Debian 12 / Ubuntu machine (as root or with sudo):
# podman with runc and netavark, debootstrap, a Python venv with megaprov, the Ansible collections
# the tests use (from PyPI), and the lab's node image. Safe to run again: each step is skipped when done.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
PACKAGES=(podman runc netavark aardvark-dns slirp4netns uidmap iptables debootstrap openssh-client python3-venv python3-pip git ca-certificates gnupg dpkg-dev)
missing=()
for p in "${PACKAGES[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: create .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
EXTRAS=${MEGAPROV_EXTRAS:-test,train}
# torch first, pinned: megatron-core accepts any torch>=2.6 and pip would otherwise pick a multi-GB CUDA build.
# The lab and CI nodes are CPU-only; point MEGAPROV_TORCH_INDEX at a CPU wheel index (for instance
# https://download.pytorch.org/whl/cpu) where no local CPU wheel is configured for pip.
TORCH=${MEGAPROV_TORCH:-torch==2.13.0}
stamp=".venv/.megaprov-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-12)-$EXTRAS"
if [ ! -f "$stamp" ]; then
  .venv/bin/pip install -q --upgrade pip
  if [[ ",$EXTRAS," == *",train,"* ]] && ! .venv/bin/python -c 'import torch' 2>/dev/null; then
    echo "setup: pip install $TORCH"
    .venv/bin/pip install -q ${MEGAPROV_TORCH_INDEX:+--index-url "$MEGAPROV_TORCH_INDEX"} "$TORCH"
  fi
  echo "setup: pip install -e .[$EXTRAS]"
  .venv/bin/pip install -q -e ".[$EXTRAS]"
  touch "$stamp"
fi
.venv/bin/python scripts/install-collections.py
.venv/bin/megaprov lab image

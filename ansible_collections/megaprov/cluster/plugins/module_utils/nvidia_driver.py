# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The loaded NVIDIA kernel module's version, read one way for every module that needs it (gpu_state, slurm_node)."""

from __future__ import annotations

import os
import re

VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")


def _read(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def loaded_version(root="/"):
    """Version of the loaded nvidia kernel module, or '' without one: /sys/module/nvidia/version, else the first
    version after "Kernel Module" in /proc/driver/nvidia/version ("NVIDIA UNIX x86_64 Kernel Module  550.127.08 ..."
    of the proprietary module, "NVIDIA UNIX Open Kernel Module for x86_64  580.95.05 ..." of the open one)."""
    version = _read(os.path.join(root, "sys/module/nvidia/version"))
    if version:
        return version
    for line in _read(os.path.join(root, "proc/driver/nvidia/version")).splitlines():
        if "Kernel Module" in line:
            return next((word for word in line.split("Kernel Module", 1)[1].split() if VERSION.match(word)), "")
    return ""

# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The NVIDIA driver's Xid line in a kernel log: the one parser that megaprov doctor (a saved kernel log) and the
node_exporter role's GPU collector (the Xid counters and alerts) share.

Standard library only, Python 3.9 or newer: the megaprov package imports it as
``ansible_collections.megaprov.cluster.plugins.module_utils.xid``, and the node_exporter role installs it beside the
collector, which runs under the node's own python3.

The forms read, as the driver prints them (open-gpu-kernel-modules, src/nvidia/src/kernel/gpu/rc/kernel_rc.c; the
oldest one as NVIDIA's "Xid Errors" document shows it):

    NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:3b:00 GPU-I:01): 94, pid=..., name=..., ...        (MIG: the GPU instance)
    NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 31, pid=..., ...         (MIG: GPU and compute instance)
    NVRM: Xid (PCI:0000:3b:00): 13, Graphics Engine Exception ...          (older drivers: no pid)
    NVRM: Xid (0000:03:00): 14, Channel 00000001                           (the oldest drivers: no "PCI:")

The address is PCI domain:bus:device (some logs add ".function"), upper or lower case hex.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# Text every Xid line holds: a cheap test before the regex.
MARKER = "NVRM: Xid ("

# Work linear in the line: the gap inside the parenthesis is bounded and stops at a bracket.
LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<domain>[0-9A-Fa-f]{1,8}):(?P<bus>[0-9A-Fa-f]{2}):(?P<device>[0-9A-Fa-f]{2})(?:\.[0-7])?"
    r"(?: (?P<instance>[^()]{1,64}))?\): (?P<xid>[0-9]{1,5})(?![0-9])"
)


class XidLine(NamedTuple):
    """One Xid event: the GPU's PCI address as the driver prints it, lower case ("0000:3b:00"), the Xid, and the MIG
    instance ("GPU-I:01 GPU-CI:02", "" on a GPU without MIG)."""

    address: str
    xid: int
    instance: str


def address(domain: int, bus: int, device: int) -> str:
    """A PCI address as the driver writes it in an Xid line: 0000:3b:00."""
    return f"{domain:04x}:{bus:02x}:{device:02x}"


def from_match(match: re.Match[str]) -> XidLine:
    """The event of a LINE match (for callers that search with LINE themselves)."""
    return XidLine(address(int(match["domain"], 16), int(match["bus"], 16), int(match["device"], 16)), int(match["xid"]), match["instance"] or "")


def parse(line: str) -> XidLine | None:
    """The Xid event in one kernel log line (journalctl -k, dmesg, syslog: any prefix), or None."""
    if MARKER not in line:
        return None
    match = LINE.search(line)
    return from_match(match) if match else None

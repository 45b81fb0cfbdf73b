# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters for the NFS roles: the smallest IPv4 network holding a set of addresses, and CIDR checks."""

from __future__ import annotations

import ipaddress
from typing import Any


def nfs_supernet(addresses: list[str]) -> str:
    """Smallest IPv4 network (CIDR) that contains every address; '' when there is none."""
    ips = [ipaddress.IPv4Address(a) for a in addresses if a]
    if not ips:
        return ""
    low, high = min(ips), max(ips)
    prefix = 32
    while prefix > 0:
        net = ipaddress.IPv4Network(f"{low}/{prefix}", strict=False)
        if high in net:
            return str(net)
        prefix -= 1
    return "0.0.0.0/0"


def nfs_cidr_problem(cidr: str, addresses: list[str]) -> str:
    """Why ``cidr`` cannot serve as the export's client list, or ''."""
    try:
        net = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return f"{cidr!r} is not a CIDR such as 10.0.0.0/24"
    outside = [a for a in addresses if a and ipaddress.ip_address(a) not in net]
    return f"{cidr} does not contain {', '.join(outside)}" if outside else ""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"nfs_supernet": nfs_supernet, "nfs_cidr_problem": nfs_cidr_problem}

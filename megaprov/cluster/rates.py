"""The measured compute rates of a cluster's nodes, as the controller knows them.

The preflight role measures each node's dense GEMM rate (roles/preflight/tasks/compute.yml; the python stage runs
it again once torch is installed) and stores it on the node as the local fact ``megaprov_compute``.
``megaprov bootstrap`` and ``megaprov preflight`` record what the nodes reported in
``<state>/rates/<inventory digest>.json``; a node measured by a plain ``ansible-playbook`` run is found in the fact
cache instead (the module returns the rate as the fact ``megaprov_compute``, and every fact gathering copies the
local fact). ``megaprov plan -i`` and ``megaprov train`` read both: nothing is contacted, and a node without a rate
is planned at the published peak, which the plan says.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from megaprov import values
from megaprov.cluster.factcache import host_facts, read_json
from megaprov.errors import UsageError
from megaprov.paths import fact_cache_dir, state_dir


@dataclass(frozen=True)
class NodeRate:
    """A node's measured dense GEMM rate (the fact ``megaprov_compute`` the preflight role stores)."""

    host: str
    tflops_per_device: float  # the slowest device's (GPU), or the whole node's (CPU)
    devices: int
    backend: str  # torch-cuda, torch-cpu, numpy-cpu
    dtype: str  # bfloat16 on GPUs, float32 on CPUs
    measured_at: str = ""

    @property
    def gpu(self) -> bool:
        return self.backend == "torch-cuda"


RATE_BACKENDS = ("torch-cuda", "torch-cpu", "numpy-cpu")
MAX_TFLOPS = 100_000.0  # per device: far above any GPU (an H200 is about 1,000 dense bf16)
_DTYPE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


def rate_from_fact(host: str, fact: Any) -> NodeRate | None:
    """The node's rate from its stored fact (``megaprov_compute``), or None when it holds none. The fact is the node's
    word, so it is input: a rate that is not a finite positive number, an unknown backend or a malformed field is
    refused with the node's name (a plan on it would divide by zero or judge against infinity)."""
    if not isinstance(fact, dict) or fact.get("version") != 1:
        return None
    fix = f"measure it again (megaprov preflight -i INVENTORY --limit {host}): the recorded fact was not written by megaprov's preflight"
    tflops = fact.get("tflops_per_device")
    if isinstance(tflops, bool) or not isinstance(tflops, (int, float)) or not (math.isfinite(tflops) and 0 < tflops <= MAX_TFLOPS):
        raise UsageError(f"node {host}: its recorded compute rate tflops_per_device={values.shown(tflops)} is not a positive finite number", fix)
    devices = fact.get("devices") or []
    if not isinstance(devices, list) or len(devices) > 1024:
        raise UsageError(f"node {host}: its recorded compute rate lists devices={values.shown(devices)}, not a list of at most 1,024", fix)
    backend, dtype, measured = fact.get("backend"), fact.get("dtype"), fact.get("measured_at", "")
    if backend not in RATE_BACKENDS:
        raise UsageError(f"node {host}: its recorded compute rate has backend={values.shown(backend)}, not one of {', '.join(RATE_BACKENDS)}", fix)
    if not isinstance(dtype, str) or not _DTYPE.fullmatch(dtype):
        raise UsageError(f"node {host}: its recorded compute rate has dtype={values.shown(dtype)}, not a dtype name", fix)
    if not isinstance(measured, str) or len(measured) > 64 or values.control_character(measured):
        raise UsageError(f"node {host}: its recorded compute rate has measured_at={values.shown(measured)}, not a time stamp", fix)
    return NodeRate(host, float(tflops), len(devices) or 1, backend, dtype, measured)


def rates_file(inventory: Path) -> Path:
    return state_dir() / "rates" / f"{fact_cache_dir(inventory).name}.json"


def record(inventory: Path, facts: dict[str, dict[str, Any]]) -> None:
    """Merge the facts the nodes reported into the inventory's rates file (atomically)."""
    path = rates_file(inventory)
    path.parent.mkdir(parents=True, exist_ok=True)
    known = read_json(path)
    merged = {**(known if isinstance(known, dict) else {}), **facts}
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(merged, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def known(inventory: Path, hosts: tuple[str, ...] | list[str]) -> tuple[NodeRate, ...]:
    """The rates megaprov recorded for ``hosts``, else those in the fact cache."""
    recorded = read_json(rates_file(inventory))
    recorded = recorded if isinstance(recorded, dict) else {}
    cache = fact_cache_dir(inventory)
    found = []
    for host in hosts:
        rate = rate_from_fact(host, recorded.get(host))
        for fact in host_facts(cache, host, "megaprov_compute"):
            if rate is not None:
                break
            rate = rate_from_fact(host, fact)
        if rate is not None:
            found.append(rate)
    return tuple(found)

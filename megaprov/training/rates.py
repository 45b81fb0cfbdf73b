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

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from megaprov.cluster.factcache import host_facts, read_json
from megaprov.paths import fact_cache_dir, state_dir
from megaprov.training.planner import Cluster, NodeRate, rate_from_fact


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


def with_rates(cluster: Cluster, inventory: str | None) -> Cluster:
    """``cluster`` with the measured rates of its hosts (unchanged without an inventory)."""
    if not inventory or not cluster.hosts:
        return cluster
    return dataclasses.replace(cluster, rates=known(Path(inventory), cluster.hosts))

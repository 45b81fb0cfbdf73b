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

from megaprov.paths import fact_cache_dir, state_dir
from megaprov.planner import Cluster, NodeRate, rate_from_fact


def rates_file(inventory: Path) -> Path:
    return state_dir() / "rates" / f"{fact_cache_dir(inventory).name}.json"


def record(inventory: Path, facts: dict[str, dict[str, Any]]) -> None:
    """Merge the facts the nodes reported into the inventory's rates file (atomically)."""
    path = rates_file(inventory)
    path.parent.mkdir(parents=True, exist_ok=True)
    known = _read_json(path)
    merged = {**(known if isinstance(known, dict) else {}), **facts}
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(merged, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def cached_fact(doc: Any) -> Any:
    """The compute fact in one host's fact-cache entry: plain JSON, or ansible-core 2.19's ``__payload__`` wrapper;
    the module's own fact, else the gathered local fact."""
    if isinstance(doc, dict) and isinstance(doc.get("__payload__"), str):
        try:
            doc = json.loads(doc["__payload__"])
        except ValueError:
            return None
    if not isinstance(doc, dict):
        return None
    local = doc.get("ansible_local")
    return doc.get("megaprov_compute") or (local.get("megaprov_compute") if isinstance(local, dict) else None)


def known(inventory: Path, hosts: tuple[str, ...] | list[str]) -> tuple[NodeRate, ...]:
    """The rates megaprov recorded for ``hosts``, else those in the fact cache."""
    recorded = _read_json(rates_file(inventory))
    recorded = recorded if isinstance(recorded, dict) else {}
    cache = fact_cache_dir(inventory)
    found = []
    for host in hosts:
        rate = rate_from_fact(host, recorded.get(host))
        for entry in (cache / host, *sorted(cache.glob(f"s*_{host}"))):
            if rate is not None:
                break
            rate = rate_from_fact(host, cached_fact(_read_json(entry)))
        if rate is not None:
            found.append(rate)
    return tuple(found)


def with_rates(cluster: Cluster, inventory: str | None) -> Cluster:
    """``cluster`` with the measured rates of its hosts (unchanged without an inventory)."""
    if not inventory or not cluster.hosts:
        return cluster
    return dataclasses.replace(cluster, rates=known(Path(inventory), cluster.hosts))

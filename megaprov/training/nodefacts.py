"""What the training environment of each node really holds, as the controller knows it.

The megatron role (python stage) records it on every node as the local fact ``megaprov_python``
(``/etc/ansible/facts.d/megaprov_python.fact``) and returns it as a cacheable fact: torch and the CUDA it was
built for, Transformer Engine (version or absent), which of apex's fused kernels import, the Megatron-LM checkout
and whether its dataset helpers are built. ``megaprov train``/``plan`` read it from the fact cache
(``<state>/facts/<digest>/``, where the bootstrap run and every fact gathering leave it) and the render chooses
the Megatron-LM implementation and fused paths from it (:func:`megaprov.training.render.stack_args`). Nothing is contacted.

With no fact known (plan without an inventory, or nodes not yet bootstrapped) the render assumes what the roles
install by default, :data:`ROLE_DEFAULTS`, and says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from megaprov import values
from megaprov.cluster.factcache import host_facts
from megaprov.errors import UsageError
from megaprov.paths import fact_cache_dir
from megaprov.training.planner import Cluster

FACT = "megaprov_python"
# The shared directory's sustained write speed for checkpoints when the inventory gives none
# (megatron_checkpoint_write_mbps): deliberately low, what one NFS server on a 10-25 GbE link sustains.
DEFAULT_WRITE_MBPS = 1000.0


@dataclass(frozen=True)
class NodeStack:
    """The training environment the job's nodes have in common (the weakest node decides)."""

    transformer_engine: str | None = None  # version, None = absent
    apex_gradient_accumulation: bool = False  # fused_weight_gradient_mlp_cuda imports
    apex_softmax: bool = False  # scaled_masked_softmax_cuda and scaled_upper_triang_masked_softmax_cuda import
    apex_layer_norm: bool = False  # fused_layer_norm_cuda imports (apex.normalization)
    torch: str | None = None
    torch_cuda: str | None = None
    helpers_built: bool | None = None  # the checkout's megatron/core/datasets helpers, None = no checkout
    transformers: str | None = None  # version, None = absent (Megatron-LM's HuggingFaceTokenizer needs it)
    hosts: tuple[str, ...] = ()  # the hosts whose fact this is built from
    missing: tuple[str, ...] = ()  # job hosts without a fact (planned as ROLE_DEFAULTS)
    source: str = "facts"  # facts | assumed | image
    image: str | None = None  # launch.container.image: the stack is the image's (probed), or assumed until it is

    def capability(self, name: str) -> bool:
        """The value the rules of ``impl-<tag>.json`` test (``transformer_engine`` is a presence)."""
        if name == "transformer_engine":
            return self.transformer_engine is not None
        value = getattr(self, name)
        return bool(value)

    def describe(self) -> str:
        te = f"Transformer Engine {self.transformer_engine}" if self.transformer_engine else "no Transformer Engine"
        kernels = [
            n
            for n, on in (
                ("gradient accumulation", self.apex_gradient_accumulation),
                ("softmax", self.apex_softmax),
                ("layer norm", self.apex_layer_norm),
            )
            if on
        ]
        apex = f"apex fused {', '.join(kernels)}" if kernels else "no apex fused kernels"
        if self.source == "image":
            return f"image {self.image} (probed on {', '.join(self.hosts)}): {te}, {apex}"
        if self.image is not None:
            return f"assumed (image {self.image} not probed yet: megaprov train probes it on the job's first node): {te}, {apex}"
        if self.source == "assumed":
            basis = "the roles' defaults" if self == ROLE_DEFAULTS else "what the inventory asks the roles to install"
            hf = ", transformers" if self.transformers else ""
            return f"assumed (no node fact {FACT} known): {basis}, {te}, {apex}{hf}"
        where = f"node facts of {', '.join(self.hosts)}"
        if self.missing:
            where += f" (none yet for {', '.join(self.missing)}: planned as the roles' defaults)"
        return f"{where}: {te}, {apex}"


ROLE_DEFAULTS = NodeStack(source="assumed")  # megatron_transformer_engine: false, apex_enabled: false
INVENTORY_ASKS = "as the inventory asks"  # the version of what an assumed stack holds because the inventory installs it


def assumed(transformer_engine: bool = False, apex: bool = False, transformers: bool = False) -> NodeStack:
    """What the nodes will hold once the python stage has run, before any fact exists: what the inventory asks the roles
    to install (megatron_transformer_engine, apex_enabled, megatron_huggingface), else the roles' defaults."""
    if not (transformer_engine or apex or transformers):
        return ROLE_DEFAULTS
    return NodeStack(
        transformer_engine=INVENTORY_ASKS if transformer_engine else None,
        apex_gradient_accumulation=apex,
        apex_softmax=apex,
        apex_layer_norm=apex,
        transformers=INVENTORY_ASKS if transformers else None,
        source="assumed",
    )


@dataclass(frozen=True)
class KnownCluster(Cluster):
    """A cluster with what the controller knows of its nodes' training environment and shared-directory speed."""

    stack: NodeStack = field(default=ROLE_DEFAULTS)
    write_mbps: float = DEFAULT_WRITE_MBPS
    write_source: str = "default"
    container_roots: tuple[str, ...] = ()  # megaprov_container_mount_roots: where launch.container.mounts may come from


def stack_of(cluster: Cluster) -> NodeStack:
    return cluster.stack if isinstance(cluster, KnownCluster) else ROLE_DEFAULTS


def write_speed(cluster: Cluster) -> tuple[float, str]:
    if isinstance(cluster, KnownCluster):
        return cluster.write_mbps, cluster.write_source
    return DEFAULT_WRITE_MBPS, "default"


# A package version as pip and torch report them: 2.5.1, 2.6.0a0+df5bbc09d1.nv24.12, 12.4, 1.13.0.dev20230101
VERSION = re.compile(r"^[0-9][0-9A-Za-z.+_-]{0,63}$")


def _version(host: str, fact: dict[str, Any], key: str) -> str | None:
    """A version the node reports (absent: None). Anything else is refused with the node's name: the render writes
    these into launch scripts and explanations."""
    value = fact.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not VERSION.fullmatch(value):
        raise UsageError(
            f"node {host}: its fact {FACT}.{key}={values.shown(value)} is not a version",
            f"record it again (megaprov bootstrap -i INVENTORY --tags python --limit {host}): megaprov's python stage did not write it",
        )
    return value


def node_from_fact(fact: Any, host: str = "?") -> NodeStack | None:
    """One node's stack from its ``megaprov_python`` fact (None when absent or not megaprov's; a malformed version is
    refused with the node's name)."""
    if not isinstance(fact, dict) or fact.get("version") != 1:
        return None
    apex: dict[str, Any] = fact["apex"] if isinstance(fact.get("apex"), dict) else {}
    megatron: dict[str, Any] = fact["megatron"] if isinstance(fact.get("megatron"), dict) else {}
    helpers = megatron.get("helpers_built")
    return NodeStack(
        transformer_engine=_version(host, fact, "transformer_engine"),
        apex_gradient_accumulation=apex.get("fused_weight_gradient_mlp_cuda") is True,
        apex_softmax=apex.get("scaled_masked_softmax_cuda") is True and apex.get("scaled_upper_triang_masked_softmax_cuda") is True,
        apex_layer_norm=apex.get("fused_layer_norm_cuda") is True,
        torch=_version(host, fact, "torch"),
        torch_cuda=_version(host, fact, "torch_cuda"),
        helpers_built=helpers if isinstance(helpers, bool) else None,
        transformers=_version(host, fact, "transformers"),
    )


def combine(found: dict[str, NodeStack], hosts: tuple[str, ...] | list[str]) -> NodeStack:
    """What every one of ``hosts`` has: a capability counts only if each node with a fact has it; hosts without a
    fact count as the roles' defaults (nothing optional)."""
    have = [found[h] for h in hosts if h in found]
    missing = tuple(h for h in hosts if h not in found)
    if not have:
        return ROLE_DEFAULTS
    if missing:
        have.append(ROLE_DEFAULTS)
    te = {n.transformer_engine for n in have}
    return NodeStack(
        transformer_engine=te.pop() if len(te) == 1 else None,  # different TE versions on different nodes: not relied on
        apex_gradient_accumulation=all(n.apex_gradient_accumulation for n in have),
        apex_softmax=all(n.apex_softmax for n in have),
        apex_layer_norm=all(n.apex_layer_norm for n in have),
        torch=have[0].torch if len({n.torch for n in have}) == 1 else None,
        torch_cuda=have[0].torch_cuda if len({n.torch_cuda for n in have}) == 1 else None,
        helpers_built=all(n.helpers_built for n in have) if all(n.helpers_built is not None for n in have) else None,
        transformers=have[0].transformers if all(n.transformers for n in have) else None,
        hosts=tuple(h for h in hosts if h in found),
        missing=missing,
    )


def known(inventory: Path, hosts: tuple[str, ...] | list[str]) -> NodeStack:
    """The stack the fact cache holds for ``hosts`` (ROLE_DEFAULTS when none)."""
    cache = fact_cache_dir(inventory)
    found: dict[str, NodeStack] = {}
    for host in hosts:
        for fact in host_facts(cache, host, FACT):
            node = node_from_fact(fact, host)
            if node is not None:
                found[host] = node
                break
    return combine(found, hosts)

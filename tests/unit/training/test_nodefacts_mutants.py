"""What the controller knows of each node's training environment (megaprov.training.nodefacts): one node's
``megaprov_python`` fact read into a :class:`NodeStack` (versions checked, apex kernels counted only when they import),
the stack every job host has in common, the assumed stack before any fact exists, and the one-line refusal of a
malformed version. Nothing is stood in: the fact cache is a real directory under a temporary MEGAPROV_STATE."""

import json

import pytest

from megaprov import paths
from megaprov.errors import UsageError
from megaprov.training import nodefacts, planner
from megaprov.training.nodefacts import ROLE_DEFAULTS, KnownCluster, NodeStack

FULL = {
    "version": 1,
    "transformer_engine": "1.13.0",
    "torch": "2.6.0a0+df5bbc09d1.nv24.12",
    "torch_cuda": "12.4",
    "transformers": "4.46.3",
    "apex": {
        "fused_weight_gradient_mlp_cuda": True,
        "scaled_masked_softmax_cuda": True,
        "scaled_upper_triang_masked_softmax_cuda": True,
        "fused_layer_norm_cuda": True,
    },
    "megatron": {"helpers_built": True},
}

HINT = "record it again (megaprov bootstrap -i INVENTORY --tags python --limit {host}): megaprov's python stage did not write it"


def refusal(fact, host="g1"):
    with pytest.raises(UsageError) as caught:
        nodefacts.node_from_fact(fact, host)
    return caught.value


# ---- capability


def test_transformer_engine_is_a_presence_whatever_its_version():
    assert NodeStack(transformer_engine="1.13.0").capability("transformer_engine") is True
    assert NodeStack(transformer_engine=nodefacts.INVENTORY_ASKS).capability("transformer_engine") is True
    assert NodeStack(transformer_engine="").capability("transformer_engine") is True  # present, even if empty
    assert NodeStack().capability("transformer_engine") is False


def test_other_capabilities_are_the_truth_of_the_field():
    stack = NodeStack(apex_softmax=True, torch="2.5.1", helpers_built=None)
    assert stack.capability("apex_softmax") is True
    assert stack.capability("apex_layer_norm") is False
    assert stack.capability("torch") is True
    assert stack.capability("torch_cuda") is False
    assert stack.capability("helpers_built") is False
    assert NodeStack(helpers_built=True).capability("helpers_built") is True
    with pytest.raises(AttributeError):
        stack.capability("no_such_field")


# ---- describe


def test_describe_node_facts_with_every_kernel():
    stack = NodeStack(transformer_engine="1.13.0", apex_gradient_accumulation=True, apex_softmax=True, apex_layer_norm=True, hosts=("g1", "g2"))
    assert stack.describe() == "node facts of g1, g2: Transformer Engine 1.13.0, apex fused gradient accumulation, softmax, layer norm"


def test_describe_node_facts_with_hosts_missing_and_nothing_optional():
    stack = NodeStack(hosts=("g1",), missing=("g2", "g3"))
    assert stack.describe() == (
        "node facts of g1 (none yet for g2, g3: planned as the roles' defaults): no Transformer Engine, no apex fused kernels"
    )


def test_describe_names_only_the_kernels_that_import():
    assert NodeStack(apex_softmax=True, hosts=("a",)).describe() == "node facts of a: no Transformer Engine, apex fused softmax"
    assert NodeStack(apex_layer_norm=True, hosts=("a",)).describe() == "node facts of a: no Transformer Engine, apex fused layer norm"
    assert NodeStack(apex_gradient_accumulation=True, hosts=("a",)).describe() == (
        "node facts of a: no Transformer Engine, apex fused gradient accumulation"
    )


def test_describe_the_roles_defaults():
    assert (
        ROLE_DEFAULTS.describe() == "assumed (no node fact megaprov_python known): the roles' defaults, no Transformer Engine, no apex fused kernels"
    )


def test_describe_what_the_inventory_asks():
    stack = nodefacts.assumed(transformer_engine=True, apex=True, transformers=True)
    assert stack.describe() == (
        "assumed (no node fact megaprov_python known): what the inventory asks the roles to install, "
        "Transformer Engine as the inventory asks, apex fused gradient accumulation, softmax, layer norm, transformers"
    )
    assert nodefacts.assumed(apex=True).describe() == (
        "assumed (no node fact megaprov_python known): what the inventory asks the roles to install, "
        "no Transformer Engine, apex fused gradient accumulation, softmax, layer norm"
    )


def test_describe_a_probed_image_and_one_not_probed_yet():
    probed = NodeStack(transformer_engine="2.1", apex_layer_norm=True, hosts=("g1", "g2"), source="image", image="nvcr.io/nvidia/pytorch:25.01-py3")
    assert probed.describe() == "image nvcr.io/nvidia/pytorch:25.01-py3 (probed on g1, g2): Transformer Engine 2.1, apex fused layer norm"
    pending = NodeStack(source="assumed", image="img:1")
    assert pending.describe() == (
        "assumed (image img:1 not probed yet: megaprov train probes it on the job's first node): no Transformer Engine, no apex fused kernels"
    )


# ---- assumed


def test_nothing_asked_is_the_roles_defaults_themselves():
    assert nodefacts.assumed() is ROLE_DEFAULTS
    assert ROLE_DEFAULTS == NodeStack(source="assumed")


def test_transformer_engine_asked():
    assert nodefacts.assumed(transformer_engine=True) == NodeStack(transformer_engine="as the inventory asks", source="assumed")


def test_apex_asked_turns_every_fused_kernel_on():
    assert nodefacts.assumed(apex=True) == NodeStack(apex_gradient_accumulation=True, apex_softmax=True, apex_layer_norm=True, source="assumed")


def test_transformers_asked():
    stack = nodefacts.assumed(transformers=True)
    assert stack == NodeStack(transformers="as the inventory asks", source="assumed")
    assert (stack.hosts, stack.missing, stack.image, stack.torch, stack.helpers_built) == ((), (), None, None, None)


def test_everything_asked_positionally():
    assert nodefacts.assumed(True, True, True) == NodeStack(
        transformer_engine="as the inventory asks",
        apex_gradient_accumulation=True,
        apex_softmax=True,
        apex_layer_norm=True,
        transformers="as the inventory asks",
        source="assumed",
    )


# ---- stack_of, write_speed


def test_a_plain_cluster_has_the_default_stack_and_write_speed():
    gpu = planner.GPUS["H100-SXM"]
    plain = planner.Cluster(2, 8, gpu)
    assert nodefacts.stack_of(plain) is ROLE_DEFAULTS
    assert nodefacts.write_speed(plain) == (1000.0, "default")
    stack = NodeStack(torch="2.5.1", hosts=("g1",))
    known = KnownCluster(2, 8, gpu, stack=stack, write_mbps=2500.0, write_source="inventory")
    assert nodefacts.stack_of(known) is stack
    assert nodefacts.write_speed(known) == (2500.0, "inventory")
    assert nodefacts.write_speed(KnownCluster(1, 1, gpu)) == (1000.0, "default")
    assert nodefacts.stack_of(KnownCluster(1, 1, gpu)) is ROLE_DEFAULTS


# ---- node_from_fact and its versions


def test_a_full_fact():
    assert nodefacts.node_from_fact(FULL, "g1") == NodeStack(
        transformer_engine="1.13.0",
        apex_gradient_accumulation=True,
        apex_softmax=True,
        apex_layer_norm=True,
        torch="2.6.0a0+df5bbc09d1.nv24.12",
        torch_cuda="12.4",
        helpers_built=True,
        transformers="4.46.3",
    )


@pytest.mark.parametrize("fact", [None, [], "x", {}, {"version": 2}, {"version": "1"}, {"torch": "2.5.1"}])
def test_a_fact_not_megaprovs_is_none(fact):
    assert nodefacts.node_from_fact(fact, "g1") is None


def test_a_bare_fact_is_nothing_optional():
    assert nodefacts.node_from_fact({"version": 1}) == NodeStack()
    assert nodefacts.node_from_fact({"version": 1, "apex": ["x"], "megatron": "built"}) == NodeStack()


def test_absent_and_empty_versions_are_none():
    fact = {"version": 1, "transformer_engine": None, "torch": "", "torch_cuda": None, "transformers": ""}
    stack = nodefacts.node_from_fact(fact, "g1")
    assert (stack.transformer_engine, stack.torch, stack.torch_cuda, stack.transformers) == (None, None, None, None)


def test_apex_kernels_count_only_when_they_import_as_true():
    truthy = {k: 1 for k in FULL["apex"]}
    stack = nodefacts.node_from_fact({"version": 1, "apex": truthy})
    assert (stack.apex_gradient_accumulation, stack.apex_softmax, stack.apex_layer_norm) == (False, False, False)


@pytest.mark.parametrize("kernel", ["scaled_masked_softmax_cuda", "scaled_upper_triang_masked_softmax_cuda"])
def test_softmax_needs_both_kernels(kernel):
    apex = dict(FULL["apex"], **{kernel: False})
    stack = nodefacts.node_from_fact(dict(FULL, apex=apex))
    assert (stack.apex_gradient_accumulation, stack.apex_softmax, stack.apex_layer_norm) == (True, False, True)


@pytest.mark.parametrize(
    "kernel,field", [("fused_weight_gradient_mlp_cuda", "apex_gradient_accumulation"), ("fused_layer_norm_cuda", "apex_layer_norm")]
)
def test_each_other_kernel_alone(kernel, field):
    stack = nodefacts.node_from_fact({"version": 1, "apex": {kernel: True}})
    assert stack == NodeStack(**{field: True})


@pytest.mark.parametrize("helpers,expected", [(True, True), (False, False), ("yes", None), (1, None), (None, None)])
def test_helpers_built_only_from_a_boolean(helpers, expected):
    assert nodefacts.node_from_fact({"version": 1, "megatron": {"helpers_built": helpers}}).helpers_built is expected


@pytest.mark.parametrize("version", ["2.5.1", "12.4", "1.13.0.dev20230101", "2.6.0a0+df5bbc09d1.nv24.12", "0", "1_2-3", "9" * 64, "1" + "a" * 63])
def test_versions_as_pip_and_torch_report_them_are_kept(version):
    for key in ("transformer_engine", "torch", "torch_cuda", "transformers"):
        assert getattr(nodefacts.node_from_fact({"version": 1, key: version}, "g1"), key) == version


@pytest.mark.parametrize(
    "value,shown",
    [
        ("v2.5", "'v2.5'"),
        ("9" * 65, "'" + "9" * 56 + "..."),
        ("2.5 1", "'2.5 1'"),
        ("2.5;rm", "'2.5;rm'"),
        ("2.5\n", "'2.5\\n'"),
        (".1", "'.1'"),
        (2.5, "2.5"),
        (True, "True"),
        (["2.5"], "['2.5']"),
    ],
)
def test_a_malformed_version_is_refused_with_the_node_and_the_fix(value, shown):
    for key in ("transformer_engine", "torch", "torch_cuda", "transformers"):
        error = refusal({"version": 1, key: value}, "g7")
        assert error.message == f"node g7: its fact megaprov_python.{key}={shown} is not a version"
        assert error.hint == HINT.format(host="g7")
        assert str(error) == f"{error.message}: {error.hint}"


def test_the_host_is_a_question_mark_when_not_given():
    with pytest.raises(UsageError) as caught:
        nodefacts.node_from_fact({"version": 1, "torch": "x"})
    assert str(caught.value) == (
        "node ?: its fact megaprov_python.torch='x' is not a version: "
        "record it again (megaprov bootstrap -i INVENTORY --tags python --limit ?): megaprov's python stage did not write it"
    )


# ---- combine


def node(**kw):
    return NodeStack(**kw)


RICH = NodeStack(
    transformer_engine="1.13.0",
    apex_gradient_accumulation=True,
    apex_softmax=True,
    apex_layer_norm=True,
    torch="2.5.1",
    torch_cuda="12.4",
    helpers_built=True,
    transformers="4.46.3",
)


def test_no_fact_for_any_host_is_the_roles_defaults():
    assert nodefacts.combine({}, ("g1", "g2")) is ROLE_DEFAULTS
    assert nodefacts.combine({"other": RICH}, ["g1"]) is ROLE_DEFAULTS
    assert nodefacts.combine({}, ()) is ROLE_DEFAULTS


def test_nodes_alike_keep_everything():
    combined = nodefacts.combine({"g1": RICH, "g2": RICH, "x": NodeStack()}, ("g1", "g2"))
    assert combined == NodeStack(
        transformer_engine="1.13.0",
        apex_gradient_accumulation=True,
        apex_softmax=True,
        apex_layer_norm=True,
        torch="2.5.1",
        torch_cuda="12.4",
        helpers_built=True,
        transformers="4.46.3",
        hosts=("g1", "g2"),
        missing=(),
        source="facts",
    )


def test_one_node_alone():
    assert nodefacts.combine({"g1": RICH}, ["g1"]) == NodeStack(**{**RICH.__dict__, "hosts": ("g1",)})


def test_a_host_without_a_fact_counts_as_the_roles_defaults():
    combined = nodefacts.combine({"g2": RICH}, ("g1", "g2", "g3"))
    assert combined == NodeStack(hosts=("g2",), missing=("g1", "g3"))
    assert combined.source == "facts"


def test_different_versions_are_not_relied_on():
    other = NodeStack(**{**RICH.__dict__, "transformer_engine": "2.0", "torch": "2.6.0", "torch_cuda": "12.6", "transformers": "4.50.0"})
    combined = nodefacts.combine({"g1": RICH, "g2": other}, ("g1", "g2"))
    assert (combined.transformer_engine, combined.torch, combined.torch_cuda) == (None, None, None)
    assert combined.transformers == "4.46.3"  # present on every node: the first's version
    assert (combined.apex_gradient_accumulation, combined.apex_softmax, combined.apex_layer_norm, combined.helpers_built) == (True,) * 4


def test_a_capability_counts_only_if_every_node_has_it():
    for field in ("apex_gradient_accumulation", "apex_softmax", "apex_layer_norm"):
        lacking = NodeStack(**{**RICH.__dict__, field: False})
        for order in (("g1", "g2"), ("g2", "g1")):
            combined = nodefacts.combine({"g1": RICH, "g2": lacking}, order)
            assert getattr(combined, field) is False
            others = {"apex_gradient_accumulation", "apex_softmax", "apex_layer_norm"} - {field}
            assert all(getattr(combined, f) is True for f in others)
    no_te = NodeStack(**{**RICH.__dict__, "transformer_engine": None})
    assert nodefacts.combine({"g1": RICH, "g2": no_te}, ("g1", "g2")).transformer_engine is None
    no_hf = NodeStack(**{**RICH.__dict__, "transformers": None})
    assert nodefacts.combine({"g1": no_hf, "g2": RICH}, ("g1", "g2")).transformers is None
    assert nodefacts.combine({"g1": RICH, "g2": no_hf}, ("g1", "g2")).transformers is None


def test_the_first_nodes_torch_when_all_agree():
    a = NodeStack(torch="2.5.1", torch_cuda="12.4")
    assert nodefacts.combine({"g1": a, "g2": a}, ("g1", "g2")).torch == "2.5.1"
    assert nodefacts.combine({"g1": a, "g2": NodeStack(torch="2.5.1")}, ("g1", "g2")) == NodeStack(torch="2.5.1", hosts=("g1", "g2"))
    assert nodefacts.combine({"g1": a, "g2": NodeStack(torch_cuda="12.4")}, ("g1", "g2")) == NodeStack(torch_cuda="12.4", hosts=("g1", "g2"))


@pytest.mark.parametrize(
    "first,second,expected",
    [(True, True, True), (True, False, False), (False, True, False), (False, False, False), (True, None, None), (None, False, None)],
)
def test_helpers_built_on_every_node(first, second, expected):
    combined = nodefacts.combine({"g1": NodeStack(helpers_built=first), "g2": NodeStack(helpers_built=second)}, ("g1", "g2"))
    assert combined.helpers_built is expected


def test_the_roles_defaults_of_a_missing_host_take_away_every_optional_part():
    combined = nodefacts.combine({"g1": RICH}, ("g1", "g2"))
    assert combined == NodeStack(hosts=("g1",), missing=("g2",))


# ---- known: from the fact cache


def write_fact(tmp_path, monkeypatch, entries):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    tmp_path.mkdir(parents=True, exist_ok=True)
    inventory = tmp_path / "inv.ini"
    inventory.write_text("[gpu_nodes]\ng1\ng2\n")
    cache = paths.fact_cache_dir(inventory)
    cache.mkdir(parents=True)
    for name, doc in entries.items():
        (cache / name).write_text(json.dumps(doc))
    return inventory


def test_known_reads_each_hosts_fact(tmp_path, monkeypatch):
    inventory = write_fact(tmp_path, monkeypatch, {"g1": {"megaprov_python": FULL}, "g2": {"ansible_local": {"megaprov_python": FULL}}})
    stack = nodefacts.known(inventory, ("g1", "g2"))
    assert stack == NodeStack(**{**nodefacts.node_from_fact(FULL).__dict__, "hosts": ("g1", "g2")})
    assert stack.describe() == "node facts of g1, g2: Transformer Engine 1.13.0, apex fused gradient accumulation, softmax, layer norm"


def test_known_takes_the_first_entry_that_is_megaprovs(tmp_path, monkeypatch):
    older = dict(FULL, torch="2.4.0")
    inventory = write_fact(
        tmp_path, monkeypatch, {"g1": {"megaprov_python": {"version": 9}}, "s1_g1": {"megaprov_python": FULL}, "s2_g1": {"megaprov_python": older}}
    )
    assert nodefacts.known(inventory, ["g1"]).torch == "2.6.0a0+df5bbc09d1.nv24.12"


def test_known_without_facts_is_the_roles_defaults(tmp_path, monkeypatch):
    inventory = write_fact(tmp_path, monkeypatch, {})
    assert nodefacts.known(inventory, ("g1", "g2")) is ROLE_DEFAULTS
    inventory = write_fact(tmp_path / "b", monkeypatch, {"g1": {"megaprov_python": FULL}})
    assert nodefacts.known(inventory, ("g1", "g2")).missing == ("g2",)


def test_known_refuses_a_malformed_version_with_the_node(tmp_path, monkeypatch):
    inventory = write_fact(tmp_path, monkeypatch, {"g2": {"megaprov_python": dict(FULL, torch_cuda="cuda 12")}})
    with pytest.raises(UsageError) as caught:
        nodefacts.known(inventory, ("g1", "g2"))
    assert caught.value.message == "node g2: its fact megaprov_python.torch_cuda='cuda 12' is not a version"

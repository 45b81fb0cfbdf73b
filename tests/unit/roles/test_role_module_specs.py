"""The collection's modules (megaprov.cluster.<name>) take the options their DOCUMENTATION promises, what ansible-test's
validate-modules checks: every documented option with its type, default, choices and required flag, check-mode
support as documented, and EXAMPLES that call the module by its FQCN with documented options only. Each filter has
its documentation file (plugins/filter/<name>.yml) with the function's arguments.

Each module's main() is run as Ansible runs it (module JSON in, JSON and exit status out) with PATH emptied, so
nothing is executed; the options as the module parsed them come back in `invocation.module_args`."""

import inspect
import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, load_module
from tests.helpers import modules

COLLECTION = ROOT / "ansible_collections" / "megaprov" / "cluster"
MODULES = {path.stem: path for path in sorted((COLLECTION / "plugins" / "modules").glob("*.py")) if path.stem != "__init__"}
# Check mode: the nccl check runs a benchmark (no check mode); the others read, or skip their write in check mode.
CHECK_MODE = {
    "apt": True,
    "compute_rate": True,
    "doctor_probe": True,
    "files": True,
    "gpu_state": True,
    "ib_write_bw": True,
    "job_step": True,
    "nccl_check": False,
    "node_facts": True,
    "proof": True,
    "rdma_facts": True,
    "refuse": True,
    "shared_check": True,
    "slurm_check": True,
    "slurm_node": True,
    "ssh_check": True,
    "uv_pip": True,
}
# Modules that would send traffic whatever the options (ib_write_bw runs perftest through subprocess, which raises
# with PATH emptied): run in check mode, where they stop after parsing their options.
CHECK_MODE_ONLY = {"ib_write_bw"}
# Values for required options that make main() do nothing: no peers to reach, nothing to read back, no interpreter.
REQUIRED = {
    "argv": ["true"],
    "files": [],
    "step": "check",
    "socket_interface": "eth0",
    "access": "path",
    "root": "/nonexistent/megaprov",
    "name": "node1",
    "source": "node1",
    "peers": {},
    "python": "/nonexistent/megaprov/bin/python",
    "facts_path": "/nonexistent/megaprov/compute.fact",
    "scratch_dir": "/nonexistent/megaprov",
    "requirements": {},
    "peer": "192.0.2.1",
    "device": "mlx5_0",
    "nodes": [],
    "msg": "refused",
    "user": "megaprov",
    "gpus": 0,
}


def block(short: str, name: str):
    text = MODULES[short].read_text()
    found = re.search(rf'^{name} = r"""(.*?)"""', text, re.S | re.M)
    assert found, f"{short}: no {name}"
    return yaml.safe_load(found.group(1))


def documentation(short: str) -> dict:
    return block(short, "DOCUMENTATION")


def run(short: str, args: dict, tmp_path: Path, monkeypatch, capsys) -> tuple[int, dict]:
    module = load_module(MODULES[short], f"spec_{short}")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no ssh, nvidia-smi, dpkg-query, nfs-cp, timeout: nothing runs
    if short in CHECK_MODE_ONLY:
        args = {**args, "_ansible_check_mode": True}
    return modules.run_module(module.main, args, capsys)


def required_args(options: dict) -> dict:
    return {name: REQUIRED[name] for name, spec in options.items() if spec.get("required")}


def test_every_module_is_covered():
    assert set(MODULES) == set(CHECK_MODE)


@pytest.mark.parametrize("short", sorted(MODULES))
def test_documentation_is_valid_and_lists_every_option(short, tmp_path, monkeypatch, capsys):
    doc = documentation(short)
    assert doc["module"] == short and doc["short_description"] and doc["description"] and doc["author"]
    options = doc["options"]
    for name, spec in options.items():
        assert set(spec) <= {"type", "elements", "required", "default", "choices", "description", "suboptions"}, (name, spec)
        assert isinstance(spec.get("description"), str | list) and spec["description"], name
    _, result = run(short, required_args(options), tmp_path, monkeypatch, capsys)
    assert set(result["invocation"]["module_args"]) == set(options)


@pytest.mark.parametrize("short", sorted(MODULES))
def test_examples_call_the_module_by_its_fqcn_with_documented_options(short):
    options = documentation(short)["options"]
    tasks = block(short, "EXAMPLES")
    calls = [task[f"megaprov.cluster.{short}"] for task in tasks if f"megaprov.cluster.{short}" in task]
    assert calls, f"{short}: no example calls megaprov.cluster.{short}"
    assert not [task for task in tasks if short in task or f"megaprov_{short}" in task], "an example uses the short or old name"
    for call in calls:
        assert set(call) <= set(options), set(call) - set(options)
        assert set(required_args(options)) <= set(call), set(required_args(options)) - set(call)


@pytest.mark.parametrize("short", sorted(MODULES))
def test_return_values_are_documented(short):
    returned = block(short, "RETURN")
    for name, spec in returned.items():
        assert spec["description"] and spec["type"] and spec["returned"], name


@pytest.mark.parametrize("short", sorted(MODULES))
def test_defaults_are_the_documented_ones(short, tmp_path, monkeypatch, capsys):
    options = documentation(short)["options"]
    _, result = run(short, required_args(options), tmp_path, monkeypatch, capsys)
    parsed = result["invocation"]["module_args"]
    for name, spec in options.items():
        if not spec.get("required"):
            assert parsed[name] == spec.get("default"), name


def typed_value(spec: dict, home: str):
    """(what Ansible is given, what the module must see) for one option of the documented type."""
    kind = spec.get("type", "str")
    if "choices" in spec:
        return spec["choices"][-1], spec["choices"][-1]
    return {
        "str": ("7", "7"),
        "int": ("7", 7),
        "float": ("2.5", 2.5),
        "bool": ("yes", True),
        "path": ("~/megaprov-spec", f"{home}/megaprov-spec"),
        # a list of entries (dicts with suboptions): empty, nothing to apply
        "list": ([7, "b"], ["7", "b"]) if spec.get("elements") == "str" else ([], []) if spec.get("elements") == "dict" else ([7, "b"], [7, "b"]),
        "dict": ("a=1", {"a": "1"}),
    }[kind]


@pytest.mark.parametrize("short", sorted(MODULES))
def test_values_are_converted_to_the_documented_types(short, tmp_path, monkeypatch, capsys):
    options = documentation(short)["options"]
    monkeypatch.setenv("HOME", str(tmp_path))
    given, wanted = {}, {}
    for name, spec in options.items():
        given[name], wanted[name] = typed_value(spec, str(tmp_path))
    # values that would make main() reach a peer or the network: the documented type, nothing to do
    for name in ("peers", "argv", "access"):
        if name in options:
            given[name] = wanted[name] = {"peers": {}, "argv": ["true"], "access": "path"}[name]
    if "write" in options:
        given["write"], wanted["write"] = "no", False
    _, result = run(short, given, tmp_path, monkeypatch, capsys)
    assert result["invocation"]["module_args"] == wanted


@pytest.mark.parametrize(("short", "name"), [(s, n) for s in sorted(MODULES) for n, o in documentation(s)["options"].items() if o.get("required")])
def test_a_missing_required_option_is_refused(short, name, tmp_path, monkeypatch, capsys):
    args = required_args(documentation(short)["options"])
    del args[name]
    rc, result = run(short, args, tmp_path, monkeypatch, capsys)
    assert rc == 1 and result["msg"] == f"missing required arguments: {name}"


@pytest.mark.parametrize(("short", "name"), [(s, n) for s in sorted(MODULES) for n, o in documentation(s)["options"].items() if "choices" in o])
def test_a_value_outside_the_choices_is_refused(short, name, tmp_path, monkeypatch, capsys):
    options = documentation(short)["options"]
    rc, result = run(short, {**required_args(options), name: "bogus"}, tmp_path, monkeypatch, capsys)
    assert rc == 1 and result["msg"].startswith(f"value of {name} must be one of: {', '.join(options[name]['choices'])}, got: bogus")


@pytest.mark.parametrize("short", sorted(MODULES))
def test_check_mode_support(short, tmp_path, monkeypatch, capsys):
    args = {**required_args(documentation(short)["options"]), "_ansible_check_mode": True}
    _, result = run(short, args, tmp_path, monkeypatch, capsys)
    refused = result.get("skipped") is True and "does not support check mode" in result.get("msg", "")
    assert refused is not CHECK_MODE[short], result


def test_every_filter_is_documented_with_its_arguments():
    plugin = load_module(COLLECTION / "plugins" / "filter" / "nfs_network.py", "spec_nfs_network")
    filters = plugin.FilterModule().filters()
    assert filters
    for name, function in filters.items():
        doc = yaml.safe_load((COLLECTION / "plugins" / "filter" / f"{name}.yml").read_text())
        arguments = list(inspect.signature(function).parameters)
        assert doc["DOCUMENTATION"]["name"] == name
        # the first argument is what is piped into the filter (_input), the others are passed in parentheses
        assert list(doc["DOCUMENTATION"]["options"]) == ["_input", *arguments[1:]], name
        assert [p.strip() for p in doc["DOCUMENTATION"]["positional"].split(",")] == ["_input", *arguments[1:]], name
        assert doc["RETURN"]["_value"]["type"] == "str" and doc["EXAMPLES"].count(f"megaprov.cluster.{name}"), name

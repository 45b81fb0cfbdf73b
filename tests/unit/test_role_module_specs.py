"""The roles' Python modules take the options their DOCUMENTATION promises (what ansible-test's validate-modules checks):
every documented option with its type, default, choices and required flag, and check-mode support as documented.

Each module's main() is run as Ansible runs it (module JSON in, JSON and exit status out) with PATH emptied, so
nothing is executed; the options as the module parsed them come back in `invocation.module_args`."""

import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, load_module
from tests.helpers import modules

MODULES = {
    "nccl_check": "ansible_collections/megaprov/cluster/plugins/modules/nccl_check.py",
    "gpu_state": "ansible_collections/megaprov/cluster/plugins/modules/gpu_state.py",
    "rdma_facts": "ansible_collections/megaprov/cluster/plugins/modules/rdma_facts.py",
    "shared_check": "ansible_collections/megaprov/cluster/plugins/modules/shared_check.py",
    "ssh_check": "ansible_collections/megaprov/cluster/plugins/modules/ssh_check.py",
}
# Check mode: the nccl check runs a benchmark (no check mode); the others read, or skip their write in check mode.
CHECK_MODE = {"nccl_check": False, "gpu_state": True, "rdma_facts": True, "shared_check": True, "ssh_check": True}
# Values for required options that make main() do nothing: no peers to reach, nothing to read back.
REQUIRED = {
    "argv": ["true"],
    "socket_interface": "eth0",
    "access": "path",
    "root": "/nonexistent/megaprov",
    "name": "node1",
    "source": "node1",
    "peers": {},
}


def documentation(short: str) -> dict:
    text = (ROOT / MODULES[short]).read_text()
    return yaml.safe_load(re.search(r'DOCUMENTATION = r"""(.*?)"""', text, re.S).group(1))


def run(short: str, args: dict, tmp_path: Path, monkeypatch, capsys) -> tuple[int, dict]:
    module = load_module(ROOT / MODULES[short], f"spec_{short}")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no ssh, nvidia-smi, dpkg-query, nfs-cp, timeout: nothing runs
    return modules.run_module(module.main, args, capsys)


def required_args(options: dict) -> dict:
    return {name: REQUIRED[name] for name, spec in options.items() if spec.get("required")}


@pytest.mark.parametrize("short", sorted(MODULES))
def test_documentation_is_valid_and_lists_every_option(short, tmp_path, monkeypatch, capsys):
    doc = documentation(short)
    assert doc["module"] == Path(MODULES[short]).stem and doc["short_description"]
    options = doc["options"]
    for name, spec in options.items():
        assert set(spec) <= {"type", "elements", "required", "default", "choices", "description"}, (name, spec)
        assert isinstance(spec.get("description", ""), str | list), name
    _, result = run(short, required_args(options), tmp_path, monkeypatch, capsys)
    assert set(result["invocation"]["module_args"]) == set(options)


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
        "list": ([7, "b"], ["7", "b"]) if spec.get("elements") == "str" else ([7, "b"], [7, "b"]),
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

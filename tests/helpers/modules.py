"""Running a role's Ansible module (roles/*/library/*.py) as Ansible does, in the test process."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args


def run_module(main: Callable[[], Any], args: dict, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    """main() with `args` as the module's JSON arguments: its exit status and the JSON result it printed."""
    with patch_module_args(args), pytest.raises(SystemExit) as stop:
        main()
    code = stop.value.code
    return (0 if code is None else code if isinstance(code, int) else 1), json.loads(capsys.readouterr().out)


def trusted(value: Any) -> Any:
    """Role defaults and vars as Ansible trusts them in a role (templates), for tests that template them by hand: every
    string of a YAML document marked trusted, through lists and mappings."""
    from ansible.template import trust_as_template

    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {k: trusted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [trusted(v) for v in value]
    return value


def role_vars(role: Any, names: list[str], **variables: Any) -> dict[str, Any]:
    """``names`` of a role's defaults and vars (``role`` its directory), templated by Ansible with ``variables`` as the
    node's facts and the inventory's settings."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    loader = DataLoader()
    known = trusted(loader.load_from_file(str(role / "defaults" / "main.yml")))
    known.update(trusted(loader.load_from_file(str(role / "vars" / "main.yml"))))
    known.update(variables)
    templar = Templar(loader=loader, variables=known)
    return {name: templar.template(known[name]) for name in names}

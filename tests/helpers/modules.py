"""Running a role's Ansible module (roles/*/library/*.py) as Ansible does, in the test process."""

from __future__ import annotations

from typing import Any

# the one runner of a module's main(), kept with the collection's plugin tests
from ansible_collections.megaprov.cluster.tests.unit.plugins.modules.utils import run_module

__all__ = ["role_vars", "run_module", "trusted"]


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

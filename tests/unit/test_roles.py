"""Role hygiene the house style asks for, checked on every role."""

import re
from pathlib import Path

import pytest
import yaml

from megaprov.cluster.stages import KNOWN_TAGS, STAGES

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (ROOT / "ansible_collections/megaprov/cluster/roles").iterdir() if p.is_dir())


def spec_options(role):
    data = yaml.safe_load((ROOT / "ansible_collections/megaprov/cluster/roles" / role / "meta" / "argument_specs.yml").read_text())
    return data["argument_specs"]["main"]["options"]


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_agree(role):
    defaults = yaml.safe_load((ROOT / "ansible_collections/megaprov/cluster/roles" / role / "defaults" / "main.yml").read_text()) or {}
    options = spec_options(role)
    assert set(defaults) == set(options)
    for name, option in options.items():
        assert name.startswith(role + "_"), f"{name} must carry the role prefix"
        assert option.get("description"), f"{name} needs a description"
        if (
            isinstance(defaults[name], (str, int, bool))
            and not (isinstance(defaults[name], str) and "{{" in defaults[name])
            and option.get("default") != {}
        ):
            assert option.get("default") == defaults[name], name


@pytest.mark.parametrize("role", ROLES)
def test_readme_lists_exactly_the_spec_variables(role):
    readme = (ROOT / "ansible_collections/megaprov/cluster/roles" / role / "README.md").read_text()
    documented = set(re.findall(r"^\| `([a-z0-9_]+)` \|", readme, flags=re.M))
    assert documented == set(spec_options(role))
    for heading in ("## Requirements", "## Role Variables", "## Dependencies", "## Example Playbook"):
        assert heading in readme


@pytest.mark.parametrize("role", ROLES)
def test_internal_variables_are_double_underscored(role):
    for path in (ROOT / "ansible_collections/megaprov/cluster/roles" / role).rglob("*.yml"):
        data = yaml.safe_load(path.read_text())
        for task in data if isinstance(data, list) else []:
            registered = task.get("register")
            if registered:
                assert registered.startswith(f"__{role}_"), f"{path}: register {registered}"


@pytest.mark.parametrize("role", ROLES)
def test_templates_start_with_ansible_managed(role):
    for template in (ROOT / "ansible_collections/megaprov/cluster/roles" / role / "templates").glob("*.j2"):
        text = template.read_text()
        if template.name == "hosts.j2":  # a block inside /etc/hosts: blockinfile writes the marker
            continue
        assert text.startswith("{{ ansible_managed | comment }}"), template


def test_stages_match_the_bootstrap_playbook():
    boot = yaml.safe_load((ROOT / "ansible_collections/megaprov/cluster/playbooks" / "bootstrap.yml").read_text())
    imported = [Path(step["ansible.builtin.import_playbook"]).stem for step in boot]
    assert imported == [name for name, _ in STAGES]
    for name in imported:
        plays = yaml.safe_load((ROOT / "ansible_collections/megaprov/cluster/playbooks" / f"{name}.yml").read_text())
        assert name in plays[0]["tags"], f"the {name} stage play must carry the tag {name}"
        for play in plays:
            roles = [role["role"] for role in play.get("roles", [])]
            # the cluster-wide settings first (role defaults), then the stage's roles, all by FQCN
            assert roles[0] == "megaprov.cluster.megaprov", (name, play["name"])
            for role in roles[1:]:
                assert role.startswith("megaprov.cluster.") and role.removeprefix("megaprov.cluster.") in KNOWN_TAGS, role


def test_no_role_depends_on_another():
    for role in ROLES:
        meta = yaml.safe_load((ROOT / "ansible_collections/megaprov/cluster/roles" / role / "meta" / "main.yml").read_text())
        assert meta.get("dependencies") == []


def test_secrets_are_never_logged():
    """Every task that creates, reads or writes the cluster private key runs with no_log."""
    keys = yaml.safe_load((ROOT / "ansible_collections/megaprov/cluster/roles/ssh_mesh/tasks/keys.yml").read_text())
    private = re.compile(r"id_ed25519(?!\.pub)")
    writers = ("ansible.builtin.command", "ansible.builtin.slurp", "ansible.builtin.copy", "megaprov.cluster.files")
    handling = [t for t in keys if any(m in t for m in writers)]
    secret = [t for t in handling if private.search(str(t)) or "results[0]" in str(t)]
    assert {t["name"] for t in secret} >= {"Generate the cluster key pair once", "Read the cluster key pair", "Install the cluster key pair"}
    for task in secret:
        assert task.get("no_log") is True, task["name"]


def _tags(node):
    if isinstance(node, dict):
        tags = node.get("tags", [])
        yield from [tags] if isinstance(tags, str) else tags
        for value in node.values():
            yield from _tags(value)
    elif isinstance(node, list):
        for item in node:
            yield from _tags(item)


def test_every_tag_in_roles_and_playbooks_is_accepted_by_the_cli():
    used = set()
    for path in list((ROOT / "ansible_collections/megaprov/cluster/roles").rglob("tasks/*.yml")) + list(
        (ROOT / "ansible_collections/megaprov/cluster/playbooks").glob("*.yml")
    ):
        used |= set(_tags(yaml.safe_load(path.read_text())))
    assert used <= KNOWN_TAGS, used - KNOWN_TAGS
    assert {"common_install", "ssh_mesh_check", "preflight", "base"} <= used


@pytest.mark.parametrize("role", ROLES)
def test_defaults_template_without_facts(role):
    """Ansible validates a role's arguments (a task tagged `always`) in every play of a run, also in plays that
    `--tags` leaves out, whose fact gathering is skipped: a default that needs a fact then fails the run
    (`bootstrap --tags preflight` on a fresh controller failed on nvidia_driver_kernel_headers). Every default must
    template with the magic variables alone."""
    from ansible.errors import AnsibleUndefinedVariable
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader
    from ansible.template import Templar, trust_as_template

    init_plugin_loader()
    role_dir = ROOT / "ansible_collections/megaprov/cluster/roles" / role
    defaults = yaml.safe_load((role_dir / "defaults" / "main.yml").read_text()) or {}
    role_vars = yaml.safe_load((role_dir / "vars" / "main.yml").read_text()) if (role_dir / "vars" / "main.yml").is_file() else {}
    magic = {
        "ansible_play_hosts_all": ["n1", "n2"],
        "groups": {"all": ["n1", "n2"]},
        "inventory_hostname": "n1",
        "hostvars": {},
        "group_names": [],
        "role_path": str(role_dir),
    }
    variables = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in {**defaults, **(role_vars or {})}.items()} | magic
    templar = Templar(loader=DataLoader(), variables=variables)
    for name, value in defaults.items():
        try:
            templar.template(trust_as_template(value) if isinstance(value, str) else value)
        except AnsibleUndefinedVariable as exc:
            pytest.fail(f"{role} default {name} needs a variable that is undefined before facts are gathered: {exc}")

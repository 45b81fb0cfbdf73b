"""Role hygiene the house style asks for, checked on every role."""

import re
from pathlib import Path

import pytest
import yaml

from megaprov.cluster.stages import KNOWN_TAGS, STAGES

ROOT = Path(__file__).resolve().parents[3]
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
def test_readme_has_the_house_sections(role):
    """The variable table itself is generated from the argument specs (tools/gen-docs.py; tests/static/test_docs.py
    fails while it is stale); the prose around it follows the house order."""
    readme = (ROOT / "ansible_collections/megaprov/cluster/roles" / role / "README.md").read_text()
    headings = ["## Requirements", "## Role Variables", "## Dependencies", "## Example Playbook"]
    assert all(h in readme for h in headings) and sorted(headings, key=readme.index) == headings
    assert readme.index("## Role Variables") < readme.index("<!-- role-variables:begin") < readme.index("## Dependencies")


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


COLLECTION = ROOT / "ansible_collections" / "megaprov" / "cluster"
# The cluster's secrets, as the roles name them. Files: the munge key (megaprov's copy and the installed one), the
# cluster user's SSH private key, the accounting database's password file and slurmdbd.conf (which holds it).
SECRET_FILE = re.compile(
    r"munge\.key|munge_cluster_key|id_ed25519(?!\.pub)|slurmdbd\.conf|__slurm_dbd_password_file|\.credentials\b|\benroot_credentials\b"
)
# Values: what a task registered from a secret file, and the munge credentials (a credential decodes once: a replay).
SECRET_VALUE = re.compile(r"__munge_key\b|__ssh_mesh_keypair\.results\[0\]|__slurm_dbd_password\b|__munge_credential\b|\benroot_credentials\b")
WRITERS = ("ansible.builtin.copy", "ansible.builtin.template", "ansible.builtin.file", "megaprov.cluster.files")
READERS = ("ansible.builtin.slurp", "ansible.builtin.command", "ansible.builtin.shell")
# The proof module records a digest of the files it is given (never their bytes): a path to a secret there is no leak.
DIGESTS = ("megaprov.cluster.proof",)


def _all_tasks():
    """(file, task) for every task of every role (tasks and handlers) and every playbook, blocks opened."""

    def walk(node):
        for task in node or []:
            if not isinstance(task, dict):
                continue
            if any(k in task for k in ("block", "rescue", "always")):
                for key in ("block", "rescue", "always"):
                    yield from walk(task.get(key))
            else:
                yield task

    for path in sorted([*COLLECTION.glob("roles/*/tasks/*.yml"), *COLLECTION.glob("roles/*/handlers/*.yml")]):
        yield from ((path, t) for t in walk(yaml.safe_load(path.read_text())))
    for path in sorted(COLLECTION.glob("playbooks/**/*.yml")):
        for play in yaml.safe_load(path.read_text()) or []:
            for key in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                yield from ((path, t) for t in walk(play.get(key) if isinstance(play, dict) else None))


def _module(task):
    return next((k for k in task if k.startswith(("ansible.", "megaprov.", "community.", "containers."))), "")


def test_every_task_that_handles_a_secret_runs_without_logging_and_writes_it_for_its_owner_alone():
    """A static check over all roles and playbooks: a task that uses a secret value, reads a secret file into a
    variable or writes one runs with no_log: true; a secret file is written 0400 or 0600 (its directory 0700). A new
    variable registered from a secret file must be named in SECRET_VALUE, or its users go unchecked: the test fails."""
    handled, bad = set(), []
    for path, task in _all_tasks():
        name, module = task.get("name", "?"), _module(task)
        args = task.get(module)
        used = yaml.safe_dump({k: v for k, v in task.items() if k not in ("name", "when", "loop_control")})
        where = f"{path.relative_to(COLLECTION)}: {name}"
        if module in DIGESTS:
            continue
        uses_secret = bool(SECRET_VALUE.search(used))
        reads_secret = module in READERS and bool(SECRET_FILE.search(used)) and "register" in task
        writes = [args] if module != "megaprov.cluster.files" else (args or {}).get("files", [])
        secret_writes = [
            w for w in writes if module in WRITERS and isinstance(w, dict) and SECRET_FILE.search(str(w.get("dest") or w.get("path") or ""))
        ]
        if uses_secret or reads_secret or secret_writes:
            handled.add(name)
            if task.get("no_log") is not True and (uses_secret or reads_secret or any("content" in w or "src" in w for w in secret_writes)):
                bad.append(f"{where}: no no_log")
        if reads_secret and not SECRET_VALUE.search(f"{task['register']}.results[0] {task['register']}"):
            bad.append(f"{where}: registers {task['register']} from a secret file: add it to SECRET_VALUE")
        for w in secret_writes:
            allowed = ("0700",) if w.get("state") == "directory" else ("0400", "0600")
            if str(w.get("mode")) not in allowed:
                bad.append(f"{where}: mode {w.get('mode')!r}, not {' or '.join(allowed)}")
    assert bad == []
    # the check sees the tasks it is about (it would pass on an empty tree otherwise)
    assert {
        "Read the cluster key",
        "Install the cluster key",
        "Keep the cluster key root's alone",
        "Decode every node's credential on the key host",
        "Read the cluster key pair",
        "Write the owner's enroot credentials file",
        "Install the cluster key pair",
        "Read the database password",
        "Write slurmdbd.conf",
    } <= handled, handled


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

"""Linters as tests: ruff, mypy (strict) and ansible-lint (production profile) must be clean; no shipped file turns
host key checking off."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(*argv, **env):
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **env}, timeout=600)


def test_ruff():
    proc = run(str(BIN / "ruff"), "check", "megaprov", "tests", "scripts", "benchmarks", "tools", "ansible_collections/megaprov/cluster/tests")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_strict():
    proc = run(str(BIN / "mypy"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ansible_lint_production_profile():
    proc = run(
        str(BIN / "ansible-lint"),
        "--offline",
        # megaprov.cluster from this checkout (FQCN roles, modules and filters), the test collections after it
        ANSIBLE_COLLECTIONS_PATH=f"{ROOT}{os.pathsep}{ROOT / '.collections'}",
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "Profile 'production' was required, and it passed" in proc.stdout + proc.stderr


# Host key checking turned off, in every spelling that takes effect. OpenSSH (readconf.c) matches keywords and the
# values of StrictHostKeyChecking case-insensitively, separates them by `=` or whitespace (`-oKey=value`, `Key value`,
# `Key = value`, values optionally quoted), and reads no, off and false as "off" and accept-new as "trust a new key":
# both let a node talk to a host whose key nobody pinned. Ansible's host_key_checking (ansible.cfg, the
# ANSIBLE_HOST_KEY_CHECKING variable, the ansible_host_key_checking host variable) and community.general.ssh_config's
# strict_host_key_checking do the same from the controller.
_QUOTE = "[\"']?"
_SEP = rf"{_QUOTE}(?:\s*[=:]\s*|\s+){_QUOTE}"
HOST_KEY_CHECKING_OFF = re.compile(
    rf"(?i)(?:stricthostkeychecking|strict_host_key_checking){_SEP}(?:no|off|false|accept-new)(?![\w.-])"
    rf"|(?<![\w-])(?:ansible_)?(?:ssh_)?host_key_checking{_SEP}(?:no|off|false|0|n|f)(?![\w.-])"
)
# What ships: the collection (roles, playbooks, modules), inventories, scripts, the package with its ansible.cfg.
# Markdown is left out: the READMEs name the forbidden settings to say they are never used.
SHIPPED = ("ansible_collections", "inventories", "scripts", "megaprov")


def _shipped_files():
    for top in SHIPPED:
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and path.suffix != ".md" and "__pycache__" not in path.parts:
                yield path


@pytest.mark.parametrize(
    "line",
    [
        "StrictHostKeyChecking no",
        "    stricthostkeychecking   accept-new",
        "StrictHostKeyChecking=no",
        "StrictHostKeyChecking = off",
        "STRICTHOSTKEYCHECKING\tFalse",
        'StrictHostKeyChecking "no"',
        "ssh -oStrictHostKeyChecking=accept-new node2",
        "ssh -o 'StrictHostKeyChecking no' node2",
        '["-o", "StrictHostKeyChecking=Accept-New"]',
        '{"StrictHostKeyChecking": "no"}',
        "host_key_checking = False",
        "ANSIBLE_HOST_KEY_CHECKING=false",
        "ansible_host_key_checking: no",
        "ansible_ssh_host_key_checking: n",
        "strict_host_key_checking: accept-new",
    ],
)
def test_host_key_checking_off_is_recognised_in_every_spelling(line):
    assert HOST_KEY_CHECKING_OFF.search(line), line


@pytest.mark.parametrize(
    "line",
    [
        "StrictHostKeyChecking yes",
        "StrictHostKeyChecking=yes",
        "StrictHostKeyChecking ask",
        '"-o", "StrictHostKeyChecking=yes"',
        "host_key_checking = True",
        "ANSIBLE_HOST_KEY_CHECKING=True",
        "StrictHostKeyChecking nothing-else",
    ],
)
def test_host_key_checking_kept_on_is_not_flagged(line):
    assert not HOST_KEY_CHECKING_OFF.search(line), line


def test_host_key_checking_is_never_turned_off():
    """No shipped file turns StrictHostKeyChecking or Ansible's host key checking off, in any spelling."""
    scanned = list(_shipped_files())
    # the files that set the policy are among those scanned (a wrong root would make this test pass on nothing)
    assert {
        ROOT / "ansible_collections/megaprov/cluster/roles/ssh_mesh/templates/ssh_config.conf.j2",
        ROOT / "megaprov/cluster/lab.py",
        ROOT / "megaprov/ansible.cfg",
    } <= set(scanned)
    found = []
    for path in scanned:
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if HOST_KEY_CHECKING_OFF.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "host key checking turned off:\n" + "\n".join(found)


def test_no_script_task_sets_a_working_directory():
    """ansible.builtin.script builds its command line with `chdir` in it, and under the mitogen strategy (--strategy
    mitogen) that command crosses to the node pickled: ansible-core 2.19's tagged strings do not unpickle there, and the
    task fails ("cannot unpickle ... _AnsibleTaggedStr": the megatron role's model check did, on every cold bootstrap
    with mitogen). A script changes its own directory instead."""
    found = []
    for path in sorted((ROOT / "ansible_collections" / "megaprov" / "cluster").rglob("*.yml")):
        docs = yaml.safe_load(path.read_text())
        stack = list(docs) if isinstance(docs, list) else []
        while stack:
            item = stack.pop()
            if not isinstance(item, dict):
                continue
            for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
                stack.extend(item.get(key) or [])
            for module in ("ansible.builtin.script", "script"):
                if isinstance(item.get(module), dict) and "chdir" in item[module]:
                    found.append(f"{path.relative_to(ROOT)}: {item.get('name', '?')}")
    assert found == [], found

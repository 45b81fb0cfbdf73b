#!/usr/bin/python
# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Install requirements into an existing virtual environment with uv, changing it only when uv's dry run says a
change is due, so a re-run reports no change and check mode reports exactly what a run would do."""

from __future__ import annotations

DOCUMENTATION = r"""
module: uv_pip
short_description: Install Python requirements into a virtual environment with uv, idempotently
description:
  - Runs C(uv pip install --dry-run) for O(name) against the environment of O(python) and reads the plan uv prints
    (C(Would make no changes), or the C(+)/C(-)/C(~) lines of what it would install, uninstall or reinstall).
  - Installs only when the plan changes something, and reports changed exactly then; a plan it cannot read fails
    the task instead of guessing.
  - In check mode the dry run alone decides; nothing is installed. Where uv itself is not installed yet (check mode
    before the first run), the task is skipped with that reason.
  - Sources as pip takes them, from the options only; uv runs with C(--no-config), so no uv.toml or pyproject.toml
    changes them. O(index_strategy=unsafe-best-match) (default) chooses among all indexes as pip does.
  - Every value goes to uv as its own argument; no shell is involved.
options:
  name:
    description: Requirements (PEP 508 strings such as C(torch==2.13.0)).
    type: list
    elements: str
    required: true
  python:
    description: Interpreter of the environment to install into (C(<venv>/bin/python)); it must exist.
    type: str
    required: true
  uv:
    description: The uv executable.
    type: str
    default: uv
  index_url:
    description: Base URL of the package index (uv's default, PyPI, when unset).
    type: str
  extra_index_url:
    description: Further package indexes.
    type: list
    elements: str
    default: []
  find_links:
    description: Directories or URLs of wheels to install from, beside the indexes.
    type: list
    elements: str
    default: []
  no_index:
    description: Use no index, only O(find_links) (a wheelhouse).
    type: bool
    default: false
  index_strategy:
    description: How uv chooses among several indexes; C(unsafe-best-match) is pip's behaviour.
    type: str
    choices: [first-index, unsafe-first-match, unsafe-best-match]
    default: unsafe-best-match
  cert:
    description: CA bundle for TLS (a TLS-intercepting proxy), given to uv as C(SSL_CERT_FILE).
    type: str
  compile_bytecode:
    description: Compile the installed files to bytecode, as pip does (the environment may not be writable at run time).
    type: bool
    default: true
author:
  - megaprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Install torch's CPU build from a wheelhouse
  megaprov.cluster.uv_pip:
    name: [torch==2.13.0]
    python: /opt/megaprov/venv/bin/python
    uv: /opt/megaprov/uv/bin/uv
    no_index: true
    find_links: [/srv/wheels]

- name: Install megatron-core from an index, behind a TLS-intercepting proxy
  megaprov.cluster.uv_pip:
    name: [megatron-core==0.16.1, einops]
    python: /opt/megaprov/venv/bin/python
    uv: /opt/megaprov/uv/bin/uv
    index_url: https://pypi.example.com/simple
    cert: /etc/ssl/certs/proxy-ca.pem
"""

RETURN = r"""
install:
  description: Distributions installed (or, in check mode, that would be), as C(name==version) or C(name @ url).
  type: list
  elements: str
  returned: always
uninstall:
  description: Distributions removed (replaced by another version), as C(name==version).
  type: list
  elements: str
  returned: always
reinstall:
  description: Distributions reinstalled at the same version.
  type: list
  elements: str
  returned: always
cmd:
  description: The uv command that installs (without C(--dry-run)).
  type: list
  elements: str
  returned: always
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

# uv's own words (crates/uv/src/commands/pip/loggers.rs): the plan's summary lines, then one line per distribution,
# " + name==version" (or " + name @ url") installed, " - " removed, " ~ " reinstalled.
NO_CHANGES = "Would make no changes"
SUMMARY = re.compile(r"^Would (download|install|uninstall) (\d+) packages?$")
DONE = re.compile(r"^(Installed|Uninstalled) (\d+) packages? in ")
CHANGE = re.compile(r"^ ([+~-]) ([A-Za-z0-9][A-Za-z0-9._-]*)(==\S+| @ \S+)$")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
KIND = {"+": "install", "-": "uninstall", "~": "reinstall"}


def read_changes(text):
    """The distributions uv's output names, by kind: {"install": [...], "uninstall": [...], "reinstall": [...]}, and
    the counts of its summary lines ({"install": 2, ...}; "download" too)."""
    changes = {"install": [], "uninstall": [], "reinstall": []}
    counts = {}
    for raw in text.splitlines():
        line = ANSI.sub("", raw).rstrip()
        found = CHANGE.match(line)
        if found:
            sign, name, spec = found.groups()
            changes[KIND[sign]].append(name + spec)
            continue
        summary = SUMMARY.match(line) or DONE.match(line)
        if summary:
            word = {"Installed": "install", "Uninstalled": "uninstall"}.get(summary.group(1), summary.group(1))
            counts[word] = int(summary.group(2))
    return changes, counts


def parse_dry_run(text):
    """What ``uv pip install --dry-run`` would do, from its output (uv prints the plan on stderr): the changes by kind
    and whether there are any. Output that says neither "no changes" nor what would change is refused (ValueError):
    a new uv wording must not read as "nothing to do"."""
    lines = [ANSI.sub("", line).strip() for line in text.splitlines()]
    changes, counts = read_changes(text)
    listed = sum(len(v) for v in changes.values())
    planned = counts.get("install", 0) + counts.get("uninstall", 0)
    if NO_CHANGES in lines:
        if listed or planned:
            raise ValueError("uv's dry run says both that it would make no changes and that it would change %d package(s)" % max(listed, planned))
        return {"changed": False, **changes}
    if not listed and not planned:
        tail = " | ".join(line for line in lines if line)[-300:]
        raise ValueError("cannot read uv's dry run: neither '%s' nor a package it would change (output: %s)" % (NO_CHANGES, tail or "none"))
    return {"changed": True, **changes}


def source_args(p):
    """uv's source arguments for the module's options, pip's way: the index, further indexes, wheel folders."""
    args = []
    if p["no_index"]:
        args.append("--no-index")
    elif p["index_url"]:
        args += ["--index-url", p["index_url"]]
    if not p["no_index"]:
        for url in p["extra_index_url"]:
            args += ["--extra-index-url", url]
    for link in p["find_links"]:
        args += ["--find-links", link]
    if not p["no_index"] and (p["index_url"] or p["extra_index_url"] or p["find_links"]):
        args += ["--index-strategy", p["index_strategy"]]
    return args


def install_argv(p, dry_run):
    """The uv command line: target environment, no configuration files, plain output, sources, then the requirements
    after "--" (a requirement is never read as an option)."""
    argv = [p["uv"], "pip", "install", "--python", p["python"], "--no-config", "--color", "never", "--no-progress"]
    argv += source_args(p)
    if dry_run:
        argv.append("--dry-run")
    elif p["compile_bytecode"]:
        argv.append("--compile-bytecode")
    return argv + ["--"] + list(p["name"])


def failure(what, rc, out, err):
    """One line for a failed uv: its last lines (uv ends with "error: ..." and its causes)."""
    lines = [line.strip() for line in ANSI.sub("", (err or "") + "\n" + (out or "")).splitlines() if line.strip()]
    return "%s failed (exit %d): %s" % (what, rc, " | ".join(lines[-6:])[-800:] or "no output")


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "list", "elements": "str", "required": True},
            "python": {"type": "str", "required": True},
            "uv": {"type": "str", "default": "uv"},
            "index_url": {"type": "str"},
            "extra_index_url": {"type": "list", "elements": "str", "default": []},
            "find_links": {"type": "list", "elements": "str", "default": []},
            "no_index": {"type": "bool", "default": False},
            "index_strategy": {"type": "str", "choices": ["first-index", "unsafe-first-match", "unsafe-best-match"], "default": "unsafe-best-match"},
            "cert": {"type": "str"},
            "compile_bytecode": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    result = {"changed": False, "install": [], "uninstall": [], "reinstall": [], "cmd": install_argv(p, dry_run=False)}
    if not p["name"]:
        module.exit_json(**result)
    if p["no_index"] and not p["find_links"]:
        module.fail_json(msg="no_index without find_links leaves uv nowhere to install from", **result)
    uv = p["uv"] if os.sep in p["uv"] else module.get_bin_path(p["uv"])
    if not uv or not os.access(uv, os.X_OK):
        if module.check_mode:
            module.exit_json(skipped=True, msg="check mode: %s is not installed yet; a run installs it first" % p["uv"], **result)
        module.fail_json(msg="%s: no uv executable there (install it first)" % p["uv"], **result)
    if not os.path.exists(p["python"]):
        if module.check_mode:
            module.exit_json(skipped=True, msg="check mode: %s does not exist yet; a run creates the environment first" % p["python"], **result)
        module.fail_json(msg="%s does not exist: create the environment first" % p["python"], **result)
    env = {"NO_COLOR": "1"}
    if p["cert"]:
        env["SSL_CERT_FILE"] = p["cert"]

    rc, out, err = module.run_command(install_argv(p, dry_run=True), environ_update=env)
    if rc != 0:
        module.fail_json(msg=failure("uv pip install --dry-run", rc, out, err), stderr=err, **result)
    try:
        plan = parse_dry_run(err + "\n" + out)
    except ValueError as exc:
        module.fail_json(msg=str(exc), stderr=err, **result)
    result.update(install=plan["install"], uninstall=plan["uninstall"], reinstall=plan["reinstall"], changed=plan["changed"])
    if not plan["changed"] or module.check_mode:
        module.exit_json(**result)

    rc, out, err = module.run_command(install_argv(p, dry_run=False), environ_update=env)
    if rc != 0:
        module.fail_json(msg=failure("uv pip install", rc, out, err), stderr=err, **result)
    done, _counts = read_changes(err + "\n" + out)
    result.update(install=done["install"], uninstall=done["uninstall"], reinstall=done["reinstall"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()

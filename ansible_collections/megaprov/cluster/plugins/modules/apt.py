#!/usr/bin/python
# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Documentation of megaprov.cluster.apt, an action plugin (plugins/action/apt.py): ansible.builtin.apt with a
dpkg-query fast path for packages already installed."""

from __future__ import annotations

DOCUMENTATION = r"""
module: apt
short_description: ansible.builtin.apt, answered by one dpkg-query when everything is already installed
description:
  - An action plugin. With O(state=present) and plain package names (optionally pinned as C(name=version)), it first
    asks dpkg over the connection whether every package is installed (at the pinned version); if so the task is
    done, unchanged, without running apt or opening its cache (a re-run of a bootstrap).
  - Otherwise, and for any other state or option, it runs M(ansible.builtin.apt) with the same options.
  - In check mode the answer is the same; apt's own check mode decides when something is missing.
options:
  name:
    description: Packages, as for M(ansible.builtin.apt) (C(name) or C(name=version)).
    type: list
    elements: str
  state:
    description: As for M(ansible.builtin.apt); only C(present) takes the fast path.
    type: str
    default: present
  update_cache:
    description: As for M(ansible.builtin.apt) (skipped when nothing is to be installed).
    type: bool
    default: false
  cache_valid_time:
    description: As for M(ansible.builtin.apt).
    type: int
    default: 0
  install_recommends:
    description: As for M(ansible.builtin.apt).
    type: bool
  allow_downgrade:
    description: As for M(ansible.builtin.apt).
    type: bool
    default: false
  deb:
    description: As for M(ansible.builtin.apt) (always runs apt).
    type: path
author:
  - megaprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Install the base packages
  megaprov.cluster.apt:
    name: [chrony, rsync]
    state: present
    install_recommends: false
"""

RETURN = r"""
changed:
  description: Whether apt installed anything (never, on the fast path).
  type: bool
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "list", "elements": "str"},
            "state": {"type": "str", "default": "present"},
            "update_cache": {"type": "bool", "default": False},
            "cache_valid_time": {"type": "int", "default": 0},
            "install_recommends": {"type": "bool"},
            "allow_downgrade": {"type": "bool", "default": False},
            "deb": {"type": "path"},
        },
        supports_check_mode=True,
    )
    module.fail_json(msg="megaprov.cluster.apt runs as an action plugin (plugins/action/apt.py); this file documents it")


if __name__ == "__main__":
    main()

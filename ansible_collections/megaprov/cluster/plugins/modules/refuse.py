#!/usr/bin/python
# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Refuse a request whose own settings cannot work, in a result megaprov reads as a usage error."""

from __future__ import annotations

DOCUMENTATION = r"""
module: refuse
short_description: Fail with a refusal of the request's own settings
description:
  - Always fails with O(msg) and C(usage_error=true). megaprov turns such a failure into a usage error (exit 2, the
    message and its fix) instead of a failed run (exit 3). Use it with a C(when) that holds when the request cannot
    work, as an C(ansible.builtin.assert) whose failure is the user's to fix.
  - It changes nothing, in check mode too.
options:
  msg:
    description: The reason, with the fix.
    type: str
    required: true
author:
  - megaprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Refuse a cluster without Slurm
  megaprov.cluster.refuse:
    msg: "Slurm does not answer on {{ inventory_hostname }}: set megaprov_scheduler: slurm, or use launch.launcher: torchrun"
  when: __job_sinfo.rc != 0
"""

RETURN = r"""
usage_error:
  description: Always true (the failure is the request's own settings, not the node).
  type: bool
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    module = AnsibleModule(argument_spec={"msg": {"type": "str", "required": True}}, supports_check_mode=True)
    module.fail_json(msg=module.params["msg"], usage_error=True)


if __name__ == "__main__":
    main()

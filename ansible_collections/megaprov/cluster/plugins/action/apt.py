# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""megaprov.cluster.apt: ansible.builtin.apt, with a fast path for a re-run. When every package the task names is
already installed (at the pinned version where one is pinned), one dpkg-query over the connection (no Python on the
node, no apt cache opened) answers, and apt is not run; otherwise, or for anything but state=present, the task is
ansible.builtin.apt with the same arguments."""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.megaprov.cluster.plugins.module_utils.apt_fast import all_installed, query_argv, wanted


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        packages = wanted(args)
        if packages is not None:
            probe = self._low_level_execute_command(query_argv(packages), sudoable=False)
            if probe.get("rc") == 0 and all_installed(packages, probe.get("stdout", "")):
                result.update(changed=False, cache_updated=False, msg="already installed: %s (dpkg-query)" % ", ".join(sorted(packages)))
                return result
        result.update(self._execute_module(module_name="ansible.builtin.apt", module_args=args, task_vars=task_vars))
        return result

# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""megaprov.cluster.apt: ansible.builtin.apt, with a fast path for a re-run. When every package the task names is
already installed (at the pinned version where one is pinned), one dpkg-query over the connection (no Python on the
node, no apt cache opened) answers, and apt is not run; otherwise, or for anything but state=present, the task is
ansible.builtin.apt with the same arguments. Before apt runs, python3-apt (which ansible.builtin.apt imports) is
installed with apt-get over the connection where it is missing: the module's own fallback installs it and re-executes
itself, which fails where modules run in-process (the mitogen strategy: "Could not import the python3-apt module" on a
fresh head, whose first apt task is the package cache's)."""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.megaprov.cluster.plugins.module_utils.apt_fast import (
    PYTHON_APT,
    PYTHON_APT_INSTALL,
    all_installed,
    query_argv,
    wanted,
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        packages = wanted(args)
        answer = None  # dpkg-query's answer, python3-apt's status included: one round trip serves both questions
        if packages is not None:
            probe = self._low_level_execute_command(query_argv({**packages, PYTHON_APT: None}), sudoable=False)
            if probe.get("rc") == 0 and all_installed(packages, probe.get("stdout", "")):
                result.update(changed=False, cache_updated=False, msg="already installed: %s (dpkg-query)" % ", ".join(sorted(packages)))
                return result
            answer = probe.get("stdout", "")
        installed_python_apt = False
        # Check mode changes nothing (the roles skip apt there without python3-apt); auto_install_module_deps: false is the
        # module's own opt-out of this install.
        if not self._task.check_mode and args.get("auto_install_module_deps", True) not in (False, "false", "no"):
            if answer is None:
                answer = self._low_level_execute_command(query_argv({PYTHON_APT: None}), sudoable=False).get("stdout", "")
            if not all_installed({PYTHON_APT: None}, answer):
                done = self._low_level_execute_command(PYTHON_APT_INSTALL, sudoable=True)
                if done.get("rc") != 0:
                    tail = (done.get("stderr") or done.get("stdout") or "").strip().splitlines()[-1:]
                    result.update(failed=True, msg="apt-get could not install python3-apt (ansible.builtin.apt needs it): %s" % " ".join(tail))
                    return result
                installed_python_apt = True
        result.update(self._execute_module(module_name="ansible.builtin.apt", module_args=args, task_vars=task_vars))
        if installed_python_apt:
            result["changed"] = True
        return result

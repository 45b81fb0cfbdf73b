"""The apt action plugin itself (plugins/action/apt.py), run in-process: Ansible's task and connection are stood in,
and so are the two doors to the node (one shell command, one module run), which record what they were asked and answer
as dpkg-query, apt-get and ansible.builtin.apt answer."""

from types import SimpleNamespace

import pytest

from ansible_collections.megaprov.cluster.plugins.action.apt import ActionModule
from ansible_collections.megaprov.cluster.plugins.module_utils import apt_fast

INSTALLED = "install ok installed"
PYTHON_APT_ROW = f"python3-apt\t{INSTALLED}\t2.6.0\n"


class Node:
    """What the node answers: dpkg-query's rows, apt-get's outcome, ansible.builtin.apt's result."""

    def __init__(self, rows="", install=None, apt=None):
        self.rows = rows
        self.install = install if install is not None else {"rc": 0, "stdout": "", "stderr": ""}
        self.apt = apt if apt is not None else {"changed": True, "cache_updated": False}
        self.commands = []
        self.modules = []

    def command(self, cmd, sudoable=True, **kwargs):
        self.commands.append((cmd, sudoable))
        if cmd.startswith("dpkg-query"):
            return {"rc": 0, "stdout": self.rows, "stderr": ""}
        return dict(self.install)

    def module(self, module_name=None, module_args=None, task_vars=None, **kwargs):
        self.modules.append((module_name, module_args, task_vars))
        return dict(self.apt)


def action(args, node, check_mode=False):
    task = SimpleNamespace(args=args, check_mode=check_mode, async_val=0, action="megaprov.cluster.apt")
    connection = SimpleNamespace(_shell=SimpleNamespace(tmpdir="/tmp/ansible-tmp"))
    plugin = ActionModule(task, connection, play_context=None, loader=None, templar=None, shared_loader_obj=None)
    plugin._low_level_execute_command = node.command
    plugin._execute_module = node.module
    return plugin


def test_everything_installed_is_answered_by_one_dpkg_query_and_apt_never_runs():
    node = Node(rows=f"chrony\t{INSTALLED}\t4.3\nrsync\t{INSTALLED}\t3.2\n{PYTHON_APT_ROW}")
    result = action({"name": ["rsync", "chrony"], "state": "present"}, node).run(task_vars={"x": 1})
    assert result == {"changed": False, "cache_updated": False, "msg": "already installed: chrony, rsync (dpkg-query)"}
    # one round trip, python3-apt asked with the packages, as the node's user (no become)
    assert node.commands == [(apt_fast.query_argv({"chrony": None, "rsync": None, "python3-apt": None}), False)]
    assert node.modules == []


def test_a_missing_package_runs_apt_with_the_tasks_own_arguments_and_vars():
    node = Node(rows=f"chrony\t{INSTALLED}\t4.3\n{PYTHON_APT_ROW}", apt={"changed": True, "cache_updated": True, "stdout": "Setting up rsync"})
    args = {"name": ["chrony", "rsync"], "update_cache": True}
    result = action(args, node).run(task_vars={"inventory_hostname": "n1"})
    assert node.modules == [("ansible.builtin.apt", args, {"inventory_hostname": "n1"})]
    assert result == {"changed": True, "cache_updated": True, "stdout": "Setting up rsync"}
    # python3-apt was present in the same answer: no second query, no apt-get
    assert len(node.commands) == 1


def test_a_failed_dpkg_query_is_not_read_as_installed():
    node = Node(rows=f"chrony\t{INSTALLED}\t4.3\n{PYTHON_APT_ROW}")

    def failing(cmd, sudoable=True, **kwargs):
        node.commands.append((cmd, sudoable))
        return {"rc": 1, "stdout": f"chrony\t{INSTALLED}\t4.3\n{PYTHON_APT_ROW}", "stderr": ""}

    plugin = action({"name": ["chrony"]}, node)
    plugin._low_level_execute_command = failing
    result = plugin.run(task_vars={})
    assert node.modules and node.modules[0][0] == "ansible.builtin.apt"
    assert result["changed"] is True
    # its answer still says python3-apt is there: no install, no second query
    assert len(node.commands) == 1


def test_a_pinned_version_that_differs_runs_apt():
    node = Node(rows=f"libnccl2\t{INSTALLED}\t2.26.2-1\n{PYTHON_APT_ROW}")
    action({"name": ["libnccl2=2.27.7-1"]}, node).run(task_vars={})
    assert [m[0] for m in node.modules] == ["ansible.builtin.apt"]


def test_python3_apt_is_installed_with_become_before_apt_and_the_task_reports_a_change():
    node = Node(rows="", apt={"changed": False, "cache_updated": False})
    result = action({"name": ["rsync"]}, node).run(task_vars={})
    assert node.commands[1:] == [(apt_fast.PYTHON_APT_INSTALL, True)]
    assert node.modules[0][0] == "ansible.builtin.apt"
    # apt changed nothing, but python3-apt was installed on the node
    assert result["changed"] is True


def test_a_task_apt_alone_decides_still_gets_python3_apt_first():
    """state=latest is not the fast path: one query for python3-apt alone, then its install, then apt."""
    node = Node(rows="")
    action({"name": ["rsync"], "state": "latest"}, node).run(task_vars={})
    assert node.commands == [(apt_fast.query_argv({"python3-apt": None}), False), (apt_fast.PYTHON_APT_INSTALL, True)]
    assert len(node.modules) == 1


def test_a_task_apt_alone_decides_with_python3_apt_present_runs_apt_only():
    node = Node(rows=PYTHON_APT_ROW, apt={"changed": False})
    result = action({"name": ["rsync"], "state": "latest"}, node).run(task_vars={})
    assert node.commands == [(apt_fast.query_argv({"python3-apt": None}), False)]
    assert result == {"changed": False}


def test_a_failed_python3_apt_install_fails_the_task_with_apt_gets_last_line_and_apt_never_runs():
    node = Node(rows="", install={"rc": 100, "stdout": "Reading package lists...", "stderr": "W: first\nE: Unable to locate package python3-apt\n"})
    result = action({"name": ["rsync"]}, node).run(task_vars={})
    assert result == {
        "failed": True,
        "msg": "apt-get could not install python3-apt (ansible.builtin.apt needs it): E: Unable to locate package python3-apt",
    }
    assert node.modules == []


def test_a_failed_install_without_stderr_quotes_stdouts_last_line():
    node = Node(rows="", install={"rc": 1, "stdout": "one\ntwo\n", "stderr": ""})
    result = action({"name": ["rsync"]}, node).run(task_vars={})
    assert result["msg"].endswith("needs it): two")


def test_a_failed_install_that_said_nothing_fails_with_an_empty_tail():
    node = Node(rows="", install={"rc": 1})
    result = action({"name": ["rsync"]}, node).run(task_vars={})
    assert result == {"failed": True, "msg": "apt-get could not install python3-apt (ansible.builtin.apt needs it): "}


def test_check_mode_installs_nothing_and_leaves_the_decision_to_apt():
    node = Node(rows="")
    result = action({"name": ["rsync"]}, node, check_mode=True).run(task_vars={})
    # the fast path's query only; no apt-get
    assert [c[0] for c in node.commands] == [apt_fast.query_argv({"rsync": None, "python3-apt": None})]
    assert len(node.modules) == 1 and result["changed"] is True


@pytest.mark.parametrize("opt_out", [False, "false", "no"])
def test_auto_install_module_deps_false_is_the_tasks_opt_out(opt_out):
    node = Node(rows="", apt={"changed": False, "failed": True, "msg": "Could not import the python3-apt module"})
    result = action({"name": ["rsync"], "auto_install_module_deps": opt_out}, node).run(task_vars={})
    # auto_install_module_deps is not a fast-path option: no query at all, no install; apt says what it says
    assert node.commands == []
    assert result["failed"] is True and "changed" in result and result["changed"] is False


def test_auto_install_module_deps_true_installs():
    node = Node(rows="")
    action({"name": ["rsync"], "auto_install_module_deps": True}, node).run(task_vars={})
    assert (apt_fast.PYTHON_APT_INSTALL, True) in node.commands


def test_a_probe_answer_without_stdout_counts_as_nothing_installed():
    node = Node()

    def silent(cmd, sudoable=True, **kwargs):
        node.commands.append((cmd, sudoable))
        return {"rc": 0} if cmd.startswith("dpkg-query") else {"rc": 0, "stdout": ""}

    plugin = action({"name": ["rsync"]}, node)
    plugin._low_level_execute_command = silent
    plugin.run(task_vars={})
    assert [c[0] for c in node.commands] == [apt_fast.query_argv({"rsync": None, "python3-apt": None}), apt_fast.PYTHON_APT_INSTALL]


def test_a_failed_install_quotes_only_the_last_of_several_lines():
    node = Node(rows="", install={"rc": 100, "stderr": "W: one\nW: two\nE: Sub-process /usr/bin/dpkg returned an error code (1)\n"})
    result = action({"name": ["rsync"]}, node).run(task_vars={})
    assert (
        result["msg"]
        == "apt-get could not install python3-apt (ansible.builtin.apt needs it): E: Sub-process /usr/bin/dpkg returned an error code (1)"
    )


def test_a_python3_apt_query_without_stdout_counts_as_missing():
    """Outside the fast path (state=latest) the second query alone asks for python3-apt: an answer without stdout is
    not an error, python3-apt is installed."""
    node = Node()

    def silent(cmd, sudoable=True, **kwargs):
        node.commands.append((cmd, sudoable))
        return {"rc": 0} if cmd.startswith("dpkg-query") else {"rc": 0, "stdout": ""}

    plugin = action({"name": ["rsync"], "state": "latest"}, node)
    plugin._low_level_execute_command = silent
    plugin.run(task_vars={})
    assert [c[0] for c in node.commands] == [apt_fast.query_argv({"python3-apt": None}), apt_fast.PYTHON_APT_INSTALL]


def test_the_plugin_runs_without_the_base_classs_deprecation_warning(monkeypatch):
    """ActionBase.run warns when handed a tmp directory (deprecated): the plugin passes on the None it was given."""
    from ansible.plugins import action as action_base

    warned = []
    monkeypatch.setattr(action_base.display, "warning", lambda msg, *args, **kwargs: warned.append(msg))
    node = Node(rows=PYTHON_APT_ROW)
    action({"name": ["rsync"]}, node).run(task_vars={"inventory_hostname": "n1"})
    assert warned == []

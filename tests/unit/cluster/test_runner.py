import dataclasses
from pathlib import Path

from megaprov.cluster import runner
from megaprov.paths import ANSIBLE_CFG

SPEC = runner.RunSpec(
    playbook=Path("/p/ansible_collections/megaprov/cluster/playbooks/bootstrap.yml"),
    inventories=(Path("/inv/inventory.ini"),),
    private_data_dir=Path("/state/runs/x"),
    collections_root=Path("/p"),
    fact_cache_dir=Path("/state/facts/abc"),
)


def test_default_kwargs_are_exact():
    kwargs = runner.build_run_kwargs(SPEC, path="/venv/bin:/usr/bin")
    assert kwargs == {
        "private_data_dir": "/state/runs/x",
        "project_dir": "/p/ansible_collections/megaprov/cluster",
        "playbook": "/p/ansible_collections/megaprov/cluster/playbooks/bootstrap.yml",
        "inventory": ["/inv/inventory.ini"],
        "envvars": {
            "ANSIBLE_CONFIG": str(ANSIBLE_CFG),
            "ANSIBLE_COLLECTIONS_PATH": "/p",
            "ANSIBLE_HOST_KEY_CHECKING": "True",
            "ANSIBLE_CACHE_PLUGIN": "jsonfile",
            "ANSIBLE_CACHE_PLUGIN_CONNECTION": "/state/facts/abc",
            "ANSIBLE_FORCE_COLOR": "False",
            "PYTHONUNBUFFERED": "1",
            "PATH": "/venv/bin:/usr/bin",
        },
        "extravars": {},
        "suppress_env_files": True,
        "fact_cache_type": "none",
        "quiet": True,
        "json_mode": False,
        "timeout": None,
    }


def test_flags_map_to_runner_arguments():
    options = runner.RunOptions(
        limit="gpu_nodes",
        tags=("base", "ssh_mesh"),
        skip_tags=("preflight",),
        check=True,
        diff=True,
        forks=16,
        extravars={"a": 1},
        verbosity=2,
        flush_cache=True,
    )
    spec = dataclasses.replace(SPEC, options=options)
    kwargs = runner.build_run_kwargs(spec)
    assert kwargs["cmdline"] == "--check --diff --flush-cache"
    assert (kwargs["limit"], kwargs["tags"], kwargs["skip_tags"], kwargs["forks"], kwargs["verbosity"]) == (
        "gpu_nodes",
        "base,ssh_mesh",
        "preflight",
        16,
        2,
    )
    assert kwargs["extravars"] == {"a": 1}


def test_mitogen_strategy_sets_the_plugin_path():
    spec = dataclasses.replace(SPEC, options=runner.RunOptions(strategy="mitogen"))
    env = runner.build_run_kwargs(spec, strategy_dir=Path("/site/ansible_mitogen/plugins/strategy"))["envvars"]
    assert env["ANSIBLE_STRATEGY"] == "mitogen_linear"
    assert env["ANSIBLE_STRATEGY_PLUGINS"] == "/site/ansible_mitogen/plugins/strategy"
    assert runner.mitogen_strategy_dir().name == "strategy"


def _event(kind, host=None, task="t", **data):
    event_data = {"task": task, **data}
    if host:
        event_data["host"] = host
    return {"event": kind, "event_data": event_data}


def test_events_fold_into_stats_failures_and_results():
    folder = runner.EventFolder(collect=("megaprov.cluster.node_facts",))
    folder(_event("playbook_on_play_start", play="Preflight"))
    folder(
        _event(
            "runner_on_ok",
            "n1",
            "Collect node facts",
            task_action="megaprov.cluster.node_facts",
            res={"checks": [1]},
            start="2026-01-01T00:00:00",
            end="2026-01-01T00:00:02",
        )
    )
    folder(_event("runner_on_ok", "n1", "Other", task_action="ansible.builtin.copy", res={}, start="2026-01-01T00:00:02", end="2026-01-01T00:00:05"))
    folder(_event("runner_on_failed", "n2", "Install", res={"msg": "E: Unable to locate package foo\n"}, ignore_errors=False))
    folder(_event("runner_on_failed", "n2", "Probe", res={"msg": "ignored"}, ignore_errors=True))
    folder(_event("runner_on_unreachable", "n3", "Collect node facts", res={"msg": "ssh: connect to host x port 22: Connection refused"}))
    folder({"event": "playbook_on_stats", "event_data": {"ok": {"n1": 2}, "changed": {"n1": 1}, "failures": {"n2": 1}, "dark": {"n3": 1}}})
    stats = {h.host: h for h in folder.host_stats()}
    assert (stats["n1"].ok, stats["n1"].changed, stats["n1"].seconds) == (2, 1, 5.0)
    assert stats["n2"].failed == 1 and stats["n3"].unreachable == 1
    assert folder.failures == [
        runner.Failure("n2", "Install", "Preflight", "E: Unable to locate package foo", False),
        runner.Failure("n3", "Collect node facts", "Preflight", "ssh: connect to host x port 22: Connection refused", True),
    ]
    assert [(r.host, r.res) for r in folder.results] == [("n1", {"checks": [1]})]


def test_new_private_dirs_are_fresh_and_pruned(tmp_path):
    made = [runner.new_private_dir(tmp_path, "t") for _ in range(runner.KEEP_RUNS + 3)]
    assert len(set(made)) == len(made)
    assert len(list((tmp_path / "runs").iterdir())) == runner.KEEP_RUNS
    assert made[-1].stat().st_mode & 0o777 == 0o700


def test_only_runner_imports_ansible_runner():
    root = Path(__file__).resolve().parents[3] / "megaprov"
    importers = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if "ansible_runner" in p.read_text())
    assert importers == ["cluster/runner.py"]


def test_the_first_playbook_error_is_extracted():
    stdout = (
        "PLAY [x] ***\n[ERROR]: YAML parsing failed: While parsing a flow sequence did not find expected ',' or ']'.\n"
        "Origin: /p/roles/common/tasks/install.yml:4:32\n\n4     argv: [a]\n"
    )
    assert runner.first_error_line(stdout) == (
        "YAML parsing failed: While parsing a flow sequence did not find expected ',' or ']'. (Origin: /p/roles/common/tasks/install.yml:4:32)"
    )
    assert runner.first_error_line("ERROR! the playbook: x.yml could not be found\n") == "the playbook: x.yml could not be found"
    assert runner.first_error_line("PLAY RECAP\nok=1\n") == ""


def test_a_failed_command_is_explained_by_its_stderr():
    folder = runner.EventFolder()
    res = {"msg": "non-zero return code", "rc": 100, "stderr": "E: Unable to locate package python3-apt\nW: stale lists", "stdout": ""}
    folder(_event("runner_on_failed", "n1", "Install python3-apt", res=res))
    assert folder.failures[0].message == "W: stale lists"


def test_extravars_are_data_in_the_run_kwargs():
    spec = dataclasses.replace(SPEC, options=runner.RunOptions(extravars={"a": 1, "b": "{{ x }}", "c": {"d": ["e", 2]}}))
    assert runner.build_run_kwargs(spec)["extravars"] == {
        "a": 1,
        "b": {"__ansible_unsafe": "{{ x }}"},
        "c": {"d": [{"__ansible_unsafe": "e"}, 2]},
    }


def test_reserved_ansible_keys_are_refused():
    import pytest

    from megaprov.errors import UsageError

    with pytest.raises(UsageError, match="reserved by Ansible"):
        runner.as_data({"x": {"__ansible_vault": "abc"}})


def test_a_template_in_an_extra_var_reaches_the_play_verbatim_and_never_runs(tmp_path):
    """A real ansible-playbook run (localhost, connection local): the lookup must not create the canary."""
    canary = tmp_path / "canary"
    out = tmp_path / "out.txt"
    hostile = "{{ lookup('pipe', 'touch " + str(canary) + "') }}"
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    (tmp_path / "inventory.ini").write_text(f"localhost ansible_connection=local ansible_python_interpreter={runner.sys.executable}\n")
    (tmp_path / "play.yml").write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.copy:\n"
        '        dest: "{{ out }}"\n'
        '        content: "{{ job.unit }}|{{ job.hosts[0] }}|{{ plain }}"\n'
    )
    (tmp_path / "run").mkdir()
    spec = runner.RunSpec(
        playbook=tmp_path / "play.yml",
        inventories=(tmp_path / "inventory.ini",),
        private_data_dir=tmp_path / "run",
        collections_root=tmp_path,
        fact_cache_dir=tmp_path / "facts",
        options=runner.RunOptions(extravars={"out": str(out), "job": {"unit": hostile, "hosts": [hostile]}, "plain": hostile}),
    )
    result = runner.run(spec)
    assert result.ok, (result.status, result.failures, result.error_line)
    assert not canary.exists(), "Ansible templated an extra var"
    assert out.read_text() == "|".join([hostile] * 3)


def test_what_a_play_says_through_set_stats_and_its_tasks_roles_are_folded():
    folder = runner.EventFolder(collect=("ansible.builtin.debug",))
    folder(_event("runner_on_ok", "head", "Any name", task_action="ansible.builtin.debug", res={"msg": "observe: x"}, role="prometheus"))
    folder(_event("runner_on_ok", "head", "Another", task_action="ansible.builtin.debug", res={"msg": "y"}))
    assert not folder.stats_seen  # a run cut short before its stats: what it would have said is unknown
    folder({"event": "playbook_on_stats", "event_data": {"ok": {"head": 2}, "artifact_data": {"slurm_submitted": "17\n"}}})
    assert [(r.role, r.res["msg"]) for r in folder.results] == [("prometheus", "observe: x"), ("", "y")]
    assert folder.data == {"slurm_submitted": "17\n"} and folder.stats_seen


def test_set_stats_and_roles_reach_the_result_of_a_real_run(tmp_path):
    """A real ansible-playbook run (localhost, connection local): what the job plays hand to megaprov (set_stats) and
    the role a collected task belongs to come back in the RunResult, whatever the tasks are named."""
    (tmp_path / "inventory.ini").write_text(f"localhost ansible_connection=local ansible_python_interpreter={runner.sys.executable}\n")
    tasks = tmp_path / "roles" / "prometheus" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "main.yml").write_text("- name: Whatever it is called\n  ansible.builtin.debug:\n    msg: 'observe: up'\n")
    (tmp_path / "play.yml").write_text(
        "- hosts: localhost\n  gather_facts: false\n  roles: [prometheus]\n  tasks:\n"
        "    - name: Some name\n      ansible.builtin.command:\n        argv: [echo, '17']\n      register: out\n      changed_when: true\n"
        "    - name: Any other name\n      ansible.builtin.set_stats:\n        data:\n          slurm_submitted: '{{ out.stdout }}'\n"
        "          units_may_run: true\n        aggregate: false\n"
    )
    (tmp_path / "run").mkdir()
    spec = runner.RunSpec(tmp_path / "play.yml", (tmp_path / "inventory.ini",), tmp_path / "run", tmp_path, tmp_path / "facts")
    result = runner.run(spec, collect=("ansible.builtin.debug",))
    assert result.ok, (result.status, result.failures, result.error_line)
    assert result.data == {"slurm_submitted": "17", "units_may_run": True} and result.stats_seen
    assert [(r.role.rpartition(".")[2], r.res["msg"]) for r in result.results] == [("prometheus", "observe: up")]

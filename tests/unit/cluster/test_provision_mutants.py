"""What bootstrap and preflight (megaprov/cluster/provision.py) show and hand over: the spec and extra-vars given to
ansible-runner, the verdict judged from what came back, the report lines printed for each stage's check (driver
state, ssh mesh, shared directory, fabric, NCCL, Slurm, observe, compute, proofs, time per stage), the failures on
stderr, and the refusals of a --limit or --tags before anything runs.

Stood in: ansible-runner (``runner.run`` answers with the given results, recording the spec it was handed) and the
state directory (a temporary MEGAPROV_STATE). The inventory loader, the stage playbooks and the rendering are real."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from megaprov.cluster import history, provision, runner
from megaprov.errors import ExitCode, UsageError
from megaprov.output import SILENT
from tests.helpers import plays

HOSTS = "[head]\nh1 ansible_host=10.0.0.1\n[gpu_nodes]\nn1 ansible_host=10.0.0.2\nn2 ansible_host=10.0.0.3\n"


# the run's host stats and duration, which the reports print
Play = functools.partial(plays.Play, hosts=[runner.HostStats("h1", ok=3, changed=1), runner.HostStats("n1", ok=2)], seconds=12.34)


def task(host: str, action: str, res: dict[str, Any], role: str = "") -> runner.TaskResult:
    return runner.TaskResult(host, "t", action, res, None, role)


@pytest.fixture
def inventory(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    path = tmp_path / "inventory.ini"
    path.write_text(HOSTS)
    return path


# ---- the driver state, the ssh mesh and the proofs, as lines


def test_gpu_summary_says_what_the_driver_stage_found_for_each_state():
    assert provision.gpu_summary({"action": "no_gpu"}) == "skipped: no GPU on the PCI bus"
    assert provision.gpu_summary({"action": "no_gpu", "installed_version": "550.1"}) == (
        "skipped: no GPU on the PCI bus (driver package 550.1 installed)"
    )
    assert provision.gpu_summary({"action": "none", "loaded_version": "550.1", "smi": [{}, {}]}) == "driver 550.1 loaded, 2 GPU(s) in nvidia-smi"
    assert provision.gpu_summary({"action": "none", "loaded_version": "550.1"}) == "driver 550.1 loaded, 0 GPU(s) in nvidia-smi"
    assert provision.gpu_summary({"action": "reboot", "installed_version": "550.2", "loaded_version": "535.9"}) == (
        "driver 550.2 installed but 535.9 loaded: reboot needed"
    )
    assert provision.gpu_summary({"action": "reboot", "loaded_version": "535.9"}) == "driver none installed but 535.9 loaded: reboot needed"
    assert provision.gpu_summary({"action": "load", "installed_version": "550.2"}) == "driver 550.2 installed, not loaded yet"
    assert provision.gpu_summary({"action": "load"}) == "driver none installed, not loaded yet"
    assert provision.gpu_summary({"action": "install", "installed_version": "550.2"}) == "no driver installed"
    assert provision.gpu_summary({}) == "no driver installed"


def pair(source: str, peer: str, ok: bool = True, seconds: float = 0.1, cached: str = "") -> dict[str, Any]:
    line = f"{source} -> {peer}: " + ("ok" if ok else "Permission denied (publickey)")
    return {"source": source, "peer": peer, "ok": ok, "seconds": seconds, "line": line, "cached": cached}


def test_mesh_lines_count_the_pairs_list_the_failed_ones_and_the_hosts_left_out():
    mesh = [pair("n1", "n2", seconds=0.25), pair("n2", "n1", ok=False, seconds=1.5), pair("h1", "n1")]
    assert provision.mesh_lines(mesh, ["n3", "n4"]) == [
        "ssh mesh: 2/3 pairs among h1, n1, n2 connect without a prompt (slowest 1.50s)",
        "  n2 -> n1: Permission denied (publickey)",
        "ssh mesh: left out as unreachable (no pair with them was tried): n3, n4",
    ]
    assert provision.mesh_lines([], []) == []
    assert provision.mesh_lines([], ["n3"]) == ["ssh mesh: left out as unreachable (no pair with them was tried): n3"]


def test_mesh_lines_say_when_only_some_pairs_came_from_a_proof():
    note = "verified at 2026-01-01T00:00:00Z, inputs unchanged; --verify re-proves"
    some = [pair("n1", "n2", cached=note), pair("n2", "n1")]
    assert provision.mesh_lines(some, []) == [
        f"ssh mesh: 2/2 pairs among n1, n2 connect without a prompt (slowest 0.10s) (some pairs cached: {note})"
    ]
    every = [pair("n1", "n2", cached=note), pair("n2", "n1", cached=note)]
    assert provision.mesh_lines(every, []) == [f"ssh mesh: 2/2 pairs among n1, n2 connect without a prompt (slowest 0.10s) ({note})"]


def test_proof_lines_name_every_host_a_proof_ran_on():
    proofs = [
        {"host": "n2", "name": "nccl", "valid": False, "reason": "no record", "verified_at": ""},
        {"host": "n1", "name": "nccl", "valid": False, "reason": "no record", "verified_at": ""},
        {"host": "n1", "name": "nccl", "valid": False, "reason": "no record", "verified_at": ""},
    ]
    assert provision.proof_lines(proofs, verify=False) == ["proof nccl: proved this run on n1, n2 (no record)"]


# ---- what bootstrap hands ansible-runner and what it reads back


def test_bootstrap_runs_the_bootstrap_playbook_on_the_inventory_and_reports_each_stage(inventory, tmp_path, monkeypatch):
    note = "verified at 2026-01-01T00:00:00Z, inputs unchanged; --verify re-proves"
    results = [
        task("n1", provision.FACTS_ACTION, {"node": {"gpus": 8}, "checks": [{"check": "kernel", "status": "pass", "value": "6.8"}]}),
        task("n1", provision.MESH_ACTION, {"pairs": [pair("n1", "n2", seconds=0.2)], "left_out": ["n3"]}),
        task("n2", provision.MESH_ACTION, {"pairs": [pair("n2", "n1", ok=False)], "left_out": []}),
        task("n1", provision.SHARED_ACTION, {"checks": [{"writer": "n2", "ok": True, "error": ""}]}),
        task("n1", provision.FABRIC_ACTION, {"summary": "2 ports up", "ports": [1], "gpus": 8, "nccl_env": {"NCCL_IB_HCA": "mlx5_0"}, "x": 1}),
        task("n2", provision.FABRIC_ACTION, {"ports": []}),  # no summary: not reported
        task("n1", provision.GPU_ACTION, {"action": "load", "installed_version": "550.2"}),
        task("n2", provision.GPU_ACTION, {"installed_version": "550.2"}),  # no action: not reported
        task("n1", provision.NCCL_ACTION, {"summary": "busbw 180 GB/s"}),
        task("n2", provision.NCCL_ACTION, {"summary": "busbw 170 GB/s", "cached": note}),
        task("n2", provision.NCCL_ACTION, {"msg": "no summary"}),
        task("h1", provision.SLURM_ACTION, {"summary": "2 nodes idle"}),
        task("h1", "ansible.builtin.debug", {"msg": "observe: prometheus on 10.0.0.1:9090"}, role="megaprov.cluster.prometheus"),
        task("h1", "ansible.builtin.debug", {"msg": "observe: other role"}, role="megaprov.cluster.grafana"),
        task("h1", "ansible.builtin.debug", {"msg": ["not", "a", "string"]}, role="prometheus"),
        task("n1", provision.COMPUTE_ACTION, {"summary": "GEMM 700 TFLOP/s", "warning": "below the model's 900"}),
    ]
    play = Play(tmp_path, results)
    monkeypatch.setattr(runner, "run", play)
    options = runner.RunOptions(limit="gpu_nodes", tags=("gpu",), extravars={"megaprov_verify": True})
    report = provision.bootstrap(provision.Request(inventory, options, SILENT))

    (spec,) = play.specs
    assert spec.playbook.name == "bootstrap.yml" and spec.inventories == (inventory.resolve(),)
    assert spec.options is options
    assert play.collect == [
        (
            provision.FACTS_ACTION,
            provision.MESH_ACTION,
            provision.SHARED_ACTION,
            provision.FABRIC_ACTION,
            provision.GPU_ACTION,
            provision.NCCL_ACTION,
            provision.COMPUTE_ACTION,
            provision.SLURM_ACTION,
            "ansible.builtin.debug",
            provision.PROOF_ACTION,
        )
    ]
    assert report.ok and report.exit_code == ExitCode.OK and report.error is None
    assert (report.inventory, report.playbook, report.changed, report.seconds) == (str(inventory.resolve()), "bootstrap.yml", 1, 12.34)
    assert report.artifacts == str(tmp_path / "artifacts")
    assert report.checks == [{"host": "n1", "check": "kernel", "status": "pass", "value": "6.8"}]
    assert report.nodes == {"n1": {"gpus": 8}}
    assert [(p["source"], p["peer"], p["ok"]) for p in report.mesh] == [("n1", "n2", True), ("n2", "n1", False)]
    assert report.mesh_left_out == ["n3"]
    assert report.shared == [{"reader": "n1", "writer": "n2", "ok": True, "error": "", "cached": ""}]
    assert report.fabric == {"n1": {"summary": "2 ports up", "ports": [1], "gpus": 8, "nccl_env": {"NCCL_IB_HCA": "mlx5_0"}}}
    assert report.gpu == {"n1": "driver 550.2 installed, not loaded yet"}
    assert report.nccl == ["n1: busbw 180 GB/s", f"n2: busbw 170 GB/s ({note})"]
    assert report.slurm == ["2 nodes idle"]
    assert report.observe == ["prometheus on 10.0.0.1:9090"]
    assert report.compute == {"n1": "GEMM 700 TFLOP/s; warning: below the model's 900"}
    assert report.verify is True and report.proofs == []
    status = json.loads(history.status_file(inventory.resolve()).read_text())
    assert status["last"]["ok"] is True and status["last"]["exit_code"] == 0


def test_bootstrap_reads_cached_checks_in_order_and_results_without_their_lists(inventory, tmp_path, monkeypatch):
    """The mesh's and the shared directory's checks as the report lists them: each carries its task's cached note, the
    shared ones ordered by reader then writer; a result without pairs, left-out hosts or checks adds none. The run
    directory is named after the command."""
    note = "verified at 2026-01-01T00:00:00Z, inputs unchanged; --verify re-proves"
    results = [
        task("n2", provision.MESH_ACTION, {"pairs": [pair("n2", "n1")], "cached": note}),
        task("n1", provision.MESH_ACTION, {}),
        task("n2", provision.SHARED_ACTION, {"checks": [{"writer": "n2", "ok": True, "error": ""}, {"writer": "n1", "ok": True, "error": ""}]}),
        task("n1", provision.SHARED_ACTION, {"checks": [{"writer": "n2", "ok": False, "error": "EACCES"}], "cached": note}),
        task("h1", provision.SHARED_ACTION, {}),
    ]
    play = Play(tmp_path, results)
    monkeypatch.setattr(runner, "run", play)
    report = provision.bootstrap(provision.Request(inventory, runner.RunOptions(), SILENT))
    assert play.specs[0].private_data_dir.name.endswith("-bootstrap")
    assert report.mesh == [{**pair("n2", "n1"), "cached": note}] and report.mesh_left_out == []
    assert report.shared == [
        {"reader": "n1", "writer": "n2", "ok": False, "error": "EACCES", "cached": note},
        {"reader": "n2", "writer": "n1", "ok": True, "error": "", "cached": ""},
        {"reader": "n2", "writer": "n2", "ok": True, "error": "", "cached": ""},
    ]


def test_bootstrap_with_a_failed_task_names_the_host_the_task_and_the_count_of_others(inventory, tmp_path, monkeypatch):
    failures = [
        runner.Failure("n1", "Install the driver", "drivers", "apt said no", False),
        runner.Failure("n2", "Install the driver", "drivers", "apt said no", False),
    ]
    monkeypatch.setattr(runner, "run", Play(tmp_path, [], failures, status="failed", rc=2))
    report = provision.bootstrap(provision.Request(inventory, runner.RunOptions(), SILENT))
    assert not report.ok and report.exit_code == ExitCode.RUN_FAILED
    assert report.error == "n1: task 'Install the driver' failed: apt said no (and 1 more failure(s))"
    assert report.verify is False


def test_an_unreachable_host_is_its_own_exit_code_with_the_hint_to_check_ssh(tmp_path):
    result = Play(
        tmp_path,
        [],
        [runner.Failure("n2", "Gathering Facts", "p", "ssh: timed out", True), runner.Failure("n1", "x", "p", "refused", True)],
        status="failed",
        rc=4,
    ).answer
    assert provision._judge(result) == (
        ExitCode.UNREACHABLE,
        "host(s) n1, n2 unreachable: ssh: timed out (and 1 more failure(s)); check the address, SSH key and that sshd runs",
    )
    one = Play(tmp_path, [], [runner.Failure("n2", "Install", "p", "boom", False)], status="failed", rc=2).answer
    assert provision._judge(one) == (ExitCode.RUN_FAILED, "n2: task 'Install' failed: boom")


def test_a_run_that_failed_without_a_task_failure_points_at_its_stdout(tmp_path):
    bare = Play(tmp_path, [], status="failed", rc=1).answer
    assert provision._judge(bare) == (ExitCode.RUN_FAILED, f"ansible-playbook ended with status failed (rc 1); see {tmp_path / 'artifacts'}/stdout")
    said = Play(tmp_path, [], status="failed", rc=1, error_line="ERROR! no playbook").answer
    assert provision._judge(said) == (ExitCode.RUN_FAILED, f"ERROR! no playbook; see {tmp_path / 'artifacts'}/stdout")
    assert provision._judge(Play(tmp_path, []).answer) == (ExitCode.OK, None)


def test_preflight_turns_off_enforcement_and_judges_the_table_itself(inventory, tmp_path, monkeypatch):
    rows = [
        {"check": "gpus", "status": "fail", "value": 7, "reason": "expected 8"},
        {"check": "kernel", "status": "pass", "value": "6.8", "reason": ""},
        {"check": "memlock", "status": "warn", "value": "64", "reason": "low"},
    ]
    results = [
        task("n2", provision.FACTS_ACTION, {"node": {"gpus": 7}, "checks": rows[:1]}),
        task("n1", provision.FACTS_ACTION, {"node": {"gpus": 8}, "checks": rows[1:]}),
        task("n1", provision.COMPUTE_ACTION, {"summary": "GEMM 900; this run 880", "cached": "verified at T"}),
    ]
    play = Play(tmp_path, results)
    monkeypatch.setattr(runner, "run", play)
    report = provision.preflight(provision.Request(inventory, runner.RunOptions(extravars={"a": 1}), SILENT))
    (spec,) = play.specs
    assert spec.playbook.name == "preflight.yml"
    assert spec.options.extravars == {"a": 1, "preflight_enforce": False}
    assert play.collect == [(provision.FACTS_ACTION, provision.COMPUTE_ACTION)]
    assert report.exit_code == ExitCode.VERDICT_FAILED and not report.ok
    assert report.error == "n2: gpus: expected 8"
    assert [(r["host"], r["check"]) for r in report.checks] == [("n1", "kernel"), ("n1", "memlock"), ("n2", "gpus")]
    assert report.nodes == {"n2": {"gpus": 7}, "n1": {"gpus": 8}}
    assert report.compute == {"n1": "GEMM 900; verified at T"}


def test_preflight_passes_when_no_row_failed(inventory, tmp_path, monkeypatch):
    results = [task("n1", provision.FACTS_ACTION, {"node": {}, "checks": [{"check": "kernel", "status": "warn", "reason": "old"}]})]
    monkeypatch.setattr(runner, "run", Play(tmp_path, results))
    report = provision.preflight(provision.Request(inventory, runner.RunOptions(), SILENT))
    assert report.ok and report.exit_code == ExitCode.OK and report.error is None


# ---- the refusals before anything runs


def test_a_limit_must_name_a_host_or_group_of_the_inventory(inventory):
    from megaprov.cluster import inventory as inv
    from megaprov.paths import roles_dir

    loaded = inv.load(inventory, roles_dir())
    for good in ("n1", "gpu_nodes", "all", "n1,!n2", "gpu_nodes:&head", "n*", "~n[12]", "@retry.txt", "n1,"):
        provision.check_limit(good, loaded)
    with pytest.raises(UsageError) as err:
        provision.check_limit("n1,n9", loaded)
    assert (err.value.message, err.value.hint) == (
        "--limit n1,n9: 'n9' is neither a host nor a group of inventory.ini",
        "use host or group names from the inventory",
    )
    with pytest.raises(UsageError) as err:
        provision.check_limit("gpu*x", loaded)
    assert err.value.message == "--limit gpu*x: 'gpu*x' matches no host or group of inventory.ini"
    with pytest.raises(UsageError) as err:
        provision.check_limit("~z.*", loaded)
    assert err.value.message == "--limit ~z.*: '~z.*' matches no host or group of inventory.ini"
    with pytest.raises(UsageError) as err:
        provision.check_limit("~(", loaded)
    assert err.value.message.startswith("--limit ~(: '~(' is not a regular expression (") and err.value.hint == "fix the pattern after ~"
    # "all" is a name patterns may match; an empty part is skipped, not the end of the list
    for good in ("al?", "~al+$", "!n1"):
        provision.check_limit(good, loaded)
    for bad, said in (
        ("n1,,n9", "'n9' is neither a host nor a group"),
        ("~zz", "'~zz' matches no host or group"),  # a regular expression without a wildcard character
        ("nX9", "'nX9' is neither a host nor a group"),
        ("Xn1", "'Xn1' is neither a host nor a group"),
    ):
        with pytest.raises(UsageError) as err:
            provision.check_limit(bad, loaded)
        assert err.value.message == f"--limit {bad}: {said} of inventory.ini"


@pytest.mark.parametrize(
    ("limit", "said"),
    [("", "is empty"), ("n" * 10_001, "is 10001 characters long"), ("n1\x1b[2J", "contains the control character \\x1b")],
)
def test_a_limit_that_is_no_text_is_refused_as_the_flag(inventory, limit, said):
    from megaprov.cluster import inventory as inv
    from megaprov.paths import roles_dir

    with pytest.raises(UsageError) as err:
        provision.check_limit(limit, inv.load(inventory, roles_dir()))
    assert err.value.message.startswith("--limit=") and err.value.message.endswith(said) and err.value.field == "--limit"


def test_an_unknown_tag_is_refused_with_the_closest_stage():
    provision.check_tags("--tags", ("gpu", "scheduler", "nvidia_driver"))
    with pytest.raises(UsageError) as err:
        provision.check_tags("--skip-tags", ("nvidia_drive",))
    assert err.value.message == "--skip-tags 'nvidia_drive' is not a stage or role"
    assert err.value.hint.startswith("did you mean 'nvidia_driver'? (stages: ")
    with pytest.raises(UsageError) as err:
        provision.check_tags("--tags", ("zzzzzz",))
    assert err.value.hint.startswith("use a stage (") and err.value.hint.endswith(") or a role's name")


def test_bootstrap_refuses_a_bad_tag_before_ansible_runs(inventory, tmp_path, monkeypatch):
    play = Play(tmp_path, [])
    monkeypatch.setattr(runner, "run", play)
    with pytest.raises(UsageError):
        provision.bootstrap(provision.Request(inventory, runner.RunOptions(tags=("nope_not_a_stage",)), SILENT))
    assert play.specs == []


# ---- what the operator reads


def report(**over: Any) -> provision.Report:
    base: dict[str, Any] = {
        "inventory": "/x/inventory.ini",
        "playbook": "bootstrap.yml",
        "ok": True,
        "changed": 3,
        "seconds": 61.26,
        "artifacts": "/state/[lab]/runs/1",
        "hosts": [runner.HostStats("h1", ok=5, changed=3, seconds=2.0)],
        "failures": [],
    }
    return provision.Report(**{**base, **over})


def lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


def test_render_bootstrap_prints_a_line_per_stage_check_and_the_verdict(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    # Text from the nodes is printed as it is: a [word] in it is not rich markup.
    note = "verified at [t], inputs unchanged; --verify re-proves"
    failed = {**pair("n2", "n1", ok=False), "line": "n2 -> n1: [ssh] refused"}
    shown = report(
        checks=[{"host": "n1", "check": "kernel", "status": "pass", "value": "6.8", "reason": ""}],
        mesh=[pair("n1", "n2"), failed],
        mesh_left_out=["n3"],
        shared=[
            {"reader": "n1", "writer": "n1", "ok": True, "error": "", "cached": ""},
            {"reader": "n1", "writer": "n2", "ok": False, "error": "[errno 2] no file", "cached": note},
            {"reader": "n2", "writer": "n1", "ok": True, "error": "", "cached": ""},
        ],
        fabric={"n2": {"summary": "1 port [down]"}, "n1": {"summary": "2 ports up"}},
        gpu={"n2": "driver 550 loaded, 8 GPU(s) in nvidia-smi", "n1": "driver [n/a] installed, not loaded yet"},
        nccl=["n1: busbw 180 GB/s [in-place]"],
        slurm=["2 nodes [idle]"],
        observe=["prometheus [up]"],
        compute={"n2": "GEMM 700", "n1": "GEMM 900 [bf16]"},
        proofs=[{"host": "n1", "name": "nccl", "valid": False, "reason": "inputs changed: [hcas]", "verified_at": ""}],
        verify=True,
        stages=[{"stage": "validate", "seconds": 1.4}, {"stage": "drivers", "seconds": 59.6}],
    )
    provision.render_bootstrap(shown)
    out, err = capsys.readouterr()
    printed = lines(out)
    assert any(line.startswith("bootstrap: /x/inventory.ini") for line in printed)
    assert "preflight: every check passed" in printed
    assert printed[printed.index("preflight: every check passed") + 1 :] == [
        "ssh mesh: 1/2 pairs among n1, n2 connect without a prompt (slowest 0.10s)",
        "  n2 -> n1: [ssh] refused",
        "ssh mesh: left out as unreachable (no pair with them was tried): n3",
        f"shared directory: 2/3 reads identical (2 writers x 2 readers; {note})",
        "  n1 <- n2: [errno 2] no file",
        "fabric: n1: 2 ports up",
        "fabric: n2: 1 port [down]",
        "gpu: n1: driver [n/a] installed, not loaded yet",
        "gpu: n2: driver 550 loaded, 8 GPU(s) in nvidia-smi",
        "nccl: n1: busbw 180 GB/s [in-place]",
        "slurm: 2 nodes [idle]",
        "observe: prometheus [up]",
        "compute: n1: GEMM 900 [bf16]",
        "compute: n2: GEMM 700",
        "proof nccl: proved this run on n1 (inputs changed: [hcas])",
        "--verify: every proof ran again",
        "time per stage: validate 1s, drivers 60s",
        "bootstrap ok: 3 change(s) in 61.3s; artifacts: /state/[lab]/runs/1",
    ]
    assert err == ""


def test_render_bootstrap_shows_the_warnings_table_and_each_failure_on_stderr(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    shown = report(
        ok=False,
        checks=[
            {"host": "n1", "check": "kernel", "status": "pass", "value": "6.8", "reason": ""},
            {"host": "n2", "check": "memlock", "status": "warn", "value": "64", "reason": "too low"},
        ],
        shared=[{"reader": "n1", "writer": "n1", "ok": True, "error": "", "cached": ""}],
        failures=[
            runner.Failure("n2", "Install the driver", "drivers", "apt said no", False),
            runner.Failure("n3", "Gathering Facts", "validate", "ssh: timed out", True),
        ],
    )
    provision.render_bootstrap(shown)
    out, err = capsys.readouterr()
    printed = lines(out)
    assert "preflight warnings and failures" in printed
    assert "preflight: every check passed" not in printed
    assert not any("kernel" in line for line in printed) and any("memlock" in line and "too low" in line for line in printed)
    assert "shared directory: 1/1 reads identical (1 writers x 1 readers)" in printed
    assert printed[-1] == "bootstrap FAILED: 3 change(s) in 61.3s; artifacts: /state/[lab]/runs/1"
    assert lines(err) == [
        "n2: failed in [drivers] 'Install the driver': apt said no",
        "n3: unreachable in [validate] 'Gathering Facts': ssh: timed out",
    ]


def test_render_bootstrap_with_nothing_collected_prints_only_the_hosts_and_the_verdict(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    provision.render_bootstrap(report(changed=0, seconds=0.04))
    out, err = capsys.readouterr()
    printed = [line for line in lines(out) if line]
    assert printed[-1] == "bootstrap ok: 0 change(s) in 0.0s; artifacts: /state/[lab]/runs/1"
    assert not any(line.startswith(("preflight", "ssh mesh", "shared", "time per stage", "proof", "--verify")) for line in printed)
    assert err == ""


def test_render_preflight_counts_each_verdict_and_the_nodes(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    shown = report(
        playbook="preflight.yml",
        ok=False,
        checks=[
            {"host": "n1", "check": "kernel", "status": "pass", "value": "6.8", "reason": ""},
            {"host": "n1", "check": "memlock", "status": "warn", "value": "64", "reason": "low"},
            {"host": "n2", "check": "gpus", "status": "fail", "value": 7, "reason": "expected 8"},
            {"host": "n2", "check": "kernel", "status": "pass", "value": "6.8", "reason": ""},
        ],
        nodes={"n1": {}, "n2": {}},
        compute={"n2": "GEMM 700", "n1": "GEMM 900 [bf16]"},
        failures=[runner.Failure("n3", "Gathering Facts", "preflight", "refused", True)],
    )
    provision.render_preflight(shown)
    out, err = capsys.readouterr()
    printed = lines(out)
    assert any(line.startswith("preflight: /x/inventory.ini") for line in printed)
    assert any("gpus" in line and "expected 8" in line for line in printed)
    assert printed[-3:] == [
        "compute: n1: GEMM 900 [bf16]",
        "compute: n2: GEMM 700",
        "preflight: 2 pass, 1 warn, 1 fail on 2 node(s); artifacts: /state/[lab]/runs/1",
    ]
    assert lines(err) == ["n3: unreachable in [preflight] 'Gathering Facts': refused"]


def test_render_preflight_without_checks_prints_no_table(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    provision.render_preflight(report(playbook="preflight.yml"))
    out, _ = capsys.readouterr()
    assert [line for line in lines(out) if line] == ["preflight: 0 pass, 0 warn, 0 fail on 0 node(s); artifacts: /state/[lab]/runs/1"]

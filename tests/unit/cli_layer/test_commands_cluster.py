"""`megaprov bootstrap`, `preflight`, `inventory check`, `init` and `self-check` (megaprov.commands.cluster) from argv to
what the operator reads: the request each handler hands to the domain layer (every flag's parsing and default, the
strategy taken from MEGAPROV_STRATEGY and its refusal, --tags/--skip-tags, -e, --verify's variable, --bundle), every
line of the text form, the JSON envelope's result, the exit code and the error line, and each command's --help. Every
command runs in-process through megaprov.cli.main with the real parser.

Stood in, only at the edge: megaprov.cluster.provision's bootstrap and preflight (they run ansible-playbook on the
hosts), by a recorder that keeps the request and returns a real provision.Report; megaprov.cluster.bundle.verify (it
hashes a bundle of gigabytes) by a recorder, so that the real bundle.bootstrap_request turns the request into the
bundle's; megaprov.selfcheck.checks (it asks this machine's programs) by a list of real selfcheck.Check. Everything
else is real: the inventory is read and validated by megaprov.cluster.inventory, `init` writes its files with
megaprov.cluster.scaffold (a spy keeps what it was asked), the GPU model is named by megaprov.training.planner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from megaprov import __version__, output, selfcheck
from megaprov.cluster import bundle, provision, runner, scaffold
from megaprov.errors import ExitCode, HostsUnreachable
from tests.helpers.commandline import cells, help_lines, isolate, options, run

GOOD = "[head]\nn1 ansible_host=192.0.2.10\n[gpu_nodes]\nn1\n"


@pytest.fixture(autouse=True)
def _env(tmp_path, monkeypatch):
    """As the benchmark runs: no colour, a known width; megaprov's state and config of this test alone, the current
    directory the test's own, no default inventory and no strategy from the environment."""
    isolate(monkeypatch, tmp_path)
    monkeypatch.delenv("MEGAPROV_STRATEGY", raising=False)
    (tmp_path / "inventory.ini").write_text(GOOD)


def report(playbook: str = "site.yml", **fields) -> provision.Report:
    base = {
        "inventory": "/x/inventory.ini",
        "playbook": playbook,
        "ok": True,
        "changed": 3,
        "seconds": 12.34,
        "artifacts": "/state/runs/r1",
        "hosts": [runner.HostStats("n1", ok=10, changed=3, seconds=11.96)],
        "failures": [],
    }
    return provision.Report(**{**base, **fields})


class Recorder:
    """provision.bootstrap or provision.preflight: keeps each request and returns the report it was given."""

    def __init__(self, answer: provision.Report) -> None:
        self.requests: list[provision.Request] = []
        self.answer = answer

    def __call__(self, request):
        self.requests.append(request)
        return self.answer


@pytest.fixture
def boot(monkeypatch):
    recorder = Recorder(report())
    monkeypatch.setattr(provision, "bootstrap", recorder)
    return recorder


@pytest.fixture
def pre(monkeypatch):
    recorder = Recorder(report("preflight.yml"))
    monkeypatch.setattr(provision, "preflight", recorder)
    return recorder


def default_request(tmp_path, **options) -> provision.Request:
    return provision.Request(inventory=tmp_path / "inventory.ini", options=runner.RunOptions(**options), report=output.SHOWN)


# ---- bootstrap: what it hands down


def test_bootstrap_hands_down_the_inventory_made_absolute_and_every_default(capsys, tmp_path, boot):
    code, _, err = run(capsys, "bootstrap", "-i", "inventory.ini")
    assert (code, err) == (ExitCode.OK, "")
    assert boot.requests == [default_request(tmp_path)]
    options = boot.requests[0].options
    assert (options.limit, options.forks, options.strategy, options.verbosity) == (None, None, "linear", 0)
    assert (options.tags, options.skip_tags, options.check, options.diff, options.flush_cache, options.extravars) == ((), (), False, False, False, {})
    assert boot.requests[0].report is output.SHOWN


def test_bootstrap_maps_each_flag(capsys, tmp_path, boot):
    code, _, err = run(
        capsys,
        "bootstrap",
        "--inventory",
        "inventory.ini",
        "--limit",
        "n1",
        "-e",
        "a=1",
        "--extra-vars",
        "b=text",
        "--forks",
        "1000",
        "--strategy",
        "free",
        "--flush-cache",
        "-vvv",
        "--tags",
        "ssh_mesh,,nccl",
        "--skip-tags",
        "observe",
        "--check",
        "--diff",
    )
    assert (code, err) == (ExitCode.OK, "")
    assert boot.requests == [
        default_request(
            tmp_path,
            limit="n1",
            forks=1000,
            extravars={"a": 1, "b": "text"},
            strategy="free",
            verbosity=3,
            flush_cache=True,
            tags=("ssh_mesh", "nccl"),
            skip_tags=("observe",),
            check=True,
            diff=True,
        )
    ]


def test_bootstrap_splits_tags_on_commas_and_drops_the_empty_ones(capsys, tmp_path, boot):
    code, _, _ = run(capsys, "bootstrap", "-i", "inventory.ini", "--tags", ",gpu_driver,", "--skip-tags", "a,b,,c")
    assert code == ExitCode.OK
    assert (boot.requests[0].options.tags, boot.requests[0].options.skip_tags) == (("gpu_driver",), ("a", "b", "c"))


@pytest.mark.parametrize(("flag", "option"), [("--check", "check"), ("--diff", "diff")])
def test_bootstrap_check_and_diff_are_each_their_own(capsys, tmp_path, boot, flag, option):
    code, _, _ = run(capsys, "bootstrap", "-i", "inventory.ini", flag)
    assert code == ExitCode.OK
    assert boot.requests == [default_request(tmp_path, **{option: True})]


def test_bootstrap_verify_sets_the_variable_over_the_operators_own(capsys, tmp_path, boot):
    code, _, _ = run(capsys, "bootstrap", "-i", "inventory.ini", "--verify", "-e", "megaprov_verify=false", "-e", "x=y")
    assert code == ExitCode.OK
    assert boot.requests[0].options.extravars == {"megaprov_verify": True, "x": "y"}


def test_bootstrap_without_verify_leaves_the_operators_variables_alone(capsys, boot):
    code, _, _ = run(capsys, "bootstrap", "-i", "inventory.ini", "-e", "megaprov_verify=false")
    assert code == ExitCode.OK
    assert boot.requests[0].options.extravars == {"megaprov_verify": False}


def test_bootstrap_takes_extra_vars_from_a_file(capsys, tmp_path, boot):
    (tmp_path / "vars.yml").write_text("k: [1, 2]\nname: v\n")
    code, _, _ = run(capsys, "bootstrap", "-i", "inventory.ini", "-e", "@vars.yml", "-e", "name=w")
    assert code == ExitCode.OK
    assert boot.requests[0].options.extravars == {"k": [1, 2], "name": "w"}


def test_bootstrap_refuses_a_bad_extra_var_before_any_run(capsys, boot):
    code, out, err = run(capsys, "bootstrap", "-i", "inventory.ini", "-e", "novalue")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == "megaprov: error: -e 'novalue' is not KEY=VALUE: write -e name=value (or -e @vars.yml)\n"
    assert boot.requests == []


def test_bootstrap_takes_the_strategy_from_the_environment(capsys, monkeypatch, boot):
    monkeypatch.setenv("MEGAPROV_STRATEGY", "mitogen")
    code, _, _ = run(capsys, "bootstrap", "-i", "inventory.ini")
    assert code == ExitCode.OK
    assert boot.requests[0].options.strategy == "mitogen"
    code, _, _ = run(capsys, "bootstrap", "-i", "inventory.ini", "--strategy", "linear")
    assert boot.requests[1].options.strategy == "linear"  # the flag wins over the environment


@pytest.mark.parametrize("command", ["bootstrap", "preflight"])
def test_a_strategy_from_the_environment_that_is_none_is_refused_before_any_run(capsys, monkeypatch, boot, pre, command):
    monkeypatch.setenv("MEGAPROV_STRATEGY", "fast")
    code, out, err = run(capsys, command, "-i", "inventory.ini")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == "megaprov: error: MEGAPROV_STRATEGY='fast' is not a strategy: use linear, free, mitogen\n"
    assert boot.requests == pre.requests == []


def test_a_strategy_flag_that_is_none_is_refused_by_argparse(capsys, boot):
    code, _, err = run(capsys, "bootstrap", "-i", "inventory.ini", "--strategy", "fre")
    assert code == ExitCode.USAGE
    assert err.startswith("megaprov: error: megaprov bootstrap: argument --strategy: invalid choice: 'fre': did you mean 'free'?")
    assert boot.requests == []


@pytest.mark.parametrize(("forks", "why"), [("0", "0 must be at least 1"), ("1001", "'1001' is more than 1,000"), ("x", "'x' is not a whole number")])
def test_bootstrap_forks_are_1_to_1000(capsys, boot, forks, why):
    code, _, err = run(capsys, "bootstrap", "-i", "inventory.ini", "--forks", forks)
    assert code == ExitCode.USAGE
    assert err.startswith(f"megaprov: error: megaprov bootstrap: argument --forks: {why}")
    assert boot.requests == []


def test_bootstrap_in_json_runs_silent_and_prints_the_report(capsys, tmp_path, boot):
    code, out, err = run(capsys, "bootstrap", "-i", "inventory.ini", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    assert boot.requests[0].report is output.SILENT
    doc = json.loads(out)
    assert (doc["megaprov"], doc["command"], doc["ok"]) == (output.JSON_SCHEMA_VERSION, "bootstrap", True)
    assert doc["result"] == json.loads(output.envelope("bootstrap", True, boot.answer))["result"]
    assert doc["result"]["playbook"] == "site.yml"
    assert doc["result"]["hosts"][0] == {
        "host": "n1",
        "ok": 10,
        "changed": 3,
        "failed": 0,
        "unreachable": 0,
        "skipped": 0,
        "rescued": 0,
        "ignored": 0,
        "seconds": 11.96,
    }


def test_bootstrap_prints_the_host_table_and_the_verdict_line(capsys, boot):
    code, out, err = run(capsys, "bootstrap", "-i", "inventory.ini")
    assert (code, err) == (ExitCode.OK, "")
    lines = out.splitlines()
    assert lines[0] == "bootstrap: /x/inventory.ini"
    assert cells(lines[2]) == ["host", "ok", "changed", "failed", "unreachable", "skipped", "time"]
    assert cells(lines[4]) == ["n1", "10", "3", "0", "0", "0", "12.0s"]
    assert lines[-1] == "bootstrap ok: 3 change(s) in 12.3s; artifacts: /state/runs/r1"


def test_a_failed_bootstrap_is_its_exit_code_the_failure_lines_and_the_error(capsys, monkeypatch):
    failed = report(
        ok=False,
        failures=[runner.Failure("n1", "install driver", "gpu", "no space left", False)],
        exit_code=ExitCode.RUN_FAILED,
        error="n1: install driver: no space left",
    )
    monkeypatch.setattr(provision, "bootstrap", Recorder(failed))
    code, out, err = run(capsys, "bootstrap", "-i", "inventory.ini")
    assert code == ExitCode.RUN_FAILED
    assert out.splitlines()[-1] == "bootstrap FAILED: 3 change(s) in 12.3s; artifacts: /state/runs/r1"
    assert err == "n1: failed in [gpu] 'install driver': no space left\nmegaprov: error: n1: install driver: no space left\n"
    code, out, err = run(capsys, "bootstrap", "-i", "inventory.ini", "-o", "json")
    doc = json.loads(out)
    assert (code, doc["ok"], doc["result"]["exit_code"]) == (ExitCode.RUN_FAILED, False, 3)
    assert doc["result"]["error"] == "n1: install driver: no space left"
    assert err == "megaprov: error: n1: install driver: no space left\n"


def test_a_bootstrap_that_raises_is_its_exit_code_and_one_line(capsys, monkeypatch):
    def unreachable(request):
        raise HostsUnreachable("n1 did not answer", "check ssh")

    monkeypatch.setattr(provision, "bootstrap", unreachable)
    code, out, err = run(capsys, "bootstrap", "-i", "inventory.ini")
    assert (code, out, err) == (ExitCode.UNREACHABLE, "", "megaprov: error: n1 did not answer: check ssh\n")


# ---- the inventory: -i, the positional form, the default


def test_bootstrap_without_an_inventory_says_where_one_is_set(capsys, tmp_path, boot):
    code, out, err = run(capsys, "bootstrap")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == (
        "megaprov: error: megaprov bootstrap needs -i INVENTORY: pass the cluster's inventory, or set MEGAPROV_INVENTORY or "
        f'inventory = "PATH" in {tmp_path / "config" / "megaprov" / "config.toml"}\n'
    )
    assert boot.requests == []


def test_bootstrap_takes_the_default_inventory(capsys, tmp_path, monkeypatch, boot):
    monkeypatch.setenv("MEGAPROV_INVENTORY", "inventory.ini")
    code, _, _ = run(capsys, "bootstrap")
    assert code == ExitCode.OK
    assert boot.requests[0].inventory == tmp_path / "inventory.ini"


@pytest.mark.parametrize(("command", "fixture"), [("bootstrap", "boot"), ("preflight", "pre")])
def test_the_positional_inventory_still_works_with_a_note(capsys, tmp_path, request, command, fixture):
    recorder = request.getfixturevalue(fixture)
    code, _, err = run(capsys, command, "inventory.ini")
    assert code == ExitCode.OK
    assert recorder.requests[0].inventory == tmp_path / "inventory.ini"
    assert err == f"megaprov: note: `megaprov {command} INVENTORY` is deprecated and goes in the next release: write -i inventory.ini\n"


def test_two_inventories_are_refused(capsys, tmp_path, boot):
    (tmp_path / "other.ini").write_text(GOOD)
    code, _, err = run(capsys, "bootstrap", "other.ini", "-i", "inventory.ini")
    assert code == ExitCode.USAGE
    assert err == f"megaprov: error: two inventories: other.ini and -i {tmp_path / 'inventory.ini'}: give one, as -i INVENTORY\n"
    assert boot.requests == []


# ---- bootstrap --bundle


class VerifyRecorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __call__(self, directory, inventory=None):
        self.calls.append((directory, inventory))


def test_bootstrap_bundle_checks_the_bundle_then_hands_down_the_bundles_request(capsys, tmp_path, monkeypatch, boot):
    verify = VerifyRecorder()
    monkeypatch.setattr(bundle, "verify", verify)
    code, _, err = run(capsys, "bootstrap", "-i", "inventory.ini", "--bundle", "b", "-e", "package_cache_bundle=/srv/bundle", "--verify")
    assert (code, err) == (ExitCode.OK, "")
    assert verify.calls == [(Path("b"), tmp_path / "inventory.ini")]
    assert boot.requests == [
        default_request(tmp_path, extravars={"package_cache_bundle": "/srv/bundle", "megaprov_verify": True, "megaprov_package_cache": True})
    ]


def test_bootstrap_bundle_refused_is_usage_and_nothing_runs(capsys, tmp_path, monkeypatch, boot):
    monkeypatch.setattr(bundle, "verify", VerifyRecorder())
    code, out, err = run(capsys, "bootstrap", "-i", "inventory.ini", "--bundle", "b")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == f"megaprov: error: --bundle b: package_cache_bundle (the bundle's directory on the head n1) is not set: {bundle.COPY_HINT}\n"
    assert boot.requests == []


def test_bootstrap_without_bundle_never_looks_at_one(capsys, monkeypatch, boot):
    verify = VerifyRecorder()
    monkeypatch.setattr(bundle, "verify", verify)
    code, _, _ = run(capsys, "bootstrap", "-i", "inventory.ini")
    assert code == ExitCode.OK
    assert verify.calls == []


# ---- preflight


def test_preflight_hands_down_the_run_flags_and_never_tags_or_check(capsys, tmp_path, pre):
    code, _, err = run(
        capsys, "preflight", "-i", "inventory.ini", "--limit", "gpu01", "-e", "a=b", "--forks", "3", "--strategy", "mitogen", "--flush-cache", "-v"
    )
    assert (code, err) == (ExitCode.OK, "")
    assert pre.requests == [
        default_request(tmp_path, limit="gpu01", extravars={"a": "b"}, forks=3, strategy="mitogen", flush_cache=True, verbosity=1)
    ]


def test_preflight_defaults(capsys, tmp_path, monkeypatch, pre):
    monkeypatch.setenv("MEGAPROV_STRATEGY", "free")
    code, _, _ = run(capsys, "preflight", "-i", "inventory.ini", "-o", "json")
    assert code == ExitCode.OK
    assert pre.requests == [provision.Request(inventory=tmp_path / "inventory.ini", options=runner.RunOptions(strategy="free"), report=output.SILENT)]


def test_preflight_does_not_take_bootstraps_flags(capsys, pre):
    for flag in ("--tags", "--check", "--verify", "--bundle"):
        code, _, err = run(capsys, "preflight", "-i", "inventory.ini", flag, "x")
        assert code == ExitCode.USAGE, flag
        assert err.startswith("megaprov: error: "), flag
    assert pre.requests == []


def test_preflight_prints_its_checks_and_counts(capsys, monkeypatch):
    checks = [
        {"host": "n1", "check": "gpu_count", "value": 8, "status": "pass", "reason": ""},
        {"host": "n1", "check": "disk", "value": "3 GiB", "status": "warn", "reason": "little room"},
    ]
    monkeypatch.setattr(provision, "preflight", Recorder(report("preflight.yml", checks=checks, nodes={"n1": {}})))
    code, out, err = run(capsys, "preflight", "-i", "inventory.ini")
    assert (code, err) == (ExitCode.OK, "")
    lines = out.splitlines()
    assert lines[0] == "preflight: /x/inventory.ini"
    assert lines[-1] == "preflight: 1 pass, 1 warn, 0 fail on 1 node(s); artifacts: /state/runs/r1"


def test_a_failed_preflight_is_its_exit_code_and_error_and_json_says_so(capsys, monkeypatch):
    checks = [{"host": "n1", "check": "gpu_count", "value": 7, "status": "fail", "reason": "8 expected"}]
    failed = report("preflight.yml", ok=False, checks=checks, exit_code=ExitCode.VERDICT_FAILED, error="n1: gpu_count: 8 expected")
    monkeypatch.setattr(provision, "preflight", Recorder(failed))
    code, out, err = run(capsys, "preflight", "-i", "inventory.ini")
    assert code == ExitCode.VERDICT_FAILED
    assert out.splitlines()[-1] == "preflight: 0 pass, 0 warn, 1 fail on 0 node(s); artifacts: /state/runs/r1"
    assert err == "megaprov: error: n1: gpu_count: 8 expected\n"
    code, out, err = run(capsys, "preflight", "-i", "inventory.ini", "-o", "json")
    doc = json.loads(out)
    assert (code, doc["command"], doc["ok"], doc["result"]["checks"]) == (ExitCode.VERDICT_FAILED, "preflight", False, checks)
    assert err == "megaprov: error: n1: gpu_count: 8 expected\n"


def test_preflight_without_an_inventory_is_usage(capsys, pre):
    code, _, err = run(capsys, "preflight")
    assert code == ExitCode.USAGE
    assert err.startswith("megaprov: error: megaprov preflight needs -i INVENTORY: ")
    assert pre.requests == []


# ---- inventory check


def test_inventory_check_prints_each_setting_the_head_the_nodes_and_the_notes(capsys, tmp_path):
    code, out, err = run(capsys, "inventory", "check", "-i", "inventory.ini")
    assert (code, err) == (ExitCode.OK, "")
    assert out.splitlines() == [
        f"{tmp_path / 'inventory.ini'}: valid; no host was contacted (`megaprov preflight` checks the nodes themselves)",
        "  megaprov_gpu_model     (unset)",
        "  megaprov_gpus_per_node 0",
        "  megaprov_gpu_expected  True",
        "  megaprov_cluster_user  megaprov",
        "  megaprov_shared_dir    /shared",
        "  megaprov_scheduler     none",
        "  megaprov_observe       False",
        "  megaprov_package_cache False",
        "  head                   n1",
        "  gpu_nodes              1: n1",
        "  note: megaprov_gpu_model is unset: `plan` and `train` need it (or --gpu); set it in group_vars/gpu_nodes.yml",
        "  note: megaprov_gpus_per_node is 0 (any): preflight then accepts a node that lost a GPU",
    ]


def test_inventory_check_names_eight_nodes_then_dots(capsys, tmp_path):
    nodes = [f"g{i:02d}" for i in range(1, 10)]
    (tmp_path / "big.ini").write_text("[head]\nh ansible_host=192.0.2.1\n[gpu_nodes]\n" + "\n".join(nodes) + "\n")
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("megaprov_gpu_model: H100-SXM\nmegaprov_gpus_per_node: 8\n")
    code, out, _ = run(capsys, "inventory", "check", "-i", "big.ini")
    assert code == ExitCode.OK
    lines = out.splitlines()
    assert lines[1] == "  megaprov_gpu_model     H100-SXM"
    assert lines[-1] == "  gpu_nodes              9: g01, g02, g03, g04, g05, g06, g07, g08 ..."
    assert not any("note:" in line for line in lines)
    (tmp_path / "eight.ini").write_text("[head]\nh ansible_host=192.0.2.1\n[gpu_nodes]\n" + "\n".join(nodes[:8]) + "\n")
    code, out, _ = run(capsys, "inventory", "check", "-i", "eight.ini")
    assert out.splitlines()[-1] == "  gpu_nodes              8: g01, g02, g03, g04, g05, g06, g07, g08"


def test_inventory_check_prints_a_path_and_values_with_brackets_as_they_are(capsys, tmp_path):
    """The inventory's path and values are the operator's: rich markup in them ([bold]) is text, not a style."""
    where = tmp_path / "site[bold]"
    (where / "group_vars").mkdir(parents=True)
    (where / "inventory.ini").write_text(GOOD)
    (where / "group_vars" / "all.yml").write_text("megaprov_gpu_model: 'H100 [bold]x'\n")
    code, out, _ = run(capsys, "inventory", "check", "-i", where / "inventory.ini")
    assert code == ExitCode.OK
    lines = out.splitlines()
    assert lines[0].startswith(f"{where / 'inventory.ini'}: valid;")
    assert lines[1] == "  megaprov_gpu_model     H100 [bold]x"


def test_inventory_check_in_json_is_the_summary(capsys, tmp_path):
    code, out, err = run(capsys, "inventory", "check", "-i", "inventory.ini", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    doc = json.loads(out)
    assert (doc["command"], doc["ok"]) == ("inventory check", True)
    assert doc["result"] == {
        "inventory": str(tmp_path / "inventory.ini"),
        "contacted": False,
        "head": "n1",
        "gpu_nodes": ["n1"],
        "hosts": 1,
        "groups": {"gpu_nodes": 1, "head": 1, "ungrouped": 0},
        "settings": {
            "megaprov_gpu_model": "",
            "megaprov_gpus_per_node": 0,
            "megaprov_gpu_expected": True,
            "megaprov_cluster_user": "megaprov",
            "megaprov_shared_dir": "/shared",
            "megaprov_scheduler": "none",
            "megaprov_observe": False,
            "megaprov_package_cache": False,
        },
        "notes": [
            "megaprov_gpu_model is unset: `plan` and `train` need it (or --gpu); set it in group_vars/gpu_nodes.yml",
            "megaprov_gpus_per_node is 0 (any): preflight then accepts a node that lost a GPU",
        ],
    }


def test_inventory_check_takes_the_default_inventory_and_refuses_none(capsys, tmp_path, monkeypatch):
    code, _, err = run(capsys, "inventory", "check")
    assert code == ExitCode.USAGE
    assert err.startswith("megaprov: error: megaprov inventory check needs -i INVENTORY: ")
    monkeypatch.setenv("MEGAPROV_INVENTORY", "inventory.ini")
    code, out, _ = run(capsys, "inventory", "check")
    assert code == ExitCode.OK
    assert out.startswith(f"{tmp_path / 'inventory.ini'}: valid;")


def test_inventory_check_of_a_bad_inventory_is_usage_and_one_line(capsys, tmp_path):
    (tmp_path / "bad.ini").write_text("[head]\nn1\n")
    code, out, err = run(capsys, "inventory", "check", "-i", "bad.ini")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err.startswith("megaprov: error: ") and "group [gpu_nodes] is missing or empty" in err
    assert len(err.splitlines()) == 1


# ---- init


@pytest.fixture
def spy(monkeypatch):
    """scaffold.init, real, with what it was asked kept."""
    calls = []
    real = scaffold.init

    def init(directory, req):
        calls.append((directory, req))
        return real(directory, req)

    monkeypatch.setattr(scaffold, "init", init)
    return calls


def test_init_hands_down_each_flag_and_names_the_files_it_wrote(capsys, tmp_path, spy):
    code, out, err = run(capsys, "init", "--head", "10.0.0.10", "--nodes", "10.0.0.11,10.0.0.12", "--gpu", "H100-SXM", "--dir", "mc")
    assert (code, err) == (ExitCode.OK, "")
    assert spy == [(Path("mc"), scaffold.InitRequest("10.0.0.10", "10.0.0.11,10.0.0.12", "H100-SXM", 8, "ubuntu", "/shared", "ethernet", "none"))]
    assert out.splitlines() == [
        "init: wrote mc/inventory.ini, mc/group_vars/all.yml, mc/group_vars/gpu_nodes.yml, mc/group_vars/head.yml",
        "next: edit them, then `megaprov inventory check -i mc` (offline) and `megaprov preflight -i mc`",
    ]
    assert (tmp_path / "mc" / "inventory.ini").is_file()


def test_init_maps_every_flag_and_names_the_gpu_as_megaprov_does(capsys, spy):
    code, _, err = run(
        capsys,
        "init",
        "--head",
        "head01=10.0.0.10",
        "--nodes",
        "gpu[01:02]",
        "--gpu",
        "NVIDIA H100 80GB HBM3",
        "--gpus-per-node",
        "4",
        "--user",
        "admin",
        "--shared-dir",
        "/data",
        "--fabric",
        "infiniband",
        "--scheduler",
        "slurm",
        "--dir",
        "c2",
    )
    assert (code, err) == (ExitCode.OK, "")
    assert spy == [(Path("c2"), scaffold.InitRequest("head01=10.0.0.10", "gpu[01:02]", "H100-SXM", 4, "admin", "/data", "infiniband", "slurm"))]


def test_init_without_gpu_hands_down_none(capsys, spy):
    code, _, _ = run(capsys, "init", "--head", "10.0.0.10", "--nodes", "10.0.0.11", "--dir", "c")
    assert code == ExitCode.OK
    assert spy[0][1].gpu is None


def test_init_prints_a_directory_with_brackets_as_it_is(capsys, spy):
    code, out, _ = run(capsys, "init", "--head", "10.0.0.10", "--nodes", "10.0.0.11", "--dir", "c[bold]")
    assert code == ExitCode.OK
    assert out.splitlines() == [
        "init: wrote c[bold]/inventory.ini, c[bold]/group_vars/all.yml, c[bold]/group_vars/gpu_nodes.yml, c[bold]/group_vars/head.yml",
        "next: edit them, then `megaprov inventory check -i c[bold]` (offline) and `megaprov preflight -i c[bold]`",
    ]


def test_init_in_json_is_the_directory_and_its_files(capsys, spy):
    code, out, err = run(capsys, "init", "--head", "10.0.0.10", "--nodes", "10.0.0.11", "--dir", "c", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    assert json.loads(out) == {
        "megaprov": output.JSON_SCHEMA_VERSION,
        "command": "init",
        "ok": True,
        "result": {"directory": "c", "files": ["c/inventory.ini", "c/group_vars/all.yml", "c/group_vars/gpu_nodes.yml", "c/group_vars/head.yml"]},
    }


def test_init_of_an_unknown_gpu_is_refused_before_anything_is_written(capsys, tmp_path, spy):
    code, out, err = run(capsys, "init", "--head", "10.0.0.10", "--nodes", "10.0.0.11", "--gpu", "Z9000", "--dir", "c")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err.startswith("megaprov: error: --gpu ") and "Z9000" in err
    assert spy == [] and not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        (["--nodes", "a", "--dir", "c"], "the following arguments are required: --head"),
        (["--head", "a", "--dir", "c"], "the following arguments are required: --nodes"),
        (["--head", "a", "--nodes", "b"], "the following arguments are required: --dir"),
        (["--head", "a", "--nodes", "b", "--dir", "c", "--gpus-per-node", "65"], "argument --gpus-per-node: '65' is more than 64"),
        (["--head", "a", "--nodes", "b", "--dir", "c", "--fabric", "roce"], "argument --fabric: invalid choice: 'roce'"),
        (["--head", "a", "--nodes", "b", "--dir", "c", "--scheduler", "pbs"], "argument --scheduler: invalid choice: 'pbs'"),
    ],
)
def test_init_flags_are_checked(capsys, spy, flags, why):
    code, _, err = run(capsys, "init", *flags)
    assert code == ExitCode.USAGE
    assert err.startswith(f"megaprov: error: megaprov init: {why}")
    assert spy == []


def test_init_into_a_directory_that_is_not_empty_is_refused(capsys, tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "x").write_text("")
    code, _, err = run(capsys, "init", "--head", "10.0.0.10", "--nodes", "10.0.0.11", "--dir", "c")
    assert code == ExitCode.USAGE
    assert err == "megaprov: error: --dir c exists and is not empty: give a new directory (init never writes over an inventory)\n"


# ---- self-check


def checks(*found: selfcheck.Check):
    return lambda: list(found)


def test_self_check_prints_one_line_a_check_and_a_fix_for_each_that_did_not_pass(capsys, monkeypatch):
    monkeypatch.setattr(
        selfcheck,
        "checks",
        checks(
            selfcheck.Check("python", selfcheck.PASS, "3.11", "never shown"),
            selfcheck.Check("podman", selfcheck.WARN, "not installed", "install podman"),
            selfcheck.Check("ssh", selfcheck.WARN, "old"),
        ),
    )
    code, out, err = run(capsys, "self-check")
    assert (code, err) == (ExitCode.OK, "")
    assert out.splitlines() == [
        "pass  python           3.11",
        "warn  podman           not installed",
        "                       fix: install podman",
        "warn  ssh              old",
    ]


def test_self_check_with_a_failure_is_exit_5_and_names_the_first(capsys, monkeypatch):
    monkeypatch.setattr(
        selfcheck,
        "checks",
        checks(
            selfcheck.Check("python", selfcheck.PASS, "3.11"),
            selfcheck.Check("collection", selfcheck.FAIL, "not found", "reinstall megaprov"),
            selfcheck.Check("ssh", selfcheck.FAIL, "missing", "install openssh-client"),
        ),
    )
    code, out, err = run(capsys, "self-check")
    assert code == ExitCode.ENVIRONMENT
    assert out.splitlines()[1:3] == ["fail  collection       not found", "                       fix: reinstall megaprov"]
    assert err == "megaprov: error: collection: not found (reinstall megaprov)\n"
    code, out, err = run(capsys, "self-check", "-o", "json")
    assert code == ExitCode.ENVIRONMENT
    error = {"code": 5, "kind": "environment", "message": "collection: not found (reinstall megaprov)"}
    assert json.loads(out) == {
        "megaprov": output.JSON_SCHEMA_VERSION,
        "command": "self-check",
        "ok": False,
        "result": {
            "version": __version__,
            "checks": [
                {"name": "python", "status": "pass", "detail": "3.11", "hint": ""},
                {"name": "collection", "status": "fail", "detail": "not found", "hint": "reinstall megaprov"},
                {"name": "ssh", "status": "fail", "detail": "missing", "hint": "install openssh-client"},
            ],
        },
        "error": error,
        "errors": [error],
    }
    assert err == "megaprov: error: collection: not found (reinstall megaprov)\n"


def test_self_check_prints_details_and_fixes_with_brackets_as_they_are(capsys, monkeypatch):
    monkeypatch.setattr(selfcheck, "checks", checks(selfcheck.Check("ssh", selfcheck.FAIL, "[bold]x[/bold] missing", "apt install [bold]ssh")))
    code, out, err = run(capsys, "self-check")
    assert code == ExitCode.ENVIRONMENT
    assert out.splitlines() == ["fail  ssh              [bold]x[/bold] missing", "                       fix: apt install [bold]ssh"]
    assert err == "megaprov: error: ssh: [bold]x[/bold] missing (apt install [bold]ssh)\n"


def test_self_check_in_json_when_all_pass(capsys, monkeypatch):
    monkeypatch.setattr(selfcheck, "checks", checks(selfcheck.Check("python", selfcheck.PASS, "3.11")))
    code, out, err = run(capsys, "self-check", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    doc = json.loads(out)
    assert doc["ok"] is True
    assert doc["result"] == {"version": __version__, "checks": [{"name": "python", "status": "pass", "detail": "3.11", "hint": ""}]}


def test_self_check_prints_a_long_detail_on_one_line(capsys, monkeypatch):
    long = "x" * 400
    monkeypatch.setattr(selfcheck, "checks", checks(selfcheck.Check("python", selfcheck.WARN, long, "y" * 400)))
    code, out, _ = run(capsys, "self-check")
    assert out.splitlines() == [f"warn  python           {long}", f"                       fix: {'y' * 400}"]


# ---- --help


def test_bootstrap_help_describes_it_and_its_examples(capsys):
    lines = help_lines(capsys, "bootstrap")
    assert "Provision and validate the cluster." in lines
    assert lines[lines.index("examples:") + 1 :] == [
        "megaprov bootstrap -i inventory.ini",
        "megaprov bootstrap -i inventory.ini --check            # dry run: what would change",
        "megaprov bootstrap -i inventory.ini --tags ssh_mesh --limit node1,node2",
        "megaprov bootstrap -i inventory.ini --verify -o json   # every verification again, one JSON document",
    ]
    assert "INVENTORY" not in lines[0].split("[-i INVENTORY]")[1]  # the positional form is not shown
    assert options(capsys, "bootstrap") == (
        "options: -h, --help show this help message and exit --debug show tracebacks -o {text,json}, --output "
        "{text,json} text (default) or json: one JSON document on stdout -i INVENTORY, --inventory INVENTORY the "
        "cluster's inventory (default: $MEGAPROV_INVENTORY or the config file's) --limit LIMIT only these hosts/groups "
        "(Ansible pattern) -e KEY=VALUE, --extra-vars KEY=VALUE set a variable (or @file.yml) --forks FORKS parallel "
        "hosts (default from ansible.cfg) --strategy {linear,free,mitogen} Ansible strategy; mitogen is faster, opt-in "
        "(env MEGAPROV_STRATEGY) --flush-cache forget cached facts (after a node was reinstalled or readdressed) -v, "
        "--verbose more Ansible output in the artifacts --tags TAGS only these stages/roles (comma separated) "
        "--skip-tags SKIP_TAGS skip these stages/roles --check dry run on the hosts: report what would change "
        "(`inventory check` contacts none) --diff show file differences --bundle DIR offline bundle (megaprov bundle "
        "build): checked against its manifest and the inventory before anything is applied --verify run every "
        "verification again, even those a recorded proof with unchanged inputs already passed"
    )


def test_preflight_help(capsys):
    lines = help_lines(capsys, "preflight")
    assert "Collect node facts and judge them against the requirements." in lines
    assert lines[lines.index("examples:") + 1 :] == [
        "megaprov preflight -i inventory.ini",
        "megaprov preflight -i inventory.ini --limit gpu01 -o json",
    ]
    assert "--tags" not in " ".join(lines)


def test_inventory_help_and_inventory_check_help(capsys):
    lines = help_lines(capsys, "inventory")
    assert "Check an inventory offline." in lines
    assert lines[lines.index("examples:") + 1 :] == ["megaprov inventory check -i inventory.ini"]
    lines = help_lines(capsys, "inventory", "check")
    assert "Validate an inventory and its variables without contacting any host." in lines
    assert lines[lines.index("examples:") + 1 :] == [
        "megaprov inventory check -i inventories/example/inventory.ini",
        "megaprov inventory check -i inventory.ini -o json",
    ]


def test_inventory_without_its_action_names_check(capsys):
    code, out, err = run(capsys, "inventory")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == "megaprov: error: megaprov inventory: missing ACTION: use `megaprov inventory check`\n"


def test_init_help(capsys):
    lines = help_lines(capsys, "init")
    assert "Write a starting inventory (head, nodes and the settings that matter) into a new directory." in lines
    assert lines[lines.index("examples:") + 1 :] == [
        "megaprov init --head 10.0.0.10 --nodes 10.0.0.11,10.0.0.12 --gpu H100-SXM --dir mycluster",
        "megaprov init --head head01=10.0.0.10 --nodes 'gpu[01:04]' --gpu H200 --scheduler slurm --fabric infiniband --dir mycluster",
    ]
    assert options(capsys, "init") == (
        "options: -h, --help show this help message and exit --debug show tracebacks -o {text,json}, --output "
        "{text,json} text (default) or json: one JSON document on stdout --head [NAME=]ADDRESS the head (controller, "
        "NFS, Slurm controller, Prometheus) --nodes HOSTS the GPU nodes: [NAME=]ADDRESS,... or a range such as "
        "gpu[01:04] (names that resolve) --gpu GPU the GPU model, as nvidia-smi or megaprov names it (H100-SXM, "
        "'NVIDIA H100 80GB HBM3', A100-80GB, ...) --gpus-per-node GPUS_PER_NODE GPUs per node (default 8) --user USER "
        "the SSH user with sudo on the nodes (default ubuntu) --shared-dir SHARED_DIR the shared directory (default "
        "/shared, served by the head over NFS) --fabric {ethernet,infiniband} the training network (default ethernet) "
        "--scheduler {none,slurm} systemd units (none, default) or Slurm --dir DIR a new directory for inventory.ini "
        "and group_vars/"
    )


def test_self_check_help(capsys):
    lines = help_lines(capsys, "self-check")
    assert "Check this machine's megaprov install: Python, ansible-core, the collection, ssh, podman." in lines
    assert lines[lines.index("examples:") + 1 :] == ["megaprov self-check", "megaprov self-check -o json"]

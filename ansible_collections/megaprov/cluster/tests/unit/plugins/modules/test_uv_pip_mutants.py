"""The uv module (plugins/modules/uv_pip.py), what the python stage reads of it: the plan read from uv's dry run
(summary counts alone, coloured output, the exact refusals of output it cannot read or that contradicts itself), the
counts of uv's own summary lines, the one-line failure the operator reads (its last lines, stdout when stderr is empty,
"no output"), and main() end to end: the exact uv command lines, their environment, the result of a real install and
of each refusal. Stood in: uv itself, a script that records its argv and environment and answers as uv 0.13.9 prints."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from ansible_collections.megaprov.cluster.plugins.modules import uv_pip
from ansible_collections.megaprov.cluster.tests.unit.plugins.modules.utils import run_module

EMPTY = {"install": [], "uninstall": [], "reinstall": []}


# --- reading uv's output -------------------------------------------------------------------------------------------


def test_the_summary_lines_are_counted_by_kind():
    text = "Would download 3 packages\nWould uninstall 1 package\nWould install 2 packages\n"
    assert uv_pip.read_changes(text) == (EMPTY, {"download": 3, "uninstall": 1, "install": 2})
    done = "Uninstalled 1 package in 3ms\nInstalled 4 packages in 12ms\n + a==1\n"
    assert uv_pip.read_changes(done) == ({**EMPTY, "install": ["a==1"]}, {"uninstall": 1, "install": 4})


@pytest.mark.parametrize("text", ["Would install 2 packages\n", "Would uninstall 1 package\n"])
def test_one_summary_line_alone_is_a_change(text):
    assert uv_pip.parse_dry_run(text) == {"changed": True, **EMPTY}


def test_coloured_no_changes_is_no_change():
    text = "\x1b[2mChecked \x1b[1m1 package\x1b[0m \x1b[2min 1ms\x1b[0m\n\x1b[2mWould make no changes\x1b[0m\n"
    assert uv_pip.parse_dry_run(text) == {"changed": False, **EMPTY}


def test_no_changes_beside_a_count_is_refused_with_the_count():
    with pytest.raises(ValueError) as refused:
        uv_pip.parse_dry_run("Would make no changes\nWould install 3 packages\n + a==1\n")
    assert str(refused.value) == "uv's dry run says both that it would make no changes and that it would change 3 package(s)"


def test_unreadable_output_is_quoted_line_by_line_without_colour():
    with pytest.raises(ValueError) as refused:
        uv_pip.parse_dry_run("\x1b[2mResolved 2 packages in 2ms\x1b[0m\n\n  Audited 2 packages in 1ms  \n")
    assert str(refused.value) == (
        "cannot read uv's dry run: neither 'Would make no changes' nor a package it would change "
        "(output: Resolved 2 packages in 2ms | Audited 2 packages in 1ms)"
    )
    with pytest.raises(ValueError) as refused:
        uv_pip.parse_dry_run("\n")
    assert str(refused.value).endswith("(output: none)")


def test_unreadable_output_keeps_its_last_300_characters():
    lines = [f"warning: line {i:03d} of something uv said" for i in range(40)]
    with pytest.raises(ValueError) as refused:
        uv_pip.parse_dry_run("\n".join(lines))
    tail = " | ".join(lines)[-300:]
    assert str(refused.value).endswith(f"(output: {tail})") and len(tail) == 300


def test_a_failure_reads_stdout_when_stderr_is_empty_and_says_when_there_is_nothing():
    assert uv_pip.failure("uv pip install", 2, "error: Distribution not found\n", "") == (
        "uv pip install failed (exit 2): error: Distribution not found"
    )
    assert uv_pip.failure("uv pip install", 2, "out\n", None) == "uv pip install failed (exit 2): out"
    assert uv_pip.failure("uv pip install --dry-run", 137, "", "") == "uv pip install --dry-run failed (exit 137): no output"


def test_a_failure_keeps_its_last_six_lines_and_800_characters():
    err = "\n".join(f"cause {i}" for i in range(1, 9))
    assert uv_pip.failure("uv", 1, "", err) == "uv failed (exit 1): cause 3 | cause 4 | cause 5 | cause 6 | cause 7 | cause 8"
    long = "error: " + "".join(str(i % 10) for i in range(1000))
    assert uv_pip.failure("uv", 1, "", long) == f"uv failed (exit 1): {long[-800:]}"


# --- main() against a stood-in uv -------------------------------------------------------------------------------------

FAKE_UV = """#!/bin/sh
printf '%s\\037' "$@" >> "$0.calls"
printf '\\036%s\\036%s\\n' "${NO_COLOR-(unset)}" "${SSL_CERT_FILE-(unset)}" >> "$0.calls"
case " $* " in
  *" --dry-run "*) cat "$0.plan" >&2; exit "$(cat "$0.plan_rc" 2>/dev/null || echo 0)" ;;
  *) cat "$0.done" >&2; exit "$(cat "$0.done_rc" 2>/dev/null || echo 0)" ;;
esac
"""

CHANGES = " - einops==0.8.1\n + einops==0.8.2\n + six==1.17.0\n"
UPGRADE_PLAN = "Resolved 2 packages in 3ms\nWould uninstall 1 package\nWould install 2 packages\n" + CHANGES
UPGRADE_DONE = "Prepared 2 packages in 5ms\nUninstalled 1 package in 1ms\nInstalled 2 packages in 4ms\n" + CHANGES


@pytest.fixture
def uv(tmp_path) -> Path:
    tool = tmp_path / "uv"
    tool.write_text(FAKE_UV)
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "python").write_text("")
    Path(f"{tool}.plan").write_text(UPGRADE_PLAN)
    Path(f"{tool}.done").write_text(UPGRADE_DONE)
    return tool


def calls(tool: Path) -> list[dict]:
    """Each run of the stood-in uv: its argv and the two variables of its environment the module sets."""
    log = Path(f"{tool}.calls")
    out = []
    for line in log.read_text().split("\n")[:-1] if log.exists() else []:
        words, no_color, cert = line.split("\036")
        env = {"NO_COLOR": no_color, "SSL_CERT_FILE": cert}
        out.append({"argv": words.split("\037")[:-1], "env": {k: None if v == "(unset)" else v for k, v in env.items()}})
    return out


def args(tool: Path, **over) -> dict:
    return {"name": ["einops==0.8.2", "six"], "python": str(tool.parent / "python"), "uv": str(tool), **over}


def argv(tool: Path, *tail: str) -> list[str]:
    return ["pip", "install", "--python", str(tool.parent / "python"), "--no-config", "--color", "never", "--no-progress", *tail]


def test_an_upgrade_runs_the_dry_run_then_the_install_and_reports_what_uv_did(uv, capsys):
    code, result = run_module(uv_pip.main, args(uv, index_url="https://pypi.example/simple", cert="/etc/ssl/proxy.pem"), capsys)
    sources = ["--index-url", "https://pypi.example/simple", "--index-strategy", "unsafe-best-match"]
    assert code == 0 and result["changed"] is True
    assert (result["install"], result["uninstall"], result["reinstall"]) == (["einops==0.8.2", "six==1.17.0"], ["einops==0.8.1"], [])
    assert result["cmd"] == [str(uv), *argv(uv, *sources, "--compile-bytecode", "--", "einops==0.8.2", "six")]
    env = {"NO_COLOR": "1", "SSL_CERT_FILE": "/etc/ssl/proxy.pem"}
    assert calls(uv) == [
        {"argv": argv(uv, *sources, "--dry-run", "--", "einops==0.8.2", "six"), "env": env},
        {"argv": argv(uv, *sources, "--compile-bytecode", "--", "einops==0.8.2", "six"), "env": env},
    ]


def test_without_a_cert_uv_gets_no_ssl_cert_file(uv, capsys, monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    Path(f"{uv}.plan").write_text("Checked 2 packages in 1ms\nWould make no changes\n")
    code, result = run_module(uv_pip.main, args(uv, compile_bytecode=False), capsys)
    assert code == 0 and result["changed"] is False and (result["install"], result["uninstall"]) == ([], [])
    assert calls(uv) == [{"argv": argv(uv, "--dry-run", "--", "einops==0.8.2", "six"), "env": {"NO_COLOR": "1", "SSL_CERT_FILE": None}}]
    assert result["cmd"][-3:] == ["--", "einops==0.8.2", "six"] and "--compile-bytecode" not in result["cmd"]


def test_check_mode_reports_the_plan_and_runs_only_the_dry_run(uv, capsys):
    code, result = run_module(uv_pip.main, {**args(uv), "_ansible_check_mode": True}, capsys)
    assert code == 0 and result["changed"] is True and result["uninstall"] == ["einops==0.8.1"]
    assert len(calls(uv)) == 1


def test_no_requirements_run_nothing(uv, capsys):
    code, result = run_module(uv_pip.main, args(uv, name=[]), capsys)
    assert code == 0 and result["changed"] is False and calls(uv) == []
    assert result["cmd"] == [str(uv), *argv(uv, "--compile-bytecode", "--")]


def test_uv_found_on_path_by_name(uv, capsys, monkeypatch):
    monkeypatch.setenv("PATH", f"{uv.parent}:/usr/bin:/bin")
    code, result = run_module(uv_pip.main, args(uv, uv="uv"), capsys)
    assert code == 0 and len(calls(uv)) == 2 and result["cmd"][0] == "uv"


def test_a_uv_that_is_not_executable_is_refused(uv, capsys):
    uv.chmod(0o644)
    code, result = run_module(uv_pip.main, args(uv), capsys)
    assert (code, result["msg"]) == (1, f"{uv}: no uv executable there (install it first)") and calls(uv) == []


def test_check_mode_before_the_environment_exists_is_skipped_with_the_reason(uv, capsys):
    code, result = run_module(uv_pip.main, {**args(uv, python="/opt/none/bin/python"), "_ansible_check_mode": True}, capsys)
    assert code == 0 and result["skipped"] is True
    assert result["msg"] == "check mode: /opt/none/bin/python does not exist yet; a run creates the environment first"
    code, result = run_module(uv_pip.main, {**args(uv, uv=str(uv.parent / "nouv")), "_ansible_check_mode": True}, capsys)
    assert result["msg"] == f"check mode: {uv.parent / 'nouv'} is not installed yet; a run installs it first"


def test_a_wheelhouse_without_folders_is_refused_before_uv_runs(uv, capsys):
    code, result = run_module(uv_pip.main, args(uv, no_index=True), capsys)
    assert (code, result["msg"]) == (1, "no_index without find_links leaves uv nowhere to install from") and calls(uv) == []


def test_an_unreadable_dry_run_fails_with_the_output_and_installs_nothing(uv, capsys):
    Path(f"{uv}.plan").write_text("Resolved 2 packages in 2ms\n")
    code, result = run_module(uv_pip.main, args(uv), capsys)
    assert code == 1 and result["stderr"] == "Resolved 2 packages in 2ms\n" and result["changed"] is False
    assert result["msg"] == (
        "cannot read uv's dry run: neither 'Would make no changes' nor a package it would change (output: Resolved 2 packages in 2ms)"
    )
    assert len(calls(uv)) == 1


def test_a_failing_install_fails_with_uvs_last_lines(uv, capsys):
    Path(f"{uv}.done").write_text("Resolved 2 packages in 2ms\nerror: Failed to install: six-1.17.0\n  Caused by: No space left on device\n")
    Path(f"{uv}.done_rc").write_text("2")
    code, result = run_module(uv_pip.main, args(uv), capsys)
    assert code == 1 and result["msg"] == (
        "uv pip install failed (exit 2): Resolved 2 packages in 2ms | error: Failed to install: six-1.17.0 | Caused by: No space left on device"
    )
    assert result["install"] == ["einops==0.8.2", "six==1.17.0"] and result["changed"] is True  # the plan it was running

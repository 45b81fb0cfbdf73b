"""The python stage's uv module (ansible_collections/megaprov/cluster/plugins/modules/uv_pip.py): how uv's dry run is read
(outputs recorded from uv 0.13.9, the pinned release), the uv command lines it runs, and main() end to end against a fake
uv on PATH: no change when the dry run says so, check mode never installs, a run installs once. Also: the pinned uv is
the same release in the pytorch role, the lab's wheelhouse and scripts/setup.sh."""

import re
import stat
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, load_module
from tests.helpers import modules

uv_pip = load_module(ROOT / "ansible_collections/megaprov/cluster/plugins/modules/uv_pip.py", "megaprov_uv_pip")

# `uv pip install --dry-run` as uv 0.13.9 prints it (stderr), for a venv that has the requirements, lacks two of them,
# has an older setuptools, and is asked to reinstall.
SATISFIED = "Using Python 3.11.7 environment at: /opt/megaprov/venv\nChecked 1 package in 1ms\nWould make no changes\n"
MISSING = """Using Python 3.11.7 environment at: /opt/megaprov/venv
Resolved 2 packages in 2ms
Would download 1 package
Would install 1 package
 + einops==0.8.2
"""
UPGRADE = """Using Python 3.11.7 environment at: /opt/megaprov/venv
Resolved 10 packages in 290ms
Would download 10 packages
Would uninstall 1 package
Would install 10 packages
 + filelock==4.3.1
 - setuptools==65.5.0
 + setuptools==84.2.1
 + torch==2.13.0+cpu
"""
FROM_URL = """Resolved 1 package in 3ms
Would download 1 package
Would uninstall 1 package
Would install 1 package
 - einops==0.8.2
 + einops @ file:///srv/wheels/einops-0.8.2-py3-none-any.whl
"""
# --color always (a terminal, or a site's UV_COLOR): the same plan in escape sequences
COLOURED = (
    "\x1b[2mResolved \x1b[1m1 package\x1b[0m \x1b[2min 5ms\x1b[0m\x1b[0m\n\x1b[2mWould install \x1b[1m1 package\x1b[0m\x1b[0m\n"
    " \x1b[32m+\x1b[39m \x1b[1mpackaging\x1b[0m\x1b[2m==26.4\x1b[0m\n"
)


def test_a_satisfied_environment_is_no_change():
    assert uv_pip.parse_dry_run(SATISFIED) == {"changed": False, "install": [], "uninstall": [], "reinstall": []}


def test_missing_packages_are_a_change_with_their_versions():
    assert uv_pip.parse_dry_run(MISSING) == {"changed": True, "install": ["einops==0.8.2"], "uninstall": [], "reinstall": []}


def test_an_upgrade_names_what_goes_and_what_comes():
    plan = uv_pip.parse_dry_run(UPGRADE)
    assert plan["changed"] and plan["uninstall"] == ["setuptools==65.5.0"]
    assert plan["install"] == ["filelock==4.3.1", "setuptools==84.2.1", "torch==2.13.0+cpu"]


def test_a_url_requirement_and_a_reinstall_are_read():
    assert uv_pip.parse_dry_run(FROM_URL)["install"] == ["einops @ file:///srv/wheels/einops-0.8.2-py3-none-any.whl"]
    assert uv_pip.parse_dry_run(" ~ six==1.17.0\n")["reinstall"] == ["six==1.17.0"]


def test_colour_is_read_through():
    assert uv_pip.parse_dry_run(COLOURED)["install"] == ["packaging==26.4"]


def test_a_summary_without_package_lines_is_still_a_change():
    """uv's summary logger (quiet settings) prints the counts only: still a change, never 'nothing to do'."""
    assert uv_pip.parse_dry_run("Would uninstall 1 package\nWould install 1 package\n")["changed"] is True


@pytest.mark.parametrize(
    "text",
    ["", "Resolved 2 packages in 2ms\n", "Using Python 3.11.7 environment at: /v\nAudited 2 packages in 1ms\n", " + einops\n"],
)
def test_output_that_says_nothing_readable_is_refused_not_taken_for_no_change(text):
    with pytest.raises(ValueError, match="cannot read uv's dry run"):
        uv_pip.parse_dry_run(text)


def test_contradicting_output_is_refused():
    with pytest.raises(ValueError, match="both"):
        uv_pip.parse_dry_run("Would make no changes\n + einops==0.8.2\n")


def test_a_line_that_merely_contains_the_words_does_not_count():
    with pytest.raises(ValueError):
        uv_pip.parse_dry_run("warning: this run: Would make no changes? no\n")


def params(**over):
    base = {
        "name": ["torch==2.13.0"],
        "python": "/opt/megaprov/venv/bin/python",
        "uv": "/opt/megaprov/uv/bin/uv",
        "index_url": None,
        "extra_index_url": [],
        "find_links": [],
        "no_index": False,
        "index_strategy": "unsafe-best-match",
        "cert": None,
        "compile_bytecode": True,
    }
    return {**base, **over}


def test_a_wheelhouse_is_no_index_and_find_links_only():
    p = params(no_index=True, find_links=["/srv/wheels", "/srv/more"], index_url="https://ignored", extra_index_url=["https://ignored2"])
    assert uv_pip.source_args(p) == ["--no-index", "--find-links", "/srv/wheels", "--find-links", "/srv/more"]


def test_an_index_with_an_extra_index_chooses_as_pip_does():
    p = params(index_url="https://download.pytorch.org/whl/cpu", extra_index_url=["https://pypi.org/simple"])
    assert uv_pip.source_args(p) == [
        "--index-url",
        "https://download.pytorch.org/whl/cpu",
        "--extra-index-url",
        "https://pypi.org/simple",
        "--index-strategy",
        "unsafe-best-match",
    ]
    assert uv_pip.source_args(params()) == []  # uv's default index, nothing to choose between


def test_the_install_command_targets_the_venv_reads_no_config_and_ends_with_the_requirements():
    p = params(name=["torch==2.13.0", "--upgrade"], no_index=True, find_links=["/w"])
    dry = uv_pip.install_argv(p, dry_run=True)
    assert dry[:9] == [
        "/opt/megaprov/uv/bin/uv",
        "pip",
        "install",
        "--python",
        "/opt/megaprov/venv/bin/python",
        "--no-config",
        "--color",
        "never",
        "--no-progress",
    ]
    # after "--" a requirement is a requirement: "--upgrade" is refused by uv as a package name, never taken as the flag
    assert dry[-4:] == ["--dry-run", "--", "torch==2.13.0", "--upgrade"]
    real = uv_pip.install_argv(p, dry_run=False)
    assert "--dry-run" not in real and real[-4:] == ["--compile-bytecode", "--", "torch==2.13.0", "--upgrade"]
    assert "--compile-bytecode" not in uv_pip.install_argv({**p, "compile_bytecode": False}, dry_run=False)


def test_a_failure_is_its_last_lines_on_one_line():
    err = (
        "Using Python 3.11.7 environment at: v\n\x1b[31merror\x1b[0m: No solution found when resolving dependencies\n"
        "  cause: Because there is no version of six==1.16 ...\n"
    )
    assert uv_pip.failure("uv pip install --dry-run", 1, "", err) == (
        "uv pip install --dry-run failed (exit 1): Using Python 3.11.7 environment at: v | "
        "error: No solution found when resolving dependencies | cause: Because there is no version of six==1.16 ..."
    )


# main() end to end: a fake uv records each command line and answers from the state file (installed or not).
FAKE_UV = """#!/bin/sh
printf '%s\\0' "$@" >> "$0.calls"; printf '\\n' >> "$0.calls"
[ -n "$SSL_CERT_FILE" ] && echo "$SSL_CERT_FILE" > "$0.cert"
case " $* " in
  *" --dry-run "*)
    if [ -f "$0.installed" ]; then printf 'Checked 1 package in 1ms\\nWould make no changes\\n' >&2
    else printf 'Resolved 1 package in 2ms\\nWould install 1 package\\n + einops==0.8.2\\n' >&2; fi ;;
  *) touch "$0.installed"; printf 'Installed 1 package in 1ms\\n + einops==0.8.2\\n' >&2 ;;
esac
"""


@pytest.fixture
def fake_uv(tmp_path) -> Path:
    uv = tmp_path / "uv"
    uv.write_text(FAKE_UV)
    uv.chmod(uv.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "python").write_text("")
    return uv


def calls(uv: Path) -> list[list[str]]:
    text = Path(f"{uv}.calls").read_text() if Path(f"{uv}.calls").exists() else ""
    return [line.strip("\0").split("\0") for line in text.splitlines() if line]


def args(uv: Path, **over) -> dict:
    return {"name": ["einops"], "python": str(uv.parent / "python"), "uv": str(uv), "no_index": True, "find_links": ["/w"], **over}


def test_module_installs_once_then_reports_no_change(fake_uv, capsys):
    code, first = modules.run_module(uv_pip.main, args(fake_uv, cert="/etc/ssl/proxy.pem"), capsys)
    assert code == 0 and first["changed"] is True and first["install"] == ["einops==0.8.2"]
    assert [("--dry-run" in c) for c in calls(fake_uv)] == [True, False]
    assert Path(f"{fake_uv}.cert").read_text().strip() == "/etc/ssl/proxy.pem"
    code, second = modules.run_module(uv_pip.main, args(fake_uv), capsys)
    assert code == 0 and second["changed"] is False and second["install"] == []
    assert len(calls(fake_uv)) == 3  # the second run's dry run only


def test_check_mode_reports_the_change_and_installs_nothing(fake_uv, capsys):
    code, result = modules.run_module(uv_pip.main, {**args(fake_uv), "_ansible_check_mode": True}, capsys)
    assert code == 0 and result["changed"] is True and result["install"] == ["einops==0.8.2"]
    assert [("--dry-run" in c) for c in calls(fake_uv)] == [True] and not Path(f"{fake_uv}.installed").exists()


def test_check_mode_before_uv_exists_is_skipped_with_the_reason(tmp_path, capsys):
    (tmp_path / "python").write_text("")
    a = {"name": ["einops"], "python": str(tmp_path / "python"), "uv": str(tmp_path / "no-uv"), "_ansible_check_mode": True}
    code, result = modules.run_module(uv_pip.main, a, capsys)
    assert code == 0 and result["skipped"] is True and "is not installed yet" in result["msg"]
    code, result = modules.run_module(uv_pip.main, {**a, "_ansible_check_mode": False}, capsys)
    assert code == 1 and "no uv executable there" in result["msg"]


def test_a_missing_environment_fails_outside_check_mode(fake_uv, capsys):
    code, result = modules.run_module(uv_pip.main, args(fake_uv, python="/nonexistent/bin/python"), capsys)
    assert code == 1 and result["msg"] == "/nonexistent/bin/python does not exist: create the environment first" and calls(fake_uv) == []


def test_no_index_without_find_links_is_refused(fake_uv, capsys):
    code, result = modules.run_module(uv_pip.main, args(fake_uv, find_links=[]), capsys)
    assert code == 1 and "nowhere to install from" in result["msg"]


def test_a_dry_run_that_fails_fails_the_task_with_uvs_reason(fake_uv, capsys):
    fake_uv.write_text("#!/bin/sh\necho 'error: Failed to parse: `--upgrade`' >&2\nexit 2\n")
    code, result = modules.run_module(uv_pip.main, args(fake_uv), capsys)
    assert code == 1 and result["msg"] == "uv pip install --dry-run failed (exit 2): error: Failed to parse: `--upgrade`"


# One uv release everywhere: the pytorch role installs it on nodes, the lab's wheelhouse carries its wheel for
# pytorch_source=wheelhouse, and scripts/setup.sh installs it into the checkout's .venv.
def test_the_pinned_uv_is_the_same_release_everywhere():
    from megaprov.cluster import wheelhouse

    defaults = yaml.safe_load((ROOT / "ansible_collections/megaprov/cluster/roles/pytorch/defaults/main.yml").read_text())
    version = defaults["pytorch_uv_version"]
    assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", version)
    assert f"uv=={version}" in wheelhouse.lab_requirements()
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert re.search(rf"^UV_VERSION={re.escape(version)}$", setup, re.M), "scripts/setup.sh pins another uv"

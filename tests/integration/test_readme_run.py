"""The README's main command, as a newcomer runs it: a fresh clone of the commit under test, no venv, no lab left
from other tests, `./scripts/run-lab.sh` to a PASSED verdict (the `readme_run` fixture runs it once per session)."""

import re

import pytest

pytestmark = pytest.mark.lab

# Tool noise a newcomer must not see: setuptools' and pip's warnings, Ansible's colour codes.
NOISE = re.compile(r"UserWarning|BuildBackendWarning|SetuptoolsDeprecationWarning|Package would be ignored|^WARNING: |DEPRECATION: |\x1b\[", re.M)


def test_the_readme_main_command_passes_from_a_fresh_clone(readme_run):
    output = readme_run["output"]
    assert readme_run["code"] == 0, output[-4000:]
    verdict = re.search(r"^verdict for job (lab-tiny-\S+): (\w+)$", output, re.M)
    assert verdict and verdict.group(2) == "PASSED", output[-4000:]
    # the training ran while another process kept one of this machine's cores busy
    assert readme_run["burner"], "the bootstrap never reported ok"
    throughput = re.search(r"^  (\w+) +throughput: (.*)$", output, re.M)
    assert throughput and throughput.group(1) == "pass", output[-4000:]
    print(f"README run throughput check: {throughput.group(2)}")
    print(f"README run: {readme_run['seconds']} s in all, marks {readme_run['marks']}")


def test_the_newcomer_sees_megaprovs_progress_not_tool_noise(readme_run):
    output = readme_run["output"]
    assert readme_run["code"] == 0, output[-4000:]
    noise = [line for line in output.splitlines() if NOISE.search(line)]
    assert not noise, noise[:10]
    # setup says what it does, bootstrap says where the time went
    # (with uv, setup.sh's default installer; its pip fallback says "pip install")
    assert "setup: uv install -e .[lab]" in output, output[:2000]
    stages = re.search(r"^time per stage: (.*)$", output, re.M)
    assert stages and "python " in stages.group(1) and "ssh_mesh " in stages.group(1), output[-4000:]

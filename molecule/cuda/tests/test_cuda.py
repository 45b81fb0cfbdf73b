"""CUDA 12.4 from the signed fixture repository: the pinned toolkit, its environment, nvcc on every login's PATH."""

from tests.molecule.inventory import scenario_hosts

testinfra_hosts = list(scenario_hosts().values())  # from Molecule's inventory


def test_pinned_toolkit_only(host):
    assert host.package("cuda-toolkit-12-4").is_installed
    assert host.package("cuda-toolkit-12-4").version == "12.4.1-1"
    assert not host.package("cuda-toolkit-12-6").is_installed
    assert "Signed-By: /usr/share/keyrings/cuda-archive-keyring.gpg" in host.file("/etc/apt/sources.list.d/megaprov-cuda.sources").content_string


def test_profile_puts_nvcc_on_the_path(host):
    profile = host.file("/etc/profile.d/megaprov-cuda.sh")
    assert profile.mode == 0o644 and profile.user == "root"
    out = host.check_output("bash -lc 'echo $CUDA_HOME; command -v nvcc; nvcc --version'")
    home, nvcc, *banner = out.splitlines()
    assert home == "/usr/local/cuda-12.4" and nvcc == "/usr/local/cuda-12.4/bin/nvcc"
    assert any("release 12.4" in line for line in banner)


def test_profile_is_idempotent_in_a_nested_login(host):
    out = host.check_output("bash -lc 'bash -lc \"echo \\$PATH\"'")
    assert out.split(":").count("/usr/local/cuda-12.4/bin") == 1

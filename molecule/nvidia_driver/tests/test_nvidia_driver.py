"""The driver stack as an 8-GPU NVSwitch node, a 1-GPU node with an exact pin and a CPU node end up with it."""

import pytest

testinfra_hosts = ["podman://nvs1", "podman://gpu1", "podman://cpu1"]

KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"
EXPECTED = {"nvs1": "550.127.08-1", "gpu1": "550.90.07-1"}


def installed(host, name):
    out = host.run(f"dpkg-query -W -f='${{Version}} ${{db:Status-Abbrev}}' {name}")
    return out.stdout.split() if out.rc == 0 else []


def test_repository_signed_by_the_keyring(host):
    source = host.file("/etc/apt/sources.list.d/megaprov-cuda.sources")
    if host.backend.get_hostname() == "cpu1":
        assert not source.exists and not host.package("cuda-keyring").is_installed
        return
    assert source.mode == 0o644
    assert f"Signed-By: {KEYRING}" in source.content_string
    assert "URIs: file:///srv/megaprov-fixtures/apt/" in source.content_string
    assert host.file(KEYRING).exists and host.package("cuda-keyring").is_installed
    # The keyring package's own list points at NVIDIA's upstream URL; the role removed it.
    assert not host.file("/etc/apt/sources.list.d/cuda-debian12-x86_64.list").exists
    # apt verified the fixture's signature: a repository apt does not trust has no policy entry.
    assert "file:/srv/megaprov-fixtures/apt" in host.check_output("apt-cache policy nvidia-driver")


def test_pinned_version_installed_and_held(host):
    name = host.backend.get_hostname()
    if name == "cpu1":
        assert installed(host, "nvidia-driver") == []
        return
    version, status = installed(host, "nvidia-driver")
    assert version == EXPECTED[name]
    assert installed(host, "cuda-drivers-550") == [EXPECTED[name], "hi"]  # held
    assert installed(host, "nvidia-driver")[1] == "hi"
    assert installed(host, "cuda-drivers-560") == []
    policy = host.check_output("apt-cache policy nvidia-driver")
    candidate = policy.split("Candidate:")[1].split()[0]
    assert candidate == EXPECTED[name], "the apt preference must keep the 560 branch out"
    pin = host.file("/etc/apt/preferences.d/megaprov-nvidia-driver").content_string
    assert ("Pin: version 550.90.07-*" if name == "gpu1" else "Pin: version 550.*") in pin


@pytest.mark.parametrize("unit", ["nvidia-persistenced", "nvidia-fabricmanager"])
def test_daemons_exactly_where_the_facts_say(host, unit):
    name = host.backend.get_hostname()
    wanted = name == "nvs1" or (name == "gpu1" and unit == "nvidia-persistenced")
    service = host.service(unit)
    if wanted:
        assert service.is_enabled and service.is_running
    else:
        assert not host.file(f"/lib/systemd/system/{unit}.service").exists


def test_fabric_manager_matches_the_driver(host):
    if host.backend.get_hostname() != "nvs1":
        assert installed(host, "nvidia-fabricmanager-550") == []
        return
    assert installed(host, "nvidia-fabricmanager-550") == [EXPECTED["nvs1"], "hi"]
    assert installed(host, "libnvidia-nscq-550") == [EXPECTED["nvs1"], "hi"]

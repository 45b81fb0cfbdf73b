"""The driver stack as an 8 x H100 NVSwitch node (branch 580, open modules), a 1 x V100 node with an exact 550 pin
(proprietary modules) and a CPU node end up with it, checked on the hosts."""

import pytest

from tests.molecule.inventory import scenario_hosts

testinfra_hosts = list(scenario_hosts().values())  # from Molecule's inventory

KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"
EXPECTED = {"nvs1": "580.105.08-1", "gpu1": "550.90.07-1"}
BRANCH = {"nvs1": "580", "gpu1": "550"}
FLAVOUR = {"nvs1": ("nvidia-kernel-open-dkms", "open"), "gpu1": ("nvidia-kernel-dkms", "proprietary")}
DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/megaprov-persistence-mode.conf"


def installed(host, name):
    """[version, status] of an installed package ("hi" when held), [] when dpkg has it not installed or not at all."""
    out = host.run(f"dpkg-query -W -f='${{Version}} ${{db:Status-Abbrev}}' {name}")
    words = out.stdout.split() if out.rc == 0 else []
    return words if len(words) == 2 and words[1][1:2] == "i" else []


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
    assert installed(host, f"cuda-drivers-{BRANCH[name]}") == [EXPECTED[name], "hi"]  # held
    assert installed(host, "nvidia-driver")[1] == "hi"
    assert installed(host, "cuda-drivers-590") == [] and installed(host, "cuda-drivers-560") == []
    policy = host.check_output("apt-cache policy nvidia-driver")
    candidate = policy.split("Candidate:")[1].split()[0]
    assert candidate == EXPECTED[name], "the apt preference must keep newer branches out"
    pin = host.file("/etc/apt/preferences.d/megaprov-nvidia-driver").content_string
    assert ("Pin: version 550.90.07-*" if name == "gpu1" else "Pin: version 580.*") in pin
    assert "Package: cuda-drivers cuda-drivers-* nvidia-* libnvidia-*" in pin


def test_kernel_module_flavour_follows_the_gpu_generation(host):
    """H100 (Hopper) gets the open modules, V100 (Volta) the proprietary ones: nvidia_driver_open: auto."""
    name = host.backend.get_hostname()
    if name == "cpu1":
        assert installed(host, "nvidia-kernel-dkms") == [] and installed(host, "nvidia-kernel-open-dkms") == []
        return
    package, flavour = FLAVOUR[name]
    other = "nvidia-kernel-dkms" if flavour == "open" else "nvidia-kernel-open-dkms"
    assert installed(host, package) == [EXPECTED[name], "hi"]
    assert installed(host, other) == []
    kernel = host.check_output("uname -r")
    module = host.file(f"/lib/modules/{kernel}/updates/dkms/nvidia.ko")
    assert module.exists, "DKMS built no module: the kernel headers were missing when the driver went in"
    assert f"{EXPECTED[name]} {flavour} kernel module for {kernel}" in module.content_string


def test_kernel_headers_installed_for_dkms(host):
    kernel = host.check_output("uname -r")
    if host.backend.get_hostname() == "cpu1":
        assert installed(host, f"linux-headers-{kernel}") == []
        return
    assert installed(host, f"linux-headers-{kernel}")[1:] == ["ii"]
    assert host.file(f"/lib/modules/{kernel}/build").is_symlink
    assert host.package("dkms").is_installed  # the real dkms from Debian's archive


def test_nouveau_blacklisted_on_gpu_nodes(host):
    conf = host.file("/etc/modprobe.d/megaprov-blacklist-nouveau.conf")
    if host.backend.get_hostname() == "cpu1":
        assert not conf.exists
        return
    lines = conf.content_string.splitlines()
    assert "blacklist nouveau" in lines and "options nouveau modeset=0" in lines
    assert conf.mode == 0o644


@pytest.mark.parametrize("unit", ["nvidia-persistenced", "nvidia-fabricmanager"])
def test_daemons_exactly_where_the_facts_say(host, unit):
    name = host.backend.get_hostname()
    wanted = name == "nvs1" or (name == "gpu1" and unit == "nvidia-persistenced")
    service = host.service(unit)
    if wanted:
        assert service.is_enabled and service.is_running
    else:
        assert not host.file(f"/lib/systemd/system/{unit}.service").exists


def test_persistence_mode_is_on_despite_the_packaged_unit(host):
    if host.backend.get_hostname() == "cpu1":
        assert not host.file(DROPIN).exists
        return
    packaged = host.file("/lib/systemd/system/nvidia-persistenced.service").content_string
    assert "--no-persistence-mode" in packaged, "the fixture must ship the unit as Ubuntu/NVIDIA do"
    effective = host.check_output("systemctl show -p ExecStart --value nvidia-persistenced")
    assert "--persistence-mode" in effective and "--no-persistence-mode" not in effective
    pid = host.check_output("systemctl show -p MainPID --value nvidia-persistenced")
    cmdline = host.file(f"/proc/{pid}/cmdline").content_string.replace("\0", " ")
    assert "--persistence-mode" in cmdline and "--no-persistence-mode" not in cmdline, cmdline


def test_fabric_manager_matches_the_driver(host):
    name = host.backend.get_hostname()
    if name != "nvs1":
        assert installed(host, "nvidia-fabricmanager") == [] and installed(host, "nvidia-fabricmanager-550") == []
        return
    # From 580 the packages are unversioned; nvidia-fabricmanager-580 is only a virtual name.
    assert installed(host, "nvidia-fabricmanager") == [EXPECTED["nvs1"], "hi"]
    assert installed(host, "libnvidia-nscq") == [EXPECTED["nvs1"], "hi"]
    assert installed(host, "nvidia-fabricmanager-580") == []
    assert host.service("nvidia-fabricmanager").is_running  # the stand-in refuses a driver of another version

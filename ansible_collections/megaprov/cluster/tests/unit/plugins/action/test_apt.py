"""The apt action plugin (plugins/action/apt.py, its pure part in plugins/module_utils/apt_fast.py): when one dpkg-query may stand
in for ansible.builtin.apt (every package installed, at its pin), and when apt must decide."""

import pytest

from ansible_collections.megaprov.cluster.plugins.module_utils import apt_fast as apt

DPKG = "chrony\tinstall ok installed\t4.3-2+deb12u3\nmunge\tdeinstall ok config-files\t0.5.15-2\nlibnccl2\tinstall ok installed\t2.27.7-1+cuda12.9\n"


def test_plain_names_and_pins_take_the_fast_path():
    assert apt.wanted({"name": ["chrony", "libnccl2=2.27.7-1+cuda12.9"], "state": "present", "install_recommends": False}) == {
        "chrony": None,
        "libnccl2": "2.27.7-1+cuda12.9",
    }
    assert apt.wanted({"name": "chrony,rsync", "update_cache": True, "cache_valid_time": 3600}) == {"chrony": None, "rsync": None}


@pytest.mark.parametrize(
    "args",
    [
        {"name": ["chrony"], "state": "latest"},
        {"name": ["chrony"], "state": "absent"},
        {"name": ["chrony"], "autoremove": True},
        {"deb": "/tmp/x.deb"},
        {"name": ["linux-headers-*"]},
        {"name": ["nccl>=2.20"]},
        {"name": ["/srv/x.deb"]},
        {"name": []},
        {"name": ["a=b=c"]},
    ],
)
def test_anything_else_goes_to_apt(args):
    assert apt.wanted(args) is None


def test_installed_means_installed_at_the_pin():
    assert apt.all_installed({"chrony": None, "libnccl2": "2.27.7-1+cuda12.9"}, DPKG)
    assert apt.all_installed({"chrony:amd64": None}, DPKG)
    assert not apt.all_installed({"libnccl2": "2.26.2-1+cuda12.8"}, DPKG), "another version is pinned"
    assert not apt.all_installed({"munge": None}, DPKG), "removed, its configuration kept: not installed"
    assert not apt.all_installed({"rsync": None}, DPKG), "not known to dpkg"


def test_the_query_quotes_every_name_for_the_shell():
    line = apt.query_argv({"chrony": None, "x;touch /tmp/pwned": None})
    assert line.startswith("dpkg-query -W -f='${Package}\\t${Status}\\t${Version}\\n' chrony 'x;touch /tmp/pwned' 2>/dev/null")


def test_python_apt_is_installed_non_interactively_and_its_absence_is_read_from_dpkg_query():
    """ansible.builtin.apt imports python3-apt; the action plugin installs it over the connection first (the module's
    own fallback re-executes itself, which fails under mitogen), retrying after an apt-get update on a node without lists."""
    assert apt.PYTHON_APT == "python3-apt"
    first, dummy, retry = apt.PYTHON_APT_INSTALL.partition(" || ")
    assert first.startswith("DEBIAN_FRONTEND=noninteractive apt-get install -y") and first.endswith("--no-install-recommends python3-apt")
    assert "apt-get update" in retry and retry.rstrip("; }").endswith("python3-apt")
    assert not apt.all_installed({apt.PYTHON_APT: None}, "python3-apt\tdeinstall ok config-files\t2.6.0\n")
    assert apt.all_installed({apt.PYTHON_APT: None}, "python3-apt\tinstall ok installed\t2.6.0\n")

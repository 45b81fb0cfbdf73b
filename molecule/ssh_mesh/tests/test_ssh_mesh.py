"""The mesh as it really is on the nodes: account, key, pinned host keys, every pair connecting."""

import itertools

import pytest
from conftest import NODES, USER

PAIRS = list(itertools.permutations(NODES, 2))


def test_account_is_the_same_on_every_node(hosts):
    uids = {name: (h.user(USER).uid, h.user(USER).gid, h.user(USER).home) for name, h in hosts.items()}
    assert set(uids.values()) == {(2345, 2345, f"/home/{USER}")}, uids


@pytest.mark.parametrize("node", NODES)
def test_private_files_have_least_permissions(hosts, node):
    h = hosts[node]
    home = h.file(f"/home/{USER}")
    assert (home.user, home.mode) == (USER, 0o750)
    ssh_dir = h.file(f"/home/{USER}/.ssh")
    assert (ssh_dir.user, ssh_dir.mode) == (USER, 0o700)
    key = h.file(f"/home/{USER}/.ssh/id_ed25519")
    assert (key.user, key.group, key.mode) == (USER, USER, 0o600)
    assert h.file(f"/home/{USER}/.ssh/authorized_keys").mode == 0o600


def test_one_key_pair_for_the_whole_cluster(hosts):
    prints = {name: h.check_output(f"ssh-keygen -y -f /home/{USER}/.ssh/id_ed25519 | ssh-keygen -lf -") for name, h in hosts.items()}
    assert len(set(prints.values())) == 1, prints
    public = hosts["mesh1"].file(f"/home/{USER}/.ssh/id_ed25519.pub").content_string.split()[1]
    for h in hosts.values():
        assert public in h.file(f"/home/{USER}/.ssh/authorized_keys").content_string


def test_known_hosts_pin_each_nodes_real_host_keys(hosts):
    real = {name: h.file("/etc/ssh/ssh_host_ed25519_key.pub").content_string.split()[:2] for name, h in hosts.items()}
    for viewer in hosts.values():
        lines = viewer.file("/etc/ssh/ssh_known_hosts").content_string.splitlines()
        for name, (kind, key) in real.items():
            entries = [line.split() for line in lines if line and not line.startswith("#")]
            match = [e for e in entries if name in e[0].split(",") and e[1] == kind]
            assert match and match[0][2] == key, f"{viewer.backend.name}: {name} is not pinned to its real key"


def test_strict_host_key_checking_is_never_off(hosts):
    for h in hosts.values():
        config = h.check_output("cat /etc/ssh/ssh_config /etc/ssh/ssh_config.d/*.conf")
        assert "stricthostkeychecking no" not in config.lower()
        assert "StrictHostKeyChecking yes" in h.file("/etc/ssh/ssh_config.d/50-megaprov-cluster.conf").content_string


@pytest.mark.parametrize(("source", "peer"), PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_every_node_reaches_every_other_without_a_prompt(hosts, source, peer):
    out = hosts[source].run(f"su - {USER} -c 'ssh -o BatchMode=yes {peer} hostname'")
    assert out.rc == 0, out.stderr
    assert out.stdout.strip() == peer


def test_an_unpinned_host_is_refused(hosts):
    out = hosts["mesh1"].run(f"su - {USER} -c 'ssh -o BatchMode=yes 127.0.0.1 true'")
    assert out.rc != 0
    assert "Host key verification failed" in out.stderr

"""The mesh as it really is on the nodes: account, key, pinned host keys, every pair connecting, and a cluster name
whose host key is wrong or unknown refused (the nodes are those of Molecule's inventory: see conftest.py)."""

import itertools
import shlex

import pytest
from conftest import NODES, UID, USER

PAIRS = list(itertools.permutations(NODES, 2))


def as_user(host, command):
    return host.run(f"su - {USER} -c {shlex.quote(command)}")


def effective_config(host, name):
    """`ssh -G NAME` as the cluster user: the settings OpenSSH would use for NAME, after every config file."""
    out = as_user(host, f"ssh -G {name}")
    assert out.rc == 0, out.stderr
    return dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)


def test_account_is_the_same_on_every_node(hosts):
    uids = {name: (h.user(USER).uid, h.user(USER).gid, h.user(USER).home) for name, h in hosts.items()}
    assert set(uids.values()) == {(UID, UID, f"/home/{USER}")}, uids


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
    public = hosts[NODES[0]].file(f"/home/{USER}/.ssh/id_ed25519.pub").content_string.split()[1]
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


@pytest.mark.parametrize(("source", "peer"), PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_the_policy_for_a_cluster_name_is_strict(hosts, source, peer):
    """What OpenSSH really applies to a cluster name once every config file is read (ssh -G), not what a file says.

    ssh -G prints StrictHostKeyChecking yes as "true" (readconf.c lists "true" first for that value); accept-new
    prints "accept-new", no/off/false print "false". The peer's inventory name must be one the role's Host line covers.
    """
    config = effective_config(hosts[source], peer)
    assert config["stricthostkeychecking"] == "true", config["stricthostkeychecking"]
    assert config["globalknownhostsfile"] == "/etc/ssh/ssh_known_hosts"
    assert config["batchmode"] == "no"  # the policy holds without BatchMode (an interactive user gets no prompt to accept)


@pytest.mark.parametrize(("source", "peer"), PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_every_node_reaches_every_other_without_a_prompt(hosts, source, peer):
    out = as_user(hosts[source], f"ssh -o BatchMode=yes {peer} hostname")
    assert out.rc == 0, out.stderr
    assert out.stdout.strip() == peer


@pytest.fixture
def wrong_key_for_peer(hosts):
    """On the first node, the known_hosts entry of the second node's name holds a key that is not the second node's.

    The peer's other entries (ecdsa, rsa) go, so that the ed25519 entry is the only one ssh can check the key against;
    the file is put back afterwards.
    """
    source, peer = NODES[0], NODES[1]
    h = hosts[source]
    h.check_output("cp -p /etc/ssh/ssh_known_hosts /root/ssh_known_hosts.verify && rm -f /root/wrong-host-key /root/wrong-host-key.pub")
    h.check_output("ssh-keygen -q -t ed25519 -N '' -C wrong -f /root/wrong-host-key")
    wrong = h.check_output("cut -d' ' -f2 /root/wrong-host-key.pub")
    h.check_output(
        'awk -v p=%s -v k=%s \'{n = split($1, names, ","); mine = 0; for (i = 1; i <= n; i++) if (names[i] == p) mine = 1}'
        ' !mine {print; next} $2 == "ssh-ed25519" {print $1, $2, k}\' /root/ssh_known_hosts.verify > /etc/ssh/ssh_known_hosts',
        peer,
        wrong,
    )
    pinned = [line for line in h.file("/etc/ssh/ssh_known_hosts").content_string.splitlines() if peer in line.split(" ")[0].split(",")]
    assert len(pinned) == 1 and pinned[0].split()[1:] == ["ssh-ed25519", wrong], pinned
    try:
        yield source, peer
    finally:
        h.check_output("mv /root/ssh_known_hosts.verify /etc/ssh/ssh_known_hosts")


def test_a_cluster_name_pinned_to_a_wrong_key_is_refused(hosts, wrong_key_for_peer):
    """With the wrong key pinned the connection must stop at the host key: ssh exits 255 (its own error). A policy of
    no/off would warn and log in anyway; yes and accept-new refuse a key that differs from the pinned one."""
    source, peer = wrong_key_for_peer
    out = as_user(hosts[source], f"ssh -o BatchMode=yes {peer} hostname")
    assert out.rc == 255, (out.rc, out.stdout, out.stderr)
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in out.stderr and "Host key verification failed." in out.stderr, out.stderr
    assert out.stdout == ""


def test_a_cluster_name_with_no_pinned_key_is_refused(hosts):
    """A cluster name whose key nobody pinned (HostKeyAlias makes ssh look the key up under a name known_hosts lacks;
    the Host line still matches the name typed): accept-new would trust it and log in, no/off too; yes refuses."""
    source, peer = NODES[0], NODES[1]
    out = as_user(hosts[source], f"ssh -o BatchMode=yes -o HostKeyAlias={peer}-not-pinned {peer} hostname")
    assert out.rc == 255, (out.rc, out.stdout, out.stderr)
    assert f"host key is known for {peer}-not-pinned and you have requested strict checking" in out.stderr, out.stderr
    assert "Host key verification failed." in out.stderr
    learnt = hosts[source].file(f"/home/{USER}/.ssh/known_hosts")
    assert not learnt.exists or f"{peer}-not-pinned" not in learnt.content_string  # nothing was learnt either

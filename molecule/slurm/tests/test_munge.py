"""munge with one cluster key: made on the controller, 0400 munge:munge on every node, not the key the package
generated at install (prepare.yml recorded its checksum), and credentials that decode across nodes."""

import itertools
import shlex

import pytest

from tests.molecule.inventory import controller, names, node

NODES = names("all")
PAIRS = list(itertools.permutations(NODES, 2))


def test_the_cluster_key_is_roots_alone_on_the_controller():
    key = controller().file("/etc/megaprov/munge/cluster.key")
    assert key.is_file
    assert (key.user, key.group, key.mode) == ("root", "root", 0o400)
    assert key.size >= 128  # mungekey --bits=1024


@pytest.mark.parametrize("name", NODES)
def test_the_munge_key_is_munges_alone(name):
    key = node(name).file("/etc/munge/munge.key")
    assert key.is_file
    assert (key.user, key.group, key.mode) == ("munge", "munge", 0o400)


def test_every_node_has_the_cluster_key():
    cluster = controller().check_output("sha256sum /etc/megaprov/munge/cluster.key").split()[0]
    keys = {name: node(name).check_output("sha256sum /etc/munge/munge.key").split()[0] for name in NODES}
    assert set(keys.values()) == {cluster}, keys


@pytest.mark.parametrize("name", NODES)
def test_the_key_the_package_generated_is_gone(name):
    host = node(name)
    generated = host.file("/var/tmp/munge-package-key.sha256").content_string.strip()
    assert len(generated) == 64, generated  # prepare.yml recorded it
    assert host.check_output("sha256sum /etc/munge/munge.key").split()[0] != generated


@pytest.mark.parametrize("name", NODES)
def test_munge_runs(name):
    service = node(name).service("munge")
    assert service.is_running and service.is_enabled


@pytest.mark.parametrize(("source", "target"), PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_a_credential_made_on_one_node_decodes_on_another(source, target):
    credential = node(source).check_output("munge -n")
    assert credential.startswith("MUNGE:"), credential
    out = node(target).run(f"printf '%s\\n' {shlex.quote(credential)} | unmunge")
    assert out.rc == 0, (out.rc, out.stdout, out.stderr)
    fields = dict(line.split(":", 1) for line in out.stdout.splitlines() if ":" in line)
    assert fields["STATUS"].strip() == "Success (0)", out.stdout
    # ENCODE_HOST: the address the credential was made at (the name as reverse DNS gives it: "???" here)
    assert fields["ENCODE_HOST"].split()[-1] == f"({node(source).check_output('hostname -I').split()[0]})", out.stdout

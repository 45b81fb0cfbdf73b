from pathlib import Path

import pytest

from megaprov import lab
from megaprov.errors import UsageError


def test_inventory_puts_the_first_node_in_head_and_all_in_gpu_nodes():
    members = [lab.Node("node1", "megaprov-x-node1", "10.89.0.2", "running"), lab.Node("node2", "megaprov-x-node2", "10.89.0.3", "running")]
    inventory, group_vars = lab.render_inventory(
        "x", members, Path("/l/id_ed25519"), Path("/l/known_hosts"), "/var/lib/containers/storage/volumes/v/_data"
    )
    assert "[head]\nnode1\n" in inventory
    assert "[gpu_nodes]\nnode1 ansible_host=10.89.0.2\nnode2 ansible_host=10.89.0.3\n" in inventory
    assert "megaprov_gpu_expected: false" in group_vars
    assert "UserKnownHostsFile=/l/known_hosts -o StrictHostKeyChecking=yes" in group_vars


def test_the_lab_inventory_passes_validation(tmp_path):
    from megaprov import inventory as inv

    members = [lab.Node(f"node{i}", f"c{i}", f"10.89.0.{i + 1}", "running") for i in range(1, 4)]
    text, group_vars = lab.render_inventory("t", members, tmp_path / "k", tmp_path / "kh", str(tmp_path / "shared"))
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text(group_vars)
    (tmp_path / "inventory.ini").write_text(text)
    root = Path(__file__).resolve().parents[2]
    loaded = inv.load(tmp_path / "inventory.ini", root / "roles", root / "inventories" / "defaults.yml")
    assert loaded.host_var("node2", "megaprov_gpu_expected") is False


@pytest.mark.parametrize("name", ["", "Lab", "-x", "a_b", "x" * 21, "1lab"])
def test_bad_lab_names_are_refused(name):
    with pytest.raises(UsageError, match="is not a valid lab name"):
        lab.validate_name(name)


def test_names_are_derived_from_the_lab_name():
    assert lab.container_name("ci", 3) == "megaprov-ci-node3"
    assert lab.network_name("ci") == "megaprov-ci"


def test_image_tag_follows_the_build_files():
    tag = lab.image_tag()
    assert tag.startswith("localhost/megaprov-node:") and len(tag.rsplit(":", 1)[1]) == 12

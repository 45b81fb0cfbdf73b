"""Orders between stages that a real GPU cluster depends on: DOCA-OFED before the driver, python before nccl."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]


def plays(name):
    return yaml.safe_load((ROOT / "ansible_collections/megaprov/cluster/playbooks" / name).read_text())


def test_doca_ofed_is_installed_before_the_driver_when_wanted():
    """nvidia-peermem builds against the ib_core present at the driver's DKMS build: OFED's, not the distribution's."""
    gpu = plays("gpu.yml")
    driver = next(i for i, p in enumerate(gpu) if any(r["role"] == "megaprov.cluster.nvidia_driver" for r in p.get("roles", [])))
    ofed = [
        i
        for i, p in enumerate(gpu)
        for t in p.get("tasks", [])
        if t.get("ansible.builtin.include_role", {}).get("name") == "megaprov.cluster.infiniband"
        and t["ansible.builtin.include_role"].get("tasks_from") == "install"
    ]
    assert ofed and ofed[0] < driver
    task = next(t for t in gpu[ofed[0]]["tasks"] if "ansible.builtin.include_role" in t)
    assert "infiniband_ofed_repo" in task["when"]  # only where OFED is wanted: a distribution stack is left alone


def test_nccl_follows_the_python_environment():
    """nccl-tests is built against the training environment's NCCL (its nvidia-nccl wheel)."""
    order = [p["ansible.builtin.import_playbook"] for p in plays("bootstrap.yml")]
    assert order.index("python.yml") < order.index("nccl.yml")


def test_a_site_file_system_gets_the_layout_from_the_cluster_user():
    """nfs_client_mode: existing has no nfs_server run: the storage stage creates the layout as the cluster user (the
    nccl role and job launch write into it as that user and stop when it is missing)."""
    client = plays("storage.yml")[1]
    block = next(t for t in client["tasks"] if "block" in t)
    assert block["become_user"] == "{{ megaprov_cluster_user }}" and "== 'existing'" in block["when"]
    create = block["block"][0]["ansible.builtin.file"]
    assert create["path"] == "{{ megaprov_shared_dir }}/{{ item }}" and create["state"] == "directory"
    layout = yaml.safe_load((ROOT / "ansible_collections/megaprov/cluster/roles" / "nfs_server" / "defaults" / "main.yml").read_text())[
        "nfs_server_layout"
    ]
    assert {"opt", "megaprov/baselines", "jobs"} <= set(layout)

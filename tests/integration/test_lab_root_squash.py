"""The lab's training share squashes root as NFS does: root on a node is nobody on /shared, the
cluster user (uid 2000 on every node) is itself; so every stage, `megaprov data prepare -i` and `megaprov train`
must write there as the cluster user. On the old lab (/shared a plain podman volume) root wrote as root and the
old job_launch.yml (`install -d -o megaprov` as root) passed; on a real root-squashed NFS mount it failed."""

import json
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, megaprov, podman_exec

pytestmark = pytest.mark.lab

CLUSTER_UID = 2000


@pytest.fixture(scope="module")
def squashed(bootstrapped):
    """The README run's lab (bootstrapped from a fresh clone: the cluster user, the share's layout, the training
    environment), whose share squashes root like every lab's: no lab of its own to start and bootstrap."""
    inventory = bootstrapped["inventory"]
    shared = yaml.safe_load((Path(inventory).parent / "group_vars" / "all.yml").read_text())["megaprov_controller_shared_dir"]
    nodes = [n["container"] for n in bootstrapped["nodes"]]
    assert len(nodes) >= 2, nodes
    return {"inventory": inventory, "shared": Path(shared), "nodes": nodes}


def test_root_on_every_node_is_nobody_on_the_share(squashed):
    for node in squashed["nodes"]:
        for where in ("jobs", "checkpoints", "data", "opt", "megaprov/baselines", "."):  # the cluster user's and root's
            made = podman_exec(node, "touch", f"/shared/{where}/by-root")
            assert made.returncode != 0 and "Permission denied" in made.stderr, (node, where, made)
            assert not (squashed["shared"] / where / "by-root").exists()
        assert podman_exec(node, "mkdir", "/shared/jobs/by-root").returncode != 0
        assert podman_exec(node, "chown", "root", "/shared/jobs").returncode != 0


def test_the_cluster_user_writes_as_itself_from_every_node(squashed):
    first, second = squashed["nodes"][:2]
    made = podman_exec(first, "su", "megaprov", "-c", "mkdir -p /shared/cache/sq && echo from-node1 > /shared/cache/sq/f")
    assert made.returncode == 0, made.stderr
    moved = podman_exec(second, "su", "megaprov", "-c", "cat /shared/cache/sq/f && mv /shared/cache/sq/f /shared/cache/sq/g")
    assert moved.returncode == 0 and moved.stdout == "from-node1\n", moved.stderr
    st = (squashed["shared"] / "cache" / "sq" / "g").stat()
    assert (st.st_uid, st.st_gid) == (CLUSTER_UID, CLUSTER_UID)


def test_the_layout_is_the_cluster_users(squashed):
    for name in ("data", "jobs", "checkpoints", "cache", "opt", "images", "megaprov", "megaprov/baselines"):
        st = (squashed["shared"] / name).stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (CLUSTER_UID, CLUSTER_UID, 0o755), name


def test_data_prepare_writes_the_dataset_as_the_cluster_user(squashed, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    assert megaprov("data", "corpus", "--output-file", str(corpus), "--documents", "1500")[0] == 0
    code, doc, err = megaprov(
        "data", "prepare", "--input", str(corpus), "--output-prefix", "data/sq", "-i", squashed["inventory"], "--output", "json"
    )
    assert code == 0, err
    for name in doc["result"]["files"]:
        st = Path(name).stat()
        assert (st.st_uid, st.st_gid) == (CLUSTER_UID, CLUSTER_UID), name
    # the nodes' cluster user can modify it (touch needs ownership or write permission: root's 0644 file refused it)
    touched = podman_exec(squashed["nodes"][1], "su", "megaprov", "-c", "touch /shared/data/sq_text_document.idx")
    assert touched.returncode == 0, touched.stderr


def test_a_job_launches_and_trains_on_the_root_squashed_share(squashed, tmp_path):
    spec = yaml.safe_load((ROOT / "examples" / "jobs" / "lab-tiny.yml").read_text())
    spec["name"] = "sq-tiny"
    path = tmp_path / "sq-tiny.yml"
    path.write_text(yaml.safe_dump(spec))
    code, doc, err = megaprov("train", "--job", str(path), "-i", squashed["inventory"], "--output", "json")
    assert code == 0, err[-3000:]
    assert doc["result"]["verdict"] == "passed", doc["result"]["checks"]
    job = squashed["shared"] / "jobs" / "sq-tiny"
    for path in (job, job / "launch", job / "logs", job / "logs" / "node1.log", squashed["shared"] / "checkpoints" / "sq-tiny"):
        assert path.stat().st_uid == CLUSTER_UID, path
    ckpt = squashed["shared"] / "checkpoints" / "sq-tiny"
    saved = sorted(p for p in ckpt.rglob("*") if p.is_file())
    assert saved and all(p.stat().st_uid == CLUSTER_UID for p in saved)
    assert json.loads((ckpt / "megaprov-model.json").read_text())["num_layers"] == spec["model"]["num_layers"]


def test_what_the_controller_writes_in_the_job_directory_is_the_cluster_users(squashed):
    """job.json, metrics and the report are rewritten by megaprov on this machine: through a root-squashed mount
    root could not write them into the cluster user's job directory, and the nodes could not replace root's files."""
    job = squashed["shared"] / "jobs" / "sq-tiny"
    written = [job / "job.json", job / "metrics.jsonl", job / "report.json"]
    assert [p.name for p in written if p.stat().st_uid != CLUSTER_UID] == []

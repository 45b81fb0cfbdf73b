"""Jobs in a container image on the lab (launch.container), under systemd: the containers stage on the README run's lab
(the registry on the head, podman on the nodes), the lab's training image fetched once into the head's registry
(megaprov image pull --bundle: carried in an offline bundle, as an air-gapped site carries it), probed in the image,
and the lab job trained in it by rootless podman to a PASSED verdict, also through a rank killed in its container; and under Slurm through pyxis,
from the squashfs that the pull imported with enroot on the head into the shared directory. enroot's .debs and
pyxis's source come from the harness's fixtures (built from NVIDIA's sources, tests/fixtures/containers.py), copied
into the nodes and named by the roles' source variables, as an air-gapped site names its mirror."""

import json
import re
import shutil
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, megaprov, podman_exec, train_and_kill_a_rank

from megaprov.cluster import bundle, lab
from megaprov.training import imagefacts, render
from megaprov.training.launchers import systemd
from tests.fixtures import build as fixtures
from tests.fixtures import containers
from tests.helpers import train_image
from tests.helpers.bundle import DEBIAN

pytestmark = pytest.mark.lab

# An upstream name the lab cannot reach: every pull of it must come from the head's registry.
UPSTREAM = "registry.megaprov.lab"
UNIT = "megaprov-job-{}.service"
FIXTURES = "/srv/megaprov-fixtures/containers"  # where the nodes find enroot's .debs and pyxis's source


@pytest.fixture(scope="module")
def boxed(bootstrapped, tmp_path_factory):
    """The README run's lab with the containers stage on (the registry on the head, podman on the nodes, enroot and
    pyxis from the fixtures' sources), the training image pulled once, and this module's data."""
    inventory = Path(bootstrapped["inventory"])
    group_vars = inventory.parent / "group_vars" / "all.yml"
    before = group_vars.read_text()
    sources = fixtures.build() / "containers"
    for node in bootstrapped["nodes"]:
        assert podman_exec(node["container"], "mkdir", "-p", FIXTURES).returncode == 0
        lab.podman("cp", f"{sources}/.", f"{node['container']}:{FIXTURES}")  # raises, with podman's message, on failure
    group_vars.write_text(
        before
        + f"megaprov_containers: true\nimage_registry_upstreams: [{UPSTREAM}]\n"
        + f"enroot_base_url: file://{FIXTURES}/enroot/\npyxis_source_url: file://{FIXTURES}/pyxis/v{containers.PYXIS_VERSION}.tar.gz\n"
    )
    try:
        began = time.monotonic()
        code, doc, err = megaprov("bootstrap", "-i", str(inventory), "--tags", "containers", "--output", "json")
        assert code == 0, err[-3000:]
        stage_s = time.monotonic() - began
        local, _ = train_image.build()
        image = f"{UPSTREAM}/megaprov/train:{local.rsplit(':', 1)[1]}"
        # carried as an air-gapped site carries it: in an offline bundle (this machine's podman saves it under its
        # upstream name), loaded on the head from the bundle's archive once the manifest vouches for it
        lab.podman("tag", local, image)
        carried = tmp_path_factory.mktemp("bundle") / "bundle"
        began = time.monotonic()
        built = bundle.collect(bundle.Contents(debian_mirror="http://deb.debian.org/debian"), carried, DEBIAN, images=[image])
        build_s = time.monotonic() - began
        assert built.images == [image]
        began = time.monotonic()
        code, doc, err = megaprov("image", "pull", image, "--bundle", str(carried), "-i", str(inventory), "--output", "json")
        assert code == 0, err[-3000:]
        pull_s = time.monotonic() - began
        archive = bundle.image_archive(carried, image)
        corpus = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
        code, _, err = megaprov("data", "corpus", "--output-file", str(corpus), "--documents", "1500")
        assert code == 0, err
        code, _, err = megaprov("data", "prepare", "--input", str(corpus), "--output-prefix", "data/lab", "-i", str(inventory), "--output", "json")
        assert code == 0, err
        shared = yaml.safe_load(group_vars.read_text())["megaprov_controller_shared_dir"]
        size = archive.stat().st_size
        print(f"containers stage {stage_s:.0f} s; bundle with the image {build_s:.0f} s; image pull {pull_s:.0f} s ({size} bytes of archive)")
        shutil.rmtree(carried)
        yield {**bootstrapped, "image": image, "pulled": doc["result"], "shared": Path(shared), "inventory": str(inventory)}
    finally:
        group_vars.write_text(before)


def job_file(tmp_path, boxed, name, **changes):
    spec = yaml.safe_load((ROOT / "examples" / "jobs" / "lab-tiny.yml").read_text())
    spec["name"] = name
    spec["launch"]["container"] = {"image": boxed["image"], "python": train_image.PYTHON}
    for path, value in changes.items():
        section, key = path.split(".")
        spec[section][key] = value
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def registry_bytes(boxed) -> dict[str, int]:
    """Bytes the head's registry sent to each client address (its access log in the journal)."""
    head = boxed["nodes"][0]["container"]
    log = podman_exec(head, "journalctl", "-u", "docker-registry", "-o", "cat", "--no-pager").stdout
    sent: dict[str, int] = {}
    for line in log.splitlines():
        written = re.search(r"http\.response\.written=(\d+)", line)
        remote = re.search(r'http\.request\.remoteaddr="?([0-9.]+)', line)
        if written and remote and "GET" in line:
            sent[remote.group(1)] = sent.get(remote.group(1), 0) + int(written.group(1))
    return sent


def test_the_image_is_served_by_the_head_under_its_upstream_name(boxed):
    pulled = boxed["pulled"]
    assert pulled["image"] == boxed["image"]
    head = boxed["nodes"][0]
    assert pulled["mirror"].endswith(f"/{UPSTREAM}/megaprov/train:{boxed['image'].rsplit(':', 1)[1]}")
    assert pulled["bytes"] > 500_000_000  # torch and megatron-core: the real image, not a stand-in
    # the node's podman resolves the upstream name through the head (the upstream itself does not exist)
    node2 = boxed["nodes"][1]["container"]
    conf = podman_exec(node2, "cat", "/etc/containers/registries.conf.d/50-megaprov-image-registry.conf").stdout
    assert UPSTREAM in conf and head["address"] in conf


def test_a_job_trains_in_the_image_under_systemd_and_a_rank_killed_in_it_resumes(boxed, tmp_path):
    """The first job with the image: probed in the image on node1, checked on both nodes as its units run it, trained
    by rootless podman. As the kernel's OOM killer would, the rank and its torchrun inside node2's container are killed
    past the checkpoint at 20: the unit restarts, podman starts the image again (its state intact: the user's pause
    process lives outside the unit), and the job resumes from its last checkpoint to a PASSED verdict."""
    inventory = Path(boxed["inventory"])
    assert imagefacts.known(inventory, boxed["image"]) is None
    name = "boxed-kill"
    spec = job_file(tmp_path, boxed, name, **{"train.train_iters": 40, "checkpoint.save_interval": 10})
    node2 = boxed["nodes"][1]["container"]
    # the image's python (torchrun and the rank), seen from the node: processes of the container
    code, err, restarted = train_and_kill_a_rank(
        boxed["inventory"],
        spec,
        boxed["shared"] / "jobs" / name,
        node2,
        "^/opt/train/bin/python .*megaprov_trainer",
        systemd.RESTART_SEC + 15,
        output="text",  # its progress lines on stderr: the probe's and the checks'
    )
    job = boxed["shared"] / "jobs" / name
    log = (job / "logs" / "node2.log").read_text()
    assert code == 0, err[-3000:] + log[-3000:]
    # the node checks ran in the image on both nodes, as the job's units run it (systemd-run, podman, the job's mounts)
    assert "train: image checked on 2 node(s): torch 2.13.0+cpu, 0 GPU(s), NCCL none (no CUDA) (the image's)" in err, err[-3000:]
    assert "shared directory writable" in err
    # the first job with this image probed it in the image, on node1: its torch, not the nodes' venv
    probed = imagefacts.known(inventory, boxed["image"])
    assert probed is not None and probed.source == "image" and probed.hosts == ("node1",), probed
    assert probed.torch and probed.torch.startswith("2.")
    assert "podman system migrate" not in log  # podman's state survived the kill: nothing to reset
    report = json.loads((job / "report.json").read_text())
    assert report["verdict"] == "passed", report
    (restart,) = report["restarts"]
    assert restart["resumed_from"] in (20, 30) and 0 <= restart["lost_iterations"] < 10
    assert report["iterations"]["last"] == 40
    # each node ran torchrun in the image, through podman, as the cluster user
    for node in boxed["nodes"][:2]:
        assert "torchrun exited with 0" in (job / "logs" / f"{node['name']}.log").read_text()
        script = (job / "launch").glob(f"*{node['name']}*")
        assert any("podman run" in p.read_text() for p in script)
    sent = registry_bytes(boxed)
    print("bytes the head's registry sent per client:", json.dumps(sent))
    for node in boxed["nodes"][:2]:
        assert sent.get(node["address"], 0) > 100_000_000, f"{node['name']} pulled the image from somewhere else: {sent}"
    print(f"node2's unit active again {restarted:.1f} s after the kill; resumed from {restart['resumed_from']}")


def test_an_image_whose_python_lacks_torch_fails_its_node_checks_and_nothing_starts(boxed, tmp_path):
    """The image is known (probed with its venv's python); a spec naming the image's system python instead is caught
    by the checks on the nodes, before any unit: exit 6, each node named."""
    spec = yaml.safe_load(Path(job_file(tmp_path, boxed, "boxed-notorch")).read_text())
    spec["launch"]["container"]["python"] = "/usr/bin/python3"
    path = tmp_path / "boxed-notorch.yml"
    path.write_text(yaml.safe_dump(spec))
    if imagefacts.known(Path(boxed["inventory"]), boxed["image"]) is None:
        pytest.skip("the image was not probed by the test above (run alone)")
    record = imagefacts.record_path(Path(boxed["inventory"]), boxed["image"])
    probed_at = record.stat().st_mtime
    code, _, err = megaprov("train", "--job", str(path), "-i", boxed["inventory"], "--output", "json")
    assert code == 6, err[-3000:]
    assert record.stat().st_mtime == probed_at and "probing image" not in err  # a known image is not probed again
    assert "failed its checks on the nodes: node1: the image's /usr/bin/python3 cannot import torch" in err, err[-2000:]
    assert "node2: the image's /usr/bin/python3 cannot import torch" in err and "nothing was started" in err
    assert not (boxed["shared"] / "jobs" / "boxed-notorch").exists()


def test_a_job_trains_in_the_squashfs_under_slurm_through_pyxis_and_passes(boxed, tmp_path):
    """enroot imported the pulled image on the head into the shared directory; Slurm's steps run the job's node
    script in it through pyxis (srun --container-image), the image's python being the only one with torch at
    /opt/train (the nodes' venv is /opt/megaprov/venv): a PASSED verdict means the ranks ran in the image."""
    squashfs = boxed["pulled"]["squashfs"]
    assert squashfs and squashfs.startswith("/") and squashfs.endswith(".sqsh"), boxed["pulled"]
    name = "boxed-slurm"
    spec = yaml.safe_load((ROOT / "examples" / "jobs" / "lab-tiny-slurm.yml").read_text())
    spec["name"] = name
    spec["train"]["train_iters"] = 40  # medians over 40 iterations: the lab's nodes share this machine's 2 cores
    spec["launch"]["container"] = {"image": squashfs, "python": train_image.PYTHON}
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(spec))
    sent_before = registry_bytes(boxed)
    began = time.monotonic()
    code, _, err = megaprov("train", "--job", str(path), "-i", boxed["inventory"])
    job = boxed["shared"] / "jobs" / name
    assert code == 0, err[-3000:] + "".join(p.read_text()[-1500:] for p in sorted((job / "logs").glob("*")) if p.is_file())
    assert "train: image checked on 2 node(s): torch 2.13.0+cpu" in err, err[-3000:]
    report = json.loads((job / "report.json").read_text())
    assert report["verdict"] == "passed", report
    script = (job / render.SLURM_BATCH_SCRIPT).read_text()
    assert f"--container-image={squashfs}" in script and "--container-mounts=" in script, script[-2000:]
    # Slurm chose the nodes: each that ran a rank logged torchrun's clean exit, and none of them has /opt/train outside
    logs = sorted((job / "logs").glob("node*.log"))
    assert len(logs) == 2 and all("torchrun exited with 0" in p.read_text() for p in logs), [p.read_text()[-1500:] for p in logs]
    for node in boxed["nodes"]:
        if node["name"] in [p.stem for p in logs]:
            assert podman_exec(node["container"], "test", "-e", train_image.PYTHON).returncode != 0, f"{node['name']} has {train_image.PYTHON}"
    # the squashfs is read in place: no node fetched anything from the head's registry for this job
    assert registry_bytes(boxed) == sent_before, (sent_before, registry_bytes(boxed))
    print(f"Slurm job through pyxis from {squashfs}: {time.monotonic() - began:.0f} s to the verdict")

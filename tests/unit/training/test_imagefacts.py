"""A container image's stack: probed once where the job runs, recorded, and what the render then follows."""

import functools
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from megaprov.errors import UsageError
from megaprov.training import imagecheck, imagefacts, jobspec, nodefacts, render
from tests.helpers.container_job import IMAGE, SPEC, cluster

ROOT = Path(__file__).resolve().parents[3]
PROBE = ROOT / "ansible_collections/megaprov/cluster/roles/megatron/files/probe_python_stack.py"


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("[gpu_nodes]\nn1\n")
    return inventory


@functools.cache
def _probed() -> str:
    return subprocess.run([sys.executable, "-", ""], input=PROBE.read_text(), capture_output=True, text=True, check=True).stdout


def real_fact():
    """What the megatron role's probe answers in this interpreter (torch and megatron-core are installed here), read
    from stdin as image_probe.yml hands it over."""
    pytest.importorskip("torch", reason="the probe imports torch, which this interpreter lacks")
    pytest.importorskip("megatron.core", reason="the probe imports megatron.core, which this interpreter lacks")
    return json.loads(_probed().splitlines()[-1])


def test_a_probe_is_recorded_once_per_inventory_and_image(state, tmp_path):
    assert imagefacts.known(state, IMAGE) is None
    fact = real_fact()
    stack = imagefacts.record(state, IMAGE, "n1", fact)
    assert stack == imagefacts.known(state, IMAGE)
    assert (stack.source, stack.image, stack.hosts, stack.torch) == ("image", IMAGE, ("n1",), fact["torch"])
    assert stack.describe().startswith(f"image {IMAGE} (probed on n1): ")
    assert imagefacts.known(state, IMAGE + "x") is None  # another image
    other = tmp_path / "other.ini"
    other.write_text("[gpu_nodes]\nn1\n")
    assert imagefacts.known(other, IMAGE) is None  # another cluster
    imagefacts.forget(state, IMAGE)
    assert imagefacts.known(state, IMAGE) is None


def test_a_record_for_another_reference_or_a_broken_one_is_not_used(state):
    path = imagefacts.record_path(state, IMAGE)
    imagefacts.record(state, IMAGE, "n1", real_fact())
    path.write_text(path.read_text().replace(IMAGE, "ubuntu:22.04"))
    assert imagefacts.known(state, IMAGE) is None
    path.write_text("{not json")
    assert imagefacts.known(state, IMAGE) is None


def test_an_answer_that_is_not_the_fact_is_refused_in_one_line(state):
    with pytest.raises(UsageError) as err:
        imagefacts.record(state, IMAGE, "n1", {"hello": 1})
    assert "did not answer with megaprov's fact" in str(err.value) and "launch.container.python" in err.value.hint
    with pytest.raises(UsageError):  # a version that could end up in a script
        imagefacts.record(state, IMAGE, "n1", {**real_fact(), "torch": "2.5; rm -rf /"})
    assert imagefacts.known(state, IMAGE) is None


def test_the_render_follows_the_images_transformer_engine():
    spec = jobspec.parse(SPEC.replace("LAUNCHER", "torchrun"))
    assumed = nodefacts.NodeStack(source="assumed", image=IMAGE)
    with_te = nodefacts.NodeStack(transformer_engine="2.1.0", hosts=("n1",), source="image", image=IMAGE)
    assert render.selected_impl(spec, assumed) != render.selected_impl(spec, with_te)
    assert "not probed yet" in assumed.describe()


def test_the_probe_runs_as_the_job_will():
    spec = jobspec.parse(SPEC.replace("LAUNCHER", "torchrun"))
    podman = imagefacts.probe_vars(spec, "/shared", "n1", True, None)
    assert podman["host"] == "n1"
    argv = podman["argv"]
    assert argv[:2] == ["podman", "run"] and "--rm" in argv and "-i" in argv  # the probe comes on stdin
    # the job's own options: the probe sees what the job's ranks will (its script's podman line, before --rm)
    job = render.render(spec, cluster(), [("n1", "a"), ("n2", "b")])
    line = next(x for x in job.nodes[0].script.splitlines() if x.startswith("podman=("))
    assert argv[: argv.index("--rm")] == shlex.split(line[len("podman=(") : line.index(" --rm")])
    assert ("--device", "nvidia.com/gpu=all") in set(zip(argv, argv[1:], strict=False))
    assert ("--volume", "/scratch/cache:/cache:ro") in set(zip(argv, argv[1:], strict=False))
    assert argv[argv.index(IMAGE) + 1 :] == ["env", "PYTHONPATH=/opt/megatron-lm", "/usr/bin/python", "-", "/opt/megatron-lm"]
    slurm = imagefacts.probe_vars(jobspec.parse(SPEC.replace("LAUNCHER", "slurm")), "/shared", "n1", True, "head")
    assert slurm["host"] == "head"  # srun from the submit host, on a node Slurm gives, asked for as the job asks
    check = imagecheck.check_vars(jobspec.parse(SPEC.replace("LAUNCHER", "slurm")), "/shared", ["n1", "n2"], True, "head", [])
    assert slurm["argv"][:5] == ["srun", "--nodes=1", "--ntasks-per-node=1", "--exclusive", "--immediate=120"]
    assert "--gpus-per-node=4" in slurm["argv"] and "--job-name=megaprov-image-probe" in slurm["argv"]
    # the same request as the node checks', but for one node
    assert [a for a in slurm["argv"] if not a.startswith(("--nodes=", "--job-name="))][:-5] == [
        a for a in check["argv"] if not a.startswith(("--nodes=", "--job-name="))
    ][:-3]
    assert "--container-image=nvcr.io#nvidia/pytorch:25.01-py3" in slurm["argv"]
    assert "--container-mounts=/shared:/shared,/opt/megatron-lm:/opt/megatron-lm:ro,/scratch/cache:/cache:ro" in slurm["argv"]


def test_a_probe_runs_image_probe_yml_on_the_jobs_node_and_records_its_answer(state, monkeypatch, capsys):
    """probe(): the play (ansible-runner stood in, recording what it was handed) gets the probe's host and argv; the
    fact it hands back through set_stats is recorded for the inventory and image; the operator is told once."""
    from megaprov.cluster import runner
    from megaprov.output import SHOWN
    from tests.helpers.plays import Play

    fact = real_fact()
    spec = jobspec.parse(SPEC.replace("LAUNCHER", "torchrun"))
    play = Play(state.parent, [], data={imagefacts.STAT: {"host": "n1", "fact": fact}}, stats_seen=True)
    monkeypatch.setattr(runner, "run", play)
    stack = imagefacts.probe(spec, state, "/shared", "n1", True, None, SHOWN)
    assert (stack.source, stack.image, stack.hosts, stack.torch) == ("image", IMAGE, ("n1",), fact["torch"])
    assert imagefacts.known(state, IMAGE) == stack
    [handed] = play.specs
    assert handed.playbook.name == "image_probe.yml" and handed.inventories == (state,)
    assert play.progress[0].total_hosts == 1  # one node probes
    assert handed.options.extravars == {"megaprov_probe": imagefacts.probe_vars(spec, "/shared", "n1", True, None)}
    said = capsys.readouterr().err
    assert f"train: probing image {IMAGE} on n1 (once per image: what its torch, Transformer Engine and apex hold)" in said


@pytest.mark.parametrize("answer", [None, "fact", {"host": "n1"}, {"host": "n1", "fact": {"torch": 1}}])
def test_a_probe_that_hands_back_no_fact_is_refused_and_nothing_recorded(state, monkeypatch, answer):
    from megaprov.cluster import runner
    from megaprov.output import SILENT
    from tests.helpers.plays import Play

    spec = jobspec.parse(SPEC.replace("LAUNCHER", "torchrun"))
    data = {} if answer is None else {imagefacts.STAT: answer}
    monkeypatch.setattr(runner, "run", Play(state.parent, [], data=data, stats_seen=True))
    with pytest.raises(UsageError) as refused:
        imagefacts.probe(spec, state, "/shared", "n1", True, None, SILENT)
    assert str(refused.value) == (
        f"the probe of image {IMAGE} on n1 did not answer with megaprov's fact: check that launch.container.python is the image's "
        "Python with torch (run it with `podman run IMAGE PYTHON -c 'import torch'`)"
    )
    assert imagefacts.known(state, IMAGE) is None and not imagefacts.record_path(state, IMAGE).exists()


def test_a_failed_probe_play_says_what_it_was_probing(state, monkeypatch):
    from megaprov.cluster import runner
    from megaprov.errors import HostsUnreachable, RunFailed
    from megaprov.output import SILENT
    from tests.helpers.plays import Play

    spec = jobspec.parse(SPEC.replace("LAUNCHER", "slurm"))
    down = [runner.Failure("head", "probe", "image probe", "ssh: connect to host head port 22: No route", True)]
    monkeypatch.setattr(runner, "run", play := Play(state.parent, [], down, status="failed", rc=4))
    with pytest.raises(HostsUnreachable) as refused:
        imagefacts.probe(spec, state, "/shared", "n1", True, "head", SILENT)
    assert play.specs[0].options.extravars["megaprov_probe"]["host"] == "head"  # srun from the submit host
    assert str(refused.value).startswith(f"probing image {IMAGE}: node(s) head unreachable (ssh: connect to host head")
    monkeypatch.setattr(runner, "run", Play(state.parent, [], status="failed", rc=2, error_line="ERROR! no such playbook"))
    with pytest.raises(RunFailed) as failed:
        imagefacts.probe(spec, state, "/shared", "n1", True, "head", SILENT)
    assert str(failed.value) == f"probing image {IMAGE}: ERROR! no such playbook: see {state.parent}/artifacts/stdout"
    assert imagefacts.known(state, IMAGE) is None


def test_the_record_is_the_probes_answer_as_json_in_the_clusters_own_private_folder(state, monkeypatch):
    """<state>/images/<the inventory's digest>/<24 hex of the reference's sha256>.json, in a 0700 folder; written again
    over itself; its host read back only when it is a host name; forgetting twice is forgetting."""
    import hashlib
    import os

    from megaprov.paths import fact_cache_dir

    monkeypatch.setattr(imagefacts.time, "time", lambda: 1700000000.5)
    fact = real_fact()
    old = os.umask(0)
    try:
        imagefacts.record(state, IMAGE, "n1", fact)
        imagefacts.record(state, IMAGE, "n2", fact)  # again: the folder exists
    finally:
        os.umask(old)
    path = imagefacts.record_path(state, IMAGE)
    digest = hashlib.sha256(IMAGE.encode()).hexdigest()[:24]
    assert path == Path(os.environ["MEGAPROV_STATE"]) / "images" / fact_cache_dir(state).name / f"{digest}.json"
    assert path.parent.stat().st_mode & 0o777 == 0o700
    doc = {"image": IMAGE, "host": "n2", "probed_at": 1700000000.5, "fact": fact}
    assert path.read_text() == json.dumps(doc, indent=2) + "\n"
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary file left
    for host, shown in (("n1", "n1"), ("bad host;", "?"), (7, "?")):
        path.write_text(json.dumps({**doc, "host": host}))
        assert imagefacts.known(state, IMAGE).hosts == (shown,)
    imagefacts.forget(state, IMAGE)
    imagefacts.forget(state, IMAGE)
    assert not path.exists()


def test_an_image_answering_a_malformed_version_is_named_in_the_refusal(state):
    fact = {**real_fact(), "torch": "2.x; rm -rf /"}
    with pytest.raises(UsageError) as refused:
        imagefacts.record(state, IMAGE, "n1", fact)
    assert str(refused.value).startswith(f"node image {IMAGE}: its fact megaprov_python.torch=")
    assert not imagefacts.record_path(state, IMAGE).exists()

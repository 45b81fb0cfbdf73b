"""Starting, finding, listing, stopping and settling a training job (megaprov.training.jobs) with everything real but
Ansible: the example specs, the plan and the render, the packed bundle, the job directory on a shared directory this
machine mounts (or a head reached over a pipe, tests/unit/training/test_jobdir.py), the controller's index. The plays
are stood in by what the nodes would do and say: the launch play unpacks the bundle with the node module's own code
(job_step.unpack) and answers like ansible-runner (tests/unit/training/test_systemd_launcher.py)."""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from megaprov import paths
from megaprov.cluster import inventory as inv
from megaprov.cluster import plays as cluster_plays
from megaprov.cluster import runner
from megaprov.errors import EnvironmentProblem, RunFailed, UsageError
from megaprov.output import SILENT
from megaprov.paths import PACKAGE_DIR
from megaprov.training import follow, jobdir, jobmeta, jobs, jobview, planner, render, target, trainer
from megaprov.training.jobspec import JobSpec
from megaprov.training.launchers import slurm, systemd
from tests.conftest import load_module
from tests.unit.training.test_jobdir import LocalChannel  # the head's helper over a pipe

ROOT = Path(__file__).resolve().parents[3]
JOBS = ROOT / "examples" / "jobs"
STEP = load_module(ROOT / "ansible_collections" / "megaprov" / "cluster" / "plugins" / "modules" / "job_step.py", "job_step")
SHARED = "/shared"  # where the nodes see the shared directory (this machine mounts it elsewhere: <tmp>/mnt)


class Said:
    """The operator's reporter: the plays must be handed this one (their progress lines go to it)."""

    def run(self, hosts: int) -> Any:
        return SILENT.run(hosts)

    def say(self, text: str) -> None:
        pass


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    """megaprov's state (the index of jobs, the mirrors) and the staging area of this test alone."""
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return tmp_path / "state"


def inventory(tmp_path: Path, nodes: int = 2, shared: str = SHARED, view: Path | None = None, gpu: str | None = None) -> Path:
    """An inventory of CPU nodes (or ``gpu`` ones, 8 a node) whose shared directory ``shared`` this machine mounts at
    ``view`` (megaprov_controller_shared_dir; None: not at all)."""
    path = tmp_path / "inventory.ini"
    lines = ["[head]", "head ansible_host=10.1.0.1", "[gpu_nodes]"] + [f"node{i} ansible_host=10.1.0.{i + 10}" for i in range(1, nodes + 1)]
    lines += ["[gpu_nodes:vars]"] + ([f"megaprov_gpu_model={gpu}", "megaprov_gpus_per_node=8"] if gpu else ["megaprov_gpu_expected=false"])
    lines += ["[all:vars]", f"megaprov_shared_dir={shared}"] + ([f"megaprov_controller_shared_dir={view}"] if view else [])
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def mnt(tmp_path) -> Path:
    """This machine's mount of the cluster's shared directory."""
    (tmp_path / "mnt").mkdir()
    return tmp_path / "mnt"


class Nodes:
    """The plays, stood in: each run is recorded; the launch (or Slurm submit) play does on the nodes what job_step
    does (unpack the bundle into the job directory on the shared directory, seen here at ``disk``) unless an answer
    for the playbook is set."""

    def __init__(self, disk: Path, shared: str = SHARED) -> None:
        self.disk = disk
        self.shared = shared
        self.ran: list[dict[str, Any]] = []
        self.answers: dict[str, runner.RunResult] = {}
        self.tmp_during: list[list[str]] = []

    def __call__(self, playbook, inventory, extravars, report, hosts, collect=(), strategy="linear"):
        job = extravars["megaprov_job"]
        self.ran.append(
            {"playbook": playbook, "inventory": inventory, "job": job, "report": report, "hosts": hosts, "collect": collect, "strategy": strategy}
        )
        self.tmp_during.append(sorted(os.listdir(tempfile.gettempdir())))
        if playbook in self.answers:
            return self.answers[playbook]
        data: dict[str, Any] = {}
        if "bundle_b64" in job:
            STEP.unpack(base64.b64decode(job["bundle_b64"]), str(self.disk / Path(job["dir"]).relative_to(self.shared)))
            data = {systemd.UNITS_MAY_RUN: True} if playbook == "job_launch.yml" else {slurm.SUBMITTED: "4242;lab\n"}
        return result(data=data)

    @property
    def playbooks(self) -> list[str]:
        return [r["playbook"] for r in self.ran]


def result(*failures: runner.Failure, data: dict | None = None, stats_seen: bool = True, results: list | None = None) -> runner.RunResult:
    return runner.RunResult(
        "failed" if failures else "successful",
        2 if failures else 0,
        [],
        list(failures),
        results or [],
        Path("/runs/1"),
        1.0,
        data=data or {},
        stats_seen=stats_seen,
    )


@pytest.fixture
def nodes(monkeypatch, mnt) -> Nodes:
    stand_in = Nodes(mnt)
    monkeypatch.setattr(cluster_plays, "run", stand_in)
    return stand_in


@dataclasses.dataclass
class Prepared:
    spec: JobSpec
    text: str
    cluster: planner.Cluster
    planned: planner.Plan
    rendered: render.Rendered
    inventory: Path

    def start(self, resume: bool = False, report: Any = SILENT, **kw: Any) -> jobs.Job:
        return jobs.start(
            self.spec,
            self.text,
            self.cluster,
            self.planned,
            jobview.plan_dict(self.planned),
            self.rendered,
            str(self.inventory),
            resume,
            report,
            **kw,
        )


def prepare(inventory_path: Path, example: str, text: str | None = None, nodes: int | None = None) -> Prepared:
    """What `megaprov train` works out before it starts a job: the spec, the cluster, the plan and the render."""
    spec, spec_text = target.read(str(JOBS / example))
    if text is not None:
        from megaprov.training.jobspec import parse

        spec, spec_text = parse(text), text
    found, hosts = target.cluster(spec, str(inventory_path), target.Shape(nodes))
    planned = planner.plan(spec, found)
    return Prepared(spec, spec_text, found, planned, render.render(spec, found, hosts, {}), inventory_path)


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        infos = tar.getmembers()
    assert len({m.name for m in infos}) == len(infos), "each file once"
    return {m.name: m for m in infos}


def member_text(data: bytes, name: str) -> str:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        handle = tar.extractfile(name)
        assert handle is not None
        return handle.read().decode()


def epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# ---- Job


def test_a_jobs_vars_name_it_for_the_plays_and_extras_join_or_override_them():
    job = jobs.Job("j", Path("/inv"), ["node1", "node2"], "/shared", "/shared/jobs/j", Path("/x"), "/shared/ck/j", "megaprov-job-j.service")
    assert job.vars() == {
        "name": "j",
        "hosts": ["node1", "node2"],
        "dir": "/shared/jobs/j",
        "unit": "megaprov-job-j.service",
        "checkpoint_dir": "/shared/ck/j",
    }
    assert job.vars(hosts=["node2"], kill=True) == {**job.vars(), "hosts": ["node2"], "kill": True}


def test_every_host_is_each_node_the_job_ran_on_once_in_the_order_they_joined():
    job = jobs.Job("j", Path("/inv"), ["node1", "node2"], "/shared", "/shared/jobs/j", Path("/x"), "/shared/c", "u", job_hosts=["node3", "node1"])
    assert job.every_host == ["node3", "node1", "node2"]
    job.job_hosts = []
    assert job.every_host == ["node1", "node2"]


# ---- where this machine sees the shared directory


def load(path: Path) -> inv.Inventory:
    return inv.load(path, paths.roles_dir(), paths.cluster_defaults())


def test_the_controllers_own_mount_is_where_it_reads_the_shared_directory(tmp_path, mnt):
    path = inventory(tmp_path, view=mnt)
    assert jobs.controller_root(load(path), SHARED) == mnt
    assert jobs.shared_view(path) == mnt


def test_without_a_mount_setting_the_nodes_path_is_read_where_it_is_a_directory_here(tmp_path):
    shared = tmp_path / "same-path"
    shared.mkdir()
    path = inventory(tmp_path, shared=str(shared))
    assert jobs.controller_root(load(path), str(shared)) == shared
    assert jobs.shared_view(path) == shared


def test_the_first_gpu_nodes_settings_decide(tmp_path, mnt):
    """Host variables of the first node of [gpu_nodes] (another node's are not asked)."""
    path = inventory(tmp_path, shared="/elsewhere")
    text = path.read_text().replace("node1 ansible_host=10.1.0.11", f"node1 ansible_host=10.1.0.11 megaprov_controller_shared_dir={mnt}")
    path.write_text(text.replace("node2 ansible_host=10.1.0.12", "node2 ansible_host=10.1.0.12 megaprov_controller_shared_dir=/not/here"))
    assert jobs.controller_root(load(path), "/elsewhere") == mnt
    path.write_text(path.read_text().replace("node1 ansible_host=10.1.0.11 ", f"node1 ansible_host=10.1.0.11 megaprov_shared_dir={tmp_path} "))
    path.write_text(path.read_text().replace(f"megaprov_controller_shared_dir={mnt}", ""))
    assert jobs.shared_view(path) == tmp_path  # node1's shared directory, mounted at the same path here


def test_a_mount_setting_that_is_not_a_directory_here_is_this_machines_fault(tmp_path):
    path = inventory(tmp_path, view=tmp_path / "not-mounted")
    with pytest.raises(EnvironmentProblem) as exc:
        jobs.shared_view(path)
    assert exc.value.message == (
        "this machine does not see the cluster's shared directory "
        f"(megaprov_controller_shared_dir={tmp_path / 'not-mounted'} is not a directory here)"
    )
    assert exc.value.hint == "mount it there, or drop megaprov_controller_shared_dir: megaprov then reads the job directories through the head"


def test_without_a_mount_the_job_directories_are_a_mirror_through_the_head(tmp_path, state):
    path = inventory(tmp_path, shared="/cluster/shared")
    root = jobs.shared_view(path)
    assert root.parent == state / "remote" and (root / "jobs").is_dir()
    assert json.loads((root / jobdir.ORIGIN).read_text()) == {"inventory": str(path.resolve()), "shared_dir": "/cluster/shared"}
    assert jobs.controller_root(load(path), "/cluster/shared") == root
    assert jobs.controller_root(load(path), "/other/shared") != root  # one mirror per shared directory


def test_the_shared_directory_defaults_to_the_roles_default(tmp_path):
    path = inventory(tmp_path)
    path.write_text(path.read_text().replace(f"megaprov_shared_dir={SHARED}\n", ""))
    assert json.loads((jobs.shared_view(path) / jobdir.ORIGIN).read_text())["shared_dir"] == "/shared"


def test_locate_names_the_job_for_the_nodes_and_for_this_machine(tmp_path, mnt, monkeypatch):
    inventory(tmp_path, view=mnt)
    monkeypatch.chdir(tmp_path)
    job = jobs.locate(load(Path("inventory.ini")), "j1", SHARED, ["node2", "node1"], "/shared/ck/j1")
    assert job == jobs.Job(
        "j1",
        tmp_path / "inventory.ini",
        ["node2", "node1"],
        SHARED,
        "/shared/jobs/j1",
        mnt / "jobs" / "j1",
        "/shared/ck/j1",
        "megaprov-job-j1.service",
    )
    assert (job.launcher, job.slurm_id, job.submit_host, job.job_hosts) == ("systemd", "", "", [])


# ---- start


def expected_meta(p: Prepared, job: jobs.Job, started: str, **changes: Any) -> dict[str, Any]:
    meta = {
        "name": p.spec.name,
        "state": "starting",
        "started": started,
        "hosts": [n.host for n in p.rendered.nodes],
        "shared_dir": SHARED,
        "job_dir": f"{SHARED}/jobs/{p.spec.name}",
        "checkpoint_dir": p.rendered.checkpoint_dir,
        "unit": f"megaprov-job-{p.spec.name}.service",
        "trainer": p.spec.launch.trainer,
        "nodes": p.cluster.nodes,
        "gpus_per_node": p.cluster.gpus_per_node,
        "gpu": p.cluster.gpu.name,
        "inventory": str(p.inventory.resolve()),
        "train_iters": p.spec.train.train_iters,
        "launcher": job.launcher,
        "stop_grace_s": p.rendered.stop.unit_s if p.rendered.stop else 0,
        "first_started": started,
        "job_hosts": [n.host for n in p.rendered.nodes],
    }
    return {**meta, **changes}


def started_stamp(meta: dict[str, Any], before: float, after: float) -> str:
    """The job's start time as job.json records it: UTC, to the second, taken while start ran."""
    stamp = meta["started"]
    assert datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ") and int(before) <= epoch(stamp) <= after
    return stamp


def test_a_new_job_is_staged_packed_and_started_by_one_play(tmp_path, mnt, nodes, state):
    p = prepare(inventory(tmp_path, view=mnt), "lab-tiny.yml")
    said = Said()
    assert not (mnt / "jobs").exists() and not state.exists()
    before = time.time()
    job = p.start(report=said)
    after = time.time()

    [run] = nodes.ran
    assert (run["playbook"], run["inventory"], run["hosts"], run["strategy"], run["collect"]) == (
        "job_launch.yml",
        p.inventory.resolve(),
        2,
        "linear",
        (),
    )
    assert run["report"] is said
    sent = dict(run["job"])
    data = base64.b64decode(sent.pop("bundle_b64"))
    units = sent.pop("units")
    assert sent == {
        "name": "lab-tiny",
        "hosts": ["node1", "node2"],
        "dir": "/shared/jobs/lab-tiny",
        "unit": "megaprov-job-lab-tiny.service",
        "checkpoint_dir": "/shared/checkpoints/lab-tiny",
        "python": "/opt/megaprov/venv/bin/python",
        "container": False,
        "master_port": 29500,
        "resume": False,
        "shape": {
            "num_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "ffn_hidden_size": 256,
            "seq_length": 128,
            "tensor": 1,
            "pipeline": 1,
        },
    }

    # the bundle: every staged file, sorted, owned by nobody in particular, directories 0755 and files 0644
    entries = members(data)
    assert list(entries) == [
        "bin",
        "bin/megaprov_trainer.py",
        "job.json",
        "launch",
        "launch/node1.service",
        "launch/node1.sh",
        "launch/node2.service",
        "launch/node2.sh",
        "launch/stop.sh",
        "logs",
        "plan.json",
        "spec.yml",
    ]
    for name, info in entries.items():
        kind = "dir" if name in ("bin", "launch", "logs") else "file"
        assert (info.isdir(), info.isfile()) == (kind == "dir", kind == "file"), name
        assert (info.mode, info.uid, info.gid, info.uname, info.gname) == (0o755 if kind == "dir" else 0o644, 0, 0, "", ""), name
        assert int(before) - 1 <= info.mtime <= after + 1, name
    assert member_text(data, "spec.yml") == p.text
    assert member_text(data, "plan.json") == json.dumps(jobview.plan_dict(p.planned), indent=2) + "\n"
    assert member_text(data, "bin/megaprov_trainer.py") == (PACKAGE_DIR / "training" / "trainer.py").read_text()
    assert member_text(data, "launch/stop.sh") == systemd.STOP_SCRIPT
    for node in p.rendered.nodes:
        assert member_text(data, f"launch/{node.host}.sh") == node.script
        assert member_text(data, f"launch/{node.host}.service") == units[node.host]
    assert list(units) == ["node1", "node2"] and "ExecStart=/bin/bash /shared/jobs/lab-tiny/launch/node2.sh" in units["node2"]
    staged = member_text(data, "job.json")
    meta = json.loads(staged)
    assert staged == json.dumps(meta, indent=2) + "\n"
    stamp = started_stamp(meta, before, after)
    assert meta == expected_meta(p, job, stamp)
    assert "segments" not in meta and "resumes" not in meta and "submit_host" not in meta

    # the job directory the nodes wrote; the staging area is gone
    local = mnt / "jobs" / "lab-tiny"
    assert json.loads((local / "job.json").read_text())["state"] == "starting"
    assert [n for n in nodes.tmp_during[0] if n.startswith("megaprov-job-")] == nodes.tmp_during[0] and len(nodes.tmp_during[0]) == 1
    assert os.listdir(tmp_path / "tmp") == []

    assert job == jobs.Job(
        "lab-tiny",
        p.inventory.resolve(),
        ["node1", "node2"],
        SHARED,
        "/shared/jobs/lab-tiny",
        local,
        "/shared/checkpoints/lab-tiny",
        "megaprov-job-lab-tiny.service",
        job_hosts=["node1", "node2"],
    )
    index = state / "jobs" / "lab-tiny.json"
    assert index.read_text() == json.dumps({"name": "lab-tiny", "inventory": str(p.inventory.resolve()), "local_dir": str(local)}) + "\n"
    assert jobs.find("lab-tiny") == job


def test_a_megatron_job_travels_without_the_lab_trainer_and_the_strategy_reaches_the_play(tmp_path, mnt, nodes):
    p = prepare(inventory(tmp_path, nodes=1, view=mnt, gpu="H100-SXM"), "gpt-345m-1node.yml")
    job = p.start(strategy="free")
    [run] = nodes.ran
    assert (run["playbook"], run["hosts"], run["strategy"], run["report"]) == ("job_launch.yml", 1, "free", SILENT)
    data = base64.b64decode(run["job"]["bundle_b64"])
    assert list(members(data)) == ["job.json", "launch", "launch/node1.service", "launch/node1.sh", "launch/stop.sh", "logs", "plan.json", "spec.yml"]
    meta = json.loads(member_text(data, "job.json"))
    assert (meta["trainer"], meta["nodes"], meta["gpus_per_node"], meta["gpu"], meta["train_iters"]) == (
        "megatron-lm",
        1,
        8,
        "H100-SXM",
        p.spec.train.train_iters,
    )
    assert meta["stop_grace_s"] == p.rendered.stop.unit_s == 130
    assert run["job"]["shape"] == {
        "num_layers": 24,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "ffn_hidden_size": 4096,
        "seq_length": 1024,
        "tensor": 1,
        "pipeline": 1,
    }
    assert jobs.model_shape(p.spec) == run["job"]["shape"]
    assert job.hosts == job.job_hosts == ["node1"]


def test_a_render_without_a_stop_grace_records_none(tmp_path, mnt, nodes):
    p = prepare(inventory(tmp_path, view=mnt), "lab-tiny.yml")
    p.rendered = dataclasses.replace(p.rendered, stop=None)
    p.start()
    meta = json.loads(member_text(base64.b64decode(nodes.ran[0]["job"]["bundle_b64"]), "job.json"))
    assert meta["stop_grace_s"] == 0


def test_a_job_of_that_name_is_not_started_again_without_resume(tmp_path, mnt, nodes, state):
    p = prepare(inventory(tmp_path, view=mnt), "lab-tiny.yml")
    p.start()
    (state / "jobs" / "lab-tiny.json").unlink()
    before = (mnt / "jobs" / "lab-tiny" / "job.json").read_text()
    with pytest.raises(UsageError) as exc:
        p.start()
    assert exc.value.message == "job lab-tiny already exists in /shared/jobs/lab-tiny"
    assert exc.value.hint == "pass --name NEW for a new job, or `megaprov train --resume lab-tiny` to continue it"
    assert nodes.playbooks == ["job_launch.yml"]  # the first start only
    assert (mnt / "jobs" / "lab-tiny" / "job.json").read_text() == before and not (state / "jobs" / "lab-tiny.json").exists()


def old_job(mnt: Path, name: str, **fields: Any) -> dict[str, Any]:
    """A job.json as an earlier start left it."""
    meta = {
        "name": name,
        "state": "failed",
        "started": "2026-01-02T03:04:05Z",
        "first_started": "2026-01-01T00:00:00Z",
        "hosts": ["node1"],
        "job_hosts": ["node3", "node1"],
        "shared_dir": SHARED,
        "job_dir": f"{SHARED}/jobs/{name}",
        "checkpoint_dir": f"{SHARED}/checkpoints/{name}",
        "resumes": 2,
        **fields,
    }
    (mnt / "jobs" / name).mkdir(parents=True)
    (mnt / "jobs" / name / "job.json").write_text(json.dumps(meta))
    return meta


def test_a_resumed_job_counts_the_resume_and_keeps_every_node_it_ran_on(tmp_path, mnt, nodes):
    p = prepare(inventory(tmp_path, view=mnt), "lab-tiny.yml")
    old_job(mnt, "lab-tiny")
    before = time.time()
    job = p.start(resume=True)
    after = time.time()
    [run] = nodes.ran
    assert run["job"]["resume"] is True
    staged = json.loads(member_text(base64.b64decode(run["job"]["bundle_b64"]), "job.json"))
    stamp = started_stamp(staged, before, after)
    assert staged == expected_meta(p, job, stamp, resumes=3, first_started="2026-01-01T00:00:00Z", job_hosts=["node3", "node1", "node2"])
    assert job.job_hosts == ["node3", "node1", "node2"] and job.hosts == ["node1", "node2"]
    assert "segments" not in staged


def test_an_elastic_job_records_its_first_segment(tmp_path, mnt, nodes):
    p = prepare(inventory(tmp_path, nodes=3, view=mnt), "lab-elastic.yml")
    p.start()
    staged = json.loads(member_text(base64.b64decode(nodes.ran[0]["job"]["bundle_b64"]), "job.json"))
    assert staged["segments"] == [{"hosts": ["node1", "node2", "node3"], "started": staged["started"], "why": "started"}]
    assert "resumes" not in staged


def test_an_elastic_resume_adds_a_segment_and_keeps_the_latest_ones(tmp_path, mnt, nodes):
    p = prepare(inventory(tmp_path, nodes=3, view=mnt), "lab-elastic.yml")
    old = [{"hosts": ["node1"], "started": f"2026-01-01T00:00:{i % 60:02d}Z", "why": f"change {i}"} for i in range(jobmeta.MAX_SEGMENTS)]
    old_job(mnt, "lab-elastic", segments=old)
    job = p.start(resume=True)
    staged = json.loads(member_text(base64.b64decode(nodes.ran[0]["job"]["bundle_b64"]), "job.json"))
    new = {"hosts": ["node1", "node2", "node3"], "started": staged["started"], "why": "resumed (megaprov train --resume)"}
    assert staged["segments"] == old[1:] + [new]
    assert staged["resumes"] == 3 and staged["job_hosts"] == job.job_hosts == ["node3", "node1", "node2"]


def test_an_elastic_change_of_nodes_is_a_new_segment_not_a_resume(tmp_path, mnt, nodes):
    p = prepare(inventory(tmp_path, nodes=3, view=mnt), "lab-elastic.yml", nodes=2)
    old_job(mnt, "lab-elastic", segments=[{"hosts": ["node3", "node1"], "started": "2026-01-01T00:00:00Z", "why": "started"}])
    job = p.start(resume=True, change="node3 lost")
    staged = json.loads(member_text(base64.b64decode(nodes.ran[0]["job"]["bundle_b64"]), "job.json"))
    assert staged["resumes"] == 2  # as it was
    assert staged["segments"] == [
        {"hosts": ["node3", "node1"], "started": "2026-01-01T00:00:00Z", "why": "started"},
        {"hosts": ["node1", "node2"], "started": staged["started"], "why": "node3 lost"},
    ]
    assert staged["nodes"] == 2 and job.hosts == ["node1", "node2"]


def test_a_slurm_job_is_submitted_and_recorded_as_submitted(tmp_path, mnt, nodes, state):
    p = prepare(inventory(tmp_path, view=mnt, gpu="H100-SXM"), "gpt-345m-ngc.yml")
    said = Said()
    job = p.start(report=said, strategy="free")
    [run] = nodes.ran
    assert (run["playbook"], run["hosts"], run["report"]) == ("job_slurm.yml", 1, said)
    sent = dict(run["job"])
    data = base64.b64decode(sent.pop("bundle_b64"))
    assert sent == {
        "name": "gpt-345m-ngc",
        "hosts": ["node1", "node2"],
        "dir": "/shared/jobs/gpt-345m-ngc",
        "unit": "megaprov-job-gpt-345m-ngc.service",
        "checkpoint_dir": p.rendered.checkpoint_dir,
        "python": "/usr/bin/python",
        "container": True,
        "master_port": 29500,
        "resume": False,
        "shape": jobs.model_shape(p.spec),
        "action": "submit",
        "submit_host": "head",
        "slurm_id": "0",
        "grace": 0,
    }
    assert list(members(data)) == ["job.json", "launch", "launch/job.sbatch", "launch/slurm-node.sh", "logs", "plan.json", "spec.yml"]
    assert member_text(data, "launch/job.sbatch") == p.rendered.sbatch
    staged = json.loads(member_text(data, "job.json"))
    assert staged == expected_meta(p, job, staged["started"], submit_host="head")
    assert (job.launcher, job.slurm_id, job.submit_host) == ("slurm", "4242", "head")
    on_disk = json.loads((mnt / "jobs" / "gpt-345m-ngc" / "job.json").read_text())
    assert on_disk == {**staged, "state": "submitted", "slurm_job_id": "4242"}
    assert json.loads((state / "jobs" / "gpt-345m-ngc.json").read_text())["local_dir"] == str(mnt / "jobs" / "gpt-345m-ngc")


FAILED_UNIT = runner.Failure("node2", "Start the job", "launch", "unit failed", False)


@pytest.mark.parametrize(
    ("answer", "plays", "error", "message"),
    [
        (
            result(FAILED_UNIT, data={systemd.UNITS_MAY_RUN: True}),
            ["job_launch.yml", "job_stop.yml"],
            RunFailed,
            "job lab-tiny not started: node2: task 'Start the job' failed: unit failed",
        ),
        (
            result(runner.Failure("node1", "Check", "launch", "port 29500 is taken", False, usage=True)),
            ["job_launch.yml"],
            UsageError,
            "job lab-tiny not started: port 29500 is taken",
        ),
        (
            result(FAILED_UNIT, stats_seen=False),
            ["job_launch.yml", "job_stop.yml"],
            RunFailed,
            "job lab-tiny not started: node2: task 'Start the job' failed: unit failed",
        ),
    ],
    ids=["units-started", "refused-before-any-unit", "interrupted"],
)
def test_a_failed_start_leaves_nothing_running_and_nothing_recorded(tmp_path, mnt, nodes, state, answer, plays, error, message):
    p = prepare(inventory(tmp_path, view=mnt), "lab-tiny.yml")
    nodes.answers["job_launch.yml"] = answer
    with pytest.raises(error) as exc:
        p.start()
    assert exc.value.message == message
    assert nodes.playbooks == plays
    if len(plays) > 1:
        stop = nodes.ran[1]
        assert stop["job"] == {k: nodes.ran[0]["job"][k] for k in ("name", "hosts", "dir", "unit", "checkpoint_dir")}
    assert not (state / "jobs").exists()
    assert os.listdir(tmp_path / "tmp") == []


def test_a_slurm_submission_that_failed_or_printed_no_id_is_not_recorded(tmp_path, mnt, nodes, state):
    p = prepare(inventory(tmp_path, view=mnt, gpu="H100-SXM"), "gpt-345m-ngc.yml")
    nodes.answers["job_slurm.yml"] = result(runner.Failure("head", "Submit", "slurm", "sbatch: error: invalid partition", False))
    with pytest.raises(RunFailed) as exc:
        p.start()
    assert exc.value.message == "job gpt-345m-ngc not submitted: head: task 'Submit' failed: sbatch: error: invalid partition"
    nodes.answers["job_slurm.yml"] = result(data={})
    with pytest.raises(RunFailed) as exc:
        p.start()
    assert exc.value.message == "job gpt-345m-ngc: sbatch printed no job id"
    assert nodes.playbooks == ["job_slurm.yml", "job_slurm.yml"] and not (state / "jobs").exists()


def test_job_files_too_large_to_travel_are_refused_before_any_play(tmp_path, mnt, nodes, state):
    p = prepare(inventory(tmp_path, view=mnt), "lab-tiny.yml")
    p.text += "# " + base64.b64encode(os.urandom(9 << 20)).decode() + "\n"  # does not compress: ~9 MiB packed
    with pytest.raises(UsageError) as exc:
        p.start()
    assert exc.value.message == "the job's files are 9 MiB packed (more than 8 MiB)"
    assert exc.value.hint == "keep data and checkpoints out of the job"
    assert nodes.ran == [] and not (state / "jobs").exists()


# ---- a controller without the mount: the job directory through the head

HEAD_SHARED = "/cluster/shared"  # the shared directory of the nodes and the head; not mounted on this machine


@pytest.fixture
def head(tmp_path, monkeypatch):
    """(the inventory, the head's <shared>, this machine's mirror root) with the plays unpacking on the head."""
    disk = tmp_path / "head"
    (disk / "jobs").mkdir(parents=True)
    path = inventory(tmp_path, shared=HEAD_SHARED)
    root = jobdir.mirror_root(load(path), HEAD_SHARED)
    channel = LocalChannel(disk / "jobs")
    monkeypatch.setitem(jobdir._CHANNELS, root, channel)
    stand_in = Nodes(disk, HEAD_SHARED)
    monkeypatch.setattr(cluster_plays, "run", stand_in)
    yield path, disk, root, stand_in
    channel.close()


def test_a_job_started_from_a_laptop_is_mirrored_from_the_head(head, state):
    path, disk, root, stand_in = head
    p = prepare(path, "lab-tiny.yml")
    job = p.start()
    local = root / "jobs" / "lab-tiny"
    assert job.local_dir == local and job.job_dir == "/cluster/shared/jobs/lab-tiny"
    assert (local.stat().st_mode & 0o777) == 0o700  # the mirror is this user's alone
    assert (local / "job.json").read_bytes() == (disk / "jobs" / "lab-tiny" / "job.json").read_bytes()
    assert (local / "spec.yml").read_text() == p.text
    assert json.loads((state / "jobs" / "lab-tiny.json").read_text())["local_dir"] == str(local)
    # resumed from the same laptop: the mirror is there already
    job = p.start(resume=True)
    assert json.loads((local / "job.json").read_text())["resumes"] == 1
    assert stand_in.playbooks == ["job_launch.yml", "job_launch.yml"]


def test_a_state_set_on_a_laptop_reaches_the_heads_job_json(head):
    path, disk, root, _ = head
    p = prepare(path, "lab-tiny.yml")
    job = p.start()
    jobs.set_state(job, "finished", verdict="passed")
    on_head = json.loads((disk / "jobs" / "lab-tiny" / "job.json").read_text())
    assert (on_head["state"], on_head["verdict"]) == ("finished", "passed")
    assert jobs.job_state(jobs.find("lab-tiny")) == "finished"


def test_a_listing_through_the_head_shows_the_heads_jobs(head):
    path, disk, root, _ = head
    prepare(path, "lab-tiny.yml").start()
    (disk / "jobs" / "Not A Job").mkdir()  # the cluster user's: not a job name, not asked about
    (disk / "jobs" / "Not A Job" / "job.json").write_text("{}")
    for record in (root.parent.parent / "jobs").glob("*.json"):
        record.unlink()  # another machine started it: this one has no index entry
    for entry in (root / "jobs").iterdir():
        shutil.rmtree(entry)
    rows = jobs.listing(str(path))
    assert [(r["name"], r["state"], r["job_dir"]) for r in rows] == [("lab-tiny", "starting", str(root / "jobs" / "lab-tiny"))]


# ---- the index, find and listing


def job_on_disk(mnt: Path, name: str, **fields: Any) -> Path:
    """A job directory as start and the nodes leave it (job.json with every field megaprov reads back)."""
    meta = {
        "name": name,
        "state": "running",
        "started": "2026-03-04T05:06:07Z",
        "hosts": ["node1", "node2"],
        "job_hosts": ["node3", "node1", "node2"],
        "shared_dir": SHARED,
        "job_dir": f"{SHARED}/jobs/{name}",
        "checkpoint_dir": f"{SHARED}/ck/{name}",
        "nodes": 2,
        **fields,
    }
    local = mnt / "jobs" / name
    (local / "logs").mkdir(parents=True, exist_ok=True)
    (local / "job.json").write_text(json.dumps(meta))
    return local


def test_remember_keeps_one_record_per_job_in_the_state_directory(tmp_path, state):
    job = jobs.Job("j1", tmp_path / "inv.ini", ["node1"], SHARED, "/shared/jobs/j1", tmp_path / "mnt" / "jobs" / "j1", "/shared/c", "u")
    assert not state.exists()
    jobs.remember(job)
    jobs.remember(dataclasses.replace(job, local_dir=tmp_path / "elsewhere"))  # again: replaced
    assert [p.name for p in (state / "jobs").iterdir()] == ["j1.json"]
    text = (state / "jobs" / "j1.json").read_text()
    assert text == '{"name": "j1", "inventory": "' + str(tmp_path / "inv.ini") + '", "local_dir": "' + str(tmp_path / "elsewhere") + '"}\n'


def test_find_reads_a_known_job_from_its_directory(tmp_path, mnt):
    path = inventory(tmp_path, nodes=3, view=mnt)
    local = job_on_disk(mnt, "j1", launcher="slurm", slurm_job_id="77", submit_host="head")
    jobs.remember(jobs.Job("j1", path, [], "", "", local, "", ""))
    job = jobs.find("j1")
    assert job == jobs.Job(
        "j1",
        path.resolve(),
        ["node1", "node2"],
        SHARED,
        "/shared/jobs/j1",
        local,
        "/shared/ck/j1",
        "megaprov-job-j1.service",
        "slurm",
        "77",
        "head",
        ["node3", "node1", "node2"],
    )


def test_find_with_an_inventory_uses_it_over_the_recorded_one(tmp_path, mnt, monkeypatch):
    path = inventory(tmp_path, view=mnt)
    local = job_on_disk(mnt, "j1")
    jobs.remember(jobs.Job("j1", tmp_path / "old-inventory.ini", [], "", "", local, "", ""))
    monkeypatch.chdir(tmp_path)
    job = jobs.find("j1", "inventory.ini")
    assert (job.inventory, job.local_dir) == (path.resolve(), local)


def test_find_without_a_record_looks_in_the_inventorys_shared_directory(tmp_path, mnt):
    path = inventory(tmp_path, view=mnt)
    local = job_on_disk(mnt, "j1")
    job = jobs.find("j1", str(path))
    assert (job.name, job.local_dir, job.inventory, job.hosts) == ("j1", local, path.resolve(), ["node1", "node2"])


def test_a_record_whose_directory_is_gone_falls_back_to_the_shared_directory(tmp_path, mnt):
    path = inventory(tmp_path, view=mnt)
    local = job_on_disk(mnt, "j1")
    (tmp_path / "moved").mkdir()
    jobs.remember(jobs.Job("j1", path, [], "", "", tmp_path / "moved" / "j1", "", ""))
    assert jobs.find("j1").local_dir == local


def test_an_unknown_job_is_a_usage_error_that_says_what_to_pass(tmp_path, mnt):
    with pytest.raises(UsageError) as exc:
        jobs.find("nope")
    assert (exc.value.message, exc.value.hint) == (
        "no job 'nope' is known on this machine",
        "pass -i INVENTORY of the cluster it ran on (megaprov jobs lists known jobs)",
    )
    path = inventory(tmp_path, view=mnt)
    with pytest.raises(UsageError) as exc:
        jobs.find("nope", str(path))
    assert (exc.value.message, exc.value.hint) == (f"no job 'nope' in {mnt / 'jobs'}", "megaprov jobs lists the jobs")


def test_a_name_that_is_not_a_job_name_is_refused_before_anything_is_read(tmp_path, mnt):
    with pytest.raises(UsageError) as exc:
        jobs.find("../etc", str(inventory(tmp_path, view=mnt)))
    assert exc.value.message == "job name='../etc' is not a job name"


def report(local: Path, doc: Any) -> None:
    (local / "report.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))


@pytest.mark.parametrize(
    ("doc", "said"),
    [
        ({"verdict": "passed", "checks": []}, "passed"),
        ({"verdict": "failed"}, "failed"),
        ({"verdict": "PASSED"}, None),
        ({"verdict": "maybe"}, None),
        ({"checks": []}, None),
        (["verdict", "passed"], None),  # not megaprov's report
        ('{"verdict": "passed"', None),  # cut short
        (None, None),  # absent
    ],
)
def test_a_reports_verdict_is_passed_failed_or_nothing(mnt, doc, said):
    local = job_on_disk(mnt, "j1")
    if doc is not None:
        report(local, doc)
    assert jobs.report_verdict(local / "report.json") == said


def test_a_report_larger_than_64_mib_is_not_read(mnt):
    local = job_on_disk(mnt, "j1")
    head = '{"verdict": "passed", "pad": "'
    with (local / "report.json").open("w") as out:
        out.write(head + "x" * ((64 << 20) - len(head) - 1) + '"}')  # valid, and one byte over
    assert (local / "report.json").stat().st_size == (64 << 20) + 1
    assert jobs.report_verdict(local / "report.json") is None


def test_a_report_reached_through_a_link_is_not_read(mnt, tmp_path):
    local = job_on_disk(mnt, "j1")
    (tmp_path / "elsewhere.json").write_text('{"verdict": "passed"}')
    (local / "report.json").symlink_to(tmp_path / "elsewhere.json")
    assert jobs.report_verdict(local / "report.json") is None


def test_the_listing_shows_every_known_and_every_shared_job_by_name(tmp_path, mnt, state):
    path = inventory(tmp_path, view=mnt)
    a = job_on_disk(mnt, "a-job", state="finished")
    report(a, {"verdict": "passed"})
    c = job_on_disk(mnt, "c-job", launcher="slurm", slurm_job_id="12", submit_host="head", started=None)
    report(c, {"verdict": "nope"})
    bad = job_on_disk(mnt, "b-job")
    (bad / "job.json").write_text('{"name": "other"}')
    (mnt / "jobs" / "d-job").mkdir()  # no job.json: not a job (yet)
    (mnt / "jobs" / "stray.json").write_text("{}")  # a file, not a job directory
    (mnt / "jobs" / "Not A Job").mkdir()
    (mnt / "jobs" / "Not A Job" / "job.json").write_text("{}")
    elsewhere = job_on_disk(tmp_path / "other-mount", "e-job", state="stopped")
    jobs.remember(jobs.Job("e-job", path, [], "", "", elsewhere, "", ""))
    jobs.remember(jobs.Job("a-job", path, [], "", "", a, "", ""))

    assert [r["name"] for r in jobs.listing(None)] == ["a-job", "e-job"]  # the index alone
    rows = jobs.listing(str(path))
    assert rows == [
        {
            "name": "'Not A Job'",
            "state": "invalid",
            "verdict": None,
            "nodes": 0,
            "started": None,
            "job_dir": str(mnt / "jobs" / "Not A Job"),
            "problem": rows[0]["problem"],
        },
        {
            "name": "a-job",
            "state": "finished",
            "verdict": "passed",
            "nodes": 2,
            "started": "2026-03-04T05:06:07Z",
            "job_dir": str(a),
            "launcher": "systemd",
            "slurm_job_id": None,
        },
        {
            "name": "b-job",
            "state": "invalid",
            "verdict": None,
            "nodes": 0,
            "started": None,
            "job_dir": str(bad),
            "problem": rows[2]["problem"],
        },
        {
            "name": "c-job",
            "state": "running",
            "verdict": None,
            "nodes": 2,
            "started": None,
            "job_dir": str(c),
            "launcher": "slurm",
            "slurm_job_id": "12",
        },
        {
            "name": "e-job",
            "state": "stopped",
            "verdict": None,
            "nodes": 2,
            "started": "2026-03-04T05:06:07Z",
            "job_dir": str(elsewhere),
            "launcher": "systemd",
            "slurm_job_id": None,
        },
    ]
    assert "job name" in rows[0]["problem"] and "is not the job's directory name 'b-job'" in rows[2]["problem"]


# ---- stop, the units' states, what job.json says


def found_job(tmp_path: Path, mnt: Path, name: str = "j1", **fields: Any) -> jobs.Job:
    path = inventory(tmp_path, nodes=3, view=mnt)
    local = job_on_disk(mnt, name, **fields)
    jobs.remember(jobs.Job(name, path, [], "", "", local, "", ""))
    return jobs.find(name)


def test_stop_runs_the_stop_play_and_records_stopped(tmp_path, mnt, nodes):
    job = found_job(tmp_path, mnt, stop_grace_s=10)
    said = Said()
    jobs.stop(job, said)
    [run] = nodes.ran
    assert (run["playbook"], run["job"], run["hosts"], run["report"]) == ("job_stop.yml", job.vars(), 2, said)
    meta = json.loads((job.local_dir / "job.json").read_text())
    assert (meta["state"], meta["stop_grace_s"], meta["started"]) == ("stopped", 10, "2026-03-04T05:06:07Z")


def test_a_stop_that_failed_leaves_the_state_as_it_was(tmp_path, mnt, nodes):
    job = found_job(tmp_path, mnt)
    nodes.answers["job_stop.yml"] = result(runner.Failure("node2", "Stop the unit", "stop", "timed out", False))
    with pytest.raises(RunFailed) as exc:
        jobs.stop(job, SILENT)
    assert exc.value.message == "job j1: stop failed: node2: task 'Stop the unit' failed: timed out"
    assert jobs.job_state(job) == "running"


def test_a_slurm_job_is_stopped_through_slurm_with_its_stop_grace(tmp_path, mnt, nodes):
    job = found_job(tmp_path, mnt, launcher="slurm", slurm_job_id="77", submit_host="head", stop_grace_s=600)
    jobs.stop(job, SILENT)
    [run] = nodes.ran
    assert run["playbook"] == "job_slurm.yml"
    assert (run["job"]["action"], run["job"]["slurm_id"], run["job"]["grace"], run["job"]["submit_host"]) == ("stop", "77", 600, "head")
    assert jobs.job_state(job) == "stopped"


def test_unit_states_are_what_each_nodes_systemd_said(tmp_path, mnt, nodes):
    job = found_job(tmp_path, mnt)
    nodes.answers["job_status.yml"] = result(
        results=[
            runner.TaskResult("node1", "Unit state", "ansible.builtin.command", {"stdout": "ActiveState=active\nSubState=running"}),
            runner.TaskResult("node2", "Unit state", "ansible.builtin.command", {"stdout": "ActiveState=failed\nSubState=failed"}),
        ]
    )
    assert jobs.unit_states(job) == {
        "node1": {"ActiveState": "active", "SubState": "running"},
        "node2": {"ActiveState": "failed", "SubState": "failed"},
    }
    [run] = nodes.ran
    assert (run["playbook"], run["job"], run["hosts"], run["collect"], run["report"]) == (
        "job_status.yml",
        job.vars(),
        2,
        ("ansible.builtin.command", "command"),
        SILENT,
    )
    said = Said()
    jobs.unit_states(job, said)
    assert nodes.ran[-1]["report"] is said


def test_a_slurm_jobs_state_is_slurms_word_for_it(tmp_path, mnt, nodes):
    job = found_job(tmp_path, mnt, launcher="slurm", slurm_job_id="77", submit_host="head")
    nodes.answers["job_slurm.yml"] = result(data={slurm.STATE: "JobId=77 JobState=RUNNING Reason=None NodeList=node[1-2] Restarts=0\n--- pending\n"})
    states = jobs.unit_states(job)
    assert list(states) == ["slurm"] and (states["slurm"]["slurm_job_id"], states["slurm"]["state"]) == ("77", "RUNNING")
    assert nodes.ran[0]["job"]["action"] == "status"


def test_the_stored_spec_is_read_back_as_the_cluster_users_file(tmp_path, mnt):
    job = found_job(tmp_path, mnt, "lab-tiny")
    (job.local_dir / "spec.yml").write_text((JOBS / "lab-tiny.yml").read_text())
    spec = jobs.job_spec(job)
    assert isinstance(spec, JobSpec) and (spec.name, spec.model.seq_length, spec.train.train_iters) == ("lab-tiny", 128, 60)
    (job.local_dir / "spec.yml").unlink()
    (tmp_path / "spec.yml").write_text((JOBS / "lab-tiny.yml").read_text())
    (job.local_dir / "spec.yml").symlink_to(tmp_path / "spec.yml")  # a link the cluster user put there is not followed
    with pytest.raises(UsageError):
        jobs.job_spec(job)


def test_segment_hosts_are_job_jsons_and_the_jobs_own_when_it_cannot_be_read(tmp_path, mnt):
    job = found_job(tmp_path, mnt)
    meta = json.loads((job.local_dir / "job.json").read_text())
    (job.local_dir / "job.json").write_text(json.dumps({**meta, "hosts": ["node3"]}))
    assert jobs.segment_hosts(job) == ["node3"] and job.hosts == ["node1", "node2"]
    (job.local_dir / "job.json").write_text("{")
    assert jobs.segment_hosts(job) == ["node1", "node2"]
    assert jobs.segment_hosts(job) is not job.hosts


def test_job_state_is_job_jsons_checked(tmp_path, mnt):
    job = found_job(tmp_path, mnt)
    assert jobs.job_state(job) == "running"
    (job.local_dir / "job.json").write_text(json.dumps({**json.loads((job.local_dir / "job.json").read_text()), "state": "Bad State"}))
    with pytest.raises(UsageError):
        jobs.job_state(job)


def test_set_state_keeps_every_other_field_and_replaces_the_file_whole(tmp_path, mnt):
    job = found_job(tmp_path, mnt, custom={"kept": [1, 2]})
    before = json.loads((job.local_dir / "job.json").read_text())
    jobs.set_state(job, "finished", verdict="passed", ended="2026-03-04T06:00:00Z")
    text = (job.local_dir / "job.json").read_text()
    assert json.loads(text) == {**before, "state": "finished", "verdict": "passed", "ended": "2026-03-04T06:00:00Z"}
    assert text == json.dumps(json.loads(text), indent=2) + "\n"
    assert sorted(os.listdir(job.local_dir)) == ["job.json", "logs"]  # no temporary file left
    jobs.set_state(job, "stopped")
    assert json.loads((job.local_dir / "job.json").read_text())["verdict"] == "passed"
    (job.local_dir / "job.json").write_text(json.dumps({**before, "name": "other"}))
    with pytest.raises(UsageError):
        jobs.set_state(job, "finished")
    assert json.loads((job.local_dir / "job.json").read_text())["name"] == "other"


# ---- launch timing from the node logs' start lines

T = epoch("2026-12-02T10:00:01Z")  # megaprov train started (this machine's clock)


def at(seconds: float) -> str:
    """The node script's stamp (date -u +%Y-%m-%dT%H:%M:%S.%3NZ) ``seconds`` after T."""
    whole, ms = divmod(round(seconds * 1000), 1000)
    return datetime.fromtimestamp(T + whole, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{ms:03d}Z"


def starting(log: follow.JobLog, host: str, rank: int, seconds: float) -> None:
    log.feed(host, f"megaprov: node {host} (node rank {rank}): torchrun starting at {at(seconds)}", T + seconds)


def iteration(log: follow.JobLog, host: str, i: int, seen: float) -> None:
    log.feed(host, trainer.log_line(i, 60, i * 8, 50.0, 0.1, 1e-3, 8, 6.0 - 0.05 * i, 1.0, 0, 0), T + seen)


@pytest.mark.parametrize(
    ("stamp", "seconds"),
    [
        ("2026-12-02T10:00:01Z", T),
        ("2026-12-02T10:00:01.250Z", T + 0.25),
        ("2026-12-02T11:00:01+01:00", T),
        ("2026-12-02T10:00:01.250+00:00", T + 0.25),
    ],
)
def test_a_stamp_is_read_as_utc(stamp, seconds):
    assert runner.epoch(stamp) == seconds


@pytest.mark.parametrize("stamp", ["", "yesterday", "2026-12-02T10:00:01.%3NZ", "2026-12-02T10:00:01z", "2026-12-02 10:00:01 UTC"])
def test_anything_else_is_not_a_stamp(stamp):
    assert runner.epoch(stamp) is None


def test_launch_timing_counts_this_launchs_starts_only():
    """Node clocks may lag this machine's by up to a second: a start up to 1 s before megaprov train counts; earlier
    ones are a former attempt's (a resumed job's log holds them)."""
    log = follow.JobLog(128)
    starting(log, "node1", 0, -1.0)  # 1 s "before": the nodes' clocks; counts
    starting(log, "node1", 0, 3.0)
    starting(log, "node2", 1, -1.5)  # an earlier launch's
    starting(log, "node2", 1, 2.25)
    starting(log, "node3", 2, -60.0)  # only an earlier launch's: not one of this launch's nodes
    iteration(log, "node2", 1, 5.5)
    iteration(log, "node2", 2, 6.0)
    iteration(log, "node2", 3, 6.5)
    starting(log, "node2", 1, 7.0)  # torchrun restarted: attempt 1
    iteration(log, "node2", 3, 9.0)
    iteration(log, "node2", 4, 9.5)
    assert [(it.iteration, it.attempt) for it in log.series()] == [(1, 0), (2, 0), (3, 1), (4, 1)]
    assert jobs.first_start_seconds(log, T) == {
        "megaprov_to_torchrun_start_s": -1.0,
        "megaprov_to_torchrun_started_everywhere_s": 2.25,  # node2's first start of this launch, the last node to start
        "torchrun_start_to_first_iteration_s": 6.5,  # from the first start to the first iteration of the first attempt
    }


def test_launch_timing_is_rounded_to_hundredths():
    log = follow.JobLog(128)
    starting(log, "node1", 0, 0.123)
    starting(log, "node2", 1, 0.456)
    iteration(log, "node2", 1, 1.0)
    assert jobs.first_start_seconds(log, T) == {
        "megaprov_to_torchrun_start_s": 0.12,
        "megaprov_to_torchrun_started_everywhere_s": 0.46,
        "torchrun_start_to_first_iteration_s": 0.88,
    }


def test_no_start_of_this_launch_no_timing():
    log = follow.JobLog(128)
    assert jobs.first_start_seconds(log, T) == {}
    starting(log, "node1", 0, -1.5)
    iteration(log, "node1", 1, 1.0)
    assert jobs.first_start_seconds(log, T) == {}
    starting(log, "node1", 0, 0.5)
    assert jobs.first_start_seconds(log, T) == {
        "megaprov_to_torchrun_start_s": 0.5,
        "megaprov_to_torchrun_started_everywhere_s": 0.5,
        "torchrun_start_to_first_iteration_s": 0.5,
    }


def test_a_start_line_whose_stamp_is_not_a_time_does_not_stop_the_report():
    """The node logs are the cluster user's files, and the stamp is whatever the node's `date` printed (a date without
    %N prints "%3N" or "N"): one line that is not a time must not turn the end of `megaprov train` into a traceback."""
    log = follow.JobLog(128)
    starting(log, "node1", 0, 0.5)
    log.feed("node2", "megaprov: node node2 (node rank 1): torchrun starting at 2026-12-02T10:00:02.%3NZ", T + 1)
    assert jobs.first_start_seconds(log, T)["megaprov_to_torchrun_start_s"] == 0.5


# ---- settle: a job that ended while nobody followed it


def node_lines(host: str, rank: int, *events: str) -> str:
    return "".join(f"megaprov: node {host} (node rank {rank}): torchrun {e} at 2026-12-02T10:00:0{i}.000Z\n" for i, e in enumerate(events))


def iterations(last: int, total: int = 60) -> str:
    return "".join(trainer.log_line(i, total, i * 8, 50.0, 0.1, 1e-3, 8, 6.0 - 0.05 * i, 1.0, 0, 0) + "\n" for i in range(1, last + 1))


def ended_job(tmp_path: Path, mnt: Path, logs: dict[str, str], example: str = "lab-tiny.yml", gpu: str | None = None, **fields: Any) -> jobs.Job:
    """A job as start left it (spec.yml, job.json), with the node logs ``logs``; found as `job status` finds it."""
    spec_text = (JOBS / example).read_text()
    name = target.read(str(JOBS / example))[0].name
    path = inventory(tmp_path, nodes=3, view=mnt, gpu=gpu)
    spec = target.read(str(JOBS / example))[0]
    meta = {
        "gpus_per_node": 1,
        "gpu": gpu or "cpu",
        "launcher": "systemd",
        "inventory": str(path),
        "trainer": spec.launch.trainer,
        "train_iters": spec.train.train_iters,
        **fields,
    }
    local = job_on_disk(mnt, name, **meta)
    (local / "spec.yml").write_text(spec_text)
    for host, text in logs.items():
        (local / "logs" / f"{host}.log").write_text(text)
    jobs.remember(jobs.Job(name, path, [], "", "", local, "", ""))
    return jobs.find(name)


FINISHED = {
    "node1": node_lines("node1", 0, "starting", "exited with 0"),
    "node2": node_lines("node2", 1, "starting") + iterations(60) + node_lines("node2", 1, "exited with 0"),
}


def judged(job: jobs.Job) -> tuple[dict[str, Any], dict[str, Any]]:
    """job.json and report.json after a verdict."""
    return json.loads((job.local_dir / "job.json").read_text()), json.loads((job.local_dir / "report.json").read_text())


def check(report_doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in report_doc["checks"] if c["name"] == name)


def expectation(job: jobs.Job, shape: target.Shape) -> str:
    spec = jobs.job_spec(job)
    expected, source = jobs.expected_throughput(spec, planner.plan(spec, target.cluster(spec, str(job.inventory), shape)[0]))
    return f"expected {expected:,.0f} ({source})"


@pytest.mark.parametrize("was", ["starting", "running", "submitted"])
def test_a_job_whose_nodes_all_finished_the_last_iteration_gets_its_verdict(tmp_path, mnt, was):
    job = ended_job(tmp_path, mnt, FINISHED, state=was)
    assert jobs.settle(job) is True
    meta, doc = judged(job)
    assert meta["state"] == "finished" and meta["verdict"] == doc["verdict"] and meta["ended"]
    assert doc["timing"] == {"judged_after_the_run": True} and doc["iterations"] == {"logged": 60, "last": 60, "total": 60}
    assert check(doc, "GPU utilisation and memory")["detail"] == "skipped: no GPU (CPU nodes)"
    assert expectation(job, target.Shape(2, 1, "cpu")) in check(doc, "throughput")["detail"]
    assert not [c for c in doc["checks"] if c["name"] == "run"]
    assert jobs.settle(job) is False  # judged once


def test_the_verdict_is_held_to_the_shape_the_job_was_started_with(tmp_path, mnt):
    """`train --nodes 1 --gpus-per-node 2`: job.json's shape, not the spec's (2 nodes of 1), is what the plan is for."""
    logs = {"node1": node_lines("node1", 0, "starting") + iterations(60) + node_lines("node1", 0, "exited with 0")}
    job = ended_job(tmp_path, mnt, logs, hosts=["node1"], job_hosts=["node1"], nodes=1, gpus_per_node=2)
    assert jobs.settle(job) is True
    detail = check(judged(job)[1], "throughput")["detail"]
    assert expectation(job, target.Shape(1, 2, "cpu")) in detail
    assert expectation(job, target.Shape(2, 2, "cpu")) not in detail and expectation(job, target.Shape(1, 1, "cpu")) not in detail


def test_a_gpu_job_is_held_to_the_gpu_it_was_started_on(tmp_path, mnt):
    job = ended_job(tmp_path, mnt, FINISHED, gpu="H100-SXM", nodes=2, gpus_per_node=1)
    meta = json.loads((job.local_dir / "job.json").read_text())
    (job.local_dir / "job.json").write_text(json.dumps({**meta, "gpu": "A100-80GB"}))  # `train --gpu A100-80GB`
    assert jobs.settle(job) is True
    doc = judged(job)[1]
    assert expectation(job, target.Shape(2, 1, "A100-80GB")) in check(doc, "throughput")["detail"]
    assert expectation(job, target.Shape(2, 1, "H100-SXM")) not in check(doc, "throughput")["detail"]
    assert check(doc, "GPU utilisation and memory")["detail"].startswith("skipped: no nvidia-smi sample")


def test_an_elastic_job_is_planned_on_every_node_it_ran_on(tmp_path, mnt):
    job = ended_job(tmp_path, mnt, FINISHED, example="lab-elastic.yml", nodes=2)
    for host, text in {"node2": node_lines("node2", 1, "starting") + iterations(200, 200) + node_lines("node2", 1, "exited with 0")}.items():
        (job.local_dir / "logs" / f"{host}.log").write_text(text)
    assert jobs.settle(job) is True
    doc = judged(job)[1]
    detail = check(doc, "throughput")["detail"]
    assert expectation(job, target.Shape(3, 1, "cpu")) in detail and expectation(job, target.Shape(2, 1, "cpu")) not in detail
    assert (doc["segments"], doc["changes"]) == ([], [])  # judged as an elastic run (no start line named a node count)


def unchanged(job: jobs.Job, units: dict[str, dict[str, str]] | None = None) -> None:
    before = (job.local_dir / "job.json").read_text()
    assert jobs.settle(job, units) is False
    assert (job.local_dir / "job.json").read_text() == before and not (job.local_dir / "report.json").exists()


@pytest.mark.parametrize("state", ["finished", "failed", "stopped", "stalled", "reshaping"])
def test_a_job_that_is_not_running_by_job_json_is_left_alone(tmp_path, mnt, state):
    unchanged(ended_job(tmp_path, mnt, FINISHED, state=state))


def test_a_job_with_a_report_or_without_job_json_is_left_alone(tmp_path, mnt):
    job = ended_job(tmp_path, mnt, FINISHED)
    report(job.local_dir, {"verdict": "failed"})
    assert jobs.settle(job) is False and jobs.job_state(job) == "running"
    (job.local_dir / "report.json").unlink()
    (job.local_dir / "job.json").unlink()
    assert jobs.settle(job) is False and not (job.local_dir / "report.json").exists()


@pytest.mark.parametrize(
    "logs",
    [
        {
            "node1": node_lines("node1", 0, "starting", "exited with 0"),
            "node2": node_lines("node2", 1, "starting") + iterations(59) + node_lines("node2", 1, "exited with 0"),
        },
        {"node1": node_lines("node1", 0, "starting", "exited with 0"), "node2": node_lines("node2", 1, "starting", "exited with 0")},  # no iteration
        {"node1": node_lines("node1", 0, "starting"), "node2": FINISHED["node2"]},  # node1 runs
        {"node1": node_lines("node1", 0, "starting", "exited with 1"), "node2": node_lines("node2", 1, "starting", "exited with 1")},  # no units said
    ],
    ids=["short-of-the-last-iteration", "no-iteration", "a-node-runs", "failed-units-unknown"],
)
def test_a_job_not_known_to_be_over_is_left_alone(tmp_path, mnt, logs):
    unchanged(ended_job(tmp_path, mnt, logs))


FAILED_LOGS = {
    "node1": node_lines("node1", 0, "starting", "exited with 0"),
    "node2": node_lines("node2", 1, "starting") + iterations(30) + node_lines("node2", 1, "exited with 1"),
}


@pytest.mark.parametrize(
    "units",
    [
        {"node1": {"ActiveState": "inactive"}, "node2": {"ActiveState": "failed"}},
        {"node1": {"ActiveState": "inactive"}},  # node2's unit is gone
    ],
)
def test_a_job_whose_units_gave_up_is_judged_failed(tmp_path, mnt, units):
    job = ended_job(tmp_path, mnt, FAILED_LOGS)
    assert jobs.settle(job, units) is True
    meta, doc = judged(job)
    assert (meta["state"], meta["verdict"], doc["verdict"]) == ("failed", "failed", "failed")
    assert check(doc, "run") == {"name": "run", "status": "fail", "detail": "failed: torchrun ended on node2 (failed-1) and the units gave up"}


@pytest.mark.parametrize("going", ["active", "activating", "reloading", "deactivating"])
def test_a_job_whose_unit_will_run_or_still_stops_is_left_alone(tmp_path, mnt, going):
    unchanged(ended_job(tmp_path, mnt, FAILED_LOGS), {"node1": {"ActiveState": "inactive"}, "node2": {"ActiveState": going}})


def test_a_finished_job_is_finished_whatever_its_units_say(tmp_path, mnt):
    job = ended_job(tmp_path, mnt, FINISHED)
    assert jobs.settle(job, {"node1": {"ActiveState": "active"}, "node2": {"ActiveState": "active"}}) is True
    assert judged(job)[0]["state"] == "finished"


def slurm_job(tmp_path: Path, mnt: Path, logs: dict[str, str], nodes_file: str) -> jobs.Job:
    job = ended_job(tmp_path, mnt, logs, example="lab-tiny-slurm.yml", launcher="slurm", slurm_job_id="77", submit_host="head")
    (job.local_dir / "launch").mkdir()
    (job.local_dir / "launch" / "nodes").write_text(nodes_file)
    events = ["allocated node[1-2]", "requeued after a failure", "failed with status 1: no restarts left"]
    (job.local_dir / "logs" / "slurm.log").write_text("".join(f"megaprov: slurm job 77 {e}\n" for e in events))
    return job


def test_a_slurm_job_is_judged_on_its_current_allocations_nodes(tmp_path, mnt):
    """node1 failed in an earlier allocation; the current one (launch/nodes) is node2 alone, which finished."""
    logs = {"node1": node_lines("node1", 0, "starting", "exited with 1"), "node2": FINISHED["node2"]}
    job = slurm_job(tmp_path, mnt, logs, "node2\n")
    assert jobs.settle(job) is True
    assert judged(job)[0]["state"] == "finished" and job.hosts == ["node2"]


def test_a_slurm_job_before_any_allocation_keeps_its_nodes(tmp_path, mnt):
    job = slurm_job(tmp_path, mnt, FINISHED, "")
    assert jobs.settle(job) is True and job.hosts == ["node1", "node2"]


def test_a_slurm_job_is_over_when_slurm_says_so(tmp_path, mnt):
    job = slurm_job(tmp_path, mnt, FAILED_LOGS, "node1\nnode2\n")
    unchanged(job, {"slurm": {"slurm_job_id": "77", "state": "RUNNING"}})
    unchanged(job, {"slurm": {"slurm_job_id": "77", "state": "UNKNOWN"}})
    assert jobs.settle(job, {"slurm": {"slurm_job_id": "77", "state": "FAILED"}}) is True
    meta, doc = judged(job)
    assert meta["state"] == "failed"
    assert check(doc, "run")["detail"] == (
        "failed: slurm job 77 FAILED: slurm job 77 requeued after a failure; slurm job 77 failed with status 1: no restarts left"
    )

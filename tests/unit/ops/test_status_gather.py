"""`megaprov status`'s document (megaprov.ops.status.gather), in-process: each node's groups, its last bootstrap result
per stage, its open doctor error codes, Slurm's state and Prometheus's up; the jobs (the live ones, then the five
latest of the others), the firing alerts, the doctor summary, what was asked and what could not be.

Real: the inventory file, the bootstrap record (cluster.history.record_bootstrap with the collection's stage plays),
the doctor findings file (ops.doctor.health.record), the jobs (their job.json on this machine's mount of the shared
directory and the controller's index, training.jobs.remember), the submit host. Stood in: the clock while the records
are written, Ansible's sinfo on the Slurm controller (ops.remote.command_output: its arguments recorded, sinfo's text
answered, or its error raised) and Prometheus (ops.top.prometheus and ops.top.snapshot: a snapshot, or an error)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from megaprov import paths
from megaprov.cluster import history, provision, runner
from megaprov.errors import HostsUnreachable, RunFailed, UsageError
from megaprov.ops import remote, status, top
from megaprov.ops.doctor import health
from megaprov.ops.doctor.findings import Report, finding
from megaprov.output import SILENT
from megaprov.training import jobs
from tests.unit.training.test_jobs_start import job_on_disk
from tests.unit.training.test_jobs_start import report as job_report

BOOTSTRAP_AT = 1_767_225_600.0  # 2026-01-01 00:00 UTC
DOCTOR_AT = 1_767_312_000.0
SINFO = "node1|idle|none\nnode2|drained|Xid 79\nghost9|down*|Not responding\n"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture
def mnt(tmp_path: Path) -> Path:
    """This machine's mount of the cluster's shared directory (megaprov_controller_shared_dir)."""
    (tmp_path / "mnt" / "jobs").mkdir(parents=True)
    return tmp_path / "mnt"


def write_inventory(tmp_path: Path, view: Path, scheduler: str = "slurm", observe: bool = True) -> str:
    """A head, a Slurm controller, two GPU nodes (node2 also in [all] and [rack_b]) and a host in no group."""
    path = tmp_path / "inventory.ini"
    path.write_text(
        "stray1 ansible_host=10.0.0.9\n"
        "[all]\nnode2\n"
        "[head]\nhead1 ansible_host=10.0.0.1\n"
        "[slurm_controller]\nctl1 ansible_host=10.0.0.2\n"
        "[gpu_nodes]\nnode1 ansible_host=10.0.0.11\nnode2 ansible_host=10.0.0.12\n"
        "[rack_b]\nnode2\n"
        "[gpu_nodes:vars]\nmegaprov_gpu_expected=false\n"
        f"[all:vars]\nmegaprov_scheduler={scheduler}\nmegaprov_observe={str(observe).lower()}\n"
        f"megaprov_shared_dir=/shared\nmegaprov_controller_shared_dir={view}\n"
    )
    return str(path)


def bootstrap_report(hosts: list[str], stages: list[str], failures: list[runner.Failure]) -> provision.Report:
    stats = [runner.HostStats(h) for h in ["localhost", *hosts]]
    ran = [{"stage": s, "seconds": 1.0} for s in stages]
    return provision.Report("inventory.ini", "bootstrap.yml", not failures, 0, 1.0, "/tmp/art", stats, failures, stages=ran)


def record_bootstraps(inventory: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two bootstraps as provision records them: base and ssh_mesh on every node (node2's mesh failed), then the gpu
    stage on the GPU nodes (node2 unreachable). stray1 was in neither."""
    stage_of = provision.stage_plays(paths.playbook("bootstrap.yml").parent)
    everyone = ["head1", "ctl1", "node1", "node2"]
    with monkeypatch.context() as clock:
        clock.setattr(time, "time", lambda: BOOTSTRAP_AT)
        mesh = runner.Failure("node2", "Check every pair", "SSH mesh", "1 of 3 pairs failed", False)
        history.record_bootstrap(Path(inventory), bootstrap_report(everyone, ["validate", "base", "ssh_mesh"], [mesh]), stage_of, check=False)
        down = runner.Failure("node2", "Gathering Facts", "GPU driver and CUDA", "ssh: timed out", True)
        history.record_bootstrap(Path(inventory), bootstrap_report(["node1", "node2"], ["gpu"], [down]), stage_of, check=False)


def record_doctor(inventory: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A quick doctor run: node1 has two GPU_XID errors and a SERVICE_DOWN error and a warning, node2 one error, and
    one error is the cluster's (no node)."""
    found = Report(
        [
            finding("SERVICE_DOWN", "node1", "chrony: inactive", severity="error"),
            finding("GPU_XID", "node1", "Xid 79", severity="error"),
            finding("GPU_XID", "node1", "Xid 48", severity="error"),
            finding("DISK_FULL", "node1", "/scratch 3 GiB free", severity="warning"),
            finding("GPU_XID", "node2", "Xid 94", severity="error"),
            finding("NCCL_LINK_SLOW", "", "12 GB/s", severity="error"),
        ],
        checked=["node1", "node2"],
    )
    with monkeypatch.context() as clock:
        clock.setattr(time, "time", lambda: DOCTOR_AT)
        health.record(inventory, found, "quick")


class Sinfo:
    """ops.remote.command_output on the Slurm controller: records each call, answers sinfo's text or raises."""

    def __init__(self, answer: str | Exception = SINFO) -> None:
        self.answer = answer
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> str:
        self.calls.append((args, kwargs))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class Prometheus:
    """ops.top.prometheus (the URL for the block) and ops.top.snapshot (its answer), recording what they were asked."""

    URL = "http://10.0.0.1:9090"

    def __init__(self, snap: top.Snapshot | None = None, fails: Exception | None = None, at: str = "snapshot") -> None:
        self.snap, self.fails, self.at = snap, fails, at
        self.opened: list[tuple[Path, str | None]] = []
        self.asked: list[str] = []
        self.closed = 0

    @contextlib.contextmanager
    def prometheus(self, found: Any, override: str | None) -> Iterator[str]:
        self.opened.append((found.path, override))
        if self.fails and self.at == "open":
            raise self.fails
        try:
            yield self.URL
        finally:
            self.closed += 1

    def snapshot(self, url: str) -> top.Snapshot:
        self.asked.append(url)
        if self.fails and self.at == "snapshot":
            raise self.fails
        assert self.snap is not None
        return self.snap


SNAPSHOT = top.Snapshot(
    Prometheus.URL,
    nodes=[top.NodeRow("node1", True, load1=0.5), top.NodeRow("node2", False), top.NodeRow("ghost9", True)],
    alerts=[top.AlertRow("NodeDown", "critical", "node2"), top.AlertRow("GpuTooHot", "warning", "node1 gpu 3")],
)


@pytest.fixture
def edges(monkeypatch: pytest.MonkeyPatch) -> tuple[Sinfo, Prometheus]:
    sinfo, prom = Sinfo(), Prometheus(SNAPSHOT)
    monkeypatch.setattr(remote, "command_output", sinfo)
    monkeypatch.setattr(top, "prometheus", prom.prometheus)
    monkeypatch.setattr(top, "snapshot", prom.snapshot)
    return sinfo, prom


def job_row(
    local: Path, state: str, started: str | None, verdict: str | None = None, launcher: str = "systemd", slurm_id: str | None = None
) -> dict[str, Any]:
    return {
        "name": local.name,
        "state": state,
        "verdict": verdict,
        "nodes": 2,
        "started": started,
        "job_dir": str(local),
        "launcher": launcher,
        "slurm_job_id": slurm_id,
    }


def some_jobs(tmp_path: Path, mnt: Path, inventory: str) -> dict[str, dict[str, Any]]:
    """A finished job both known here and on the shared directory, a running Slurm job only on the shared directory
    (another machine started it), a stopped job known here only (its directory on another mount)."""
    done = job_on_disk(mnt, "a-done", state="finished", started="2026-01-02T00:00:00Z")
    job_report(done, {"verdict": "passed"})
    running = job_on_disk(mnt, "b-running", state="running", started="2026-01-01T00:00:00Z", launcher="slurm", slurm_job_id="41", submit_host="ctl1")
    other = job_on_disk(tmp_path / "other-mount", "c-stopped", state="stopped", started="2026-01-03T00:00:00Z")
    for name, local in (("a-done", done), ("c-stopped", other)):
        jobs.remember(jobs.Job(name, Path(inventory), [], "", "", local, "", ""))
    return {
        "a-done": job_row(done, "finished", "2026-01-02T00:00:00Z", verdict="passed"),
        "b-running": job_row(running, "running", "2026-01-01T00:00:00Z", launcher="slurm", slurm_id="41"),
        "c-stopped": job_row(other, "stopped", "2026-01-03T00:00:00Z"),
    }


def recorded_nodes() -> dict[str, dict[str, Any]]:
    return {
        "stray1": {"groups": [], "stages": {}, "doctor": []},
        "head1": {"groups": ["head"], "stages": {"base": "ok", "ssh_mesh": "ok"}, "doctor": []},
        "ctl1": {"groups": ["slurm_controller"], "stages": {"base": "ok", "ssh_mesh": "ok"}, "doctor": []},
        "node1": {"groups": ["gpu_nodes"], "stages": {"base": "ok", "ssh_mesh": "ok", "gpu": "ok"}, "doctor": ["GPU_XID", "SERVICE_DOWN"]},
        "node2": {
            "groups": ["gpu_nodes", "rack_b"],
            "stages": {"base": "ok", "ssh_mesh": "failed", "gpu": "unreachable"},
            "doctor": ["GPU_XID"],
        },
    }


LAST_BOOTSTRAP = {"at": BOOTSTRAP_AT, "ok": False, "exit_code": 0, "error": None}
DOCTOR = {"at": DOCTOR_AT, "level": "quick", "errors": 5}
ALERTS = [
    {"name": "NodeDown", "severity": "critical", "where": "node2"},
    {"name": "GpuTooHot", "severity": "warning", "where": "node1 gpu 3"},
]


def test_the_whole_view_joins_the_records_with_slurms_and_prometheuss_answers(tmp_path, mnt, edges, monkeypatch):
    inventory = write_inventory(tmp_path, mnt)
    record_bootstraps(inventory, monkeypatch)
    record_doctor(inventory, monkeypatch)
    rows = some_jobs(tmp_path, mnt, inventory)
    sinfo, prom = edges

    found = status.gather(inventory, True, SILENT)

    nodes = recorded_nodes()
    nodes["node1"].update(slurm={"state": "idle", "reason": "none"}, up=True)
    nodes["node2"].update(slurm={"state": "drained", "reason": "Xid 79"}, up=False)  # ghost9: in no inventory
    assert found == {
        "inventory": inventory,
        "last_bootstrap": LAST_BOOTSTRAP,
        "nodes": nodes,
        "jobs": [rows["b-running"], rows["c-stopped"], rows["a-done"]],
        "alerts": ALERTS,
        "doctor": DOCTOR,
        "asked": ["alerts", "slurm"],
        "problems": [],
    }
    assert sinfo.calls == [
        (
            (Path(inventory), "cluster_status.yml", {"megaprov_status": {"host": "ctl1"}}),
            {
                "command": "status",
                "role": "the Slurm controller",
                "host": "ctl1",
                "doing": "sinfo failed",
                "limit": 1 << 20,
                "report": SILENT,
            },
        )
    ]
    assert sinfo.calls[0][1]["report"] is SILENT
    assert (prom.opened, prom.asked, prom.closed) == ([(Path(inventory), None)], [Prometheus.URL], 1)


def test_recorded_asks_no_host_and_lists_only_the_jobs_this_machine_knows(tmp_path, mnt, edges, monkeypatch):
    inventory = write_inventory(tmp_path, mnt)
    record_bootstraps(inventory, monkeypatch)
    record_doctor(inventory, monkeypatch)
    rows = some_jobs(tmp_path, mnt, inventory)
    sinfo, prom = edges

    found = status.gather(inventory, False, SILENT)

    assert found == {
        "inventory": inventory,
        "last_bootstrap": LAST_BOOTSTRAP,
        "nodes": recorded_nodes(),
        "jobs": [rows["c-stopped"], rows["a-done"]],  # b-running is on the shared directory only: not asked
        "alerts": [],
        "doctor": DOCTOR,
        "asked": [],
        "problems": [],
    }
    assert (sinfo.calls, prom.opened, prom.asked) == ([], [], [])


def test_a_cluster_never_bootstrapped_nor_doctored_from_here_shows_its_nodes_and_groups_only(tmp_path, mnt, edges):
    inventory = write_inventory(tmp_path, mnt)
    edges[0].answer = ""  # sinfo answered nothing

    found = status.gather(inventory, True, SILENT)

    nodes = {name: {"groups": row["groups"], "stages": {}, "doctor": []} for name, row in recorded_nodes().items()}
    nodes["node1"]["up"], nodes["node2"]["up"] = True, False
    assert found == {
        "inventory": inventory,
        "last_bootstrap": None,
        "nodes": nodes,
        "jobs": [],
        "alerts": ALERTS,
        "doctor": None,
        "asked": ["alerts", "slurm"],
        "problems": [],
    }


def test_without_slurm_sinfo_is_not_asked_and_without_observe_prometheus_is_not(tmp_path, mnt, edges, monkeypatch):
    inventory = write_inventory(tmp_path, mnt, scheduler="none", observe=False)
    record_bootstraps(inventory, monkeypatch)
    sinfo, prom = edges

    found = status.gather(inventory, True, SILENT)

    assert found["nodes"] == {name: {**row, "doctor": []} for name, row in recorded_nodes().items()}
    assert (found["alerts"], found["asked"], found["problems"]) == ([], ["slurm"], [])
    assert (sinfo.calls, prom.opened, prom.asked) == ([], [], [])


def test_sinfo_prometheus_and_jobs_that_fail_are_one_problem_line_each_in_that_order(tmp_path, edges, monkeypatch):
    inventory = write_inventory(tmp_path, tmp_path / "not-mounted")  # the jobs' shared directory is not here
    record_doctor(inventory, monkeypatch)
    sinfo, prom = edges
    sinfo.answer = HostsUnreachable("status: the Slurm controller ctl1 is unreachable: ssh: connect refused", "check that it runs and answers SSH")
    prom.fails = RunFailed("top: Prometheus at http://10.0.0.1:9090 did not answer", "check the observe stage")

    found = status.gather(inventory, True, SILENT)

    assert found == {
        "inventory": inventory,
        "last_bootstrap": None,
        "nodes": {
            name: {"groups": row["groups"], "stages": {}, "doctor": row["doctor"]} for name, row in recorded_nodes().items()
        },  # neither slurm nor up
        "jobs": [],
        "alerts": [],
        "doctor": DOCTOR,
        "asked": [],
        "problems": [
            "status: the Slurm controller ctl1 is unreachable: ssh: connect refused: check that it runs and answers SSH",
            "top: Prometheus at http://10.0.0.1:9090 did not answer: check the observe stage",
            f"this machine does not see the cluster's shared directory (megaprov_controller_shared_dir={tmp_path / 'not-mounted'} is not"
            " a directory here): mount it there, or drop megaprov_controller_shared_dir: megaprov then reads the job directories"
            " through the head",
        ],
    }
    assert (len(sinfo.calls), prom.opened, prom.asked, prom.closed) == (1, [(Path(inventory), None)], [Prometheus.URL], 1)


def test_a_prometheus_that_cannot_be_reached_leaves_slurms_answer_and_the_jobs(tmp_path, mnt, edges):
    inventory = write_inventory(tmp_path, mnt)
    prom = edges[1]
    prom.fails, prom.at = UsageError("top: the head's Prometheus at 10.0.0.1:9090 cannot be reached", "pass --url"), "open"

    found = status.gather(inventory, True, SILENT)

    assert found["problems"] == ["top: the head's Prometheus at 10.0.0.1:9090 cannot be reached: pass --url"]
    assert (found["asked"], found["alerts"], prom.asked) == (["slurm"], [], [])
    assert {name: (row.get("slurm"), row.get("up")) for name, row in found["nodes"].items()} == {
        "stray1": (None, None),
        "head1": (None, None),
        "ctl1": (None, None),
        "node1": ({"state": "idle", "reason": "none"}, None),
        "node2": ({"state": "drained", "reason": "Xid 79"}, None),
    }


def test_the_live_jobs_come_first_then_the_five_latest_of_the_others(tmp_path, mnt, edges):
    inventory = write_inventory(tmp_path, mnt)
    started = {
        "a-first": ("finished", "2026-01-01T00:00:00Z"),
        "b-queued": ("submitted", None),
        "c-sixth": ("failed", "2026-01-06T00:00:00Z"),
        "d-second": ("stopped", "2026-01-02T00:00:00Z"),
        "e-running": ("running", "2026-01-03T00:00:00Z"),
        "f-fifth": ("finished", "2026-01-05T00:00:00Z"),
        "g-starting": ("starting", "2026-01-09T00:00:00Z"),
        "h-seventh": ("finished", "2026-01-07T00:00:00Z"),
        "i-fourth": ("unknown", "2026-01-04T00:00:00Z"),
        "j-third": ("stopped", "2026-01-04T03:00:00+05:00"),  # 2026-01-03T22:00Z: by time, not by its text, after i-fourth
    }
    rows = {name: job_row(job_on_disk(mnt, name, state=s, started=at), s, at) for name, (s, at) in started.items()}
    bad = job_on_disk(mnt, "k-broken")
    (bad / "job.json").write_text(json.dumps({"name": "someone-else"}))  # an invalid job is one of the others, never started

    found = status.gather(inventory, True, SILENT)

    names = [job["name"] for job in found["jobs"]]
    assert names == ["b-queued", "e-running", "g-starting", "h-seventh", "c-sixth", "f-fifth", "i-fourth", "j-third"]
    assert found["jobs"][:4] == [rows["b-queued"], rows["e-running"], rows["g-starting"], rows["h-seventh"]]


def test_a_damaged_record_counts_as_none_and_findings_that_are_no_objects_are_skipped(tmp_path, mnt, edges, monkeypatch):
    inventory = write_inventory(tmp_path, mnt, scheduler="none", observe=False)
    target = health.findings_file(Path(inventory))
    target.parent.mkdir(parents=True)
    target.write_text("[1, 2]\n")
    status_path = history.status_file(Path(inventory))
    status_path.parent.mkdir(parents=True)
    status_path.write_text(json.dumps({"stages": {"base": {"at": 1.0}, "gpu": {"at": 2.0, "hosts": {"node1": "failed"}}}}))

    found = status.gather(inventory, False, SILENT)
    assert (found["doctor"], found["last_bootstrap"]) == (None, None)
    assert {name: row["stages"] for name, row in found["nodes"].items()} == {
        "stray1": {},
        "head1": {},
        "ctl1": {},
        "node1": {"gpu": "failed"},
        "node2": {},
    }

    target.write_text(json.dumps({"at": 5.0, "level": "passive", "findings": ["GPU_XID", {"code": "GPU_XID", "node": "node1", "severity": "error"}]}))
    found = status.gather(inventory, False, SILENT)
    assert found["doctor"] == {"at": 5.0, "level": "passive", "errors": 1}
    assert {name: row["doctor"] for name, row in found["nodes"].items()} == {"stray1": [], "head1": [], "ctl1": [], "node1": ["GPU_XID"], "node2": []}

    target.write_text(json.dumps({"at": 6.0, "level": "deep"}))  # a run that found nothing
    assert status.gather(inventory, False, SILENT)["doctor"] == {"at": 6.0, "level": "deep", "errors": 0}

"""What a root controller writes on the shared directory is the cluster user's (root is nobody there: root_squash)."""

import builtins
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from megaprov.owner import as_owner_of
from megaprov.training import follow, jobs, verdict

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching to the cluster user's uid needs root")
UID = GID = 2000


@pytest.fixture
def job_dir():
    # Not under pytest's tmp_path: its parents are root's 0700, which the cluster user cannot pass.
    top = Path(tempfile.mkdtemp(prefix="megaprov-owner-"))
    top.chmod(0o755)
    yield from _job_dir(top)
    shutil.rmtree(top)


def _job_dir(top):
    directory = top / "jobs" / "j1"
    directory.mkdir(parents=True)
    os.chown(directory, UID, GID)
    directory.chmod(0o755)  # the cluster user's, as the job launch leaves it: root cannot write here on the share
    yield directory


def owners(directory: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_uid, p.stat().st_gid) for p in directory.iterdir()}


def test_metrics_state_and_report_are_written_as_the_owner_of_the_job_directory(job_dir, monkeypatch):
    recorded = {"name": "j1", "shared_dir": "/shared", "job_dir": "/shared/jobs/j1", "checkpoint_dir": "/shared/checkpoints/j1"}
    (job_dir / "job.json").write_text(json.dumps({**recorded, "hosts": ["node1"], "state": "running"}))
    os.chown(job_dir / "job.json", UID, GID)
    job = jobs.Job("j1", Path("/inv"), ["node1"], "/shared", "/shared/jobs/j1", job_dir, "/shared/checkpoints/j1", "u.service")
    log = follow.JobLog(128)
    log.feed("node1", "[2026-01-01 00:00:00] iteration 1/ 2 | lm loss: 5.0 | elapsed time per iteration (ms): 10.0 | global batch size: 8 |", 0.0)
    follow.append_metrics(job_dir, "j1", log.series(), log, "running")
    follow.write_metrics(job_dir, "j1", log, "passed")
    jobs.set_state(job, "passed", verdict="passed")
    report = {"job": {"name": "j1"}, "verdict": "passed"}
    monkeypatch.setattr(verdict, "render_markdown", lambda report: "# report\n")
    # Nothing may be imported under the cluster user's uid: a root-only venv (the README run's, under /tmp/pytest-of-root)
    # is unreadable then (matplotlib's lazy import failed that way).
    real_import, late = builtins.__import__, []

    def watched(name, *args, **kwargs):
        if os.geteuid() != 0 and name not in sys.modules:
            late.append(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", watched)
    verdict.write_report(job_dir, report, log.series())
    monkeypatch.setattr(builtins, "__import__", real_import)
    assert late == []
    assert os.geteuid() == 0  # the switch is undone
    assert all(owner == (UID, GID) for owner in owners(job_dir).values()), owners(job_dir)
    assert {"metrics.jsonl", "metrics.prom", "job.json", "report.json", "report.md", "report.png"} <= set(owners(job_dir))


def test_a_root_owned_directory_is_written_as_root(tmp_path):
    with as_owner_of(tmp_path):
        (tmp_path / "f").write_text("x")
    assert (tmp_path / "f").stat().st_uid == 0

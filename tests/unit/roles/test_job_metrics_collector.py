"""The head's training-job collector (roles/node_exporter/files/megaprov_job_metrics.py): what megaprov train's follower
writes into each job directory, gathered into one textfile for node-exporter, and hostile job directories kept out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from megaprov.training import follow
from tests.conftest import load_module

SCRIPT = Path(__file__).parents[3] / "ansible_collections/megaprov/cluster/roles/node_exporter/files/megaprov_job_metrics.py"


def load() -> ModuleType:
    return load_module(SCRIPT, "megaprov_job_metrics")


def job_text(name: str, host: str, iteration: int, loss: str = "4.5") -> str:
    log = follow.JobLog(seq_length=16)
    log.feed(host, f" iteration {iteration}/ 60 | elapsed time per iteration (ms): 250.0 | global batch size: 2 | lm loss: {loss} |", 100.0)
    return follow.prometheus_text(name, log, "running", follow.Targets(100.0, 80.0, 5, 0.8, 1))


def samples(text: str) -> dict[str, str]:
    return {line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1] for line in text.splitlines() if line and not line.startswith("#")}


def test_the_follower_s_text_passes_whole_and_each_family_is_declared_once():
    collector = load()
    text = collector.render([("a", 90.0, job_text("a", "node2", 7)), ("b", 50.0, job_text("b", "node3", 3, "nan"))], 100.0)
    got = samples(text)
    assert got['megaprov_job_iteration{job="a",node="node2"}'] == "7" and got['megaprov_job_iteration{job="b",node="node3"}'] == "3"
    assert got['megaprov_job_loss{job="b",node="node3"}'] == "NaN"
    assert got['megaprov_job_metrics_age_seconds{job="a",node="node2"}'] == "10.0"
    assert got['megaprov_job_metrics_age_seconds{job="b",node="node3"}'] == "50.0"
    follower = samples(job_text("a", "node2", 7))
    assert {k for k in got if 'job="a"' in k} == set(follower) | {'megaprov_job_metrics_age_seconds{job="a",node="node2"}'}
    assert text.count("# TYPE megaprov_job_iteration gauge") == 1 and "# TYPE megaprov_job_restarts_total counter" in text


def test_a_job_speaks_for_itself_only_and_nothing_but_samples_passes():
    collector = load()
    hostile = (
        'megaprov_job_running{job="other",node="n"} 1\n'  # another job's name
        'megaprov_job_running{job="a",node="n",extra="x"} 1\n'  # labels of its own
        'megaprov_job_loss{job="a",node="n"} 1 1700000000\n'  # a timestamp
        'node_load1{job="a",node="n"} 99\n'  # not a job metric
        'megaprov_job_iteration{job="a",node="n\\"x"} 1\n'
        "# TYPE megaprov_job_iteration histogram\n"
        "# HELP megaprov_job_iteration evil\\n\n"
        'megaprov_job_iteration{job="a",node="n"} 5\n'
        'megaprov_job_iteration{job="a",node="n"} 6\n'  # a second sample of one family: the first wins
    )
    got = collector.render([("a", 100.0, hostile)], 100.0)
    assert samples(got) == {'megaprov_job_iteration{job="a",node="n"}': "5", 'megaprov_job_metrics_age_seconds{job="a",node="n"}': "0.0"}
    assert "# TYPE megaprov_job_iteration gauge" in got and "evil" not in got
    assert collector.render([("a", 1.0, "garbage\n")], 2.0) == ""


def test_main_reads_the_jobs_directory_bounded_and_writes_atomically(tmp_path: Path):
    jobs = tmp_path / "jobs"
    for name, host in (("a", "node1"), ("b", "node2")):
        (jobs / name).mkdir(parents=True)
        (jobs / name / "metrics.prom").write_text(job_text(name, host, 4))
    (jobs / "bad name").mkdir()
    (jobs / "bad name" / "metrics.prom").write_text(job_text("bad name", "n", 1))
    (jobs / "c").mkdir()
    (jobs / "c" / "metrics.prom").symlink_to(jobs / "a" / "metrics.prom")  # a link is not the job's own file
    (jobs / "old").mkdir()
    (jobs / "old" / "metrics.prom").write_text(job_text("old", "n", 1))
    os.utime(jobs / "old" / "metrics.prom", (1.0, 1.0))
    (jobs / "big").mkdir()
    (jobs / "big" / "metrics.prom").write_text("# " + "x" * 70000 + "\n" + job_text("big", "n", 1))  # past the bound
    out = tmp_path / "state" / "megaprov_jobs.prom"
    out.parent.mkdir()
    done = subprocess.run([sys.executable, str(SCRIPT), "--jobs-dir", str(jobs), "--output", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert {k.split("{")[1].split(",")[0] for k in samples(text)} == {'job="a"', 'job="b"'}
    assert oct(out.stat().st_mode & 0o777) == "0o644" and [p.name for p in out.parent.iterdir()] == ["megaprov_jobs.prom"]
    missing = subprocess.run([sys.executable, str(SCRIPT), "--jobs-dir", str(tmp_path / "none"), "--output", str(out)], capture_output=True)
    assert missing.returncode == 0 and out.read_text() == ""  # no jobs directory yet: an empty textfile, not an error

"""The systemd unit of a training job on a node, and its stop script: nothing of a job outlives its node script."""

import os
import shlex
import subprocess
import time
from pathlib import Path

from megaprov.training import jobs, jobspec
from megaprov.training.launchers import systemd

ROOT = Path(__file__).resolve().parents[3]


def _job() -> jobs.Job:
    hosts = ["node1", "node2"]
    return jobs.Job("tiny", Path("/inv"), hosts, "/shared", "/shared/jobs/tiny", Path("/x"), "/shared/checkpoints/tiny", "megaprov-job-tiny.service")


def _unit(job: jobs.Job) -> dict[str, list[str]]:
    spec = jobspec.parse((ROOT / "examples" / "jobs" / "lab-tiny.yml").read_text())
    text = systemd.unit_text(spec, job, "node2", 1, "megaprov", lab=True)
    keys: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            keys.setdefault(key, []).append(value)
    return keys


def test_the_unit_marks_the_job_and_stops_through_the_stop_script():
    unit = _unit(_job())
    assert unit["Environment"] == ["MEGAPROV_JOB_UNIT=megaprov-job-tiny.service"]
    assert unit["ExecStart"] == ["/bin/bash /shared/jobs/tiny/launch/node2.sh"]
    assert unit["ExecStop"] == ["/bin/bash /shared/jobs/tiny/launch/stop.sh $MAINPID"]
    assert unit["Restart"] == ["on-failure"] and unit["RestartSec"] == [str(systemd.RESTART_SEC)]
    assert unit["KillMode"] == ["mixed"] and unit["User"] == ["megaprov"]


def _marked(unit: str, *argv: str) -> subprocess.Popen:
    # start_new_session: like ranks orphaned by a killed torchrun, they are nobody's children here
    proc = subprocess.Popen(list(argv), env={**os.environ, "MEGAPROV_JOB_UNIT": unit}, start_new_session=True)
    # Until the child has exec'd, /proc shows the parent's environment, without the mark: on a busy machine the stop
    # script could scan in between and miss it (seen in a full suite run: "killing 1 process(es)" of 2).
    mark = f"MEGAPROV_JOB_UNIT={unit}".encode()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and proc.poll() is None:  # an exited child (a zombie) shows no environment
        try:
            if mark in Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0"):
                break
        except OSError:
            break  # already gone: the test says what it missed
        time.sleep(0.01)
    return proc


def _stop(tmp_path: Path, unit: str, mainpid: str) -> subprocess.CompletedProcess:
    script = tmp_path / "stop.sh"
    script.write_text(systemd.STOP_SCRIPT)
    return subprocess.run(["bash", str(script), mainpid], env={**os.environ, "MEGAPROV_JOB_UNIT": unit}, capture_output=True, text=True, timeout=30)


def test_processes_left_after_the_node_script_are_killed_and_no_others(tmp_path):
    unit = f"megaprov-job-t{os.getpid()}.service"
    orphans = [_marked(unit, "sleep", "300") for _ in range(2)]
    other_job = _marked(unit.replace(".service", "-other.service"), "sleep", "300")
    unmarked = subprocess.Popen(["sleep", "300"])
    try:
        out = _stop(tmp_path, unit, "")  # the node script is gone: $MAINPID is empty
        assert out.returncode == 0, out.stderr
        assert "killing 2 process(es) of the job left behind" in out.stdout
        for proc in orphans:
            assert proc.wait(timeout=5) == -9
        assert other_job.poll() is None and unmarked.poll() is None, "the stop script killed a process of another job"
    finally:
        for proc in (*orphans, other_job, unmarked):
            proc.kill()


def test_a_running_node_script_gets_sigterm_and_is_waited_for(tmp_path):
    unit = f"megaprov-job-m{os.getpid()}.service"
    flag = tmp_path / "saved"
    # A node script that "saves a checkpoint" for 1 s on SIGTERM before it exits; started in the background of a
    # shell that exits, so that init reaps it as systemd reaps a unit's main process (no zombie left to wait for).
    node_script = f"trap 'sleep 1; touch {flag}; exit 143' TERM; while :; do sleep 0.1; done"
    pidfile = tmp_path / "main.pid"
    _marked(unit, "bash", "-c", f"bash -c {shlex.quote(node_script)} & echo $! > {pidfile}").wait(timeout=5)
    main = pidfile.read_text().strip()
    time.sleep(0.3)
    started = time.monotonic()
    out = _stop(tmp_path, unit, main)
    assert out.returncode == 0, out.stderr
    assert flag.exists(), "the stop script did not wait for the node script to finish"
    assert not Path(f"/proc/{main}").exists()
    assert time.monotonic() - started >= 0.9


def test_the_units_stop_timeout_is_the_jobs_grace_not_a_fixed_one():
    """TimeoutStopSec comes from the render's stop grace (checkpoint bytes / write speed)."""
    from megaprov.training import render

    spec = jobspec.parse((ROOT / "examples" / "jobs" / "lab-tiny.yml").read_text())
    assert _unit(_job())["TimeoutStopSec"] == [str(render.stop_grace(spec).unit_s)]
    big = jobspec.parse((ROOT / "examples" / "jobs" / "gpt3-175b-128nodes.yml").read_text())
    grace = render.stop_grace(big)
    text = systemd.unit_text(big, _job(), "node2", 1, "megaprov", False, grace)
    assert f"TimeoutStopSec={grace.unit_s}" in text.splitlines() and grace.unit_s > 30 * 60


def test_the_node_log_is_written_by_the_job_user_not_by_systemd():
    """On a root-squashed share systemd cannot open an append: log (it opens it as root, before User= applies): the
    unit logs to the journal and the node script, running as the job user, appends to its log itself, first thing."""
    from megaprov.training import render
    from megaprov.training.planner import Cluster

    unit = _unit(_job())
    assert unit["StandardOutput"] == ["journal"] and not any(v.startswith(("append:", "file:")) for v in unit["StandardError"])
    spec = jobspec.parse((ROOT / "examples" / "jobs" / "lab-tiny.yml").read_text())
    out = render.render(spec, Cluster(2, 1, render.planner.GPUS["cpu"], "/shared"), [("node1", "10.0.0.1"), ("node2", "10.0.0.2")])
    for node in out.nodes:
        body = [line for line in node.script.splitlines() if line and not line.startswith("#")]
        log = shlex.quote(render.node_log(out.job_dir, node.host))
        assert body[1] == f"exec >>{log} 2>&1  # as the job user (a root-squashed share refuses root)"


def test_systemd_starts_a_node_script_at_most_once_more_than_the_restarts_the_spec_allows():
    """StartLimitBurst counts starts within the interval, the first one included: max_restarts N is N + 1 starts. With
    max_restarts 0 the one start is the limit (Restart=on-failure then stops at the limit, no restart), never 0, which
    systemd reads as no limit at all."""
    text = (ROOT / "examples" / "jobs" / "lab-tiny.yml").read_text()
    assert "max_restarts" not in text
    for restarts in (0, 1, 3, 20):
        spec = jobspec.parse(text.replace("launch:\n", f"launch:\n  max_restarts: {restarts}\n"))
        assert spec.launch.max_restarts == restarts
        unit = systemd.unit_text(spec, _job(), "node2", 1, "megaprov", lab=True).splitlines()
        assert f"StartLimitBurst={restarts + 1}" in unit and f"StartLimitIntervalSec={systemd.START_LIMIT_INTERVAL}" in unit
        assert "Restart=on-failure" in unit

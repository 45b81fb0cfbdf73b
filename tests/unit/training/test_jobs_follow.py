"""Following a started job and judging it (megaprov.training.jobs: follow_job, follow_log, node_log, read_log, conclude,
the throughput it is held to). A real job directory under tmp_path with real node logs growing between polls, a spec
from examples/jobs, the real planner, verdict and report writers; only Ansible (plays.run, or the Slurm launcher's
answers) and the follower's clock (jobs.time: each sleep advances it and writes what the nodes print next) stand in."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from megaprov.cluster import plays as cluster_plays
from megaprov.cluster import runner
from megaprov.cluster.rates import NodeRate
from megaprov.errors import UsageError
from megaprov.output import SILENT
from megaprov.training import elastic, follow, jobdir, jobs, jobspec, nodefacts, planner, render, verdict
from megaprov.training.launchers.slurm import SlurmLauncher, SlurmState
from tests.unit.training.test_jobdir import LocalChannel  # the head's helper over a pipe

ROOT = Path(__file__).resolve().parents[3]
JOBS = ROOT / "examples" / "jobs"
AT = "2026-12-05T20:00:00.000Z"


# ---- what the nodes print


def start(host: str, rank: int, nodes: int | None = None) -> str:
    return f"megaprov: node {host} (node rank {rank}): torchrun starting at {AT}" + (f" on {nodes} nodes" if nodes else "")


def ended(host: str, rank: int, rc: int = 0) -> str:
    return f"megaprov: node {host} (node rank {rank}): torchrun exited with {rc} at {AT}"


def it(i: int, total: int, ms: float = 100.0, loss: float | None = None, batch: int = 8, tflops: float = 1.5, nan: int = 0, second: int = 0) -> str:
    """One iteration line as Megatron-LM prints it, stamped 20:00 + ``second`` + i seconds on the node clock."""
    s = second + i
    loss_text = "nan" if loss is not None and loss != loss else f"{(6.0 - 0.05 * i) if loss is None else loss:.6E}"
    return (
        f" [2026-12-05 20:{s // 60:02d}:{s % 60:02d}.000000] iteration {i:8d}/{total:8d} | consumed samples: {i * batch:12d} |"
        f" elapsed time per iteration (ms): {ms} | throughput per GPU (TFLOP/s/GPU): {tflops} | learning rate: 3.000000E-03 |"
        f" global batch size: {batch:5d} | lm loss: {loss_text} | loss scale: 1.0 | grad norm: 1.000 |"
        f" number of skipped iterations:   0 | number of nan iterations: {nan:3d} |"
    )


def saved(i: int) -> str:
    return f"  successfully saved checkpoint from iteration {i:7d} to /shared/checkpoints/x [ t 1/1, p 1/1 ]"


def write(job: jobs.Job, host: str, *lines: str) -> None:
    with (job.local_dir / "logs" / f"{host}.log").open("a") as fh:
        fh.write("".join(line + "\n" for line in lines))


# ---- a job directory as `megaprov train` leaves it


def make_job(
    tmp_path: Path,
    spec_file: str = "lab-tiny.yml",
    hosts: tuple[str, ...] = ("node1", "node2"),
    launcher: str = "systemd",
    job_hosts: tuple[str, ...] | None = None,
    shared: Path | None = None,
    **meta_extra,
) -> jobs.Job:
    shared = shared or tmp_path / "shared"
    text = (JOBS / spec_file).read_text()
    name = jobspec.parse(text).name
    jdir = shared / "jobs" / name
    (jdir / "logs").mkdir(parents=True)
    (jdir / "launch").mkdir()
    (jdir / "spec.yml").write_text(text)
    for rank, host in enumerate(hosts):
        (jdir / "launch" / f"{host}.sh").write_text(f"#!/bin/bash\ntorchrun --node-rank {rank} train.py\n")
        (jdir / "launch" / f"{host}.service").write_text("[Unit]\n")
    meta = {
        "name": name,
        "state": "running",
        "started": AT,
        "hosts": list(hosts),
        "job_hosts": list(job_hosts or hosts),
        "shared_dir": str(shared),
        "job_dir": str(jdir),
        "checkpoint_dir": str(shared / "checkpoints" / name),
        "unit": render.unit_name(name),
        "trainer": "lab",
        "nodes": len(job_hosts or hosts),
        "gpus_per_node": 1,
        "gpu": "cpu",
        "launcher": launcher,
        **meta_extra,
    }
    if launcher == "slurm":
        meta.update(slurm_job_id="7", submit_host="head")
    (jdir / "job.json").write_text(json.dumps(meta, indent=2) + "\n")
    return jobs.Job(
        name,
        tmp_path / "inventory.ini",
        list(hosts),
        str(shared),
        str(jdir),
        jdir,
        str(shared / "checkpoints" / name),
        render.unit_name(name),
        launcher,
        "7" if launcher == "slurm" else "",
        "head" if launcher == "slurm" else "",
        list(job_hosts or hosts),
    )


def meta(job: jobs.Job) -> dict:
    return json.loads((job.local_dir / "job.json").read_text())


def set_meta(job: jobs.Job, **changes) -> None:
    doc = meta(job)
    doc.update(changes)
    (job.local_dir / "job.json").write_text(json.dumps(doc))


def spec_of(spec_file: str = "lab-tiny.yml", **sections) -> jobspec.JobSpec:
    s = jobspec.parse((JOBS / spec_file).read_text())
    for section, values in sections.items():
        s = s.model_copy(update={section: getattr(s, section).model_copy(update=values)})
    return s


def cpu_cluster(nodes: int = 2, rates: tuple[NodeRate, ...] = ()) -> nodefacts.KnownCluster:
    hosts = tuple(f"node{i + 1}" for i in range(nodes))
    return nodefacts.KnownCluster(nodes, 1, planner.GPUS["cpu"], "/shared", hosts, rates, stack=nodefacts.ROLE_DEFAULTS)


# ---- what stands in: the clock and Ansible


class RanOn(Exception):
    """The follower polled past the end of the test's script (it missed the end it should have seen)."""


class Clock:
    """jobs.time: monotonic and wall clocks; each sleep advances both by what was asked, then runs the script's next
    step (what the nodes print meanwhile; None: nothing)."""

    def __init__(self, steps=(), start: float = 1000.0) -> None:
        self.mono = start
        self.wall = 1_800_000_000.0
        self.steps = list(steps)
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.mono

    def time(self) -> float:
        return self.wall

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.mono += seconds
        self.wall += seconds
        if not self.steps:
            raise RanOn(f"still polling at {self.mono}")
        step = self.steps.pop(0)
        if step is not None:
            step()


@pytest.fixture
def clock(monkeypatch):
    made = Clock()
    monkeypatch.setattr(jobs, "time", made)
    return made


class Plays:
    """plays.run: every play asked for, when (the follower's clock) and with what; job_status.yml answers each node's
    unit from ``units`` (a list: one answer per question, the last one repeated)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.ran: list[tuple[str, float, dict, object]] = []
        self.units: list[dict[str, dict[str, str]]] = [{}]
        self.unreachable: list[list[str]] = [[]]

    def run(self, playbook, inventory, extravars, report, hosts, collect=(), strategy="linear"):
        self.ran.append((playbook, self.clock.mono, dict(extravars), report))
        if playbook != "job_status.yml":
            return runner.RunResult("successful", 0, [], [], [], Path("/tmp/run"), 1.0, stats_seen=True)
        asked = extravars["megaprov_job"]["hosts"]
        n = sum(1 for p in self.ran if p[0] == "job_status.yml") - 1
        units = self.units[min(n, len(self.units) - 1)]
        down = self.unreachable[min(n, len(self.unreachable) - 1)]
        results = [
            runner.TaskResult(h, "unit", "ansible.builtin.command", {"stdout": "\n".join(f"{k}={v}" for k, v in u.items())})
            for h, u in units.items()
            if h in asked and h not in down
        ]
        failures = [runner.Failure(h, "unit", "status", "ssh: connect to host: timed out", True) for h in down if h in asked]
        return runner.RunResult("failed" if failures else "successful", 4 if failures else 0, [], failures, results, Path("/tmp/run"), 1.0)

    def names(self) -> list[str]:
        return [p[0] for p in self.ran]

    def times(self, playbook: str) -> list[float]:
        return [p[1] for p in self.ran if p[0] == playbook]


@pytest.fixture
def ansible(monkeypatch, clock):
    fake = Plays(clock)
    monkeypatch.setattr(cluster_plays, "run", fake.run)
    return fake


class Slurm(SlurmLauncher):
    """The Slurm launcher, its answers about the job stood in (each question pops the next; the last one repeats); the
    job's allocation, continuations and events are read from the job directory as written by its batch script."""

    def __init__(self, clock: Clock, answers: list[SlurmState]) -> None:
        super().__init__()
        self.clock = clock
        self.answers = answers
        self.asked: list[float] = []
        self.stopped: list[object] = []

    def state(self, job, report=None):
        assert job.launcher == "slurm" and report is SILENT  # the follower asks quietly about this job
        self.asked.append(self.clock.mono)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def stop(self, job, report):
        self.stopped.append(report)


def use_launcher(monkeypatch, launcher) -> None:
    real = jobs.launchers.of
    monkeypatch.setattr(jobs.launchers, "of", lambda name: launcher if name == "slurm" else real(name))


class Heard:
    """on_progress / on_waiting: what the operator sees, and when."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.progress: list[jobs.Progress] = []
        self.said: list[tuple[float, str]] = []

    def on_progress(self, p: jobs.Progress) -> None:
        self.progress.append(p)

    def on_waiting(self, text: str) -> None:
        self.said.append((self.clock.mono, text))


def follow_job(job, clock, heard=None, stall=1000.0, poll=1.0, **kwargs) -> jobs.Outcome:
    heard = heard or Heard(clock)
    return jobs.follow_job(job, 128, heard.on_progress, stall, poll=poll, report=SILENT, on_waiting=heard.on_waiting, **kwargs)


# ---- follow_job: systemd


def test_the_follower_shows_each_new_furthest_iteration_and_ends_when_every_node_exited_0_at_the_last(tmp_path, clock, ansible):
    job = make_job(tmp_path)
    (job.local_dir / "metrics.jsonl").write_text('{"iteration": 99}\n')  # an earlier follower's: the logs are read again
    write(job, "node1", start("node1", 0))
    write(job, "node2", start("node2", 1))
    clock.steps = [
        lambda: write(job, "node2", it(1, 4, ms=200.0, loss=5.0, tflops=1.25), it(2, 4, ms=100.0, loss=4.5, tflops=2.5)),
        lambda: write(job, "node1", saved(2)),  # news, but no further iteration: nothing to show
        lambda: (write(job, "node2", it(3, 4, loss=4.0), it(4, 4, loss=3.5, tflops=3.0)), write(job, "node1", ended("node1", 0))),
        lambda: write(job, "node2", ended("node2", 1)),
    ]
    heard = Heard(clock)
    targets = follow.Targets(5000.0, 4000.0, 20, 0.5, 1)
    outcome = jobs.follow_job(job, 128, heard.on_progress, 60.0, poll=2.0, report=SILENT, log_interval=3, targets=targets)
    assert (outcome.state, outcome.reason, outcome.timing) == ("finished", "", {})
    assert clock.slept == [2.0] * 4 and clock.steps == []  # it ended at the poll that read node2's exit, not before
    assert [outcome.log.node_state(h) for h in ("node1", "node2")] == ["exited-0", "exited-0"]
    assert (outcome.log.seq_length, outcome.log.log_interval, outcome.log.saves) == (128, 3, [2])
    tps = 8 * 128 / 0.1  # global batch x sequence length / step time
    assert heard.progress == [
        jobs.Progress(job.name, 2, 4, 4.5, tps, 2.5, (4 - 2) * 150.0 / 1000.0, 0, 0),  # ETA: the median step time, 150 ms
        jobs.Progress(job.name, 4, 4, 3.5, tps, 3.0, 0.0, 2, 0),
    ]
    assert [outcome.log.iterations[i].seen for i in (1, 2, 3, 4)] == [clock.wall - 6.0, clock.wall - 6.0, clock.wall - 2.0, clock.wall - 2.0]
    records = [json.loads(line) for line in (job.local_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [1, 2, 3, 4] and records[0]["tokens_per_second"] == 8 * 128 / 0.2
    prom = (job.local_dir / "metrics.prom").read_text()
    label = f'{{job="{job.name}",node="node2"}}'
    for sample in ("megaprov_job_running", "megaprov_job_iteration"):
        assert f"{sample}{label} " in prom
    assert f"megaprov_job_running{label} 1\n" in prom and f"megaprov_job_iteration{label} 4\n" in prom
    assert f"megaprov_job_expected_tokens_per_second{label} 5000.0\n" in prom and f"megaprov_job_tokens_per_second_floor{label} 4000.0\n" in prom
    assert ansible.ran == [] and meta(job)["state"] == "running"  # a healthy run asks nothing of the nodes; conclude writes the state


def test_a_node_that_exited_0_while_another_runs_is_not_the_end(tmp_path, clock, ansible):
    job = make_job(tmp_path)
    write(job, "node1", start("node1", 0))
    write(job, "node2", start("node2", 1), it(1, 2), it(2, 2))
    clock.steps = [lambda: write(job, "node1", ended("node1", 0)), None, lambda: write(job, "node2", ended("node2", 1))]
    outcome = follow_job(job, clock)
    assert outcome.state == "finished" and clock.mono == 1003.0 and clock.steps == []


def test_every_node_down_is_failed_once_the_units_gave_up_not_while_they_restart(tmp_path, clock, ansible):
    """systemd starts torchrun again RestartSec after it failed: the units are asked only when every node's torchrun
    has been down longer than that (restart_wait_s, 25 s), and again 25 s after an answer that they still run."""
    job = make_job(tmp_path)
    write(job, "node1", start("node1", 0))
    write(job, "node2", start("node2", 1), it(1, 10), it(2, 10))
    ansible.units = [{h: {"ActiveState": "activating"} for h in job.hosts}, {h: {"ActiveState": "failed"} for h in job.hosts}]
    clock.steps = [lambda: (write(job, "node1", ended("node1", 0)), write(job, "node2", ended("node2", 1, 1)))] + [None] * 60
    outcome = follow_job(job, clock)
    assert (outcome.state, outcome.reason) == ("failed", "torchrun ended on node2 (failed-1) and the units gave up")
    assert ansible.times("job_status.yml") == [1027.0, 1054.0] and clock.mono == 1054.0 and outcome.log.furthest == 2
    assert ansible.names() == ["job_status.yml", "job_status.yml"]  # nothing stopped: the units are over


def test_a_node_up_again_restarts_the_wait_for_the_units(tmp_path, clock, ansible):
    job = make_job(tmp_path)
    write(job, "node1", start("node1", 0), ended("node1", 0, 1))
    write(job, "node2", start("node2", 1), it(1, 10), ended("node2", 1, 1))
    ansible.units = [{h: {"ActiveState": "failed"} for h in job.hosts}]
    steps = [None] * 60
    steps[9] = lambda: write(job, "node1", start("node1", 0))  # read at 1010: torchrun runs again on node1
    steps[11] = lambda: write(job, "node1", ended("node1", 0, 1))  # and failed again, read at 1012
    clock.steps = steps
    outcome = follow_job(job, clock)
    assert outcome.state == "failed" and ansible.times("job_status.yml") == [1038.0]


def test_torchrun_that_exited_0_short_of_the_last_iteration_or_before_any_is_not_finished(tmp_path, clock, ansible):
    job = make_job(tmp_path)
    write(job, "node1", start("node1", 0), ended("node1", 0))
    write(job, "node2", start("node2", 1), ended("node2", 1))  # no iteration logged at all
    ansible.units = [{h: {"ActiveState": "inactive"} for h in job.hosts}]
    clock.steps = [None] * 30
    assert follow_job(job, clock).state == "failed" and ansible.times("job_status.yml") == [1026.0]
    short = make_job(tmp_path / "short")
    write(short, "node1", start("node1", 0), ended("node1", 0))
    write(short, "node2", start("node2", 1), it(1, 10), it(5, 10), ended("node2", 1))
    clock.steps = [None] * 60
    assert follow_job(short, clock).state == "failed"


def test_no_output_for_the_stall_timeout_stops_the_job(tmp_path, clock, ansible):
    job = make_job(tmp_path)
    write(job, "node1", start("node1", 0))
    write(job, "node2", start("node2", 1), it(1, 10))
    clock.steps = [lambda: write(job, "node2", it(2, 10))] + [None] * 10
    outcome = follow_job(job, clock, stall=3.0)
    assert (outcome.state, outcome.reason) == ("stalled", "no output from any node for 3 s; the job was stopped")
    assert clock.mono == 1005.0  # 3 s after the last news (at 1001) is not yet more than 3 s
    assert outcome.log.furthest == 2
    [(playbook, _, extravars, report)] = ansible.ran
    assert playbook == "job_stop.yml" and extravars["megaprov_job"]["unit"] == job.unit and report is SILENT
    assert meta(job)["state"] == "stopped"


def test_news_without_an_iteration_keeps_the_stall_clock_at_bay(tmp_path, clock, ansible):
    job = make_job(tmp_path)
    write(job, "node1", start("node1", 0))
    write(job, "node2", start("node2", 1), it(1, 3))
    clock.steps = [lambda: write(job, "node1", "NCCL INFO ring 0")] * 5 + [lambda: write(job, "node2", it(2, 3), it(3, 3))]
    clock.steps += [lambda: (write(job, "node1", ended("node1", 0)), write(job, "node2", ended("node2", 1)))]
    heard = Heard(clock)
    outcome = follow_job(job, clock, heard, stall=2.0)
    assert outcome.state == "finished" and [p.iteration for p in heard.progress] == [1, 3]


def test_ctrl_c_detaches_and_leaves_the_job_running(tmp_path, clock, ansible):
    job = make_job(tmp_path)
    write(job, "node2", start("node2", 1), it(1, 10))

    def interrupt():
        raise KeyboardInterrupt

    clock.steps = [None, interrupt]
    outcome = follow_job(job, clock)
    assert (outcome.state, outcome.reason) == ("detached", "interrupted: the job keeps running on the nodes")
    assert outcome.log.furthest == 1 and ansible.ran == [] and meta(job)["state"] == "running"


# ---- follow_job: Slurm


def allocate(job: jobs.Job, *hosts: str, slurm_id: str | None = None) -> None:
    """What the batch script writes as an allocation starts: its nodes, and the id of a continuation."""
    (job.local_dir / render.SLURM_NODES_FILE).write_text("".join(h + "\n" for h in hosts))
    if slurm_id:
        with (job.local_dir / render.SLURM_JOBS_FILE).open("a") as fh:
            fh.write(slurm_id + "\n")


def test_a_queued_slurm_job_is_asked_about_every_5_s_and_does_not_stall(tmp_path, clock, monkeypatch):
    job = make_job(tmp_path, "lab-tiny-slurm.yml", launcher="slurm")
    queued = SlurmState("7", "PENDING", "Priority", position=2, pending=3)
    slurm = Slurm(clock, [queued, queued, SlurmState("7", "RUNNING", nodes="node[1-2]")])
    use_launcher(monkeypatch, slurm)

    def allocated():
        allocate(job, "node1", "node2")
        write(job, "node1", start("node1", 0))
        write(job, "node2", start("node2", 1))

    steps = [None] * 11 + [allocated] + [lambda i=i: write(job, "node2", it(i, 3)) for i in (1, 2, 3)]
    clock.steps = [*steps, lambda: (write(job, "node1", ended("node1", 0)), write(job, "node2", ended("node2", 1)))]
    heard = Heard(clock)
    outcome = follow_job(job, clock, heard, stall=8.0)
    assert outcome.state == "finished" and clock.steps == []  # 12 s in the queue with an 8 s stall timeout: a queue is no stall
    assert slurm.asked == [1000.0, 1006.0]  # every WAIT_POLL while no node runs it; not again once its nodes run
    assert heard.said == [(1000.0, "slurm job 7 PENDING (Priority, 2 of 3 in the queue)")]  # said once, not at each question


def test_a_held_slurm_job_stalls_and_is_stopped(tmp_path, clock, monkeypatch):
    job = make_job(tmp_path, "lab-tiny-slurm.yml", launcher="slurm")
    slurm = Slurm(clock, [SlurmState("7", "PENDING", "JobHeldUser")])
    use_launcher(monkeypatch, slurm)
    clock.steps = [None] * 20
    heard = Heard(clock)
    outcome = follow_job(job, clock, heard, stall=8.0)
    assert (outcome.state, clock.mono) == ("stalled", 1009.0) and slurm.stopped == [SILENT]  # asked at 1000 and 1006: held, no queue
    assert job.hosts == ["node1", "node2"]  # no allocation yet: the job's nodes stay the submitted ones
    assert heard.said == [(1000.0, "slurm job 7 PENDING (JobHeldUser)")] and meta(job)["state"] == "stopped"


def test_a_running_slurm_job_is_asked_every_30_s_and_its_end_is_slurms_word(tmp_path, clock, monkeypatch):
    job = make_job(tmp_path, "lab-tiny-slurm.yml", launcher="slurm")
    allocate(job, "node1", "node2")
    write(job, "node1", start("node1", 0))
    write(job, "node2", start("node2", 1), it(1, 100))
    (job.local_dir / render.SLURM_EVENTS).write_text(
        "megaprov: slurm job 7 running on node[1-2]\nplanted\nmegaprov: slurm job 7 failed with status 1 (restart 1 of 1)\n"
        "megaprov: slurm job 7 ended: no restarts left\n"
    )
    failed = SlurmState("7", "FAILED", nodes="node[1-2]", exit_code="1:0")
    slurm = Slurm(clock, [SlurmState("7", "RUNNING", nodes="node[1-2]"), failed])
    use_launcher(monkeypatch, slurm)
    clock.steps = [None] * 40
    heard = Heard(clock)
    outcome = follow_job(job, clock, heard)
    assert slurm.asked == [1000.0, 1031.0] and outcome.log.furthest == 1
    assert outcome.state == "failed" and outcome.reason == (
        "slurm job 7 FAILED on node[1-2], exit 1:0; slurm job 7 failed with status 1 (restart 1 of 1); slurm job 7 ended: no restarts left"
    )
    assert heard.said == [(1000.0, "slurm job 7 RUNNING on node[1-2]"), (1031.0, "slurm job 7 FAILED on node[1-2], exit 1:0")]


def test_a_continuation_on_other_nodes_is_followed_there(tmp_path, clock, monkeypatch):
    """Slurm says the first job failed, but the batch script had submitted its continuation meanwhile: not the end. The
    continuation's allocation is read from then on, and the job's nodes are its nodes."""
    job = make_job(tmp_path, "lab-tiny-slurm.yml", launcher="slurm")
    allocate(job, "node1", "node2", slurm_id="7")
    write(job, "node1", start("node1", 0))
    write(job, "node2", start("node2", 1), it(1, 3), ended("node2", 1, 1))
    allocate(job, "node1", "node2", slurm_id="8")  # submitted as job 7 failed
    slurm = Slurm(clock, [SlurmState("7", "FAILED", nodes="node[1-2]", exit_code="1:0"), SlurmState("8", "RUNNING", nodes="node[3-4]")])
    use_launcher(monkeypatch, slurm)

    def continued():
        allocate(job, "node3", "node4")
        write(job, "node3", start("node3", 0))
        write(job, "node4", start("node4", 1), it(1, 3), it(2, 3), it(3, 3))

    clock.steps = [continued, None, None, lambda: (write(job, "node3", ended("node3", 0)), write(job, "node4", ended("node4", 1)))]
    outcome = follow_job(job, clock)
    assert outcome.state == "finished" and job.hosts == ["node3", "node4"] and clock.steps == []
    assert slurm.asked == [1000.0]


def test_a_slurm_job_over_before_its_nodes_logged_the_last_iteration_failed(tmp_path, clock, monkeypatch):
    job = make_job(tmp_path, "lab-tiny-slurm.yml", launcher="slurm")
    allocate(job, "node1", "node2")
    write(job, "node1", start("node1", 0), ended("node1", 0))
    write(job, "node2", start("node2", 1), it(1, 3), ended("node2", 1))
    slurm = Slurm(clock, [SlurmState("7", "COMPLETED", nodes="node[1-2]", exit_code="0:0")])
    use_launcher(monkeypatch, slurm)
    outcome = follow_job(job, clock)
    assert (outcome.state, outcome.reason) == ("failed", "slurm job 7 COMPLETED on node[1-2], exit 0:0")  # no events: no dangling separator
    assert slurm.asked == [1000.0] and clock.slept == []


# ---- through the head (a controller without the shared mount: megaprov.training.jobdir's mirror)


@pytest.fixture
def through_head(tmp_path, monkeypatch):
    """Returns (the job as the head has it, the job as this machine follows it: in its mirror)."""
    channels = []

    def make(spec_file="lab-tiny.yml", **kwargs):
        on_head = make_job(tmp_path / "head", spec_file, shared=tmp_path / "head" / "shared", **kwargs)
        root = tmp_path / "mirror"
        (root / "jobs").mkdir(parents=True)
        (root / jobdir.ORIGIN).write_text(json.dumps({"inventory": str(tmp_path / "inventory.ini"), "shared_dir": on_head.shared_dir}))
        channels.append(LocalChannel(Path(on_head.shared_dir) / "jobs"))
        monkeypatch.setitem(jobdir._CHANNELS, root, channels[-1])
        local = replace(on_head, local_dir=root / "jobs" / on_head.name)
        assert jobdir.refresh(local.local_dir)
        return on_head, local

    yield make
    for channel in channels:
        channel.close()


def test_through_the_head_the_nodes_lines_are_read_and_the_metrics_go_back_every_10_s(through_head, clock, ansible):
    on_head, job = through_head()
    write(on_head, "node1", start("node1", 0))
    write(on_head, "node2", start("node2", 1))
    (on_head.local_dir / "report.md").write_text("# the controller's file: not read while following\n")
    pushed = []
    clock.steps = [
        lambda i=i: (write(on_head, "node2", it(i, 12)), pushed.append((clock.mono, (on_head.local_dir / "metrics.prom").exists())))
        for i in range(1, 13)
    ]
    clock.steps.append(lambda: (write(on_head, "node1", ended("node1", 0)), write(on_head, "node2", ended("node2", 1))))
    outcome = follow_job(job, clock)
    assert outcome.state == "finished" and outcome.log.furthest == 12 and clock.steps == []
    assert [at for at, there in pushed if there][:1] == [1012.0]  # pushed at 1000 (none yet) and at 1011: more than 10 s later
    head_prom = (on_head.local_dir / "metrics.prom").read_text()
    assert f'megaprov_job_iteration{{job="{job.name}",node="node2"}} 10\n' in head_prom  # as read by the poll at 1010
    assert not (job.local_dir / "report.md").exists()


# ---- follow_job: launch.elastic under systemd (the follower's elastic.Watch, real; its plays stood in)


@pytest.fixture
def no_confirm_wait(monkeypatch):
    monkeypatch.setattr(elastic.time, "sleep", lambda seconds: None)  # elastic.CONFIRM_S between two questions


def test_a_grow_from_another_shell_is_read_from_job_json_every_30_s(tmp_path, clock, ansible):
    job = make_job(tmp_path, "lab-elastic.yml", hosts=("node1", "node2"), job_hosts=("node1", "node2", "node3"))
    watch = elastic.Watch(job, spec_of("lab-elastic.yml"), SILENT, cpu_cluster(3))
    write(job, "node1", start("node1", 0, 2))
    write(job, "node2", start("node2", 1, 2))
    steps = [lambda i=i: write(job, "node2", it(i, 65, batch=12)) for i in range(1, 66)]
    steps[19] = lambda: (
        set_meta(job, hosts=["node1", "node2", "node3"]),
        write(job, "node3", start("node3", 2, 3)),
        write(job, "node2", it(20, 65, batch=12)),
    )
    clock.steps = [*steps, lambda: [write(job, h, ended(h, r)) for r, h in enumerate(("node1", "node2", "node3"))]]
    heard = Heard(clock)
    outcome = follow_job(job, clock, heard, watch=watch)
    assert outcome.state == "finished" and clock.steps == [] and job.hosts == ["node1", "node2", "node3"]
    assert heard.said == [(1031.0, "job lab-elastic now runs on 3 node(s): node1, node2, node3")]  # once: read again at 1062, unchanged
    assert ansible.ran == []


def test_a_lost_node_is_said_at_once_and_the_job_fails_when_its_units_gave_up(tmp_path, clock, ansible, no_confirm_wait):
    job = make_job(tmp_path, "lab-elastic.yml", hosts=("node1", "node2", "node3"))
    watch = elastic.Watch(job, spec_of("lab-elastic.yml"), SILENT, cpu_cluster(3))
    for rank, host in enumerate(job.hosts):
        write(job, host, start(host, rank, 3))
    write(job, "node3", *(it(i, 100, batch=12) for i in range(1, 6)))
    ansible.unreachable = [["node2", "node3"], ["node2", "node3"], []]
    ansible.units = [{}, {}, {h: {"ActiveState": "failed"} for h in job.hosts}]
    clock.steps = [
        lambda: write(job, "node2", ended("node2", 1, 1)),
        None,
        lambda: [write(job, h, ended(h, r, 1)) for r, h in ((0, "node1"), (2, "node3"))],
    ]
    clock.steps += [None] * 30
    heard = Heard(clock)
    outcome = follow_job(job, clock, heard, watch=watch)
    [(at, line)] = heard.said
    assert at == 1001.0 and line.startswith(
        "megaprov: job lab-elastic lost node2 (unreachable), node3 (unreachable): 1 node(s) left, fewer than launch.elastic.min_nodes=2;"
        " it cannot continue at "
    )
    assert (job.local_dir / render.ELASTIC_EVENTS).read_text() == line + "\n"
    assert ansible.times("job_status.yml") == [1001.0, 1001.0, 1029.0]  # asked twice about the loss, then once the units gave up
    assert (outcome.state, outcome.reason) == (
        "failed",
        "torchrun ended on node1 (failed-1), node2 (failed-1), node3 (failed-1) and the units gave up",
    )


def test_units_that_gave_up_while_a_grow_reshapes_the_job_are_not_its_end(tmp_path, clock, ansible):
    job = make_job(tmp_path, "lab-elastic.yml", hosts=("node1", "node2", "node3"), state="reshaping")
    watch = elastic.Watch(job, spec_of("lab-elastic.yml"), SILENT, cpu_cluster(3))
    for rank, host in enumerate(job.hosts):
        write(job, host, start(host, rank, 3), ended(host, rank, 1))
    ansible.units = [{h: {"ActiveState": "failed"} for h in job.hosts}]
    steps = [None] * 60
    steps[39] = lambda: set_meta(job, state="running")
    clock.steps = steps
    outcome = follow_job(job, clock, watch=watch)
    assert outcome.state == "failed" and ansible.times("job_status.yml") == [1026.0, 1053.0]
    # without a watch (no launch.elastic) nothing reshapes it: the units' word stands
    plain = make_job(tmp_path / "plain", "lab-elastic.yml", hosts=("node1", "node2", "node3"), state="reshaping")
    for rank, host in enumerate(plain.hosts):
        write(plain, host, start(host, rank, 3), ended(host, rank, 1))
    clock.steps = [None] * 30
    assert follow_job(plain, clock).state == "failed" and ansible.times("job_status.yml")[-1] == clock.mono == 1079.0


# ---- node_log, follow_log, read_log, launcher_events


def test_node_log_reads_the_last_node_by_default_filtered_and_counted(tmp_path):
    job = make_job(tmp_path)
    write(job, "node2", *(f"line {i} {'NCCL WARN' if i % 2 else 'ok'}" for i in range(10)))
    with (job.local_dir / "logs" / "node2.log").open("ab") as fh:
        fh.write(b"bad \xff byte\n")
    assert jobs.node_log(job, None, 3) == ("node2", ["line 8 ok", "line 9 NCCL WARN", "bad \ufffd byte"])
    assert jobs.node_log(job, "node2", 2, re.compile("WARN")) == ("node2", ["line 7 NCCL WARN", "line 9 NCCL WARN"])
    assert jobs.node_log(job, "node1", 5) == ("node1", [])  # nothing logged yet
    with pytest.raises(UsageError) as info:
        jobs.node_log(job, "node3", 5)
    assert (info.value.message, info.value.hint) == (f"--node node3 is not a node of job {job.name}", "use one of node1, node2")


def test_node_log_reads_only_the_end_of_a_large_log(tmp_path, monkeypatch):
    job = make_job(tmp_path)
    write(job, "node2", *(f"line {i:03d}" for i in range(100)))
    monkeypatch.setattr(jobs, "MAX_LOG_TAIL", 40)
    host, lines = jobs.node_log(job, "node2", 100)
    assert host == "node2" and lines[-4:] == ["line 096", "line 097", "line 098", "line 099"] and len(lines) == 5


def test_node_log_of_a_slurm_job_names_its_current_allocations_nodes(tmp_path):
    job = make_job(tmp_path, "lab-tiny-slurm.yml", launcher="slurm")
    write(job, "node2", "from the first allocation")
    assert jobs.node_log(job, None, 5) == ("node2", ["from the first allocation"])  # no allocation file yet: the job's nodes
    allocate(job, "gpu-a", "gpu-b", "gpu-c")
    write(job, "gpu-c", "now")
    assert jobs.node_log(job, None, 5) == ("gpu-c", ["now"])
    with pytest.raises(UsageError, match=r"^--node node1 is not a node of job lab-tiny"):
        jobs.node_log(job, "node1", 5)


def test_follow_log_emits_the_tail_then_each_new_line_until_job_json_says_the_job_is_over(tmp_path, clock):
    job = make_job(tmp_path, state="starting")
    write(job, "node2", "a", "b", "c")
    emitted: list[str] = []
    clock.steps = [
        lambda: write(job, "node2", "d", "e"),
        lambda: set_meta(job, state="submitted"),
        lambda: (write(job, "node1", "not followed"), set_meta(job, state="running")),
        lambda: (write(job, "node2", "f"), set_meta(job, state="finished")),
    ]
    assert jobs.follow_log(job, None, 2, emitted.append, poll=0.25) == "node2"
    assert emitted == ["b", "c", "d", "e", "f"] and clock.slept == [0.25] * 4 and clock.steps == []


def test_follow_log_ends_when_the_node_exited_0_after_the_last_iteration(tmp_path, clock):
    job = make_job(tmp_path)
    write(job, "node2", start("node2", 1), it(1, 3))
    emitted: list[str] = []
    clock.steps = [lambda: write(job, "node2", it(3, 3), ended("node2", 1, 1), start("node2", 1)), lambda: write(job, "node2", ended("node2", 1))]
    assert jobs.follow_log(job, "node2", 1, emitted.append) == "node2"
    assert emitted == [it(1, 3), it(3, 3), ended("node2", 1, 1), start("node2", 1), ended("node2", 1)] and clock.slept == [1.0, 1.0]
    short = make_job(tmp_path / "short")  # exited 0 before the last iteration: the unit may still restart it
    write(short, "node2", start("node2", 1), it(1, 3), ended("node2", 1))
    clock.steps = [None, lambda: set_meta(short, state="failed")]
    assert jobs.follow_log(short, "node2", 1, emitted.append) == "node2" and clock.steps == []
    none = make_job(tmp_path / "none")  # exited 0 before any iteration
    write(none, "node2", start("node2", 1), ended("node2", 1))
    clock.steps = [None, lambda: set_meta(none, state="failed")]
    assert jobs.follow_log(none, "node2", 1, emitted.append) == "node2" and clock.steps == []


def test_follow_log_of_a_node_without_a_log_yet_shows_it_from_its_first_line(tmp_path, clock):
    job = make_job(tmp_path)
    emitted: list[str] = []

    def interrupt():
        raise KeyboardInterrupt

    clock.steps = [lambda: write(job, "node1", "first", "second"), interrupt]
    assert jobs.follow_log(job, "node1", 10, emitted.append) == "node1"
    assert emitted == ["first", "second"]


def test_follow_log_through_the_head_sees_the_job_end_in_job_json(through_head, clock):
    on_head, job = through_head()
    write(on_head, "node2", "x")
    (on_head.local_dir / "report.md").write_text("# not read while following\n")
    emitted: list[str] = []
    clock.steps = [lambda: write(on_head, "node2", "y"), lambda: set_meta(on_head, state="stopped")]
    assert jobs.follow_log(job, None, 5, emitted.append) == "node2"
    assert emitted == ["x", "y"] and clock.steps == [] and not (job.local_dir / "report.md").exists()


def test_read_log_folds_every_node_the_job_ran_on_with_the_spec_s_sequence_and_interval(tmp_path, clock):
    job = make_job(tmp_path, "lab-elastic.yml", hosts=("node1", "node2"), job_hosts=("node3", "node1", "node2"))
    write(job, "node3", start("node3", 2, 3), *(it(i, 40, batch=12) for i in (5, 10, 15)))
    write(job, "node1", "  successfully loaded checkpoint from /shared/checkpoints/x [ t 1/1, p 1/1 ] at iteration 10")
    write(job, "node2", start("node2", 1, 2), it(15, 40, batch=12, ms=200.0))
    log = jobs.read_log(job, 256, 5)
    assert (log.seq_length, log.log_interval, log.furthest, log.iteration_host) == (256, 5, 15, "node3")
    assert log.iterations[15].tokens_per_second == 12 * 256 / 0.2 and log.iterations[15].seen == clock.wall
    assert [(r.last_iteration, r.resumed_from) for r in log.restarts] == [(15, 10)]  # 15 - interval 5 <= loaded 10 < 15
    assert jobs.read_log(job, 256).log_interval == 1  # by default every iteration is logged


def test_launcher_events_are_each_launchers_own_story(tmp_path):
    job = make_job(tmp_path)
    (job.local_dir / render.ELASTIC_EVENTS).write_text("megaprov: job lab-tiny lost node2 (unreachable) at t\nother\n")
    assert jobs.launcher_events(job) == ["job lab-tiny lost node2 (unreachable) at t"]
    slurm = make_job(tmp_path / "slurm", "lab-tiny-slurm.yml", launcher="slurm")
    (slurm.local_dir / render.SLURM_EVENTS).write_text("megaprov: slurm job 7 running on node[1-2]\nmegaprov: job x\n")
    assert jobs.launcher_events(slurm) == ["slurm job 7 running on node[1-2]"]


# ---- progress


def test_progress_takes_the_eta_from_the_median_of_the_last_10_step_times():
    log = follow.JobLog(128)
    for i in range(1, 13):
        log.feed("node2", it(i, 100, ms=10.0 * i, loss=7.0 - 0.1 * i, tflops=0.5 * i), 0.0)
    log.feed("node1", saved(10), 0.0)
    log.feed("node1", saved(5), 0.0)
    log.feed("node2", it(11, 100, ms=0.0), 0.0)  # a restart; a step time of 0 says nothing
    log.feed("node2", it(12, 100, ms=120.0, loss=5.5), 0.0)
    p = jobs._progress("j", log)
    assert (p.job, p.iteration, p.total, p.loss, p.tflops_per_gpu, p.checkpoint, p.restarts) == ("j", 12, 100, 5.5, 1.5, 10, 1)
    assert p.tokens_per_second == 8 * 128 / 0.12
    # the last 10 logged iterations (3-12), but 11's step time of 0: the median of 30-100 and 120 ms is 70 ms
    assert p.eta_seconds == pytest.approx((100 - 12) * 70.0 / 1000.0)
    none = follow.JobLog(128)
    none.feed("node2", " iteration        3/      10 | lm loss: 5.0 |", 0.0)
    p = jobs._progress("j", none)
    assert (p.eta_seconds, p.checkpoint, p.tokens_per_second, p.restarts) == (None, 0, None, 0)


# ---- what the run is held to


CPU_PEAK = "nominal CPU peak 100.0 GFLOP/s (no measured rate: run megaprov bootstrap, whose python stage measures it)"


def test_the_expectation_is_the_plans_tokens_per_second_unless_the_spec_sets_one():
    s, cluster = spec_of(), cpu_cluster(2)
    planned = planner.plan(s, cluster)
    assert planned.tokens_per_second == pytest.approx(8 * 128 / planned.step_seconds)  # global batch x sequence / step time
    assert jobs.expected_throughput(s, planned) == (planned.tokens_per_second, f"the plan's estimate at MFU 0.6%; {CPU_PEAK}")
    assert jobs.expected_throughput(s, replace(planned, peak=None)) == (planned.tokens_per_second, "the plan's estimate at MFU 0.6%")
    # verify.mfu: the plan's figure scaled from its own MFU to the one asked for (tokens/s is proportional to MFU)
    at = spec_of(verify={"mfu": 0.025})
    value, source = jobs.expected_throughput(at, planned)
    assert value == pytest.approx(planned.tokens_per_second * 0.025 / planned.mfu_assumed) and source == f"the plan at verify.mfu=0.025; {CPU_PEAK}"
    assert jobs.expected_throughput(at, replace(planned, peak=None))[1] == "the plan at verify.mfu=0.025"
    fixed = spec_of(verify={"tokens_per_second": 1234.56789, "mfu": 0.025})
    assert jobs.expected_throughput(fixed, planned) == (1234.56789, "verify.tokens_per_second, set in the job spec")


def test_the_metrics_carry_the_expectation_the_floor_and_the_spec_s_intervals():
    s = spec_of(verify={"tokens_per_second": 1234.56789, "throughput_tolerance": 0.75, "gpu_utilization": 0.3}, train={"log_interval": 5})
    planned = planner.plan(s, cpu_cluster(2))
    assert jobs.metrics_targets(s, planned) == follow.Targets(1234.568, 925.926, 20, 0.3, 5)
    plain = spec_of()
    targets = jobs.metrics_targets(plain, planned)
    assert (targets.expected_tokens_per_second, targets.tokens_per_second_floor) == (
        round(planned.tokens_per_second, 3),
        round(planned.tokens_per_second * 0.8, 3),
    )


def test_an_elastic_job_is_held_on_each_node_count_to_the_plan_on_that_many_nodes():
    s, cluster = spec_of("lab-elastic.yml"), cpu_cluster(3)
    planned = planner.plan(s, cluster)
    [two] = planned.continuations
    assert jobs.expected_by_nodes(s, planned, cluster) == {3: planned.tokens_per_second, 2: two.tokens_per_second}
    assert two.tokens_per_second == pytest.approx(12 * 128 / planner.plan(planner.without_elastic(s), cpu_cluster(2)).step_seconds)
    # an explicit figure is the full job's: scaled by the node count
    fixed = spec_of("lab-elastic.yml", verify={"tokens_per_second": 3000.0})
    assert jobs.expected_by_nodes(fixed, planned, cluster) == {3: 3000.0, 2: 2000.0}
    # verify.mfu: each count's own plan at that MFU
    at = spec_of("lab-elastic.yml", verify={"mfu": 0.02})
    small = planner.plan(planner.without_elastic(s), cpu_cluster(2))
    by = jobs.expected_by_nodes(at, planned, cluster)
    assert by[2] == pytest.approx(small.tokens_per_second * 0.02 / small.mfu_assumed) and by[3] == pytest.approx(
        planned.tokens_per_second * 0.02 / planned.mfu_assumed
    )
    # counts that cannot keep the global batch are not among them; a cluster known only by its size is planned by it
    four = spec_of("lab-elastic.yml", launch={"nodes": 4}, train={"global_batch_size": 8})
    bare = nodefacts.KnownCluster(4, 1, planner.GPUS["cpu"], "/shared", stack=nodefacts.ROLE_DEFAULTS)
    planned4 = planner.plan(four, bare)
    by4 = jobs.expected_by_nodes(four, planned4, bare)
    assert sorted(by4) == [2, 4] and by4[2] == planner.plan(planner.without_elastic(four), replace(bare, nodes=2)).tokens_per_second


def test_each_node_count_is_planned_on_its_own_nodes_measured_rates():
    rates = tuple(NodeRate(h, tf, 1, "torch-cpu", "float32", "t") for h, tf in (("node1", 0.4), ("node2", 0.4), ("node3", 0.1)))
    s, cluster = spec_of("lab-elastic.yml"), cpu_cluster(3, rates)
    planned = planner.plan(s, cluster)
    by = jobs.expected_by_nodes(s, planned, cluster)
    # node3 is 4x slower and sets the pace of 3 nodes; node1 and node2 alone run at their own
    assert by[2] == planner.plan(planner.without_elastic(s), cpu_cluster(2, rates[:2])).tokens_per_second
    assert by[2] > by[3]


# ---- conclude: the verdict and the report


def good_logs(job, total=60, ms=600.0, loss=lambda i: 6.0 - 0.05 * i, nan_at=None):
    write(job, "node1", start("node1", 0), saved(20), saved(40), saved(60), ended("node1", 0))
    lines = [it(i, total, ms=ms, loss=float("nan") if i == nan_at else loss(i), nan=1 if i == nan_at else 0) for i in range(1, total + 1)]
    write(job, "node2", start("node2", 1), *lines, ended("node2", 1))


def conclude(job, spec=None, outcome=None, gpu_nodes=False, cluster=None, timing=None, nodes=2):
    spec = spec or spec_of()
    cluster = cluster or cpu_cluster(nodes)
    planned = planner.plan(spec, cluster)
    outcome = outcome or jobs.Outcome("finished", jobs.read_log(job, spec.model.seq_length, spec.train.log_interval))
    return jobs.conclude(
        job, spec, planned, outcome, gpu_nodes, timing if timing is not None else {"megaprov_start_to_units_started_s": 1.5}, cluster
    )


def statuses(judged):
    return [(c.name, c.status) for c in judged.checks]


def test_a_good_run_passes_and_its_report_says_so(tmp_path):
    job = make_job(tmp_path)
    good_logs(job)
    (job.local_dir / "metrics.jsonl").write_text("stale\n")
    before = meta(job)
    judged, report, paths = conclude(job)
    expected = planner.plan(spec_of(), cpu_cluster(2)).tokens_per_second
    assert judged.passed and statuses(judged) == [
        ("loss falling", "pass"),
        ("no nan", "pass"),
        ("throughput", "pass"),
        ("GPU utilisation and memory", "skipped"),
        ("every rank alive", "pass"),
    ]
    measured = 8 * 128 / 0.6
    assert judged.checks[2].detail == (
        f"median {measured:,.0f} tokens/s, expected {expected:,.0f} (the plan's estimate at MFU 0.6%; {CPU_PEAK}) x 0.8 = {expected * 0.8:,.0f}"
    )
    assert paths == {"json": job.local_dir / "report.json", "markdown": job.local_dir / "report.md", "plot": job.local_dir / "report.png"}
    assert json.loads(paths["json"].read_text()) == report and paths["plot"].read_bytes().startswith(b"\x89PNG")
    assert report["verdict"] == "passed" and report["job"] == before
    assert report["iterations"] == {"logged": 60, "last": 60, "total": 60} and report["checkpoints"] == [20, 40, 60]
    assert report["loss"] == {"first": 5.95, "last": 3.0, "min": 3.0} and report["restarts"] == [] and report["errors"] == []
    assert report["throughput"] == {"tokens_per_second_median": pytest.approx(measured), "tflops_per_gpu_median": 1.5}
    assert report["timing"] == {"megaprov_start_to_units_started_s": 1.5}
    assert report["commands"] == {
        "node1": "#!/bin/bash\ntorchrun --node-rank 0 train.py\n",
        "node2": "#!/bin/bash\ntorchrun --node-rank 1 train.py\n",
    }
    assert "segments" not in report and "changes" not in report
    md = paths["markdown"].read_text().splitlines()
    assert md[0] == "# megaprov job lab-tiny: PASSED" and md[2] == "2 node(s) x 1 process(es), trainer lab, 60/60 iterations."
    assert "- megaprov_start_to_units_started_s: 1.5" in md and "### node2" in md
    after = meta(job)
    assert (after["state"], after["verdict"]) == ("finished", "passed") and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", after["ended"])
    records = [json.loads(line) for line in (job.local_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == list(range(1, 61))
    prom = (job.local_dir / "metrics.prom").read_text()
    label = '{job="lab-tiny",node="node2"}'
    assert f"megaprov_job_running{label} 0\n" in prom and f"megaprov_job_iteration{label} 60\n" in prom
    assert f"megaprov_job_expected_tokens_per_second{label} {round(expected, 3)!r}\n" in prom
    assert f"megaprov_job_tokens_per_second_floor{label} {round(expected * 0.8, 3)!r}\n" in prom
    assert f"megaprov_job_save_interval_iterations{label} 20\n" in prom


def test_a_run_below_the_expected_throughput_fails(tmp_path):
    job = make_job(tmp_path)
    good_logs(job, ms=1200.0)  # 853 tokens/s; the plan expects 1,330 and 0.8 of it is 1,064
    judged, report, _ = conclude(job)
    assert not judged.passed and report["verdict"] == "failed"
    assert [c.name for c in judged.checks if c.status == "fail"] == ["throughput"]
    assert judged.checks[2].detail.startswith("too slow: median 853 tokens/s, expected 1,330 (the plan's estimate at MFU 0.6%;")
    assert (meta(job)["state"], meta(job)["verdict"]) == ("finished", "failed")
    assert (job.local_dir / "report.md").read_text().startswith("# megaprov job lab-tiny: FAILED\n")


def test_a_nan_loss_fails_the_run(tmp_path):
    job = make_job(tmp_path)
    good_logs(job, nan_at=30)
    judged, report, _ = conclude(job)
    assert [c.name for c in judged.checks if c.status == "fail"] == ["no nan"] and report["verdict"] == "failed"
    assert judged.checks[1].detail == "1 nan iteration(s) reported; first non-finite loss at iteration 30: lower train.lr, use bf16, check the data"


def test_a_run_that_restarted_from_its_checkpoint_reports_the_restart(tmp_path):
    job = make_job(tmp_path)
    write(job, "node1", start("node1", 0), saved(20), start("node1", 0), "  successfully loaded checkpoint from /c [ t 1/1 ] at iteration 20")
    write(job, "node1", saved(40), saved(60), ended("node1", 0))
    (job.local_dir / "launch" / "node1.sh").write_bytes(b"#!/bin/bash\necho caf\xe9\n")  # not UTF-8: quoted as it can be
    write(job, "node2", start("node2", 1), *(it(i, 60, ms=600.0) for i in range(1, 31)), ended("node2", 1, 1), start("node2", 1))
    write(job, "node2", *(it(i, 60, ms=600.0) for i in range(21, 61)), ended("node2", 1))
    judged, report, paths = conclude(job)
    assert judged.passed and judged.checks[4].detail == "all 60 iterations; torchrun exited 0 on 2 node(s), 1 restart(s) resumed from checkpoints"
    assert report["restarts"] == [{"last_iteration": 30, "resumed_from": 20, "lost_iterations": 10, "seconds_to_resumed_iteration": 0.0}]
    assert "| 30 | 20 | 10 | 0.0 |" in paths["markdown"].read_text().splitlines()
    assert report["commands"]["node1"] == "#!/bin/bash\necho caf\ufffd\n"


def test_a_run_that_did_not_finish_fails_with_why(tmp_path):
    job = make_job(tmp_path)
    good_logs(job)
    log = jobs.read_log(job, 128)
    judged, report, _ = conclude(job, outcome=jobs.Outcome("stalled", log, "no output from any node for 600 s; the job was stopped"))
    assert judged.passed is False and report["verdict"] == "failed"
    assert judged.checks[-1] == verdict.Check("run", "fail", "stalled: no output from any node for 600 s; the job was stopped")
    assert (meta(job)["state"], meta(job)["verdict"]) == ("stalled", "failed")
    assert '{job="lab-tiny",node="node2"} 0\n' in (job.local_dir / "metrics.prom").read_text()


def test_gpu_samples_of_the_jobs_nodes_while_iterations_ran_are_judged(tmp_path):
    job = make_job(tmp_path)
    good_logs(job)
    for host, util in (("node1", 90), ("node2", 80), ("node3", 0)):  # node3 is not the job's
        (job.local_dir / "logs" / f"gpu-{host}.csv").write_text(
            f"2026/12/05 19:50:00.000, 0, 0, 10, 80000\n2026/12/05 20:00:30.000, 0, {util}, 1000, 80000\n"  # idle before the run: left out
        )
    judged, _, _ = conclude(job, spec_of(verify={"gpu_utilization": 0.5}), gpu_nodes=True)
    assert judged.checks[3] == verdict.Check(
        "GPU utilisation and memory", "pass", "mean utilisation 85% over 2 samples (needs 50%), peak memory 1000/80000 MiB"
    )


def test_a_busier_machine_lowers_a_measured_expectation_and_a_throttled_node_is_named(tmp_path):
    rates = tuple(NodeRate(h, 0.2, 1, "torch-cpu", "float32", "t") for h in ("node1", "node2"))
    cluster = cpu_cluster(2, rates)
    expected = planner.plan(spec_of(), cluster).tokens_per_second
    job = make_job(tmp_path)
    good_logs(job, ms=8 * 128 / (expected * 0.7 * 0.7) * 1000)  # 0.7 of the expectation scaled by the start-up rates (0.7)
    write(job, "node1", "megaprov compute | rank: 0 | rate (TFLOP/s): 0.2 |")
    write(job, "node2", "megaprov compute | rank: 1 | rate (TFLOP/s): 0.08 |")  # 0.4 of its stored rate: median 0.7
    judged, _, _ = conclude(job, cluster=cluster)
    detail = judged.checks[2].detail
    assert judged.checks[2].status == "fail" and "; x 0.70: the median node computed at 0.70 of its stored rate at start-up" in detail
    assert detail.endswith("; node2 computed 80.0 GFLOP/s at start-up, 0.40x the 200.0 GFLOP/s it was measured at (throttled or busy)")
    fixed = make_job(tmp_path / "fixed")  # an explicit figure is the operator's: not scaled
    good_logs(fixed)
    write(fixed, "node2", "megaprov compute | rank: 1 | rate (TFLOP/s): 0.08 |")
    judged, _, _ = conclude(fixed, spec_of(verify={"tokens_per_second": 1000.0}), cluster=cluster)
    assert " x 0.70" not in judged.checks[2].detail and "expected 1,000 (verify.tokens_per_second, set in the job spec)" in judged.checks[2].detail


def elastic_logs(job, ms=100.0):
    """3 nodes log 1-30 (checkpoint 20); node3 lost; node1 and node2 continue from 20 and log 21-60."""
    write(job, "node1", start("node1", 0, 3), saved(20), start("node1", 0, 2), saved(40), saved(60), ended("node1", 0))
    write(job, "node3", start("node3", 2, 3), *(it(i, 60, ms=ms, batch=12) for i in range(1, 31)))
    write(
        job, "node2", start("node2", 1, 3), start("node2", 1, 2), *(it(i, 60, ms=ms, batch=12, second=100) for i in range(21, 61)), ended("node2", 1)
    )


def test_an_elastic_run_is_judged_per_segment_on_its_node_counts(tmp_path):
    job = make_job(tmp_path, "lab-elastic.yml", hosts=("node1", "node2"), job_hosts=("node1", "node2", "node3"))
    elastic_logs(job)
    s, cluster = spec_of("lab-elastic.yml"), cpu_cluster(3)
    planned = planner.plan(s, cluster)
    by = jobs.expected_by_nodes(s, planned, cluster)
    judged, report, paths = conclude(job, s, cluster=cluster)
    assert judged.passed, judged.reasons()
    assert statuses(judged) == [
        ("loss falling", "pass"),
        ("no nan", "pass"),
        ("segment throughput", "pass"),
        ("GPU utilisation and memory", "skipped"),
        ("every rank alive", "pass"),
        ("elastic continuity", "pass"),
        ("sample order", "pass"),
    ]
    assert [(g["nodes"], g["first"], g["last"], g["expected"], g["lost_iterations"]) for g in report["segments"]] == [
        (3, 1, 20, by[3], 0),
        (2, 21, 60, by[2], 10),
    ]
    assert [(c["nodes_before"], c["nodes_after"], c["resumed_from"]) for c in report["changes"]] == [(3, 2, 20)]
    assert "## Segments (launch.elastic)" in paths["markdown"].read_text()
    # without the cluster (nothing to plan the other counts on) the run is held to the job's own figure, as before
    plain = make_job(tmp_path / "plain", "lab-elastic.yml", hosts=("node1", "node2"), job_hosts=("node1", "node2", "node3"))
    elastic_logs(plain)
    judged, report, _ = jobs.conclude(plain, s, planned, jobs.Outcome("finished", jobs.read_log(plain, 128)), False, {}, None)
    assert "segments" not in report and [c.name for c in judged.checks][2:] == ["throughput", "GPU utilisation and memory", "every rank alive"]


def test_an_elastic_segment_below_its_own_expectation_fails(tmp_path):
    job = make_job(tmp_path, "lab-elastic.yml", hosts=("node1", "node2"), job_hosts=("node1", "node2", "node3"))
    elastic_logs(job, ms=3000.0)  # 512 tokens/s: below 0.8 of either count's plan
    judged, _, _ = conclude(job, spec_of("lab-elastic.yml"), cluster=cpu_cluster(3))
    assert judged.checks[2].name == "segment throughput" and judged.checks[2].status == "fail"
    assert "2 nodes (iterations 21-60): 512 tokens/s of 997 expected" in judged.checks[2].detail


def test_the_report_and_metrics_go_back_to_the_head(through_head):
    on_head, job = through_head()
    good_logs(on_head)
    jobdir.refresh(job.local_dir)
    judged, report, _ = conclude(job)
    head = on_head.local_dir
    assert judged.passed and json.loads((head / "report.json").read_text()) == report
    assert all((head / name).is_file() for name in ("report.md", "report.png", "metrics.jsonl", "metrics.prom"))
    assert (meta(on_head)["state"], meta(on_head)["verdict"]) == ("finished", "passed")


def test_the_follower_polls_every_half_second_and_folds_every_logged_iteration_by_default(tmp_path, clock, ansible):
    job = make_job(tmp_path)
    write(job, "node1", start("node1", 0))
    write(job, "node2", start("node2", 1), it(1, 2))
    clock.steps = [lambda: (write(job, "node2", it(2, 2), ended("node2", 1)), write(job, "node1", ended("node1", 0)))]
    outcome = jobs.follow_job(job, 128, lambda p: None, 60.0)
    assert outcome.state == "finished" and clock.slept == [0.5] and outcome.log.log_interval == 1


def test_a_slurm_job_over_while_asked_with_its_exit_lines_finished(tmp_path, clock, monkeypatch):
    job = make_job(tmp_path, "lab-tiny-slurm.yml", launcher="slurm")
    allocate(job, "node1", "node2")
    write(job, "node1", start("node1", 0))
    write(job, "node2", start("node2", 1), it(1, 2), it(2, 2))

    class Over(Slurm):
        def state(self, job, report=None):
            write(job, "node1", ended("node1", 0))  # the nodes' exit lines, written while Slurm was asked
            write(job, "node2", ended("node2", 1))
            return super().state(job, report)

    use_launcher(monkeypatch, Over(clock, [SlurmState("7", "COMPLETED", nodes="node[1-2]", exit_code="0:0")]))
    outcome = follow_job(job, clock)
    assert (outcome.state, outcome.reason, outcome.log.furthest) == ("finished", "", 2) and clock.slept == []


def test_an_elastic_figure_is_scaled_to_every_count_it_may_run_on():
    s = spec_of("lab-elastic.yml", launch={"nodes": 4}, train={"global_batch_size": 8}, verify={"tokens_per_second": 4000.0})
    s = s.model_copy(update={"launch": s.launch.model_copy(update={"elastic": s.launch.elastic.model_copy(update={"min_nodes": 1})})})
    planned = planner.plan(s, cpu_cluster(4))
    assert jobs.expected_by_nodes(s, planned, cpu_cluster(4)) == {4: 4000.0, 2: 2000.0, 1: 1000.0}  # 3 nodes cannot keep the batch of 8


# ---- the job directory is the cluster user's: a link in place of a file is refused, never followed


@pytest.fixture
def secret(tmp_path):
    path = tmp_path / "secret"
    path.write_text("2026/12/05 20:00:30.000, 0, 99, 1, 80000\nroot's line\n")
    return path


def test_a_linked_node_log_is_refused_by_node_log_and_the_follower(tmp_path, clock, ansible, secret):
    from megaprov import untrusted

    job = make_job(tmp_path)
    (job.local_dir / "logs" / "node2.log").symlink_to(secret)
    with pytest.raises(untrusted.BadEntry, match="is a symbolic link"):
        jobs.node_log(job, "node2", 5)
    with pytest.raises(untrusted.BadEntry, match="is a symbolic link"):
        follow_job(job, clock)
    with pytest.raises(untrusted.BadEntry, match="is a symbolic link"):
        jobs.read_log(job, 128)


def test_a_log_replaced_by_a_link_while_followed_is_refused(tmp_path, clock, secret):
    from megaprov import untrusted

    job = make_job(tmp_path)
    emitted: list[str] = []
    clock.steps = [lambda: (job.local_dir / "logs" / "node2.log").symlink_to(secret)]
    with pytest.raises(untrusted.BadEntry, match="is a symbolic link"):
        jobs.follow_log(job, "node2", 5, emitted.append)
    assert emitted == []


def test_linked_gpu_samples_are_refused_by_the_verdict(tmp_path, secret):
    from megaprov import untrusted

    job = make_job(tmp_path)
    good_logs(job)
    (job.local_dir / "logs" / "gpu-node1.csv").symlink_to(secret)
    with pytest.raises(untrusted.BadEntry, match="is a symbolic link"):
        conclude(job, gpu_nodes=True)

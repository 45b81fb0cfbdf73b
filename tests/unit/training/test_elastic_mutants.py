"""launch.elastic's systemd side (megaprov.training.elastic) with the cluster stood in: what the follower asks the
nodes and when, which node it counts as lost and why, the exact event lines an operator reads, what a relaunch stops,
renders and starts (and what job.json says when it fails), and `megaprov job grow`'s refusals and its way back."""

import contextlib
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from megaprov.errors import HostsUnreachable, RunFailed, UsageError
from megaprov.output import SILENT
from megaprov.training import elastic, jobs, target
from tests.unit.training.test_elastic import LAB, _watch, cpu_cluster, lab_spec, parse

ROOT = Path(__file__).resolve().parents[3]
NOW = "2026-12-05T20:00:00Z"


@pytest.fixture(autouse=True)
def _quiet_events(monkeypatch):
    """Events are written here, as this user, and stamped with a fixed time."""
    pushed = []
    monkeypatch.setattr(elastic.jobdir, "push", lambda *a: pushed.append(a))
    monkeypatch.setattr(elastic, "as_owner_of", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(elastic.follow, "utc_now", lambda: NOW)
    return pushed


def make_job(tmp_path, hosts=("node1", "node2", "node3"), job_hosts=None):
    (tmp_path / "logs").mkdir(exist_ok=True)
    return jobs.Job(
        "el",
        tmp_path / "inventory.ini",
        list(hosts),
        "/shared",
        "/shared/jobs/el",
        tmp_path,
        "/shared/checkpoints/el",
        "megaprov-job-el.service",
        job_hosts=list(job_hosts or hosts),
    )


def events(tmp_path):
    return (tmp_path / "logs" / "elastic.log").read_text().splitlines()


def failure(host, unreachable=True, message="ssh: connect to host: No route to host"):
    return SimpleNamespace(host=host, unreachable=unreachable, message=message)


def run_result(failures=(), results=(), ok=True):
    return SimpleNamespace(failures=list(failures), results=list(results), ok=ok, error_line="", status="failed", artifacts="/tmp/a")


# ---- events


def test_an_event_is_one_stamped_line_appended_to_the_jobs_events_and_sent_to_the_head(tmp_path, _quiet_events):
    job = make_job(tmp_path)
    first = elastic.event(job, "job el lost node3")
    second = elastic.event(job, "job el grows\x1b]52;c;x\x07")
    assert first == f"megaprov: job el lost node3 at {NOW}"
    assert second == f"megaprov: job el grows\\x1b]52;c;x\\x07 at {NOW}"
    assert (tmp_path / "logs" / "elastic.log").read_text() == f"{first}\n{second}\n"
    assert _quiet_events == [(tmp_path, "logs/elastic.log")] * 2


# ---- doctor's findings


@pytest.mark.parametrize(
    ("ran_ago", "since_ago", "flagged"),
    [
        (None, None, set()),  # no doctor run (or none within the day)
        (100.0, 50.0, set()),  # it ran before the segment began: old news
        (10.0, 50.0, {"node2"}),  # it ran since
        (100.0, None, {"node2"}),  # since=0: whenever it ran
    ],
)
def test_doctor_findings_count_when_the_run_is_newer_than_the_segment(monkeypatch, tmp_path, ran_ago, since_ago, flagged):
    from megaprov.ops.doctor import health

    asked = []
    monkeypatch.setattr(health, "unhealthy_nodes", lambda inventory: asked.append(inventory) or (["node2"], ran_ago))
    now = time.time()
    job = make_job(tmp_path)
    got = elastic.unhealthy(job) if since_ago is None else elastic.unhealthy(job, now - since_ago)
    assert got == flagged and asked == [str(tmp_path / "inventory.ini")]


def test_a_doctor_run_made_at_the_segments_start_counts(monkeypatch, tmp_path):
    from megaprov.ops.doctor import health

    monkeypatch.setattr(elastic.time, "time", lambda: 1000.0)
    monkeypatch.setattr(health, "unhealthy_nodes", lambda inventory: (["node2"], 10.0))  # ran at 990
    assert elastic.unhealthy(make_job(tmp_path), 990.0) == {"node2"}
    assert elastic.unhealthy(make_job(tmp_path), 990.5) == set()


# ---- asking the nodes


def test_probe_asks_the_segments_nodes_for_their_units_and_names_the_lost(monkeypatch, tmp_path):
    job = make_job(tmp_path)
    calls = []
    result = run_result(
        failures=[failure("node3"), failure("node1", unreachable=False), failure("node9")],
        results=[
            SimpleNamespace(host="node1", res={"stdout": "ActiveState=activating\nNRestarts=2\nEnvironment=A=B"}),
            SimpleNamespace(host="node2", res={"stdout": "ActiveState=failed\nResult=start-limit-hit\nNRestarts=4"}),
            SimpleNamespace(host="node4", res={}),
        ],
    )
    monkeypatch.setattr(elastic.plays, "run", lambda *a, **k: calls.append((a, k)) or result)
    since = []
    monkeypatch.setattr(elastic, "unhealthy", lambda job, s: since.append(s) or {"node2", "node3", "node8"})
    found = elastic.probe(job, 123.0)
    [(args, kwargs)] = calls
    assert args == ("job_status.yml", job.inventory, {"megaprov_job": job.vars(hosts=["node1", "node2", "node3"])}, SILENT, 3)
    assert kwargs == {"collect": ("ansible.builtin.command", "command")}
    assert since == [123.0]
    assert found.units == {
        "node1": {"ActiveState": "activating", "NRestarts": "2", "Environment": "A=B"},
        "node2": {"ActiveState": "failed", "Result": "start-limit-hit", "NRestarts": "4"},
        "node4": {},
    }
    # node3 did not answer (and doctor flagged it: the first reason stays); node1's failed task is no loss; node9 and
    # node8 are not the job's nodes; node2's unit gave up while node1's starts again
    assert found.lost == {"node3": "unreachable", "node2": "its unit gave up (start-limit-hit, 4 restarts)"}


def test_probe_of_chosen_nodes_asks_only_those(monkeypatch, tmp_path):
    job = make_job(tmp_path, hosts=("node1", "node2"), job_hosts=("node1", "node2", "node3"))
    calls = []
    monkeypatch.setattr(elastic.plays, "run", lambda *a, **k: calls.append(a) or run_result(failures=[failure("node1")]))
    monkeypatch.setattr(elastic, "unhealthy", lambda job, s: {"node1", "node3"})
    found = elastic.probe(job, 0.0, ["node3"])
    assert calls[0][2] == {"megaprov_job": job.vars(hosts=["node3"])} and calls[0][4] == 1
    assert found.lost == {"node3": "error findings of megaprov doctor"}  # node1 was not asked


def test_a_unit_that_gave_up_without_its_result_is_still_named():
    units = {"node1": {"ActiveState": "active"}, "node2": {"ActiveState": "failed"}, "node3": {"ActiveState": "inactive"}}
    assert elastic.gave_up_units(units) == {"node2": "its unit gave up (failed, ? restarts)"}
    assert elastic.gave_up_units({"node1": {"ActiveState": "inactive"}, "node2": {"ActiveState": "failed"}}) == {}  # nothing runs


# ---- when to ask


def iterations(*ms):
    return SimpleNamespace(series=lambda: [SimpleNamespace(ms_per_iteration=m) for m in ms], total=100, furthest=10)


def test_quiet_after_is_five_recent_iterations_or_the_minimum():
    assert elastic.quiet_after(iterations()) == elastic.QUIET_MIN_S
    assert elastic.quiet_after(iterations(1000.0, 2000.0)) == elastic.QUIET_MIN_S  # 7.5 s: the minimum
    # the median of the last ten iterations (of 11 here): 20 s, five of them 100 s
    assert elastic.quiet_after(iterations(*[10_000.0] * 6, *[30_000.0] * 5)) == 100.0
    assert elastic.quiet_after(iterations(*[20_000.0] * 9, None)) == 100.0  # an untimed one is skipped


def watch_at(monkeypatch, now):
    monkeypatch.setattr(elastic.time, "monotonic", lambda: now)
    watch = elastic.Watch.__new__(elastic.Watch)
    watch.asked = 0.0
    return watch


def test_the_first_question_is_not_held_back_and_the_next_waits_probe_every_s(monkeypatch):
    log = iterations()
    watch = watch_at(monkeypatch, elastic.PROBE_EVERY_S)
    assert watch.due(log, ["failed-1"], 0.0)
    watch.asked = 0.5
    assert not watch.due(log, ["failed-1"], 0.0)


def test_due_at_the_edges(monkeypatch):
    log = iterations()
    watch = watch_at(monkeypatch, 1000.0)
    assert not watch.due(log, [], 0.0)  # no node's state known yet: nothing ended
    assert not watch.due(log, ["running"], elastic.QUIET_MIN_S)  # exactly the quiet time: not yet
    assert watch.due(log, ["running"], elastic.QUIET_MIN_S + 0.1)
    assert not watch.restarting  # a silence restarts nothing
    assert watch.due(log, ["running", "failed-1"], 0.0) and watch.restarting
    unknown = SimpleNamespace(series=lambda: [], total=0, furthest=0)  # the last iteration not known yet
    assert watch.due(unknown, ["exited-0", "exited-0"], 0.0) and watch.restarting


# ---- the follower's decision


def test_a_loss_is_said_in_full_and_the_others_relaunched_from_the_checkpoint(tmp_path, monkeypatch):
    lost = elastic.Probe({}, {"node3": "unreachable"})
    watch, log, asked, relaunched = _watch(tmp_path, monkeypatch, [lost, lost])
    slept = []
    monkeypatch.setattr(elastic.time, "sleep", slept.append)
    clock = iter([500.0, 600.0])
    monkeypatch.setattr(elastic.time, "time", lambda: next(clock))
    watch.since = 400.0
    since = []
    monkeypatch.setattr(elastic, "probe", lambda job, s, hosts=None: since.append(s) or lost)
    line = watch.check(log)
    expected = (
        "megaprov: job el lost node3 (unreachable): continues on 2 node(s) (node1, node2) from the checkpoint at iteration 20"
        f" (iteration 27 reached) at {NOW}"
    )
    assert line == expected and events(tmp_path) == [expected]
    assert slept == [elastic.CONFIRM_S] and since == [400.0, 400.0]
    [(args, kwargs)] = relaunched
    assert args == (watch.job, watch.spec, ["node1", "node2"], "lost node3 (unreachable)", watch.report, ["node1", "node2"])
    assert watch.since == 500.0  # the new segment: doctor findings from before it are old news
    assert not watch.due(log, ["failed-1"], 0.0)  # just asked


def test_without_a_checkpoint_it_continues_from_iteration_0(tmp_path, monkeypatch):
    lost = elastic.Probe({}, {"node1": "error findings of megaprov doctor"})
    watch, log, _, relaunched = _watch(tmp_path, monkeypatch, [lost])
    log.saves = []
    line = watch.check(log)
    assert line is not None and "continues on 2 node(s) (node2, node3) from the checkpoint at iteration 0 (iteration 27 reached)" in line


def test_several_lost_nodes_are_named_in_order_and_a_new_loss_is_said_again(tmp_path, monkeypatch):
    two = elastic.Probe({}, {"node3": "unreachable", "node2": "error findings of megaprov doctor"})
    watch, log, _, relaunched = _watch(tmp_path, monkeypatch, [two, two, elastic.Probe({}, {"node3": "unreachable", "node1": "unreachable"})])
    first = watch.check(log)
    assert first == (
        "megaprov: job el lost node2 (error findings of megaprov doctor), node3 (unreachable): 1 node(s) left, fewer than"
        f" launch.elastic.min_nodes=2; it cannot continue at {NOW}"
    )
    second = watch.check(log)  # other nodes lost: new news
    assert second is not None and second.startswith("megaprov: job el lost node1 (unreachable), node3 (unreachable): 1 node(s) left")
    assert relaunched == []


def test_the_follower_reads_the_segments_nodes_from_job_json_before_asking(tmp_path, monkeypatch):
    watch, log, _, relaunched = _watch(tmp_path, monkeypatch, [elastic.Probe({}, {"node1": "error findings of megaprov doctor"})])
    monkeypatch.setattr(jobs, "segment_hosts", lambda job: ["node1", "node2", "node3", "node4"])
    watch.counts = [4, 3, 2]
    assert watch.check(log) is not None
    assert relaunched[0][0][2] == ["node2", "node3", "node4"]


def test_a_fresh_watch_starts_its_segment_now_and_does_not_regrow(tmp_path, monkeypatch):
    monkeypatch.setattr(elastic.time, "time", lambda: 777.0)
    watch, log, asked, relaunched = _watch(tmp_path, monkeypatch, [elastic.Probe({}, {})])
    assert watch.since == 777.0 and watch.counts == [3, 2] and watch.report is None
    watch.job.hosts = ["node1", "node2"]  # node3 out: but nothing restarts, so nothing grows
    assert watch.check(log) is None and asked == [None]


def test_a_restart_with_every_node_in_asks_nothing_more(tmp_path, monkeypatch):
    watch, log, asked, relaunched = _watch(tmp_path, monkeypatch, [elastic.Probe({}, {})])
    watch.restarting = True
    assert watch.check(log) is None and asked == [None] and relaunched == []


@pytest.mark.parametrize(
    ("back", "why"),
    [
        (elastic.Probe({"node3": {}}, {"node3": "error findings of megaprov doctor"}), "answers, but doctor flagged it"),
        (elastic.Probe({}, {}), "no answer and no failure: not back"),
    ],
)
def test_a_node_that_is_not_healthy_again_is_not_taken_back(tmp_path, monkeypatch, back, why):
    watch, log, asked, relaunched = _watch(tmp_path, monkeypatch, [elastic.Probe({}, {}), back])
    watch.job.hosts = ["node1", "node2"]
    watch.restarting = True
    assert watch.check(log) is None and relaunched == [], why


def test_a_returned_node_that_adds_no_usable_count_is_left_out(tmp_path, monkeypatch):
    """4 nodes, counts 4 and 2: on 2 after losing two, one back makes 3, which keeps no batch: it stays on 2."""
    watch, log, asked, relaunched = _watch(tmp_path, monkeypatch, [elastic.Probe({}, {}), elastic.Probe({"node3": {}}, {})])
    watch.job.every_host = ["node1", "node2", "node3", "node4"]
    watch.job.hosts = ["node1", "node2"]
    watch.counts = [4, 2]
    watch.restarting = True
    assert watch.check(log) is None and asked == [None, ["node3", "node4"]] and relaunched == []


def test_a_regrow_is_said_and_relaunched_on_every_node_back(tmp_path, monkeypatch):
    watch, log, asked, relaunched = _watch(tmp_path, monkeypatch, [elastic.Probe({}, {}), elastic.Probe({"node2": {}, "node3": {}}, {})])
    watch.job.hosts = ["node1"]
    watch.restarting = True
    clock = iter([900.0])
    monkeypatch.setattr(elastic.time, "time", lambda: next(clock))
    since = []
    real = elastic.probe
    monkeypatch.setattr(elastic, "probe", lambda job, s, hosts=None: since.append(s) or real(job, s, hosts))
    watch.since = 800.0
    line = watch.check(log)
    expected = f"megaprov: job el grows back to 3 nodes (node1, node2, node3) at its restart: node2, node3 answer again at {NOW}"
    assert line == expected and events(tmp_path) == [expected]
    [(args, kwargs)] = relaunched
    assert args == (
        watch.job,
        watch.spec,
        ["node1", "node2", "node3"],
        "grew back to 3 nodes at a restart: node2, node3",
        None,
        ["node1", "node2", "node3"],
    )
    assert kwargs == {"kill": True}
    assert since == [800.0, 800.0] and watch.since == 900.0
    assert not watch.due(log, ["failed-1"], 0.0)  # just asked


# ---- the relaunch


@pytest.fixture
def stage(monkeypatch, tmp_path):
    """relaunch with the inventory, the plan, the render, the stop play and the start stood in; everything recorded."""
    rec = SimpleNamespace(calls=[], states=[], stop=run_result(), start_error=None)
    (tmp_path / "spec.yml").write_text(LAB)
    monkeypatch.setattr(elastic, "_gpu_nodes", lambda inventory: rec.calls.append(("gpu_nodes", inventory)) or ["node1", "node2", "node3", "node4"])
    monkeypatch.setattr(target, "cluster", lambda *a: rec.calls.append(("cluster", *a)) or ("FOUND", [("node1", "10.0.0.1")]))
    monkeypatch.setattr(elastic.render, "render", lambda *a: rec.calls.append(("render", *a)) or "RENDERED")
    from megaprov.training import jobview, planner

    monkeypatch.setattr(planner, "plan", lambda *a: rec.calls.append(("plan", *a)) or "PLANNED")
    monkeypatch.setattr(jobview, "plan_dict", lambda p: {"plan": p})
    monkeypatch.setattr(jobs, "set_state", lambda job, state, **extra: rec.states.append((state, extra)))
    monkeypatch.setattr(elastic.plays, "run", lambda *a: rec.calls.append(("stop", *a)) or rec.stop)

    def start(*a, **k):
        rec.calls.append(("start", *a, k))
        if rec.start_error:
            raise rec.start_error
        return SimpleNamespace(hosts=["node1", "node2"])  # what jobs.start reports it started on

    monkeypatch.setattr(jobs, "start", start)
    monkeypatch.setenv("MEGAPROV_TEST_ENV", "seen")
    return rec


def test_relaunch_renders_for_the_new_nodes_stops_the_old_and_starts_from_the_checkpoint(tmp_path, stage):
    job = make_job(tmp_path)
    spec = parse(LAB)
    got = elastic.relaunch(job, spec, ["node2", "node1", "evil;host"], "lost node3 (unreachable)", "REPORT", kill=True)
    assert got is job and job.hosts == ["node1", "node2"]
    inventory = str(tmp_path / "inventory.ini")
    cluster, plan, render, stop, start = stage.calls[1:]
    assert stage.calls[0] == ("gpu_nodes", inventory)
    # only the inventory's nodes (job.json is the cluster user's), the others excluded from the shape
    assert cluster == ("cluster", spec, inventory, target.Shape(2, exclude=("node3", "node4")))
    assert plan == ("plan", spec, "FOUND")
    assert render[:4] == ("render", spec, "FOUND", [("node1", "10.0.0.1")]) and render[4]["MEGAPROV_TEST_ENV"] == "seen"
    assert stop == ("stop", "job_stop.yml", job.inventory, {"megaprov_job": job.vars(hosts=["node1", "node2", "node3"], kill=True)}, "REPORT", 3)
    assert start == (
        "start",
        spec,
        LAB,
        "FOUND",
        "PLANNED",
        {"plan": "PLANNED"},
        "RENDERED",
        inventory,
        True,
        "REPORT",
        {"change": "lost node3 (unreachable)"},
    )
    assert stage.states == [("reshaping", {"reshaping": "lost node3 (unreachable)"})]


def test_relaunch_stops_the_named_nodes_only_and_lets_them_save(tmp_path, stage):
    job = make_job(tmp_path)
    elastic.relaunch(job, parse(LAB), ["node1", "node2", "node3"], "grew", "REPORT", ["node3", "node9"])
    [stop] = [c for c in stage.calls if c[0] == "stop"]
    assert stop[3] == {"megaprov_job": job.vars(hosts=["node3"], kill=False)} and stop[5] == 1


def test_relaunch_with_nothing_to_stop_stops_nothing(tmp_path, stage):
    elastic.relaunch(make_job(tmp_path), parse(LAB), ["node1"], "back", "REPORT", [])
    assert [c[0] for c in stage.calls] == ["gpu_nodes", "cluster", "plan", "render", "start"]


def test_a_relaunch_whose_units_do_not_stop_fails_the_job_and_starts_nothing(tmp_path, stage):
    stage.stop = run_result(failures=[failure("node2")], ok=False)
    with pytest.raises(HostsUnreachable) as info:
        elastic.relaunch(make_job(tmp_path), parse(LAB), ["node1", "node2"], "lost node3", "REPORT")
    assert (
        info.value.message
        == "job el: the units could not be stopped before the change: node(s) node2 unreachable (ssh: connect to host: No route to host)"
    )
    assert stage.states[-1] == ("failed", {"reshaping": "lost node3: the units could not be stopped before the change"})
    assert "start" not in [c[0] for c in stage.calls]


def test_a_relaunch_whose_start_fails_says_so_in_job_json(tmp_path, stage):
    stage.start_error = RunFailed("job el: the start failed", "see the log")
    with pytest.raises(RunFailed):
        elastic.relaunch(make_job(tmp_path), parse(LAB), ["node1", "node2"], "lost node3", "REPORT")
    assert stage.states[-1] == ("failed", {"reshaping": "lost node3: the start on node1, node2 failed"})


def test_the_inventorys_gpu_nodes_are_read_in_order():
    inventory = ROOT / "inventories" / "example" / "inventory.ini"
    from megaprov import paths
    from megaprov.cluster import inventory as inv

    expected = list(inv.load(str(inventory), paths.roles_dir(), paths.cluster_defaults()).hosts_of("gpu_nodes"))
    assert expected and elastic._gpu_nodes(str(inventory)) == expected


# ---- megaprov job grow


@pytest.fixture
def grow(monkeypatch, tmp_path):
    """grow_systemd of a 3-node job running on node1 and node2, with the nodes' answers and the relaunch stood in."""
    rec = SimpleNamespace(
        job=make_job(tmp_path, hosts=("node1", "node2"), job_hosts=("node1", "node2", "node3")),
        answer=run_result(),
        bad=set(),
        relaunches=[],
        fail_first=None,
        status=[],
        shapes=[],
    )
    monkeypatch.setattr(
        elastic.jobmeta,
        "load",
        lambda path, name: (
            SimpleNamespace(job_hosts=("node1", "node2", "node3", "planted")) if path == tmp_path / "job.json" and name == "el" else None
        ),
    )
    monkeypatch.setattr(elastic, "_gpu_nodes", lambda inventory: ["node1", "node2", "node3", "node4"])
    monkeypatch.setattr(elastic.plays, "run", lambda *a: rec.status.append(a) or rec.answer)
    monkeypatch.setattr(elastic, "unhealthy", lambda job: rec.bad)
    monkeypatch.setattr(target, "cluster", lambda spec, inventory, shape: rec.shapes.append((inventory, shape)) or (cpu_cluster(3), []))

    def relaunch(*a, **k):
        rec.relaunches.append((a, k))
        if rec.fail_first and len(rec.relaunches) == 1:
            raise rec.fail_first
        return a[0]

    monkeypatch.setattr(elastic, "relaunch", relaunch)
    return rec


def test_grow_takes_the_answering_node_back(tmp_path, grow):
    spec = parse(LAB)
    before, after = elastic.grow_systemd(grow.job, spec, "REPORT")
    assert (before, after) == (["node1", "node2"], ["node1", "node2", "node3"])
    [status] = grow.status
    assert status == ("job_status.yml", grow.job.inventory, {"megaprov_job": grow.job.vars(hosts=["node1", "node2", "node3"])}, SILENT, 3)
    assert grow.shapes == [(str(tmp_path / "inventory.ini"), target.Shape(3, exclude=("node4",)))]
    assert events(tmp_path) == [f"megaprov: job el grows from 2 to 3 nodes (node1, node2, node3): node3 answer again at {NOW}"]
    [(args, kwargs)] = grow.relaunches
    assert args == (
        grow.job,
        spec,
        ["node1", "node2", "node3"],
        "grew to 3 nodes: node3 back (megaprov job grow)",
        "REPORT",
        ["node1", "node2", "node3"],
    )
    assert kwargs == {}


def test_grow_of_a_job_on_all_its_nodes_is_refused(tmp_path, grow):
    grow.job.hosts = ["node1", "node2", "node3"]
    with pytest.raises(UsageError) as info:
        elastic.grow_systemd(grow.job, parse(LAB), "REPORT")
    assert (info.value.message, info.value.hint) == ("job el runs on all 3 of its nodes", "nothing to grow")
    assert grow.status == []


def test_grow_names_why_each_missing_node_cannot_come_back(tmp_path, grow):
    grow.job.hosts = ["node1"]
    grow.answer = run_result(failures=[failure("node2"), failure("node3", unreachable=False)])
    grow.bad = {"node3"}
    with pytest.raises(UsageError) as info:
        elastic.grow_systemd(grow.job, parse(LAB), "REPORT")
    assert info.value.message == "job el cannot grow: node2 (unreachable), node3 (error findings of megaprov doctor)"
    assert info.value.hint == "bring the node back (and run `megaprov doctor` again), then grow"
    assert grow.relaunches == []


def test_grow_to_no_larger_count_is_refused(tmp_path, grow, monkeypatch):
    monkeypatch.setattr(elastic, "counts_of", lambda spec, cluster: [4, 2])
    with pytest.raises(UsageError) as info:
        elastic.grow_systemd(grow.job, parse(LAB), "REPORT")
    assert info.value.message == "job el cannot grow: 3 healthy nodes keep the global batch on no more than its 2"
    assert info.value.hint == "bring more of its nodes back"


def test_a_failed_grow_goes_back_to_the_nodes_it_ran_on(tmp_path, grow):
    grow.fail_first = RunFailed("job el: the start failed", "see the log")
    spec = parse(LAB)
    with pytest.raises(RunFailed):
        elastic.grow_systemd(grow.job, spec, "REPORT")
    assert events(tmp_path)[-1] == f"megaprov: job el could not start on 3 nodes: back on node1, node2 at {NOW}"
    assert grow.relaunches[1] == ((grow.job, spec, ["node1", "node2"], "the grow failed: back on 2 nodes", "REPORT", []), {})


def test_the_grow_follows_the_largest_count_of_the_full_cluster(tmp_path, grow, monkeypatch):
    seen = []
    monkeypatch.setattr(elastic, "counts_of", lambda spec, cluster: seen.append(cluster.nodes) or [3, 2])
    s = lab_spec()
    elastic.grow_systemd(grow.job, s, "REPORT")
    assert seen == [3]

"""benchmarks/taskprof.py: a run's job events folded into tasks (wall span over hosts, skips), two roles' tasks of the
same name kept apart by their file and line."""

from tests.conftest import ROOT, load_module

taskprof = load_module(ROOT / "benchmarks" / "taskprof.py", "megaprov_taskprof")


def event(kind, host, task, path, start, end, play="Python environment"):
    data = {
        "play": play,
        "task": task,
        "task_action": "ansible.builtin.debug",
        "host": host,
        "start": start,
        "end": end,
        "task_path": f"/x/ansible_collections/megaprov/cluster/{path}",
    }
    return {"event": kind, "event_data": data}


def test_profile_folds_hosts_and_keeps_same_named_tasks_apart():
    events = [
        event("runner_on_skipped", "node1", "Say it", "roles/pytorch/tasks/main.yml:5", "2026-01-01T00:00:00", "2026-01-01T00:00:00.100000"),
        event("runner_on_skipped", "node2", "Say it", "roles/pytorch/tasks/main.yml:5", "2026-01-01T00:00:00", "2026-01-01T00:00:00.300000"),
        event("runner_on_ok", "node1", "Say it", "roles/megatron/tasks/main.yml:9", "2026-01-01T00:00:10", "2026-01-01T00:00:12"),
        {"event": "playbook_on_task_start", "event_data": {"task": "Say it"}},
    ]
    tasks = taskprof.profile(events)
    assert [(t.path, t.hosts, t.skipped, round(t.wall, 2)) for t in tasks] == [
        ("roles/pytorch/tasks/main.yml:5", 2, 2, 0.3),
        ("roles/megatron/tasks/main.yml:9", 1, 0, 2.0),
    ]
    lines = taskprof.lines(tasks, 1)
    assert lines[0] == "tasks 2, wall sum 2.3 s; skipped on every host: 1 (0.3 s)"
    assert lines[1].startswith("  2.00 s  hosts=1 skipped=0  Python environment") and lines[1].endswith("roles/megatron/tasks/main.yml:9")
    assert len(lines) == 2

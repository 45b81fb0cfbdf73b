"""Where bootstrap time goes: seconds per stage from the plays' start events."""

from megaprov.cluster import provision, runner
from megaprov.cluster.stages import STAGES


def test_every_stage_playbook_play_maps_to_its_stage(root):
    stage_of = provision.stage_plays(root / "ansible_collections/megaprov/cluster/playbooks")
    assert set(stage_of.values()) == {s for s, _ in STAGES}
    assert stage_of["Storage - NFS server"] == "storage" and stage_of["Storage - shared directory on every node"] == "storage"
    assert stage_of["Python environment"] == "python"


def test_a_stage_runs_from_its_first_play_to_the_next_stages_first_play():
    stage_of = {"Validate": "validate", "Storage - server": "storage", "Storage - clients": "storage", "Python": "python"}
    plays = [("Validate", 100.0), ("Storage - server", 101.5), ("Storage - clients", 110.0), ("Unknown", 111.0), ("Python", 130.0)]
    assert provision.stage_seconds(plays, stage_of, 453.04) == [
        {"stage": "validate", "seconds": 1.5},
        {"stage": "storage", "seconds": 28.5},
        {"stage": "python", "seconds": 323.0},
    ]
    assert provision.stage_seconds([], stage_of, 5.0) == []


def test_play_start_events_are_folded_with_their_time():
    folder = runner.EventFolder()
    folder({"event": "playbook_on_play_start", "created": "2026-11-30T12:00:00.500000", "event_data": {"play": "Base"}})
    folder({"event": "playbook_on_play_start", "created": "bad", "event_data": {"play": "SSH mesh"}})
    assert [name for name, _ in folder.plays] == ["Base"]

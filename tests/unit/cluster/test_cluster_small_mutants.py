"""Behaviour that the mutation benchmark found unpinned (issue 36): the NFS network filter, the bootstrap history
file and the fact-cache reader."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from ansible_collections.megaprov.cluster.plugins.filter import nfs_network
from megaprov.cluster import factcache, history
from megaprov.paths import fact_cache_dir

# --- nfs_supernet -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("addresses", "expected"),
    [
        ([], ""),
        (["", ""], ""),
        (["10.0.0.5"], "10.0.0.5/32"),
        (["10.0.0.5", "", "10.0.0.9"], "10.0.0.0/28"),
        (["192.168.1.10", "192.168.2.10"], "192.168.0.0/22"),
        (["1.2.3.4", "100.0.0.1"], "0.0.0.0/1"),
        (["128.0.0.1", "200.0.0.1"], "128.0.0.0/1"),
        (["1.0.0.0", "200.0.0.0"], "0.0.0.0/0"),
    ],
)
def test_nfs_supernet_is_the_smallest_network(addresses: list[str], expected: str) -> None:
    assert nfs_network.nfs_supernet(addresses) == expected


# --- nfs_cidr_problem ---------------------------------------------------------------------------------------------


def test_nfs_cidr_problem_accepts_a_network_holding_every_address() -> None:
    assert nfs_network.nfs_cidr_problem("10.0.0.0/24", ["10.0.0.1", "", "10.0.0.254"]) == ""
    assert nfs_network.nfs_cidr_problem("10.0.0.0/24", []) == ""


def test_nfs_cidr_problem_accepts_host_bits_set() -> None:
    assert nfs_network.nfs_cidr_problem("10.0.0.5/24", ["10.0.0.7"]) == ""


def test_nfs_cidr_problem_names_every_address_outside() -> None:
    problem = nfs_network.nfs_cidr_problem("10.0.0.0/24", ["10.0.0.1", "10.0.1.1", "", "192.168.0.1"])
    assert problem == "10.0.0.0/24 does not contain 10.0.1.1, 192.168.0.1"


def test_nfs_cidr_problem_handles_ipv6() -> None:
    assert nfs_network.nfs_cidr_problem("fd00::/64", ["fd00::1", "fd00::ffff"]) == ""
    assert nfs_network.nfs_cidr_problem("fd00::1/64", ["fd00:0:0:1::1"]) == "fd00::1/64 does not contain fd00:0:0:1::1"


@pytest.mark.parametrize("cidr", ["not-a-cidr", "10.0.0.0/33", ""])
def test_nfs_cidr_problem_rejects_a_malformed_cidr(cidr: str) -> None:
    assert nfs_network.nfs_cidr_problem(cidr, ["10.0.0.1"]) == f"{cidr!r} is not a CIDR such as 10.0.0.0/24"


# --- history ------------------------------------------------------------------------------------------------------


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    monkeypatch.setattr(history.time, "time", lambda: 1234.5)
    return tmp_path / "state"


def _report(failures: list[SimpleNamespace], stages: list[str]) -> SimpleNamespace:
    return SimpleNamespace(
        hosts=[SimpleNamespace(host=h) for h in ("localhost", "n1", "n2")],
        stages=[{"stage": s} for s in stages],
        failures=failures,
        ok=False,
        exit_code=2,
        error="n2 failed",
    )


def test_status_file_lives_under_state_status(state: Path, tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.ini"
    assert history.status_file(inventory) == state / "status" / f"{fact_cache_dir(inventory).name}.json"


def test_record_bootstrap_writes_each_stage_and_the_last_run(state: Path, tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.ini"
    failures = [
        SimpleNamespace(play="Install drivers", host="n1", unreachable=True),
        SimpleNamespace(play="Install drivers", host="localhost", unreachable=False),
        SimpleNamespace(play="Configure slurm", host="n2", unreachable=False),
    ]
    stage_of = {"Install drivers": "drivers", "Configure slurm": "slurm"}
    history.record_bootstrap(inventory, _report(failures, ["validate", "drivers", "base", "slurm"]), stage_of, check=False)
    expected = {
        "stages": {
            "drivers": {"at": 1234.5, "hosts": {"n1": "unreachable", "n2": "ok"}},
            "base": {"at": 1234.5, "hosts": {"n1": "ok", "n2": "ok"}},
            "slurm": {"at": 1234.5, "hosts": {"n1": "ok", "n2": "failed"}},
        },
        "last": {"at": 1234.5, "ok": False, "exit_code": 2, "error": "n2 failed"},
    }
    path = history.status_file(inventory)
    assert path.read_text() == json.dumps(expected, indent=2, sort_keys=True) + "\n"
    assert history.read_status(path) == expected
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_record_bootstrap_keeps_stages_it_did_not_run(state: Path, tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.ini"
    history.record_bootstrap(inventory, _report([], ["base"]), {}, check=False)
    history.record_bootstrap(inventory, _report([], ["slurm"]), {}, check=False)
    data = history.read_status(history.status_file(inventory))
    assert sorted(data["stages"]) == ["base", "slurm"]


def test_record_bootstrap_check_writes_nothing(state: Path, tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.ini"
    history.record_bootstrap(inventory, _report([], ["base"]), {}, check=True)
    assert not history.status_file(inventory).exists()


@pytest.mark.parametrize("text", ["[1, 2]", '"text"', "null", "{not json", ""])
def test_read_status_is_empty_for_anything_but_an_object(tmp_path: Path, text: str) -> None:
    path = tmp_path / "status.json"
    path.write_text(text)
    assert history.read_status(path) == {}
    assert history.read_status(tmp_path / "missing.json") == {}


# --- factcache ----------------------------------------------------------------------------------------------------


def test_read_json_reads_facts_larger_than_the_default_file_limit(tmp_path: Path) -> None:
    path = tmp_path / "n1"
    doc = {"blob": "x" * (2 << 20)}
    path.write_text(json.dumps(doc))
    assert factcache.read_json(path) == doc


def test_read_json_refuses_facts_over_its_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(factcache, "MAX_FACTS_BYTES", 16)
    path = tmp_path / "n1"
    path.write_text(json.dumps({"blob": "x" * 64}))
    assert factcache.read_json(path) is None

"""doctor's Xid catalogue against the sources it cites (megaprov/ops/doctor/xid.py's docstring): DCGM 4.6.0's health
watch treats 48, 74, 79, 95, 119, 120 and 140 as always fatal and 94 as a warning; the catalogue's IGNORE bucket is
nothing to do. Each rule is checked through doctor itself: a kernel log line with the Xid becomes a finding of the
severity, cause and fix the catalogue gives, and a fatal one drains its node."""

from __future__ import annotations

import pytest

from megaprov.ops.doctor import health, signatures, xid
from megaprov.ops.doctor.findings import XID_ACTION_FIX, Report

DCGM_FATAL = (48, 74, 79, 95, 119, 120, 140)  # DcgmHealthWatch.cpp BuildXidMappings
DCGM_WARNING = (94,)  # contained: only the application restarts (DcgmRecorder.cpp)
IGNORED = (43, 45, 63, 92)  # the catalogue's IGNORE bucket, among others
RESTART_APP = (8, 94)
CHECK_APP = (13, 31)


def doctor_on(number: int) -> list:
    line = f"[ 1234.5] NVRM: Xid (PCI:0000:18:00): {number}, pid=4321, name=python, message"
    return [f for f in signatures.scan([line], signatures.Context("kern.log", "gpu1")) if f.code == "GPU_XID"]


@pytest.mark.parametrize("number", DCGM_FATAL)
def test_the_xids_dcgm_calls_fatal_are_errors_that_take_the_gpu_or_node_out(number):
    entry = xid.lookup(number)
    assert entry.severity == "error" and entry.action in ("reset_gpu", "reboot", "drain"), entry
    (found,) = doctor_on(number)
    assert found.severity == "error" and found.fix == XID_ACTION_FIX[entry.action] and f"Xid {number} ({entry.name})" in found.cause


@pytest.mark.parametrize("number", DCGM_WARNING)
def test_a_contained_error_restarts_the_application_only(number):
    entry = xid.lookup(number)
    assert (entry.action, entry.severity) == ("restart_app", "warn")
    assert [f.severity for f in doctor_on(number)] == ["warn"]


@pytest.mark.parametrize(
    ("numbers", "action", "severity"), [(IGNORED, "none", "info"), (RESTART_APP, "restart_app", "warn"), (CHECK_APP, "check_app", "warn")]
)
def test_the_catalogues_buckets(numbers, action, severity):
    for number in numbers:
        assert (xid.lookup(number).action, xid.lookup(number).severity) == (action, severity), number
        assert [f.severity for f in doctor_on(number)] == [severity], number


def test_every_entry_is_consistent_nothing_to_do_is_a_note_and_an_error_takes_something_out():
    assert len(xid.CATALOGUE) >= 48
    for number, entry in xid.CATALOGUE.items():
        assert entry.number == number and entry.action in xid.ACTIONS and entry.severity in xid.SEVERITIES, entry
        assert (entry.action == "none") == (entry.severity == "info"), entry
        if entry.severity == "error":
            assert entry.action in ("reset_gpu", "reboot", "drain"), entry
        assert entry.action in XID_ACTION_FIX and entry.name and entry.note, entry


def test_an_unknown_xid_is_a_warning_to_drain_and_look_up():
    assert 999 not in xid.CATALOGUE
    entry = xid.lookup(999)
    assert (entry.name, entry.action, entry.severity) == ("unknown Xid", xid.UNKNOWN_ACTION, xid.UNKNOWN_SEVERITY) == ("unknown Xid", "drain", "warn")
    (found,) = doctor_on(999)
    assert found.severity == "warn" and "not in megaprov's catalogue" in found.cause


def test_only_fatal_xids_drain_their_node(tmp_path):
    from megaprov.cluster import inventory as inv

    path = tmp_path / "inventory.ini"
    path.write_text("[head]\nhead1\n\n[gpu_nodes]\ngpu1\n")
    hosts, groups, group_vars, _ = inv.parse_ini(path.read_text(), str(path))
    found = inv.Inventory(path, hosts, groups, group_vars)
    for number in (*DCGM_FATAL, *DCGM_WARNING, *IGNORED, 999):
        report = Report()
        report.add(*doctor_on(number))
        assert bool(health.drain_plan(found, report)) == (number in DCGM_FATAL), number

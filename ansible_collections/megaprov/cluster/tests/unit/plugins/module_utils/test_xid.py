"""module_utils/xid.py: the Xid line of the NVIDIA driver, read the same way by megaprov doctor and the node collector."""

import pytest

from ansible_collections.megaprov.cluster.plugins.module_utils import xid

FORMS = [
    # kernel_rc.c, today's driver: no MIG attribution
    ("NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus.", ("0000:18:00", 79, "")),
    # kernel_rc.c on a MIG GPU: the GPU instance, or the GPU and compute instance
    ("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid='<unknown>', name=<unknown>, Contained: CE User Channel", ("0000:01:00", 94, "GPU-I:05")),
    ("NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 31, pid=1234, name=python, MMU Fault", ("0000:3b:00", 31, "GPU-I:01 GPU-CI:02")),
    # older drivers: no pid, upper-case hex
    ("NVRM: Xid (PCI:0000:3B:00): 13, Graphics Engine Exception on (GPC 0, TPC 1)", ("0000:3b:00", 13, "")),
    # the oldest drivers, as NVIDIA's "Xid Errors" document shows them: no "PCI:"
    ("[ 12.5] NVRM: Xid (0000:03:00): 14, Channel 00000001", ("0000:03:00", 14, "")),
    # journal and syslog prefixes, a function number
    ("2026-12-02T10:00:00+0000 gpu7 kernel: NVRM: Xid (PCI:0001:c1:00.0): 48, pid=99, name=python, DBE", ("0001:c1:00", 48, "")),
    ("NVRM: Xid (PCI:0000:18:00): , no number", None),
    ("NVRM: Xid (PCI:0000:18:00): 123456, too many digits", None),
    ("NVRM: Xid (PCI:zz:18:00): 79, not an address", None),
    ("NVRM: GPU at PCI:0000:18:00: GPU-1234", None),
    ("NVRM: Xid (PCI:0000:18:00 " + "x" * 65 + "): 79, a gap longer than any instance", None),
]


@pytest.mark.parametrize(("line", "expected"), FORMS, ids=[str(i) for i in range(len(FORMS))])
def test_parse_reads_every_form_of_the_xid_line(line, expected):
    event = xid.parse(line)
    assert (tuple(event) if event else None) == expected
    match = xid.LINE.search(line)
    assert (tuple(xid.from_match(match)) if match else None) == expected


def test_every_xid_line_holds_the_marker():
    assert all(xid.MARKER in line for line, expected in FORMS if expected)
    assert xid.parse("NVRM: Xid(PCI:0000:18:00): 79") is None


def test_address_is_what_the_driver_prints():
    assert xid.address(0, 0x3B, 0) == "0000:3b:00" and xid.address(0x10001, 0xC1, 0x1F) == "10001:c1:1f"

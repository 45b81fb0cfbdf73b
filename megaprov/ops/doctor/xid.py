"""NVIDIA's Xid errors: what each means and the action it calls for, as megaprov doctor reports them.

Sources read: NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors, "Xid Errors" with its resolution per Xid:
restart the application, reset the GPU, reboot, or drain and contact support) and NVIDIA DCGM 4.6.0's own handling
(NVIDIA/DCGM: nvvs/src/DcgmRecorder.cpp treats Xid 94 as contained, only the application restarts, and Xid 95 as
uncontained; dcgmlib/src/DcgmKmsgReader.cpp reads Xids 79, 119 and 120 from /dev/kmsg as fatal;
dcgmlib/src/tests/DcgmKmsgReaderTests.cpp holds the driver's line "NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>',
name=<unknown>, GPU has fallen off the bus"). The notes are megaprov's own words. Pure data."""

from __future__ import annotations

from dataclasses import dataclass

SOURCE = "NVIDIA Xid catalogue (docs.nvidia.com/deploy/xid-errors); NVIDIA DCGM 4.6.0 nvvs/src/DcgmRecorder.cpp, dcgmlib/src/DcgmKmsgReader.cpp"
ACTIONS = ("restart_app", "check_app", "reset_gpu", "reboot", "drain", "none")


@dataclass(frozen=True)
class Xid:
    number: int
    name: str  # as NVIDIA names it
    action: str  # one of ACTIONS
    severity: str  # error, warn or info
    note: str  # what it usually means, in megaprov's words


def _x(number: int, name: str, action: str, severity: str, note: str) -> tuple[int, Xid]:
    return number, Xid(number, name, action, severity, note)


CATALOGUE: dict[int, Xid] = dict(
    [
        _x(
            13,
            "Graphics Engine Exception",
            "check_app",
            "warn",
            "usually an application fault (bad address, bad kernel); a GPU fault when it repeats",
        ),
        _x(
            31,
            "GPU memory page fault",
            "check_app",
            "warn",
            "an illegal memory access by a kernel: an application or library bug far more often than hardware",
        ),
        _x(
            32,
            "Invalid or corrupted push buffer stream",
            "reset_gpu",
            "error",
            "the driver read a bad command stream: PCIe or host memory corruption",
        ),
        _x(38, "Driver firmware error", "reset_gpu", "error", "the GPU's firmware failed; reset the GPU"),
        _x(
            43,
            "GPU stopped processing",
            "restart_app",
            "warn",
            "the GPU stopped a context after a fault in the application; the GPU itself is usable",
        ),
        _x(
            45,
            "Preemptive cleanup, due to previous errors",
            "none",
            "info",
            "the driver cleaned up after an earlier error or a killed process; look at the Xid before it",
        ),
        _x(48, "Double Bit ECC Error", "reset_gpu", "error", "an uncorrectable memory error; the GPU needs a reset to retire or remap the row"),
        _x(61, "Internal micro-controller breakpoint/warning", "reset_gpu", "error", "the GPU's internal micro-controller stopped; reset the GPU"),
        _x(62, "Internal micro-controller halt", "reset_gpu", "error", "the GPU's internal micro-controller halted; reset the GPU"),
        _x(
            63,
            "ECC page retirement or row remapping recording event",
            "reset_gpu",
            "warn",
            "a row was marked for remapping; it takes effect at the next GPU reset",
        ),
        _x(64, "ECC page retirement or row remapper recording failure", "drain", "error", "the GPU could not record a remap: its memory is failing"),
        _x(68, "NVDEC0 Exception", "check_app", "warn", "a video decoder fault, mostly in the application"),
        _x(69, "Graphics Engine class error", "check_app", "warn", "an invalid command to the graphics engine, mostly in the application"),
        _x(74, "NVLINK Error", "reset_gpu", "error", "an NVLink failed: reset the GPU; a link that fails again needs service"),
        _x(
            79,
            "GPU has fallen off the bus",
            "drain",
            "error",
            "the GPU stopped answering on PCIe (power, thermal or hardware): drain and reboot, then service",
        ),
        _x(92, "High single-bit ECC error rate", "reset_gpu", "warn", "many corrected memory errors: reset the GPU to remap, watch for more"),
        _x(
            94,
            "Contained ECC error",
            "restart_app",
            "error",
            "an uncorrectable error the hardware contained: only the application that hit it restarts",
        ),
        _x(
            95,
            "Uncontained ECC error",
            "reset_gpu",
            "error",
            "an uncorrectable error that was not contained: every application on the GPU is affected; reset it",
        ),
        _x(109, "Context Switch Timeout Error", "restart_app", "warn", "a context did not switch in time: a hung kernel or a GPU fault"),
        _x(
            119,
            "GSP RPC Timeout",
            "reset_gpu",
            "error",
            "the GPU System Processor stopped answering the driver: reset the GPU (DCGM treats it as fatal)",
        ),
        _x(120, "GSP Error", "reset_gpu", "error", "the GPU System Processor reported an error: reset the GPU (DCGM treats it as fatal)"),
        _x(121, "C2C Link corrected error", "none", "info", "a corrected error on the chip-to-chip link (Grace Hopper); watch its rate"),
        _x(
            154, "GPU recovery action changed", "drain", "error", "the driver says what the GPU needs now (reset or reboot): drain the node and do it"
        ),
    ]
)


def lookup(number: int) -> Xid:
    """The catalogue's entry; an Xid it does not list is reported as needing a look at the GPU (drain if it repeats)."""
    return CATALOGUE.get(number) or Xid(number, "Xid not in megaprov's catalogue", "drain", "warn", "see NVIDIA's Xid catalogue for this number")

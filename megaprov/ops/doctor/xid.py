"""NVIDIA's Xid errors: what each means and the action it calls for, as megaprov doctor reports them. Pure data.

Sources read (the notes below are megaprov's own words; only the short names are NVIDIA's):
- NVIDIA's Xid catalogue for Ampere and newer GPUs, docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, and the
  spreadsheet it links (Xid-Catalog.xlsx, sheets "Xids", "Xid 144-150 Decode", "Resolution Buckets"), read as embedded by
  NVIDIA/NVSentinel health-monitors/syslog-health-monitor/pkg/common/Xid-Catalog.xlsx (sha256 7f70ce96...d5a5, the same
  rows as the page): per Xid the "Resolution Bucket (Immediate Action)" (RESTART_APP, RESET_GPU, RESTART_BM, IGNORE,
  CONTACT_SUPPORT, WORKFLOW_XID_45/48, WORKFLOW_NVLINK_ERR, WORKFLOW_NVLINK5_ERR, XID_154, CHECK_MECHANICALS, ...) and the
  investigatory one (CHECK_APP/CUDA, WORKFLOW_XID_13/31, XID_137_FLOW, ...).
- The archived Xid table, docs.nvidia.com/deploy/xid-errors/archive/index.html: the names of codes the new catalogue lists
  as "Unused" on Ampere and newer (61, 122, 123).
- NVIDIA/DCGM 4.6.0: modules/health/DcgmHealthWatch.cpp BuildXidMappings (always-fatal Xids 48, 74, 79, 95, 119, 120, 140;
  94 only a warning), nvvs/src/DcgmRecorder.cpp (94 contained: only the application restarts; 95 uncontained),
  dcgmlib/src/DcgmKmsgReader.cpp (79, 119 and 120 read from /dev/kmsg).
- NVIDIA/open-gpu-kernel-modules 595.45.04 and 580.95.05: src/nvidia/src/kernel/gpu/gpu.c (Xid 154's text "GPU recovery action
  changed from 0x%x (%s) to 0x%x (%s)" with None / GPU Reset Required / Node Reboot Required / Drain P2P / Drain and Reset),
  src/common/sdk/nvidia/inc/nverror.h (the codes).

How a catalogue bucket becomes a megaprov action (findings.XID_ACTION_FIX says what each action means to the operator):
RESTART_APP -> restart_app, or check_app where the investigatory action points at the application first (13, 31, 69);
RESET_GPU and WORKFLOW_XID_48 / WORKFLOW_NVLINK_ERR -> reset_gpu; RESTART_BM -> reboot; IGNORE -> none (severity info);
CONTACT_SUPPORT and CHECK_MECHANICALS -> drain. Deliberate departures: 64 drains (the immediate action is a GPU reset, but a
row-remap failure is an RMA criterion in NVIDIA's GPU memory error management guide), 137 is check_app (immediate IGNORE, but
its investigatory flow is an application bug hunt), 154 is reboot (the catalogue says "follow what Xid 154 says"; a reboot
satisfies every recovery action the driver can name).

Not verified: the catalogue revision (the sheet carries no date; its rows reach Xid 172 and driver R575); NVIDIA's live page
was not reachable, only stored copies; Xids 144-150 (NVLink5, B200/GB200 only) need the message's IntrInfo and error-status
words decoded against the "Xid 144-150 Decode" sheet to pick between no action and a GPU reset, which megaprov does not do:
their entries here are the per-code worst case that is common (reset_gpu) with a severity for the usual case; the message
texts of most Xids come from GSP firmware, which is not open source."""

from __future__ import annotations

from dataclasses import dataclass

SOURCE = (
    "NVIDIA Xid catalogue for Ampere and newer (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, Xid-Catalog.xlsx "
    "sha256 7f70ce96..., rows to Xid 172), archived Xid table for codes it lists as unused; NVIDIA DCGM 4.6.0 DcgmHealthWatch.cpp"
)
ACTIONS = ("restart_app", "check_app", "reset_gpu", "reboot", "drain", "none")
SEVERITIES = ("error", "warn", "info")


@dataclass(frozen=True)
class Xid:
    number: int
    name: str  # the short description as NVIDIA words it
    action: str  # one of ACTIONS
    severity: str  # one of SEVERITIES
    note: str  # what it usually means and what to do, in megaprov's words


_NVLINK5 = "NVLink5 (B200/GB200 only)"

_ROWS: tuple[tuple[int, str, str, str, str], ...] = (
    (
        8,
        "GPU stopped processing",
        "restart_app",
        "warn",
        "a channel stopped making progress and was torn down: restart the job, report it if it recurs",
    ),
    (
        13,
        "Graphics Engine Exception",
        "check_app",
        "warn",
        "mostly the application (an out-of-range address, a bad instruction); the same GPC/TPC failing again and again points at the GPU",
    ),
    (
        31,
        "GPU memory page fault",
        "check_app",
        "warn",
        "a kernel touched an address it may not: an application or library bug far more often than hardware, unless it repeats on one GPU only",
    ),
    (
        32,
        "Invalid or corrupted push buffer stream",
        "restart_app",
        "warn",
        "the GPU's DMA engine read a damaged command stream, usually a PCIe signal problem rather than the application",
    ),
    (
        38,
        "Driver firmware error",
        "none",
        "info",
        "a GPU-internal firmware watchdog fired; no action is asked for, report it if it keeps coming back",
    ),
    (39, "Copy Engine Exception", "restart_app", "warn", "a copy engine faulted: restart the job, report it if it recurs"),
    (40, "Copy Engine Exception", "restart_app", "warn", "a copy engine faulted: restart the job, report it if it recurs"),
    (41, "Copy Engine Exception", "restart_app", "warn", "a copy engine faulted: restart the job, report it if it recurs"),
    (
        43,
        "GPU stopped processing",
        "none",
        "info",
        "the application hit a software fault and was stopped; the GPU is fine, the reason is the Xid before it or the job's own log",
    ),
    (
        45,
        "Preemptive cleanup, due to previous errors",
        "none",
        "info",
        "the driver tore down a job's GPU work (kill, Ctrl-C, GPU reset or an earlier error); act on the Xid logged before it",
    ),
    (46, "GPU stopped processing", "reset_gpu", "error", "the GPU timed out on its work: reset it, and call the vendor if it recurs"),
    (
        48,
        "Double Bit ECC Error",
        "reset_gpu",
        "error",
        "an uncorrectable memory error: reset the GPU (drain first when Xid 63 or 64 come with it) and run a field diagnostic if it repeats",
    ),
    (54, "Auxiliary power is not connected to the GPU board", "drain", "error", "the board lacks auxiliary power: check its cabling and seating"),
    (
        61,
        "Internal micro-controller breakpoint/warning",
        "drain",
        "warn",
        "a code NVIDIA's catalogue lists as unused on Ampere and newer: unexpected on these GPUs, so a case for the vendor",
    ),
    (62, "Internal micro-controller halt", "reset_gpu", "error", "a micro-controller inside the GPU halted: reset the GPU, report it if it recurs"),
    (
        63,
        "GPU memory remapping event",
        "none",
        "info",
        "a failing memory row was recorded for remapping; it takes effect at the next GPU reset (nvidia-smi's remapped rows show it pending)",
    ),
    (
        64,
        "GPU memory remapping failure",
        "drain",
        "error",
        "the GPU could not record a row remap, so its memory can no longer repair itself: take the node out and plan a replacement",
    ),
    (68, "NVDEC0 Exception", "restart_app", "warn", "the video decoder faulted (rare in training): restart the job"),
    (69, "Graphics Engine class error", "check_app", "warn", "the engine was sent a command it does not accept, usually by the application"),
    (
        74,
        "NVLINK Error",
        "reset_gpu",
        "error",
        "an NVLink to another GPU or an NVSwitch failed (the fault may be at the far end): reset or reboot; a link that fails again needs service",
    ),
    (
        79,
        "GPU has fallen off the bus",
        "reboot",
        "error",
        "the GPU stopped answering on PCIe (power, thermal, riser or board): drain and reboot the node, open a hardware case if it returns",
    ),
    (92, "High single-bit ECC error rate", "none", "info", "corrected memory errors are frequent; nothing to do now, watch for a rising trend"),
    (
        94,
        "Contained memory error",
        "restart_app",
        "warn",
        "an uncorrectable error was confined to one application: restart that job; reset the GPU when convenient",
    ),
    (
        95,
        "Uncontained memory error",
        "reset_gpu",
        "error",
        "an uncorrectable error that may have hit every application on the GPU: reset the GPU before running on it again",
    ),
    (
        109,
        "Context Switch Timeout Error",
        "reset_gpu",
        "error",
        "the GPU could not switch contexts in time (a hung kernel or a GPU fault): reset the GPU",
    ),
    (
        110,
        "Security Fault Error",
        "reset_gpu",
        "error",
        "a hardware security fault: reset the GPU, cold-reset the system and call the vendor if it persists",
    ),
    (
        119,
        "GSP RPC Timeout",
        "reset_gpu",
        "error",
        "the GPU System Processor stopped answering the driver: reset the GPU, power-cycle the node if it comes back",
    ),
    (120, "GSP Error", "reset_gpu", "error", "code on the GPU System Processor failed: reset the GPU, power-cycle the node if it comes back"),
    (
        121,
        "C2C Error",
        "none",
        "info",
        "corrected errors on the chip-to-chip link to a Grace CPU (GB200); no impact, a GPU reset in a maintenance window retrains the link",
    ),
    (
        122,
        "SPI PMU RPC Read Failure",
        "drain",
        "warn",
        "a code NVIDIA's catalogue lists as unused on Ampere and newer: unexpected on these GPUs, so a case for the vendor",
    ),
    (
        123,
        "SPI PMU RPC Write Failure",
        "drain",
        "warn",
        "a code NVIDIA's catalogue lists as unused on Ampere and newer: unexpected on these GPUs, so a case for the vendor",
    ),
    (
        136,
        "Link Training Failed",
        "reset_gpu",
        "error",
        "an NVLink did not train (H100): reset the GPU; a link that fails again needs its signal path checked",
    ),
    (
        137,
        "NVLink Privilege Error",
        "check_app",
        "warn",
        "an illegal peer-to-peer access over NVLink, mostly an application bug: debug it with compute-sanitizer or cuda-gdb",
    ),
    (
        140,
        "ECC Unrecovered Error",
        "reset_gpu",
        "error",
        "uncorrectable memory errors the driver could not retire or remap: reset the GPU, call the vendor if it persists",
    ),
    (143, "GPU Initialization Error", "reset_gpu", "error", "the GPU failed to initialise: reset it, call the vendor if it persists"),
    (
        144,
        "NVLINK: SAW Error",
        "reset_gpu",
        "warn",
        f"{_NVLINK5}: a 'Fatal' message needs a GPU reset, a 'Nonfatal' one nothing; watch for Xid 48 or 94/95 after it",
    ),
    (
        145,
        "NVLINK: RLW Error",
        "reset_gpu",
        "warn",
        f"{_NVLINK5}: a 'Fatal' message needs a GPU reset, a 'Nonfatal' one nothing; follow an Xid 154 if one comes with it",
    ),
    (146, "NVLINK: TLW Error", "reset_gpu", "warn", f"{_NVLINK5}: a 'Fatal' message needs a GPU reset, a 'Nonfatal' one nothing"),
    (147, "NVLINK: TREX Error", "none", "info", f"{_NVLINK5}: non-fatal, no action; report it if it repeats"),
    (148, "NVLINK: NVLPW_CTRL Error", "none", "info", f"{_NVLINK5}: non-fatal, no action; report it if it repeats"),
    (
        149,
        "NVLINK: NETIR Error",
        "reset_gpu",
        "error",
        f"{_NVLINK5}: a link went down (cable, transceiver, peer or a deliberate shutdown): reset the GPU, then look at the link",
    ),
    (150, "NVLINK: MSE Error", "reset_gpu", "error", f"{_NVLINK5}: the link's management engine failed: reset the GPU"),
    (
        154,
        "GPU Recovery Action Changed",
        "reboot",
        "error",
        "after another Xid the driver states what the GPU needs (GPU reset, node reboot, drain P2P, drain and reset): do it; a reboot covers all",
    ),
    (
        155,
        "NVLINK: SW Defined Error",
        "reset_gpu",
        "warn",
        "a link was taken down on purpose (software or an operator); reset the GPU if nobody meant to",
    ),
    (
        156,
        "Resource Retirement Event",
        "reset_gpu",
        "warn",
        "the GPU retired a faulty internal resource; the retirement takes effect at the next GPU reset",
    ),
    (158, "GPU Fatal Timeout", "reset_gpu", "error", "the GPU hit a fatal timeout: reset it, call the vendor if it recurs"),
    (171, "Uncorrectable DRAM error", "none", "info", "detail line for the Xid 48 logged with it (the fault was in DRAM): act on the 48"),
    (
        172,
        "Uncorrectable SRAM error",
        "none",
        "info",
        "detail line for the Xid 48 logged with it (the fault was in on-chip SRAM): act on the 48 and check nvidia-smi's SRAM threshold flag",
    ),
)

CATALOGUE: dict[int, Xid] = {number: Xid(number, name, action, severity, note) for number, name, action, severity, note in _ROWS}

# An Xid megaprov does not know is taken out of service for a look rather than ignored (NVIDIA's catalogue files unknown and
# unused codes under CONTACT_SUPPORT), as a warning rather than an error: newer drivers add informational codes too.
UNKNOWN_ACTION = "drain"
UNKNOWN_SEVERITY = "warn"


def lookup(number: int) -> Xid:
    """The catalogue's entry for an Xid; one it does not list is an 'unknown Xid' to drain and look at (see UNKNOWN_ACTION)."""
    known = CATALOGUE.get(number)
    if known is not None:
        return known
    return Xid(number, "unknown Xid", UNKNOWN_ACTION, UNKNOWN_SEVERITY, "not in megaprov's catalogue: look it up in NVIDIA's Xid catalogue")

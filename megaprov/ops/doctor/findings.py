"""What ``megaprov doctor`` reports: findings, and the catalogue of their codes.

A finding names one problem: a stable ``code`` (the catalogue below; the README's troubleshooting section is made
from it), a ``severity`` (error: the node or job cannot work as it is; warn: it works worse or will fail; info: said
for completeness), the ``node`` where known, the ``evidence`` (a file and line, or a command and its output), the
``cause`` in words and the ``fix`` (a command, a spec change, a variable). Pure."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from megaprov import values

SEVERITIES = ("error", "warn", "info")
MAX_EVIDENCE = 400  # characters of one evidence line


# What one log read by doctor costs at most (signatures.py holds the scan that keeps to it).
MAX_LOG_BYTES = 256 * 1024 * 1024  # one log file read: its last 256 MiB
MAX_LINE = 4096  # characters of a line looked at
# The bound per log, for `megaprov doctor --help`; the bounds in signatures make it hold: besides one chunk and its lines, the
# scan keeps at most MAX_FINDINGS findings (and their keys: a line each), 2 x MAX_POINTS points and MAX_NODES node
# names of at most 255 characters. tests/unit/ops/test_doctor_bounded.py measures it on the worst logs it knows.
LOG_MEMORY = 64 * 1024 * 1024
LOG_BOUNDS = (
    f"doctor reads each log once, as a stream (at most its last {MAX_LOG_BYTES >> 20} MiB, lines cut at {MAX_LINE:,}"
    f" characters), in time linear in the bytes read and in under {LOG_MEMORY >> 20} MiB of memory per log, however long"
    " the log."
)


@dataclass(frozen=True)
class Code:
    code: str
    severity: str
    area: str  # gpu, network, host, storage, software, job
    title: str
    cause: str  # the usual cause, in words
    evidence: str  # what doctor shows as evidence
    fix: str  # the usual fix


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str
    node: str
    evidence: str
    cause: str
    fix: str
    source: str = ""  # health (a check on the cluster) or the log file it was read from
    line: int = 0  # 1-based line of the evidence in that file, 0 when none

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _codes(*rows: Code) -> dict[str, Code]:
    return {row.code: row for row in rows}


CODES: dict[str, Code] = _codes(
    # ---- failure signatures in job logs (megaprov doctor --log FILE / --job NAME)
    Code(
        "CUDA_OOM",
        "error",
        "job",
        "CUDA out of memory",
        "a rank asked the caching allocator for more GPU memory than was free: the layout does not fit the GPU",
        "torch's 'CUDA out of memory. Tried to allocate ...' line, with the planner's memory estimate for the job",
        "lower train.micro_batch_size, set train.recompute: full, or raise parallel.tensor/pipeline; `megaprov plan` shows the fit",
    ),
    Code(
        "NCCL_TIMEOUT",
        "error",
        "job",
        "NCCL collective timed out",
        "a collective waited longer than the process group timeout: a straggler, a hung or dead rank, or a dead link",
        "ProcessGroupNCCL's watchdog line: the rank, the collective (OpType), its sequence number and how long it ran",
        "look at the other ranks' logs first (the rank that did not reach the collective); `megaprov doctor -i INV --level deep` pairs the nodes",
    ),
    Code(
        "NCCL_SYSTEM_ERROR",
        "error",
        "network",
        "NCCL unhandled system error",
        "a socket or device call failed inside NCCL: usually the wrong network interface or a peer address that cannot be reached",
        "NCCL's 'unhandled system error' and its 'Last error:' line",
        "set the cluster interface (infiniband_socket_interface, NCCL_SOCKET_IFNAME) and rerun `megaprov bootstrap -i INV --tags fabric`",
    ),
    Code(
        "NCCL_LOOPBACK",
        "error",
        "network",
        "NCCL used a loopback address",
        "the host name resolves to 127.0.1.1 (Debian's /etc/hosts default) or NCCL chose the lo interface, so peers connect to themselves",
        "NCCL's bootstrap/socket lines naming lo or a 127.x address",
        "run `megaprov bootstrap -i INV --tags base` (it writes /etc/hosts with the cluster addresses) and set NCCL_SOCKET_IFNAME",
    ),
    Code(
        "NCCL_VERSION_MISMATCH",
        "error",
        "software",
        "ranks loaded different NCCL releases",
        "nodes run different NCCL libraries (different torch or nvidia-nccl wheels, or LD_LIBRARY_PATH)",
        "the 'NCCL version' lines of the ranks, which differ",
        "install the same training environment everywhere: `megaprov bootstrap -i INV --tags python`",
    ),
    Code(
        "IB_COMPLETION_ERROR",
        "error",
        "network",
        "InfiniBand completion error",
        "an RDMA transfer failed on the HCA named; retry exceeded (status 12) means the peer or the link/switch between stopped answering",
        "NCCL's NET/IB completion line with the HCA, the peer and the status",
        "check that HCA port, its cable and switch port (`megaprov doctor -i INV` shows port states and error counters); drain the node",
    ),
    Code(
        "RDZV_PORT_IN_USE",
        "error",
        "job",
        "rendezvous port in use",
        "another process (an old job, a stale torchrun) listens on the rendezvous/master port",
        "the EADDRINUSE / 'address already in use' line with the port",
        "stop the old job (`megaprov job stop NAME`) or set launch.master_port to a free port",
    ),
    Code(
        "RDZV_TIMEOUT",
        "error",
        "job",
        "rendezvous timed out",
        "not every node joined the rendezvous in time: a node never started its launcher, or cannot reach the rendezvous host",
        "torch's rendezvous timeout line, with how many nodes joined",
        "look at the nodes that did not join (`megaprov job status NAME`); check they reach the head's rendezvous port",
    ),
    Code(
        "PEER_LOST",
        "error",
        "job",
        "a peer went away during the job",
        "a rank's connection to another node closed or reset mid-job: that node died, was cut off the network, or its ranks were killed",
        "the gloo/NCCL/c10d line about the closed or reset connection",
        "look at the peer node's log and kernel log; `megaprov doctor -i INV` checks that node; `megaprov train --resume NAME` continues",
    ),
    Code(
        "DATA_PREFIX_MISSING",
        "error",
        "job",
        "dataset prefix not found",
        "data.prefixes names .bin/.idx files that do not exist on the shared directory",
        "the error naming the missing .bin/.idx path",
        "run `megaprov data prepare` for that prefix, or correct data.prefixes in the job spec",
    ),
    Code(
        "VOCAB_MISMATCH",
        "error",
        "job",
        "token ids outside the model's vocabulary",
        "the dataset was tokenized with another tokenizer than the job's (its ids exceed the model's vocabulary)",
        "the index error in the embedding, or the vocabulary check's line",
        "prepare the data again with the job's tokenizer (`megaprov data prepare --tokenizer ...`) or set data.tokenizer to the data's",
    ),
    Code(
        "LOSS_NAN",
        "error",
        "job",
        "loss became nan or inf",
        "training diverged numerically: learning rate too high, warm-up too short, or fp16 overflow",
        "the iteration line with 'lm loss: nan' (or inf) or nan iterations counted",
        "lower train.lr, lengthen train.lr_warmup_iters, clip gradients (train.clip_grad), prefer bf16; resume from the last good checkpoint",
    ),
    Code(
        "LOSS_DIVERGING",
        "warn",
        "job",
        "loss rising",
        "the loss climbs over many iterations after falling, often with grad norm spikes: the learning rate is too high for this batch",
        "the iteration lines where the loss is lowest and where it is now, and the grad norm history",
        "lower train.lr or lengthen train.lr_warmup_iters; resume from a checkpoint before the rise",
    ),
    Code(
        "THROUGHPUT_FALLING",
        "warn",
        "job",
        "throughput falling",
        "time per iteration grows during the run: data loading, a slow or throttling node, or a degraded link",
        "the iteration lines at the start and at the end (ms per iteration, TFLOP/s)",
        "run `megaprov doctor -i INV --level quick` to find a slow node; check GPU clocks and data loading",
    ),
    Code(
        "DATALOADER_SLOW",
        "warn",
        "job",
        "data loading is slow",
        "the batch generator takes a large share of each iteration: too few data workers or slow storage",
        "Megatron's timers: batch-generator against forward-backward",
        "raise Megatron's --num-workers (launch.extra_args) and keep the dataset on fast storage",
    ),
    Code(
        "RANK_OOM_KILLED",
        "error",
        "host",
        "the kernel's OOM killer killed a rank",
        "the node ran out of host memory (data workers, pinned memory, a leak)",
        "the kernel's 'Out of memory: Killed process' line",
        "lower data workers or host-side caching; check the node's memory with `megaprov preflight`",
    ),
    Code(
        "RANK_KILLED",
        "error",
        "job",
        "a rank was killed by a signal",
        "a worker process ended on a signal (SIGKILL: the OOM killer or an operator; SIGSEGV: a crash; SIGTERM: a stop)",
        "torchrun's failure summary with the signal or negative exit code",
        "look at the node's kernel log for the OOM killer; `megaprov train --resume NAME` continues from the last checkpoint",
    ),
    Code(
        "GPU_XID",
        "error",
        "gpu",
        "NVIDIA Xid error",
        "the NVIDIA driver reported an Xid: by NVIDIA's catalogue an application fault, a GPU needing reset, or hardware needing service",
        "the kernel log's 'NVRM: Xid' line with the GPU's PCI address",
        "the action for that Xid (restart the application, reset the GPU, or drain the node and contact support), given per finding",
    ),
    Code(
        "GPU_ECC",
        "error",
        "gpu",
        "uncorrectable ECC errors",
        "the GPU memory had uncorrectable errors since the driver loaded",
        "nvidia-smi's uncorrected volatile ECC count, or CUDA's 'uncorrectable ECC error encountered'",
        "drain the node, reset the GPU (or reboot) to remap the rows; replace the GPU if errors return",
    ),
    # ---- containers (launch.container): pyxis and enroot under Slurm, podman under systemd
    Code(
        "CONTAINER_IMPORT_FAILED",
        "error",
        "software",
        "pyxis could not import the job's image",
        "enroot, run by pyxis for the job step, failed to import the image or to unpack it into the container's filesystem:"
        " a registry that refused or cannot be reached, no space left in enroot's cache or data directory",
        "pyxis's 'failed to import docker image' or 'failed to create container filesystem' line; enroot's log follows it",
        "fetch the image once for the cluster with `megaprov image pull IMAGE -i INV` and give launch.container.image the"
        " squashfs it writes on the shared directory; the enroot lines after pyxis's say what failed",
    ),
    Code(
        "CONTAINER_USERNS_REFUSED",
        "error",
        "host",
        "the node refuses unprivileged user namespaces",
        "enroot (pyxis) and rootless podman run the container in a user namespace of the job's user, which the kernel or"
        " the account's subordinate ID ranges refuse",
        "enroot's 'failed to create user namespace' or newuidmap's 'write to uid_map failed'",
        "allow unprivileged user namespaces on the node (user.max_user_namespaces above 0; kernel.unprivileged_userns_clone=1"
        " on Debian kernels; kernel.apparmor_restrict_unprivileged_userns=0 or enroot's AppArmor profile on Ubuntu 24.04);"
        " `enroot check` lists what it needs; for podman, the cluster user's /etc/subuid and /etc/subgid ranges",
    ),
    Code(
        "CDI_DEVICE_MISSING",
        "error",
        "gpu",
        "podman found no CDI device for the GPUs",
        "the node's CDI spec (/etc/cdi/nvidia.yaml, NVIDIA's container toolkit) lacks the device the job asked for: never"
        " generated, or generated before the driver or a GPU changed",
        "podman's 'unresolvable CDI devices' line",
        "regenerate the spec with `megaprov bootstrap -i INV --tags containers` (nvidia-ctk cdi generate) and check"
        " `nvidia-ctk cdi list` on the node",
    ),
    Code(
        "REGISTRY_REFUSED",
        "error",
        "network",
        "a container registry refused the image",
        "the registry has no such image or tag (manifest unknown), wants credentials (unauthorized, denied), or cannot be"
        " reached (the head's registry down, a mirror setting wrong)",
        "podman's 'reading manifest ... in ...' or 'pinging container registry' line, or enroot's 'URL ... returned error code'",
        "`megaprov image pull IMAGE -i INV` puts the image in the head's registry, where every node's podman looks first;"
        " credentials for pyxis go in enroot_credentials, for podman `podman login` as the cluster user",
    ),
    # ---- health checks on the cluster (megaprov doctor -i INV)
    Code(
        "NODE_UNREACHABLE",
        "error",
        "host",
        "node unreachable",
        "the node does not answer SSH: down, cut off the network, or its host key changed",
        "Ansible's unreachable message",
        "check the node's power and network; `megaprov bootstrap -i INV --tags ssh_mesh` after a reinstall",
    ),
    Code(
        "GPU_CHECKS_SKIPPED",
        "info",
        "gpu",
        "GPU checks skipped",
        "the node shows no NVIDIA GPU (the lab, or megaprov_gpu_expected: false)",
        "the probe's nvidia-smi lookup",
        "nothing to do on a CPU node",
    ),
    Code(
        "JOB_FILE_REFUSED",
        "warn",
        "job",
        "job file not read",
        "a node log or GPU sample file of the job is a link, a FIFO, a directory or larger than its bound: the cluster user"
        " (or a job) can write there, so megaprov does not follow or block on it, and that node's log was not checked",
        "the file and what it is",
        "remove it or replace it with the regular file the job writes (ls -l on the shared directory), then run doctor again",
    ),
    Code(
        "KERNEL_LOG_UNREADABLE",
        "warn",
        "host",
        "kernel log not readable",
        "neither journalctl -k nor dmesg could be read on a GPU node, so Xids and the OOM killer cannot be checked",
        "the command and its error",
        "run doctor as a user that may read the kernel log (root: become), or set kernel.dmesg_restrict=0",
    ),
    Code(
        "GPU_COUNT",
        "error",
        "gpu",
        "GPUs missing",
        "fewer GPUs answer than the node has on its PCI bus or the preflight recorded: a GPU fell off the bus or the driver lost it",
        "nvidia-smi's GPU list against the PCI bus and the preflight facts",
        "look for Xid 79 in the kernel log; reboot the node; drain it if the GPU stays missing",
    ),
    Code(
        "GPU_ROW_REMAP_PENDING",
        "warn",
        "gpu",
        "row remapping pending",
        "the GPU has rows to remap that take effect only after a GPU reset",
        "nvidia-smi's remapped_rows.pending",
        "drain the node and reset the GPU (nvidia-smi -r) or reboot it when idle",
    ),
    Code(
        "GPU_ROW_REMAP_FAILED",
        "error",
        "gpu",
        "row remapping failed",
        "the GPU ran out of spare rows: its memory is failing",
        "nvidia-smi's remapped_rows.failure",
        "drain the node and contact the vendor to replace the GPU",
    ),
    Code(
        "GPU_PCIE_DEGRADED",
        "warn",
        "gpu",
        "PCIe link degraded",
        "a GPU's PCIe link runs narrower or slower than it can: a bad riser, cable or slot",
        "nvidia-smi's current against maximum PCIe generation and width",
        "reseat the GPU or its riser; drain the node if host-device copies are slow",
    ),
    Code(
        "IB_PORT_DOWN",
        "error",
        "network",
        "InfiniBand port not active",
        "an HCA port is down, polling or initialising: the cable, the switch port, or the subnet manager",
        "ibstat's port state",
        "check the cable and switch port; make sure a subnet manager runs on the fabric (opensm or the switch's)",
    ),
    Code(
        "IB_PORT_RATE",
        "warn",
        "network",
        "InfiniBand port below its rate",
        "an HCA port runs slower than the others of the node: a degraded cable or a link trained at a lower width/speed",
        "ibstat's rate against the node's fastest port",
        "reseat or replace the cable; check the switch port",
    ),
    Code(
        "IB_ERRORS_RISING",
        "warn",
        "network",
        "InfiniBand error counters rising",
        "symbol errors or link-downed events grew since the last doctor run: a marginal cable or transceiver",
        "the port counters now and at the last run",
        "replace the cable or transceiver on that port; watch the counters with `megaprov doctor -i INV` again",
    ),
    Code(
        "HOST_LOOPBACK",
        "error",
        "host",
        "host name resolves to loopback",
        "the node's own name resolves to a 127.x address (Debian's 127.0.1.1 line): NCCL and gloo then give peers a loopback address",
        "getent hosts for the node's name",
        "run `megaprov bootstrap -i INV --tags base` (it writes the cluster's addresses into /etc/hosts) or remove the 127.0.1.1 line",
    ),
    Code(
        "HOST_WRONG_ADDRESS",
        "warn",
        "host",
        "host name resolves off the cluster interface",
        "the node's name resolves to an address that is not on the cluster (NCCL socket) interface",
        "getent hosts for the node's name and the interface's addresses",
        "run `megaprov bootstrap -i INV --tags base`, or fix DNS so the name resolves to the cluster address",
    ),
    Code(
        "CLOCK_SKEW",
        "warn",
        "host",
        "clock skew",
        "the node's clock differs from the controller's: logs, Slurm and munge credentials disagree on time",
        "the node's time against the controller's window around the probe",
        "check chrony (`chronyc tracking`) and its servers (common_chrony_servers); `megaprov bootstrap -i INV --tags base`",
    ),
    Code(
        "CLOCK_UNSYNCED",
        "warn",
        "host",
        "clock not synchronised",
        "chrony reports the clock is not synchronised to any source",
        "chronyc tracking's leap status",
        "give chrony reachable servers (common_chrony_servers) and rerun `megaprov bootstrap -i INV --tags base`",
    ),
    Code(
        "VERSION_MISMATCH",
        "error",
        "software",
        "versions differ between nodes",
        "nodes run different driver, CUDA, NCCL, torch or megatron-core versions: ranks then disagree or fail",
        "each node's version of the package",
        "run `megaprov bootstrap -i INV --tags gpu,python` so every node gets the inventory's pinned versions",
    ),
    Code(
        "DISK_FULL",
        "error",
        "storage",
        "disk nearly full",
        "the shared or scratch directory has less free space than the threshold: checkpoints and logs will fail to write",
        "free and total space of the directory",
        "delete old checkpoints (jobs/*/checkpoints) or grow the file system; thresholds: doctor_shared_min_free_gib,"
        " doctor_scratch_min_free_gib (default doctor_min_free_gib: 10) and doctor_min_free_percent (5)",
    ),
    Code(
        "SHARED_DIR",
        "error",
        "storage",
        "shared directory not usable",
        "a node cannot write to, or read every other node's file from, the shared directory as the cluster user",
        "the N-writer, N-reader check's failure",
        "check the NFS server and the node's mount; `megaprov bootstrap -i INV --tags storage`",
    ),
    Code(
        "SERVICE_DOWN",
        "error",
        "host",
        "service not running",
        "a service megaprov enabled on the node is not active (stopped or failed)",
        "systemd's state of the unit",
        "`systemctl start UNIT` on the node (and `journalctl -u UNIT` for why it stopped), or `megaprov bootstrap -i INV`",
    ),
    Code(
        "DCGM_DIAG",
        "error",
        "gpu",
        "DCGM diagnostic failed",
        "a DCGM diagnostic test failed on a GPU",
        "dcgmi diag's failed test, GPU and message",
        "drain the node; rerun `dcgmi diag -r 3` on it; reset or replace the GPU per NVIDIA's guidance",
    ),
    Code(
        "NCCL_BANDWIDTH_LOW",
        "error",
        "network",
        "NCCL bandwidth below the baseline",
        "all_reduce_perf's bus bandwidth is under the platform's figure or 80 % of the baseline the nccl stage recorded",
        "all_reduce_perf's peak bus bandwidth against the threshold",
        "check NVLink/NVSwitch (Fabric Manager) within a node, the IB ports across nodes; `--level deep` isolates the node",
    ),
    Code(
        "NCCL_PAIR_SLOW",
        "error",
        "network",
        "a node slows every pair it is in",
        "pairwise all_reduce between nodes was slow in every pairing that included this node: its NIC, cable or switch port",
        "the pairs' bus bandwidth in both passes",
        "drain the node (`megaprov doctor -i INV --drain`) and check its HCAs and cables",
    ),
    Code(
        "NCCL_LINK_SLOW",
        "warn",
        "network",
        "one pair of nodes is slow",
        "pairwise all_reduce between two nodes was slow or failed while neither node slowed its other pairing: the path between"
        " them (a cable, a switch port, routing); with two nodes in all, the one pair cannot say which node (error when it failed)",
        "the pair's bus bandwidth against the median pair, or its failure",
        "run `megaprov doctor -i INV --level deep` with a third node to isolate it; check both nodes' HCAs, cables and switch ports",
    ),
    Code(
        "IB_BANDWIDTH_LOW",
        "error",
        "network",
        "RDMA bandwidth low",
        "ib_write_bw between two nodes is under the port's rate",
        "ib_write_bw's average bandwidth against the port rate",
        "check the HCA's port rate and PCIe link; the cable and switch port",
    ),
)

# The codes the log signatures can give, and those of the health checks (for the README and the tests).
LOG_CODES = (
    "CUDA_OOM", "NCCL_TIMEOUT", "NCCL_SYSTEM_ERROR", "NCCL_LOOPBACK", "NCCL_VERSION_MISMATCH", "IB_COMPLETION_ERROR",
    "RDZV_PORT_IN_USE", "RDZV_TIMEOUT", "PEER_LOST", "DATA_PREFIX_MISSING", "VOCAB_MISMATCH", "LOSS_NAN", "LOSS_DIVERGING",
    "THROUGHPUT_FALLING", "DATALOADER_SLOW", "RANK_OOM_KILLED", "RANK_KILLED", "GPU_XID", "GPU_ECC",
    "CONTAINER_IMPORT_FAILED", "CONTAINER_USERNS_REFUSED", "CDI_DEVICE_MISSING", "REGISTRY_REFUSED",
)  # fmt: skip


_WHITESPACE = str.maketrans("\t\n\r", "   ")


def clip(text: str, limit: int = MAX_EVIDENCE) -> str:
    """One evidence line, bounded: tabs and line ends are spaces, any other control or format character its escape
    (values.printable, the one escaping function for what came from outside)."""
    flat = values.printable(text.strip().translate(_WHITESPACE))
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def finding(code: str, node: str = "", evidence: str = "", cause: str = "", fix: str = "", severity: str = "", **where: Any) -> Finding:
    """A finding of a catalogued code; cause and fix default to the catalogue's words."""
    entry = CODES[code]
    return Finding(
        code=code,
        severity=severity or entry.severity,
        node=node,
        evidence=clip(evidence),
        cause=clip(cause or entry.cause, 2 * MAX_EVIDENCE),  # they may quote a log: printable and bounded too
        fix=clip(fix or entry.fix, 2 * MAX_EVIDENCE),
        **where,
    )


@dataclass
class Report:
    """Findings of one doctor run, in a stable order (errors first, then by node and code)."""

    findings: list[Finding] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)  # what was looked at: nodes or files

    def add(self, *found: Finding) -> None:
        self.findings.extend(found)

    def sorted(self) -> list[Finding]:
        rank = {s: i for i, s in enumerate(SEVERITIES)}
        return sorted(self.findings, key=lambda f: (rank.get(f.severity, 9), f.node, f.code, f.source, f.line))

    @property
    def wrong(self) -> bool:
        """Something is wrong: an error or a warning (info findings are not)."""
        return any(f.severity in ("error", "warn") for f in self.findings)


# What to do for each action of NVIDIA's Xid catalogue (megaprov/ops/doctor/xid.py gives an Xid's action).
XID_ACTION_FIX = {
    "restart_app": "restart the job (`megaprov train --resume NAME`); if it comes back, look for an application or driver bug",
    "check_app": "look at the application first (an illegal address or a bad kernel launch); rerun it; if it persists, reset the GPU",
    "reset_gpu": "drain the node, reset the GPU (`nvidia-smi -r -i GPU` with no process on it) or reboot, then undrain",
    "reboot": "drain the node and reboot it",
    "drain": "drain the node (`megaprov doctor -i INV --drain`), run `dcgmi diag -r 3`, and contact the vendor if it fails",
    "none": "nothing to do: informational",
}

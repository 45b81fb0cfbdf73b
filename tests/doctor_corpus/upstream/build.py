#!/usr/bin/env python3
# ruff: noqa: E501  (the upstream format strings and the log lines are quoted whole)
"""Build the logs of failures only GPU clusters produce, from the upstream programs' own format strings.

Each case is a job's node log (or a kernel log) as torchrun's ranks, NCCL, Megatron-LM, the Linux kernel and the NVIDIA
driver print it; the fixed text of every line is the source's format string (cited per case in MANIFEST.json, which
this script writes with the logs), the variable parts (ranks, sizes, hosts, addresses, times) are ours.

    .venv/bin/python tests/doctor_corpus/upstream/build.py     # rewrites the .log files and MANIFEST.json here
"""

from __future__ import annotations

import json
import math
from pathlib import Path

HERE = Path(__file__).resolve().parent

# ---- the format strings, as their sources write them (%-style or {} placeholders filled below)
# torch c10/cuda/CUDACachingAllocator.cpp (malloc's OutOfMemoryError message, torch 2.4+)
OOM = (
    "CUDA out of memory. Tried to allocate {ask}. GPU {dev} has a total capacity of {total} of which {free} is free. "
    "Including non-PyTorch memory, this process has {used} memory in use. Of the allocated memory {alloc} is allocated by PyTorch, "
    "and {reserved} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
# torch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (watchdog): "[Rank ", rank, "] Watchdog caught collective operation
# timeout: ", work, " ran for ", ms, " milliseconds before timing out." with WorkNCCL's operator<< (SeqNum, OpType, NumelIn,
# NumelOut, Timeout(ms)); torch 2.3+ prefixes the process group: "[PG ID 0 PG GUID 0(default_pg) Rank 3]"
WATCHDOG = (
    "[rank{r}]:[E{stamp} ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={n}, NumelOut={n}, Timeout(ms)=600000) ran for {ran} milliseconds before timing out."
)
# NCCL src/debug.cc: INFO lines "%s:%d:%d [%d] NCCL INFO %s" (host:pid:tid [cudaDev]); WARN lines "%s:%d:%d [%d] %s:%d (%s) NCCL WARN %s"
INFO = "{host}:{pid}:{tid} [{dev}] NCCL INFO {msg}"
WARN = "{host}:{pid}:{tid} [{dev}] {file}:{line} ({func}) NCCL WARN {msg}"
# NCCL src/init.cc VERSION_STRING: "NCCL version " MAJOR.MINOR.PATCH SUFFIX "+cuda" CUDA_MAJOR.CUDA_MINOR
VERSION = "NCCL version {v}+cuda{c}"
# NCCL src/bootstrap.cc "Bootstrap: Using%s"; src/transport/net_socket.cc "NET/Socket : Using%s" (" [0]if:addr<0>")
# NCCL src/os/linux.cc "%s: connect to %s failed : %s"
# torch torch/csrc/distributed/c10d/NCCLUtils.cpp getNcclErrorDetailStr: "\nLast error:\n" + ncclGetLastError(),
# ncclSystemError's interpretation "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or
# device error. "; NCCL src/init.cc ncclGetErrorString: "unhandled system error (run with NCCL_DEBUG=INFO for details)"
# NCCL src/transport/net_ib/p2p.cc: "NET/IB: Got completion from peer %s with status=%s(%d) opcode=%s(%d) vendor_err=%u
# %s%s%s%s hca %s"; src/misc/ibvwrap.cc ibvWcStatusStr: IBV_WC_RETRY_EXC_ERR
IB = "NET/IB: Got completion from peer {peer} with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129  hca {hca}"
# Megatron-LM megatron/training/training.py training_log (the iteration line; megaprov's follower parses the same)
ITER = (
    " [{stamp}] iteration {it:8d}/{total:8d} | consumed samples: {samples:12d} | elapsed time per iteration (ms): {ms:.1f} |"
    " throughput per GPU (TFLOP/s/GPU): {tf:.1f} | learning rate: {lr:E} | global batch size: {gbs:5d} | lm loss: {loss:E} |"
    " loss scale: 1.0 | grad norm: {gn:.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |"
)
# megatron-core megatron/core/timers.py Timers._get_global_min_max_time_string: "(min, max) time across ranks (ms):" then
# "\n    {}: ({:.2f}, {:.2f})".format((name + ' ').ljust(48, '.'), min, max)
TIMERS_HEAD = "(min, max) time across ranks (ms):"
TIMER = "    {}: ({:.2f}, {:.2f})"
# Linux mm/oom_kill.c __oom_kill_process: "%s: Killed process %d (%s) total-vm:%lukB, anon-rss:%lukB, file-rss:%lukB,
# shmem-rss:%lukB, UID:%u pgtables:%lukB oom_score_adj:%hd" with "Out of memory"
OOMKILL = (
    "{stamp} {host} kernel: Out of memory: Killed process {pid} (python) total-vm:412857344kB, anon-rss:197434112kB, file-rss:0kB, "
    "shmem-rss:2097152kB, UID:1001 pgtables:402312kB oom_score_adj:0"
)
# NVIDIA driver (open-gpu-kernel-modules nvErrorLog_va / DCGM 4.6.0 dcgmlib/src/tests/DcgmKmsgReaderTests.cpp):
# "NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus"
XID = "{stamp} {host} kernel: NVRM: Xid (PCI:{pci}): {xid}, pid={pid}, name={name}, {text}"
# CUDA runtime cudaGetErrorString(cudaErrorECCUncorrectable) in torch's C10_CUDA_CHECK message "CUDA error: %s"
ECC = "[rank{r}]: RuntimeError: CUDA error: uncorrectable ECC error encountered"

# pyxis 0.24.0 pyxis_slurmstepd.c / common.c (memfd_print_log), through slurmstepd's error log: "pyxis: importing docker image: %s",
# "pyxis: failed to import docker image: %s", "pyxis: failed to create container filesystem for image: %s", "pyxis: printing %s
# log file:", "pyxis:     %s" (each line of enroot's log)
PYXIS = "slurmstepd: error: pyxis: {msg}"
PYXIS_INFO = "pyxis: {msg}"
# enroot 4.1.2 src/common.sh common::log/common::curl: "[ERROR] URL %s returned error code: %d %s"; bin/enroot-nsenter.c:
# err(EXIT_FAILURE, "failed to create user namespace") -> "enroot-nsenter: failed to create user namespace: %s"
ENROOT_HTTP = "[ERROR] URL {url} returned error code: {code} {status}"
ENROOT_USERNS = "enroot-nsenter: failed to create user namespace: {why}"

SOURCES = {
    "oom": "pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp: 'CUDA out of memory. Tried to allocate ... GPU ... has a total capacity of ... of which ... is free.'",
    "watchdog": "pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp: '[Rank N] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=, OpType=, ..., Timeout(ms)=) ran for N milliseconds before timing out.'",
    "nccl_debug": "NVIDIA/nccl src/debug.cc (5067397c): '%s:%d:%d [%d] NCCL INFO %s', '%s:%d:%d [%d] %s:%d (%s) NCCL WARN %s'",
    "nccl_version": "NVIDIA/nccl src/init.cc VERSION_STRING: 'NCCL version MAJOR.MINOR.PATCH+cudaX.Y'",
    "nccl_socket": "NVIDIA/nccl src/bootstrap.cc 'Bootstrap: Using%s', src/transport/net_socket.cc 'NET/Socket : Using%s', src/os/linux.cc '%s: connect to %s failed : %s'",
    "nccl_error": "NVIDIA/nccl src/init.cc ncclGetErrorString 'unhandled system error (run with NCCL_DEBUG=INFO for details)'; pytorch/pytorch torch/csrc/distributed/c10d/NCCLUtils getNcclErrorDetailStr '\\nLast error:\\n' + ncclGetLastError()",
    "nccl_ib": "NVIDIA/nccl src/transport/net_ib/p2p.cc: 'NET/IB: Got completion from peer %s with status=%s(%d) opcode=%s(%d) vendor_err=%u %s%s%s%s hca %s'; src/misc/ibvwrap.cc ibvWcStatusStr",
    "megatron_iter": "NVIDIA/Megatron-LM megatron/training/training.py training_log: ' iteration N/ M | consumed samples: | elapsed time per iteration (ms): | throughput per GPU (TFLOP/s/GPU): | learning rate: | global batch size: | lm loss: | loss scale: | grad norm: | number of skipped iterations: | number of nan iterations: |'",
    "megatron_timers": "megatron-core 0.16.1 megatron/core/timers.py: '(min, max) time across ranks (ms):' and '    {name + space, ljust 48 with dots}: ({min:.2f}, {max:.2f})'",
    "oom_killer": "torvalds/linux mm/oom_kill.c __oom_kill_process: 'Out of memory: Killed process %d (%s) total-vm:%lukB, anon-rss:%lukB, file-rss:%lukB, shmem-rss:%lukB, UID:%u pgtables:%lukB oom_score_adj:%hd'",
    "xid": "NVIDIA/DCGM 4.6.0 dcgmlib/src/tests/DcgmKmsgReaderTests.cpp (the driver's line): 'NVRM: Xid (PCI:0000:2a:00): 79, pid=..., name=..., GPU has fallen off the bus'",
    "cuda_ecc": "CUDA runtime cudaGetErrorString(cudaErrorECCUncorrectable): 'uncorrectable ECC error encountered', in torch's 'CUDA error: %s'",
    "pyxis": "NVIDIA/pyxis v0.24.0 pyxis_slurmstepd.c: 'pyxis: importing docker image: %s', 'pyxis: failed to import docker image: %s', 'pyxis: failed to create container filesystem for image: %s'; common.c memfd_print_log: 'pyxis: printing %s log file:', 'pyxis:     %s'",
    "enroot": "NVIDIA/enroot v4.1.2 src/common.sh common::curl: '[ERROR] URL %s returned error code: %d %s'; bin/enroot-nsenter.c: err(EXIT_FAILURE, \"failed to create user namespace\")",
    "torchrun": "pytorch/pytorch torch/distributed/elastic/multiprocessing/errors: ChildFailedError summary 'exitcode  : -6 (pid: N)', 'traceback : Signal 6 (SIGABRT) received by PID N'",
}


def nccl_init(host: str, pid: int, ranks: range, version: str = "2.27.7", ib: bool = True) -> list[str]:
    lines = [INFO.format(host=host, pid=pid, tid=pid, dev=0, msg=f"Bootstrap: Using ib0:10.10.0.{ranks.start // 8 + 11}<0>")]
    lines.append(INFO.format(host=host, pid=pid, tid=pid, dev=0, msg=VERSION.format(v=version, c="12.9")))
    if ib:
        lines.append(
            INFO.format(
                host=host,
                pid=pid,
                tid=pid,
                dev=0,
                msg="NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [2]mlx5_4:1/IB [3]mlx5_5:1/IB ; OOB ib0:10.10.0.11<0>",
            )
        )
    for r in ranks:
        d = r % 8
        lines.append(
            INFO.format(
                host=host, pid=pid + d, tid=pid + d, dev=d, msg=f"comm 0x55d0c{r:03x}0 rank {r} nRanks 16 nNodes 2 localRanks 8 localRank {d} MNNVL 0"
            )
        )
    return lines


def iterations(losses: list[float], ms: list[float], start: int = 1, total: int = 2000, gn: list[float] | None = None) -> list[str]:
    out = []
    for i, (loss, t) in enumerate(zip(losses, ms, strict=True)):
        it = start + i * 10
        out.append(
            ITER.format(
                stamp=f"2026-11-30 0{1 + it // 3600}:{it // 60 % 60:02d}:{it % 60:02d}",
                it=it,
                total=total,
                samples=it * 512,
                ms=t,
                tf=412.0 * 1180.0 / t,
                lr=3e-4 * min(1.0, it / 200),
                gbs=512,
                loss=loss,
                gn=(gn[i] if gn else 1.1 - 0.001 * i),
            )
        )
    return out


def cases() -> dict[str, tuple[list[str], list[str], list[str], str]]:
    """file -> (lines, expected codes, sources, what it shows)."""
    healthy_losses = [10.8 * math.exp(-i / 30) + 2.1 for i in range(40)]
    steady = [1180.0 + (7 if i % 3 else -5) for i in range(40)]
    c: dict[str, tuple[list[str], list[str], list[str], str]] = {}

    c["healthy_gpu.log"] = (
        nccl_init("gpu-a01", 41200, range(0, 8)) + iterations(healthy_losses, steady),
        [],
        ["nccl_debug", "nccl_version", "megatron_iter"],
        "a healthy 16-GPU run: NCCL on IB, a falling loss, a steady rate",
    )
    oom = iterations(healthy_losses[:3], steady[:3]) + [
        "[rank5]: Traceback (most recent call last):",
        '[rank5]:   File "/opt/megatron-lm/pretrain_gpt.py", line 285, in <module>',
        "[rank5]: torch.OutOfMemoryError: "
        + OOM.format(ask="3.91 GiB", dev=5, total="79.19 GiB", free="1.62 GiB", used="77.55 GiB", alloc="72.03 GiB", reserved="4.02 GiB"),
    ]
    c["cuda_oom.log"] = (oom, ["CUDA_OOM"], ["oom", "megatron_iter"], "rank 5 runs out of GPU memory in the first iterations")
    wd = (
        nccl_init("gpu-a02", 52000, range(8, 16))
        + iterations(healthy_losses[:10], steady[:10])
        + [
            WATCHDOG.format(r=r, stamp=f"1130 02:14:07.{311200 + r:06d}", seq=48211, op="ALLREDUCE", n=134217728, ran=600000 + 17 * r)
            for r in range(8, 12)
        ]
    )
    wd += [
        "[rank8]:[E1130 02:14:07.402100 ProcessGroupNCCL.cpp:684] [Rank 8] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        "E1130 02:14:12.113000 52000 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) local_rank: 0 (pid: 52008) of binary: /opt/megaprov/venv/bin/python",
        "  exitcode  : -6 (pid: 52008)",
        "  traceback : Signal 6 (SIGABRT) received by PID 52008",
    ]
    c["nccl_watchdog_timeout.log"] = (
        wd,
        ["NCCL_TIMEOUT", "RANK_KILLED"],
        ["watchdog", "nccl_debug", "torchrun"],
        "ranks 8-11 wait 10 minutes in ALLREDUCE #48211; the watchdog aborts them (SIGABRT)",
    )
    loop = [
        INFO.format(host="gpu-b01", pid=7101, tid=7101, dev=0, msg="Bootstrap: Using lo:127.0.1.1<0>"),
        INFO.format(host="gpu-b01", pid=7101, tid=7101, dev=0, msg=VERSION.format(v="2.27.7", c="12.9")),
        WARN.format(
            host="gpu-b01",
            pid=7101,
            tid=7180,
            dev=0,
            file="misc/socket.cc",
            line=484,
            func="socketTryAccept",
            msg="socketStartConnect: connect to 127.0.1.1<35519> failed : Connection refused",
        ),
        "[rank0]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.7",
        "[rank0]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
        "[rank0]: Last error:",
        "[rank0]: socketStartConnect: connect to 127.0.1.1<35519> failed : Connection refused",
    ]
    c["nccl_system_error_loopback.log"] = (
        loop,
        ["NCCL_LOOPBACK"],
        ["nccl_debug", "nccl_socket", "nccl_error"],
        "the host name resolves to 127.0.1.1: NCCL's bootstrap uses lo and peers connect to themselves",
    )
    iface = [
        INFO.format(host="gpu-b02", pid=8101, tid=8101, dev=0, msg="Bootstrap: Using docker0:172.17.0.1<0>"),
        INFO.format(host="gpu-b02", pid=8101, tid=8101, dev=0, msg=VERSION.format(v="2.27.7", c="12.9")),
        "[rank8]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.7",
        "[rank8]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
        "[rank8]: Last error:",
        "[rank8]: socketPollConnect: connect to 172.17.0.1<48213> failed : Connection timed out",
    ]
    c["nccl_system_error_iface.log"] = (
        iface,
        ["NCCL_SYSTEM_ERROR"],
        ["nccl_debug", "nccl_socket", "nccl_error"],
        "NCCL picked docker0 (172.17.0.1): the other node cannot reach that address",
    )
    c["nccl_version_mismatch.log"] = (
        nccl_init("gpu-c01", 9100, range(0, 8), version="2.27.7") + nccl_init("gpu-c02", 9300, range(8, 16), version="2.21.5"),
        ["NCCL_VERSION_MISMATCH"],
        ["nccl_debug", "nccl_version"],
        "the two nodes load different NCCL releases (one node's venv has another torch)",
    )
    ib = (
        nccl_init("gpu-d01", 6100, range(0, 8))
        + iterations(healthy_losses[:6], steady[:6])
        + [
            WARN.format(
                host="gpu-d01",
                pid=6103,
                tid=6190,
                dev=3,
                file="transport/net_ib/p2p.cc",
                line=688,
                func="ncclIbCompletionEventProcess",
                msg=IB.format(peer="10.10.0.12<40511>", hca="mlx5_3"),
            ),
            INFO.format(host="gpu-d01", pid=6103, tid=6190, dev=3, msg="transport/net.cc:1389 -> 6"),
        ]
    )
    c["ib_retry_exceeded.log"] = (
        ib,
        ["IB_COMPLETION_ERROR"],
        ["nccl_debug", "nccl_ib", "megatron_iter"],
        "transport retry counter exceeded on mlx5_3 to 10.10.0.12: the link or switch stopped answering",
    )
    div = [10.8 * math.exp(-i / 6) + 3.0 for i in range(18)] + [3.9 + 0.35 * i for i in range(16)]
    norms = [1.2] * 18 + [1.5 + 4.0 * i for i in range(16)]
    c["loss_diverging.log"] = (
        iterations(div, steady[: len(div)], gn=norms),
        ["LOSS_DIVERGING"],
        ["megatron_iter"],
        "the loss falls to about 3.4, then climbs for 150 iterations with the grad norm spiking",
    )
    slow = [1180.0] * 12 + [1180.0 + 90.0 * i for i in range(1, 21)]
    c["throughput_falling.log"] = (
        iterations(healthy_losses[:32], slow),
        ["THROUGHPUT_FALLING"],
        ["megatron_iter"],
        "time per iteration grows from 1.18 s to 3 s while the loss keeps falling",
    )
    timers = []
    for i in range(4):
        timers += iterations(healthy_losses[i * 2 : i * 2 + 2], steady[:2], start=1 + 20 * i)
        timers += [
            TIMERS_HEAD,
            TIMER.format(("forward-backward" + " ").ljust(48, "."), 1160.31 + i, 1171.77 + i),
            TIMER.format(("batch-generator" + " ").ljust(48, "."), 402.18 + i, 455.93 + i),
            TIMER.format(("optimizer" + " ").ljust(48, "."), 8.02, 8.44),
        ]
    c["dataloader_slow.log"] = (
        timers,
        ["DATALOADER_SLOW"],
        ["megatron_iter", "megatron_timers"],
        "Megatron's timers: the batch generator takes ~39 % of forward-backward",
    )
    c["oom_killer.log"] = (
        [
            "2026-11-30T03:12:40+0000 gpu-e01 kernel: python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
            OOMKILL.format(stamp="2026-11-30T03:12:41+0000", host="gpu-e01", pid=88127),
            "2026-11-30T03:12:41+0000 gpu-e01 kernel: oom_reaper: reaped process 88127 (python), now anon-rss:0kB, file-rss:0kB, shmem-rss:2097152kB",
        ],
        ["RANK_OOM_KILLED"],
        ["oom_killer"],
        "the kernel's OOM killer takes a rank (host memory, not GPU memory)",
    )
    c["xid_79.log"] = (
        [
            "2026-11-30T04:00:01+0000 gpu-f03 kernel: mlx5_core 0000:1a:00.0: mlx5_cmd_out_err:838: QUERY_VPORT_COUNTER(0x770) op_mod(0x0) failed, status bad parameter(0x3)",
            XID.format(
                stamp="2026-11-30T04:00:12+0000",
                host="gpu-f03",
                pci="0000:9b:00",
                xid=79,
                pid="'<unknown>'",
                name="<unknown>",
                text="GPU has fallen off the bus.",
            ),
            "2026-11-30T04:00:12+0000 gpu-f03 kernel: NVRM: GPU 0000:9b:00.0: GPU has fallen off the bus.",
        ],
        ["GPU_XID"],
        ["xid"],
        "GPU 0000:9b:00 falls off the bus",
    )
    c["xid_48.log"] = (
        [
            XID.format(
                stamp="2026-11-30T05:10:02+0000",
                host="gpu-f04",
                pci="0000:18:00",
                xid=48,
                pid=31277,
                name="python",
                text="An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
            ),
            XID.format(
                stamp="2026-11-30T05:10:02+0000",
                host="gpu-f04",
                pci="0000:18:00",
                xid=63,
                pid=31277,
                name="python",
                text="Row Remapper: New row (0x00000000000d7f34) was marked for remapping, reset gpu to activate.",
            ),
        ],
        ["GPU_XID"],
        ["xid"],
        "a double-bit ECC error (Xid 48) and the row marked for remapping (Xid 63)",
    )
    c["cuda_ecc.log"] = (
        iterations(healthy_losses[:4], steady[:4])
        + [
            ECC.format(r=2),
            "[rank2]: CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
        ],
        ["GPU_ECC"],
        ["cuda_ecc", "megatron_iter"],
        "rank 2's GPU hits an uncorrectable ECC error",
    )
    image = "nvcr.io#nvidia/pytorch:25.01-py3"
    c["pyxis_import_unauthorized.log"] = (
        [
            PYXIS_INFO.format(msg=f"importing docker image: {image}"),
            PYXIS.format(msg=f"failed to import docker image: {image}"),
            PYXIS.format(msg="printing enroot log file:"),
            PYXIS.format(
                msg="    " + ENROOT_HTTP.format(url="https://nvcr.io/v2/nvidia/pytorch/manifests/25.01-py3", code=401, status="Unauthorized")
            ),
            "srun: error: gpu-a03: task 0: Exited with exit code 1",
        ],
        ["CONTAINER_IMPORT_FAILED", "REGISTRY_REFUSED"],
        ["pyxis", "enroot"],
        "pyxis cannot import an NGC image: nvcr.io wants credentials the node's enroot does not have",
    )
    c["enroot_userns_refused.log"] = (
        [
            PYXIS_INFO.format(msg="creating container filesystem: pyxis_4411.0"),
            PYXIS.format(msg="failed to create container filesystem for image: /shared/images/nvcr.io_nvidia_pytorch_25.01-py3-3c1a6f0e.sqsh"),
            PYXIS.format(msg="printing enroot log file:"),
            PYXIS.format(msg="    " + ENROOT_USERNS.format(why="Operation not permitted")),
            "srun: error: gpu-b11: task 0: Exited with exit code 1",
        ],
        ["CONTAINER_IMPORT_FAILED", "CONTAINER_USERNS_REFUSED"],
        ["pyxis", "enroot"],
        "a node whose kernel refuses unprivileged user namespaces: enroot cannot unpack the squashfs for pyxis",
    )
    return c


def main() -> None:
    manifest = {
        "about": "Logs of failures only GPU clusters produce, built by build.py from the upstream programs' format strings (sources per case); the variable parts are made up.",
        "cases": [],
    }
    for name, (lines, expect, sources, what) in cases().items():
        (HERE / name).write_text("\n".join(lines) + "\n")
        manifest["cases"].append(
            {"file": name, "expect": expect, "produced": f"built from format strings: {what}", "sources": [SOURCES[s] for s in sources]}
        )
    (HERE / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")


if __name__ == "__main__":
    main()

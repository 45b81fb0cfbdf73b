"""megaprov doctor's log signatures (megaprov/ops/doctor/signatures.py), finding by finding: for each rule, the exact cause
and fix the operator reads for every form of its message (the lines are those of tests/doctor_corpus/ or built from
the same upstream format strings), the whole-log analyses at the edges of their thresholds (the loss trend, the
grad-norm spike, the throughput and GPU utilisation falls, the data-loader share, NCCL releases), and the one-line
errors of a --log that cannot be read. Nothing is stood in: the scan reads real lines and real files under tmp_path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from megaprov import untrusted
from megaprov.errors import UsageError
from megaprov.ops.doctor import signatures
from megaprov.ops.doctor.findings import CODES, MAX_LINE, Finding

CORPUS = Path(__file__).resolve().parents[2] / "doctor_corpus"


def scan(lines, node="", job=None, source="t.log"):
    return signatures.scan(lines, signatures.Context(source, node, job or {}))


def one(line, node=""):
    (found,) = scan([line], node)
    return found


def expect(code, evidence, cause="", fix="", node="", line=1, source="t.log", severity=""):
    """The finding the operator reads: an empty cause or fix is the catalogue's words for the code."""
    entry = CODES[code]
    return Finding(code, severity or entry.severity, node, evidence, cause or entry.cause, fix or entry.fix, source, line)


def explained(line, node=""):
    found = one(line, node)
    return found.cause, found.fix


# ---- the line rules: cause and fix of every form


IB_FIX = "check {hca}'s port state and error counters, and the cable and switch port to {peer} (`megaprov doctor -i INV`)"


@pytest.mark.parametrize(
    ("line", "cause", "hca"),
    [
        (
            "gpu-d01:6103:6190 [3] transport/net_ib/p2p.cc:688 (ncclIbCompletionEventProcess) NCCL WARN NET/IB: Got completion from peer"
            " 10.10.0.12<40511> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129  hca mlx5_3",
            "an RDMA transfer to 10.10.0.12<40511> on mlx5_3 failed with status 12: transport retry counter exceeded: the peer or the"
            " link/switch between stopped answering",
            "mlx5_3",
        ),
        (
            "NET/IB : Got completion from peer 10.0.0.2<1234> with status=12 opcode=0 len=0 vendor err 129",
            "an RDMA transfer to 10.0.0.2<1234> failed with status 12: transport retry counter exceeded: the peer or the link/switch between"
            " stopped answering",
            "",
        ),
        (
            "NET/IB : Got completion from peer 10.0.0.2<1234> with error 13, opcode 0, len 0, vendor err 136",
            "an RDMA transfer to 10.0.0.2<1234> failed with status 13: RNR retry counter exceeded",
            "",
        ),
        (
            "NET/IB : Got completion from peer 10.0.0.2<1234> with status=5 opcode=0 len=0 vendor err 249 hca mlx5_0",
            "an RDMA transfer to 10.0.0.2<1234> on mlx5_0 failed with status 5: work request flushed (the queue pair had failed before)",
            "mlx5_0",
        ),
        (
            "NET/IB : Got completion from peer 10.0.0.2<1234> with status=4 opcode=0",
            "an RDMA transfer to 10.0.0.2<1234> failed with status 4: see ibv_wc_status",
            "",
        ),
    ],
    ids=["retry-exceeded-hca", "retry-exceeded", "rnr-old-form", "flushed", "unnamed-status"],
)
def test_an_ib_completion_error_names_the_peer_the_hca_and_what_the_status_means(line, cause, hca):
    peer = "10.10.0.12<40511>" if "10.10.0.12" in line else "10.0.0.2<1234>"
    assert explained(line) == (cause, IB_FIX.format(hca=hca or "the HCA", peer=peer))


def _port_fix(port):
    return f"stop what listens there (`ss -ltnp 'sport = :{port}'` on the head; `megaprov job stop NAME`) or set launch.master_port"


@pytest.mark.parametrize(
    ("line", "port"),
    [
        (
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 29613,"
            " useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
            "29613",
        ),
        ("[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29511 (errno: 98 - Address already in use).", "29511"),
        ("RuntimeError: Address already in use, master port: 29777", "29777"),
        ("RuntimeError: Address already in use", ""),
    ],
    ids=["torch-listen", "socket-bind", "port-after", "no-port"],
)
def test_a_port_in_use_names_the_port_or_the_default_one_to_look_at(line, port):
    where = f"port {port}" if port else "the rendezvous port"
    assert explained(line) == (
        f"{where} is already taken by another process (an old job or a stale torchrun)",
        _port_fix(port or "29500"),
    )


def test_a_rendezvous_timeout_says_how_many_clients_joined_where_torch_says_it():
    line = "torch.distributed.DistStoreError: Timed out after 21 seconds waiting for clients. 1/2 clients joined."
    assert explained(line) == (
        "only 1 of 2 clients joined the store: the missing nodes never started or cannot reach the rendezvous host",
        CODES["RDZV_TIMEOUT"].fix,
    )
    assert explained("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError") == (CODES["RDZV_TIMEOUT"].cause, CODES["RDZV_TIMEOUT"].fix)


KILLED_FIX = CODES["RANK_KILLED"].fix
WHY = {
    "SIGKILL": "SIGKILL comes from the kernel's OOM killer or an operator's kill -9",
    "SIGSEGV": "SIGSEGV is a crash in native code (a driver, NCCL or extension bug, or bad memory)",
    "SIGTERM": "SIGTERM is a stop (megaprov job stop, Slurm's time limit or preemption)",
    "SIGABRT": "SIGABRT is an abort: NCCL's or torch's watchdog, or a failed assertion in native code",
    "SIGBUS": "SIGBUS is a bad memory access (often /dev/shm too small)",
}
NUMBERS = {"SIGKILL": 9, "SIGSEGV": 11, "SIGTERM": 15, "SIGABRT": 6, "SIGBUS": 7}


@pytest.mark.parametrize("name", sorted(WHY))
def test_a_rank_killed_by_a_signal_says_where_that_signal_comes_from(name):
    number = NUMBERS[name]
    summary = f"  traceback : Signal {number} ({name}) received by PID 32124"
    assert explained(summary) == (f"a rank ended on {name}: {WHY[name]}", KILLED_FIX)
    agent = f"E1202 api.py:1002] failed (exitcode: -{number}) local_rank: 1 (pid: 32124) of binary: /work/main/.venv/bin/python"
    assert explained(agent) == (f"a rank ended on signal {number}: {WHY[name]}", KILLED_FIX)


def test_a_rank_killed_by_another_signal_is_named_by_it_without_a_reason():
    assert explained("  traceback : Signal 10 (SIGUSR1) received by PID 4") == ("a rank ended on SIGUSR1", KILLED_FIX)
    assert explained("failed (exitcode: -3) local_rank: 0 (pid: 5) of binary: python") == ("a rank ended on signal 3", KILLED_FIX)
    assert explained("failed (exitcode: -4) local_rank: 2 of binary: python") == ("a rank ended on signal 4", KILLED_FIX)


def test_torchs_two_lines_about_one_killed_rank_are_one_finding():
    lines = (CORPUS / "lab" / "killed_rank.log").read_text().splitlines()
    killed = [f for f in scan(lines) if f.code == "RANK_KILLED"]
    assert [(f.line, f.cause) for f in killed] == [(61, f"a rank ended on signal 9: {WHY['SIGKILL']}")]


@pytest.mark.parametrize(("rc", "name"), [(134, "SIGABRT"), (135, "SIGBUS"), (137, "SIGKILL"), (139, "SIGSEGV")])
def test_torchrun_ended_by_a_signal_names_the_node_and_the_signal(rc, name):
    line = f"megaprov: node node2 (node rank 1): torchrun exited with {rc} at 2026-12-02T23:01:11.670Z"
    extra = " (SIGKILL: the kernel's OOM killer or an operator's kill -9)" if rc == 137 else ""
    assert one(line) == expect(
        "RANK_KILLED",
        line,
        f"torchrun on node2 ended on {name} (exit {rc}): its ranks died with it{extra}",
        "look at node2's kernel log (`megaprov doctor -i INV --node node2`, journalctl -k); `megaprov train --resume NAME` continues",
        node="node2",
    )


def test_torchrun_exiting_otherwise_is_no_signature():
    for rc in (0, 1, 125, 130, 143):
        assert scan([f"megaprov: node node2 (node rank 1): torchrun exited with {rc} at 2026-12-02T23:01:11.670Z"]) == []


USERNS = "CONTAINER_USERNS_REFUSED"


@pytest.mark.parametrize(
    ("line", "cause", "fix"),
    [
        (
            "slurmstepd: error: pyxis:     enroot-nsenter: failed to create user namespace: Operation not permitted",
            "enroot-nsenter could not create a user namespace (Operation not permitted): the kernel refuses them to unprivileged users",
            CODES[USERNS].fix,
        ),
        (
            "enroot-mksquashovlfs: failed to create user namespace",
            "enroot-mksquashovlfs could not create a user namespace: the kernel refuses them to unprivileged users",
            CODES[USERNS].fix,
        ),
        (
            "newuidmap: write to uid_map failed: Operation not permitted",
            "rootless podman's newuidmap could not map the cluster user's IDs (Operation not permitted)",
            "give the cluster user subordinate ID ranges (/etc/subuid, /etc/subgid) and check that newuidmap is setuid root",
        ),
        (
            "newgidmap: write to gid_map failed",
            "rootless podman's newgidmap could not map the cluster user's IDs",
            "give the cluster user subordinate ID ranges (/etc/subuid, /etc/subgid) and check that newgidmap is setuid root",
        ),
    ],
    ids=["enroot-why", "enroot", "newuidmap-why", "newgidmap"],
)
def test_a_refused_user_namespace_says_which_program_and_why(line, cause, fix):
    assert explained(line) == (cause, fix)


def test_a_missing_cdi_device_names_it_with_the_catalogues_fix():
    line = "Error: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all"
    assert one(line) == expect("CDI_DEVICE_MISSING", line, "podman could not resolve nvidia.com/gpu=all from the node's CDI spec")


WATCHDOG = (
    "[rank{rank}]:[E1130 02:14:07.311208 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] Watchdog caught"
    " collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=134217728, NumelOut=134217728, Timeout(ms)={timeout})"
    " ran for {ran} milliseconds before timing out."
)


@pytest.mark.parametrize(
    ("rank", "seq", "op", "timeout", "ran", "seconds", "minutes"),
    [
        (8, 48211, "ALLREDUCE", 600000, 600136, "600", "10"),
        (3, 7, "ALLGATHER", 1800000, 1800000, "1800", "30"),
        (0, 9, "BROADCAST", 90000, 95499, "95", "1.5"),
    ],
)
def test_an_nccl_watchdog_timeout_names_the_rank_the_collective_and_the_times(rank, seq, op, timeout, ran, seconds, minutes):
    line = WATCHDOG.format(rank=rank, seq=seq, op=op, timeout=timeout, ran=ran)
    assert explained(line) == (
        f"rank {rank} waited {seconds} s for collective {op} (sequence number {seq}, timeout {minutes} min): another rank never reached it:"
        " a straggler, a hung or crashed rank, or a dead link",
        f"find the rank that is not at {op} #{seq}: the first error in the other ranks' logs, a node's kernel log (Xid, OOM killer);"
        " `megaprov doctor -i INV --level deep` tests the links pair by pair",
    )


def test_a_system_error_without_its_last_error_says_where_to_look():
    line = (
        "[rank8]: torch.distributed.DistBackendError: NCCL error in: NCCLUtils.cpp:77, unhandled system error (run with NCCL_DEBUG=INFO for details)"
    )
    assert one(line) == expect("NCCL_SYSTEM_ERROR", line, "NCCL failed a socket or device call (its 'Last error' line says which)")


def test_an_xid_names_the_gpu_the_xid_and_the_action():
    line = "NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus."
    assert one(line, "gpu7") == expect(
        "GPU_XID",
        line,
        "GPU 0000:18:00 reported Xid 79 (GPU has fallen off the bus): the GPU stopped answering on PCIe (power, thermal, riser or board):"
        " drain and reboot the node, open a hardware case if it returns",
        "drain the node and reboot it",
        node="gpu7",
        severity="error",
    )


def test_the_oom_killer_names_the_process_and_the_node():
    line = "2026-11-30T03:12:41+0000 gpu-e01 kernel: Out of memory: Killed process 88127 (python) total-vm:412857344kB, anon-rss:1kB"
    assert one(line) == expect("RANK_OOM_KILLED", line, "the kernel killed process 88127 (python) because the node ran out of memory", node="gpu-e01")


OOM = (
    "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.19 GiB"
    " of which 1.06 GiB is free."
)
OOM_FIX = (
    "lower train.micro_batch_size, set train.recompute: selective (or full), or raise parallel.tensor/pipeline; "
    "`megaprov plan` shows the memory per GPU of each layout"
)


def test_a_cuda_oom_says_what_was_asked_and_what_was_free():
    assert explained(OOM) == ("a rank on GPU 3 asked for 2.00 GiB more GPU memory with 1.06 GiB free of 79.19 GiB", OOM_FIX)
    assert explained("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB") == (
        "a rank asked for 512.00 MiB more GPU memory",
        OOM_FIX,
    )


def test_a_cuda_oom_in_a_planned_job_names_the_estimate_and_the_jobs_fix():
    plan = {"memory": {"per_gpu_gib": 61.5}, "memory_fix": "set train.micro_batch_size: 1"}
    (found,) = scan([OOM], "gpu1", plan)
    assert (found.cause, found.fix) == (
        "a rank on GPU 3 asked for 2.00 GiB more GPU memory with 1.06 GiB free of 79.19 GiB; the planner estimated 61.5 GiB per GPU for this layout",
        "set train.micro_batch_size: 1",
    )
    (unsized,) = scan([OOM], "gpu1", {"memory": {"gpu_gib": 80}})
    assert unsized.cause.endswith("; the planner estimated ? GiB per GPU for this layout") and unsized.fix == OOM_FIX
    for job in ({"memory": "61.5"}, {"memory": {}}, {"memory_fix": ""}):
        (plain,) = scan([OOM], "gpu1", job)
        assert (plain.cause, plain.fix) == ("a rank on GPU 3 asked for 2.00 GiB more GPU memory with 1.06 GiB free of 79.19 GiB", OOM_FIX)


REGISTRY_FIX = CODES["REGISTRY_REFUSED"].fix


@pytest.mark.parametrize(
    ("line", "cause", "fix"),
    [
        (
            "Error: initializing source docker://head:5000/megaprov/trainer:25.01: reading manifest 25.01 in head:5000/megaprov/trainer:"
            " manifest unknown",
            "the registry answered 'manifest unknown' for head:5000/megaprov/trainer:25.01: it does not hold that image",
            "`megaprov image pull IMAGE -i INV` puts it in the head's registry",
        ),
        (
            "Error: reading manifest latest in docker.io/library/x: unauthorized: authentication required",
            "the registry answered 'unauthorized' for docker.io/library/x:latest",
            REGISTRY_FIX,
        ),
        (
            'Error: pinging container registry head:5000: Get "https://head:5000/v2/": http: server gave HTTP response to HTTPS client',
            'registry head:5000 could not be reached or spoken to: Get "https://head:5000/v2/": http: server gave HTTP response to HTTPS client',
            REGISTRY_FIX,
        ),
        (
            "Error: pinging container registry head:5000: " + "x" * 200,
            "registry head:5000 could not be reached or spoken to: " + "x" * 160,
            REGISTRY_FIX,
        ),
        (
            "slurmstepd: error: pyxis:     [ERROR] URL https://nvcr.io/v2/nvidia/pytorch/manifests/25.01-py3 returned error code: 401 Unauthorized",
            "enroot's request to https://nvcr.io/v2/nvidia/pytorch/manifests/25.01-py3 was answered 401 Unauthorized",
            REGISTRY_FIX,
        ),
        ("[ERROR] URL https://nvcr.io/v2/x returned error code: 404", "enroot's request to https://nvcr.io/v2/x was answered 404", REGISTRY_FIX),
    ],
    ids=["manifest-unknown", "unauthorized", "ping", "ping-long", "enroot-status", "enroot-code"],
)
def test_a_refused_registry_says_what_it_answered(line, cause, fix):
    assert explained(line) == (cause, fix)


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        (
            "slurmstepd: error: pyxis: failed to import docker image: nvcr.io#nvidia/pytorch:25.01-py3 (importer: enroot)",
            "pyxis could not import image nvcr.io#nvidia/pytorch:25.01-py3 for the job step (enroot's log lines that follow say why)",
        ),
        (
            "slurmstepd: error: pyxis: failed to create container filesystem for image: /shared/img.sqsh",
            "pyxis could not unpack image /shared/img.sqsh for the job step (enroot's log lines that follow say why)",
        ),
    ],
)
def test_a_failed_pyxis_import_says_which_step_and_image(line, cause):
    assert explained(line) == (cause, CODES["CONTAINER_IMPORT_FAILED"].fix)


# ---- NCCL's system error, refined by its "Last error"


def test_a_system_error_whose_last_error_names_an_address_says_to_check_that_address():
    path = CORPUS / "upstream" / "nccl_system_error_iface.log"
    lines = path.read_text().splitlines()
    detail = "socketPollConnect: connect to 172.17.0.1<48213> failed : Connection timed out"
    assert signatures.scan_file(path) == [
        expect(
            "NCCL_SYSTEM_ERROR",
            f"{lines[2]} | Last error: {detail}",
            f"NCCL failed a socket or device call: {detail}",
            "check that every node reaches 172.17.0.1 on the cluster interface (NCCL_SOCKET_IFNAME, infiniband_socket_interface)"
            " and that no firewall blocks it; `megaprov doctor -i INV`",
            line=3,
            source=str(path),
        )
    ]


def test_a_last_error_on_the_same_line_without_an_address_is_quoted_cut_to_200_characters():
    detail = "ibv_reg_mr failed: " + "Cannot allocate memory " * 12
    lines = ["unhandled system error (run with NCCL_DEBUG=INFO for details)", f"[rank2]: Last error: {detail}"]
    assert scan(lines, "gpu4") == [
        expect(
            "NCCL_SYSTEM_ERROR",
            f"{lines[0]} | Last error: {detail.strip()}",
            f"NCCL failed a socket or device call: {detail.strip()[:200]}",
            node="gpu4",
        )
    ]


def test_a_system_error_whose_last_error_is_loopback_is_the_loopback_trap():
    path = CORPUS / "upstream" / "nccl_system_error_loopback.log"
    lines = path.read_text().splitlines()
    detail = "socketStartConnect: connect to 127.0.1.1<35519> failed : Connection refused"
    # NCCL's own lines name gpu-b01; torch's rank lines name no node: two places, each said once
    assert signatures.scan_file(path) == [
        expect("NCCL_LOOPBACK", lines[0], node="gpu-b01", source=str(path)),
        expect("NCCL_LOOPBACK", f"{lines[3]} | Last error: {detail}", line=4, source=str(path)),
    ]
    # the node known for every line: the loopback finding already stands for the system error
    assert signatures.scan_file(path, node="gpu-b01") == [expect("NCCL_LOOPBACK", lines[0], node="gpu-b01", source=str(path))]


def test_a_loopback_last_error_on_another_node_does_not_hide_this_nodes():
    lines = [
        "gpu-b01:7101:7101 [0] NCCL INFO Bootstrap: Using lo:127.0.1.1<0>",
        "unhandled system error (run with NCCL_DEBUG=INFO for details)",
        "Last error: socketStartConnect: connect to 127.0.0.1<35519> failed : Connection refused",
    ]
    assert [(f.code, f.node, f.line) for f in scan(lines, "gpu-b02")] == [("NCCL_LOOPBACK", "gpu-b01", 1), ("NCCL_LOOPBACK", "gpu-b02", 2)]


# ---- whole-log analyses: the loss trend


def iteration(i, loss, ms=100.0, norm=1.0, tflops=None):
    """Megatron-LM's training_log line (megatron/training/training.py); grad norm only where given, as Megatron prints it."""
    text = (
        f" [2026-12-02 10:00:00] iteration {i:8d}/   10000 | consumed samples: {i * 8:12d} | elapsed time per iteration (ms): {ms:.1f} |"
        f" throughput per GPU (TFLOP/s/GPU): {tflops if tflops is not None else 40000 / ms:.1f} | learning rate: 3.000000E-04 |"
        f" global batch size:     8 | lm loss: {loss:.6E} | loss scale: 1.0 |"
    )
    if norm is not None:
        text += f" grad norm: {norm:.3f} |"
    return text + " number of skipped iterations:   0 | number of nan iterations:   0 |"


def series(losses, norms=None, ms=None):
    norms = norms or [1.0] * len(losses)
    ms = ms or [100.0] * len(losses)
    return [iteration(10 * (k + 1), loss, t, n) for k, (loss, n, t) in enumerate(zip(losses, norms, ms, strict=True))]


def diverging(losses, norms=None, node=""):
    return [f for f in scan(series(losses, norms), node) if f.code == "LOSS_DIVERGING"]


def described(i, loss, norm=1.0):
    return (
        f"iteration {i}, lm loss {loss:.4g}"
        + (f", grad norm {norm:.4g}" if norm is not None else "")
        + ", learning rate 0.0003, ms/iter 100, TFLOP/s/GPU 400"
    )


FALL = [10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0]  # then the minimum
LR_WORDS = ": the learning rate is too high for this batch, or the warm-up too short"


def test_six_rising_points_after_the_minimum_are_a_divergence_named_by_where_it_fell_and_rose():
    losses = [*FALL, 3.5, 4.0, 4.5, 5.0, 5.5]  # the minimum and five points after it: the fewest the trend is judged on
    assert diverging(losses, node="gpu2") == [
        expect(
            "LOSS_DIVERGING",
            f"{described(80, 3.0)} -> {described(130, 5.5)}",
            f"the loss fell to 3 at iteration 80 and rose to 5.5 by iteration 130 (Mann-Kendall z=2.63){LR_WORDS}",
            node="gpu2",
            line=13,
        )
    ]
    assert diverging(losses[:-1]) == []  # five points after the minimum... four: too few to judge


def test_a_loss_of_zero_is_a_loss():
    losses = [10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
    (found,) = diverging(losses)
    assert found.cause == f"the loss fell to 0 at iteration 110 and rose to 3 by iteration 170 (Mann-Kendall z=3.00){LR_WORDS}"


def test_the_rise_is_measured_to_the_last_loss():
    losses = [*FALL, 2.0, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 5.0]  # the last point takes back far more than a tenth of the drop
    (found,) = diverging(losses)
    assert found.cause == f"the loss fell to 1 at iteration 100 and rose to 5 by iteration 170 (Mann-Kendall z=3.34){LR_WORDS}"
    assert found.line == 17


@pytest.mark.parametrize(
    "losses",
    [
        [*FALL, 2.0, 1.0, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06, 1.07],  # a steady rise of 0.07 after a drop of 9
        [55.0, 54.0, 53.0, 52.0, 51.5, 51.0, 50.5, 50.0, 50.1, 50.2, 50.3, 50.4, 50.5],  # 0.5 above a minimum of 50: under 2 %
        [30.0, 10.0, 9.5, 9.0, 8.5, 8.0, 7.5, 7.0, 6.5, 6.0, 5.5, 5.0, 5.3, 5.6, 5.9, 6.2, 6.5],  # 1.5 back of a drop of 25 from the first loss
        [2.5, 2.0, 1.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.2, 1.2, 1.2],  # a step up at the end: no slope (median 0)
    ],
    ids=["small-rise", "under-2-percent-of-the-minimum", "under-a-tenth-of-the-drop", "flat-slope"],
)
def test_a_rise_too_small_or_too_flat_is_no_divergence(losses):
    assert diverging(losses) == []


@pytest.mark.parametrize(
    "losses",
    [
        [11.0, 10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0],  # rise 1.0: exactly a tenth of the drop of 10
        [55.0, 54.0, 53.0, 52.0, 51.5, 51.0, 50.5, 50.0, 50.2, 50.4, 50.6, 50.8, 51.0],  # rise 1.0: exactly 2 % of the minimum of 50
        [10.0, 9.5, 9.0, 8.5, 8.0, 7.5, 7.0, 6.5, 6.0, 5.5, 5.0, 5.2, 5.4, 5.6, 5.8, 6.0],  # rise 1.0 of a drop of 5 from the first loss
        [2.5, 2.45, 2.4, 2.35, 2.3, 2.25, 2.2, 2.15, 2.1, 2.05, 2.0, 2.01, 2.02, 2.03, 2.04, 2.05, 2.06],  # a drop under 1: 0.06 of 0.5
    ],
    ids=["a-tenth-of-the-drop", "two-percent-of-the-minimum", "from-the-first-loss", "a-drop-under-one"],
)
def test_a_rise_at_its_thresholds_is_a_divergence(losses):
    assert [f.code for f in diverging(losses)] == ["LOSS_DIVERGING"]


SPIKE_LOSSES = [*FALL, 3.5, 4.0, 4.5, 5.0, 5.5]


@pytest.mark.parametrize(
    ("norms", "spikes"),
    [
        ([1.0] * 12 + [5.5], "; grad norm peaked at 5.5 against a median of 1"),  # above five times the median
        ([1.0] * 12 + [5.0], ""),  # five times: not above
        ([2.0] * 12 + [4.0], ""),
        ([0.2] * 12 + [2.0], "; grad norm peaked at 2 against a median of 0.2"),  # norms under 1 spike too
        ([0.0] * 10 + [1.0] * 3, ""),  # a median of 0: nothing to compare with
    ],
    ids=["above-5x", "at-5x", "under-5x", "small-norms", "zero-median"],
)
def test_a_divergence_names_a_grad_norm_spike_above_five_times_the_median(norms, spikes):
    (found,) = diverging(SPIKE_LOSSES, norms)
    assert found.cause == f"the loss fell to 3 at iteration 80 and rose to 5.5 by iteration 130 (Mann-Kendall z=2.63){spikes}{LR_WORDS}"


def test_a_spike_is_read_from_the_iterations_that_print_a_grad_norm_six_at_least():
    six = [None] * 7 + [1.0, 1.0, 1.0, 1.0, 1.0, 8.0]  # six iterations print one
    (found,) = diverging(SPIKE_LOSSES, six)
    assert "; grad norm peaked at 8 against a median of 1:" in found.cause
    (fewer,) = diverging(SPIKE_LOSSES, [None] * 8 + [1.0, 1.0, 1.0, 1.0, 8.0])
    assert "grad norm peaked" not in fewer.cause


def test_a_spike_thinned_out_of_a_long_series_is_still_named():
    n = 600  # past MAX_POINTS: every other point of the series is dropped, the second (the spike) among them
    losses = [10.0 - 0.01 * k for k in range(300)] + [7.0 + 0.01 * k for k in range(300)]
    norms = [1.0, 50.0] + [1.0] * (n - 2)
    (found,) = diverging(losses, norms)
    assert "; grad norm peaked at 50 against a median of 1:" in found.cause


# ---- whole-log analyses: a non-finite loss, throughput, timers, NCCL releases


def test_a_non_finite_loss_names_its_iteration_learning_rate_and_the_grad_norms_before():
    lines = series([9.0, 8.0, 7.0, 6.0, 5.0, 4.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    lines.append(iteration(70, float("nan"), norm=None))
    assert scan(lines, "gpu1") == [
        expect(
            "LOSS_NAN",
            "iteration 70, lm loss nan, learning rate 0.0003, ms/iter 100, TFLOP/s/GPU 400",
            "the loss is not finite from iteration 70 at learning rate 0.0003; grad norm before it: 2, 3, 4, 5, 6",
            node="gpu1",
            line=7,
        )
    ]


def test_time_per_iteration_growing_within_the_attempt_names_the_rates():
    ms = [500.0] + [100.0] * 9 + [100.0 + 15 * i for i in range(1, 11)]  # the first interval carries start-up
    lines = series([10 - 0.1 * i for i in range(20)], ms=ms)
    (found,) = scan(lines, "gpu1")
    assert (found.code, found.node, found.line) == ("THROUGHPUT_FALLING", "gpu1", 20)
    assert found.cause == (
        "time per iteration grew from a median of 100 ms to 227.5 ms (44% of the early rate), TFLOP/s/GPU 400 -> 160:"
        " data loading falling behind, a slow or throttling node, or a degraded link"
    )
    assert found.evidence.startswith("iteration 20, lm loss 9.9,") and found.evidence.endswith("ms/iter 250, TFLOP/s/GPU 160")


def test_a_data_loader_taking_over_a_quarter_of_forward_backward_is_slow():
    timers = [
        "(min, max) time across ranks (ms):",
        "    optimizer ......................................: (8.02, 8.44)",  # the first timer line is the evidence's line
        "    forward-backward ...............................: (390.12, 400.00)",
        "    batch-generator ................................: (99.10, 120.00)",
        "    forward-backward ...............................: 400.00",  # one rank: a single time
        "    batch-generator ................................: (90.00, 110.00)",
    ]
    assert scan(timers, "gpu3") == [
        expect(
            "DATALOADER_SLOW",
            "batch-generator 115 ms, forward-backward 400 ms (median max across ranks)",
            "the batch generator takes 115 ms of the 400 ms forward-backward (29%): the ranks wait for data",
            node="gpu3",
            line=2,
        )
    ]
    quarter = [line.replace("120.00", "100.00").replace("110.00", "100.00") for line in timers]
    assert scan(quarter, "gpu3") == []  # a quarter exactly: not over it
    assert scan([line for line in timers if "forward-backward" not in line]) == []


def test_ranks_on_different_nccl_releases_are_named_with_their_lines():
    lines = [
        "gpu1:100:100 [0] NCCL INFO NCCL version 2.27.7+cuda13.0",
        "gpu2:200:200 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
        "gpu1:100:100 [0] NCCL INFO NCCL version 2.27.7+cuda13.0",
        "torch was compiled with NCCL version 2.19.3",
    ]
    assert scan(lines) == [
        expect(
            "NCCL_VERSION_MISMATCH",
            "gpu1: NCCL 2.27.7 (line 1); gpu2: NCCL 2.21.5 (line 2)",
            "the ranks loaded 2 NCCL releases (2.21.5, 2.27.7): their collectives are not compatible",
        )
    ]


def test_a_flood_of_findings_does_not_hide_the_whole_log_analyses():
    flood = [
        f"2026-11-30T03:12:41+0000 node{n} kernel: Out of memory: Killed process {1000 + p} (python) total-vm:1kB"
        for n in range(50)
        for p in range(20)
    ]  # MAX_FINDINGS: 50 nodes, 20 each
    late = "2026-11-30T03:12:41+0000 node99 kernel: Out of memory: Killed process 7 (python) total-vm:1kB"
    losses = [*FALL, 3.5, 4.0, 4.5, 5.0, 5.5]
    versions = ["gpu1:100:100 [0] NCCL INFO NCCL version 2.27.7+cuda13.0", "gpu2:200:200 [0] NCCL INFO NCCL version 2.21.5+cuda12.4"]
    found = scan([*flood, late, *versions, *series(losses)])
    assert len(found) == 1002
    assert [f.code for f in found[1000:]] == ["NCCL_VERSION_MISMATCH", "LOSS_DIVERGING"]
    nan = scan([*flood, *series([9.0, 8.0]), iteration(30, float("inf"))])
    assert [f.code for f in nan[1000:]] == ["LOSS_NAN"]


# ---- GPU utilisation from the nodes' nvidia-smi samples


def util(values):
    return [{"util": float(v)} for v in values]


def test_falling_gpu_utilisation_names_the_early_and_late_means():
    rows = util([0, 0] + [90] * 8 + [30] * 10)  # 20 samples: the first tenth is start-up
    assert signatures.gpu_utilisation(rows, "gpu1", "gpu-gpu1.csv") == [
        expect(
            "THROUGHPUT_FALLING",
            "nvidia-smi utilization.gpu: mean 90 % early, 30 % late",
            "GPU utilisation fell from 90 % to 30 % during the job: the GPUs wait (data loading, a slow peer, host-side work)",
            node="gpu1",
            line=0,
            source="gpu-gpu1.csv",
        )
    ]


def test_the_early_and_late_quarters_are_a_quarter_of_the_samples_three_at_least():
    # 12 samples: 1 of start-up, then the first 3 and the last 3 of 11
    (found,) = signatures.gpu_utilisation(util([0, 90, 90, 90, 60, 60, 60, 60, 60, 20, 20, 20]), "n", "s")
    assert found.evidence == "nvidia-smi utilization.gpu: mean 90 % early, 20 % late"
    assert signatures.gpu_utilisation(util([0, 90, 90, 90, 60, 60, 60, 60, 20, 20, 20]), "n", "s") == []  # 11: too few
    # 40 samples: 4 of start-up, then quarters of 9
    rows = util([0] * 4 + [100] * 8 + [40] + [70] * 18 + [60] + [10] * 8)
    (found,) = signatures.gpu_utilisation(rows, "n", "s")
    assert found.evidence == "nvidia-smi utilization.gpu: mean 93 % early, 16 % late"


@pytest.mark.parametrize(
    ("early", "late", "falls"),
    [(50, 20, True), (49, 10, False), (100, 69, True), (100, 70, False)],
    ids=["busy-at-50", "never-busy", "under-70-percent", "at-70-percent"],
)
def test_a_fall_is_from_a_busy_start_to_under_seventy_percent_of_it(early, late, falls):
    rows = util([early] * 12 + [late] * 12)
    assert bool(signatures.gpu_utilisation(rows, "n", "s")) is falls


# ---- --log files that cannot be read


def refused(path, root=None):
    with pytest.raises(UsageError) as caught:
        signatures.scan_file(path, root=root)
    return caught.value


def test_a_missing_log_is_one_line_naming_the_flag(tmp_path):
    error = refused(tmp_path / "gone.log")
    assert (error.message, error.hint) == (
        f"--log {tmp_path / 'gone.log'}: no such file",
        "give the path of a job log, node log or saved dmesg/journal output",
    )


def test_a_directory_given_as_a_log_is_one_line(tmp_path):
    error = refused(tmp_path)
    assert (error.message, error.hint) == (f"--log {tmp_path}: is a directory", "give log files (a job's logs are jobs/NAME/logs/NODE.log)")


def test_a_fifo_given_as_a_log_is_refused_unread(tmp_path):
    fifo = tmp_path / "stream"
    os.mkfifo(fifo)
    error = refused(fifo)
    assert (error.message, error.hint) == (
        f"--log {fifo}: is not a regular file (it is a FIFO)",
        "give a regular log file (save a stream first: journalctl -k > kernel.log)",
    )


def test_a_log_behind_something_that_is_no_directory_says_so(tmp_path):
    (tmp_path / "file").write_text("x\n")
    error = refused(tmp_path / "file" / "job.log")
    assert (error.message, error.hint) == (
        f"--log {tmp_path / 'file' / 'job.log'}: passes through something that is not a directory",
        "check the path and its permissions",
    )


def test_a_log_name_is_shown_printable(tmp_path):
    error = refused(tmp_path / "a\x1b]0;x\x07.log")
    assert "\x1b" not in error.message and error.message.endswith(": no such file") and error.message.startswith(f"--log {tmp_path}/a")


def test_a_binary_log_is_not_text_for_the_operator_and_for_a_job(tmp_path):
    core = tmp_path / "core"
    core.write_bytes(b"\x7fELF\0\0\0" + b"x" * 100)
    error = refused(core)
    assert (error.message, error.hint) == (f"--log {core}: is not a text file", "give a log file (journalctl -k > kernel.log saves a kernel log)")
    with pytest.raises(untrusted.BadEntry) as caught:
        signatures.scan_file(core, root=tmp_path)
    assert (caught.value.path, caught.value.problem) == (str(core), "is not a text file")


# ---- reading a log: lines, bounds


def test_a_logs_lines_are_split_as_splitlines_would_across_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(signatures, "READ_CHUNK", 7)
    text = "alpha\r\nbeta\rgamma\n\ndelta\u2028eps\r" + "\n" + "z" * 20
    path = tmp_path / "x.log"
    path.write_bytes(text.encode())
    with signatures.log_lines(path) as lines:
        assert list(lines) == text.splitlines()


def test_a_line_longer_than_max_line_is_cut(tmp_path):
    path = tmp_path / "long.log"
    path.write_text("a" * (MAX_LINE + 50) + "\nb\n" + "c" * (MAX_LINE + 5))
    with signatures.log_lines(path) as lines:
        assert list(lines) == ["a" * MAX_LINE, "b", "c" * MAX_LINE]


def test_a_log_longer_than_its_bound_is_read_from_its_end_without_the_cut_line(tmp_path, monkeypatch):
    import megaprov.ops.doctor.signatures as module

    monkeypatch.setattr(module, "MAX_LOG_BYTES", 20)
    path = tmp_path / "big.log"
    path.write_text("first line\nsecond line\nthird\nfourth\n")  # 36 bytes: the last 20 start inside "second line"
    with signatures.log_lines(path) as lines:
        assert list(lines) == ["third", "fourth"]

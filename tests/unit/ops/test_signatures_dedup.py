"""megaprov doctor's log rules (megaprov/ops/doctor/signatures.py) as the operator meets them in a whole log: which lines
say the same thing once (every rank printing the same peer loss, port or missing dataset; one GPU's Xid; one rank's
kill, OOM or watchdog timeout; one peer's RDMA failure) and which are separate findings, with the evidence line kept;
the restarts that split a job's iterations into attempts (torchrun's start line, an iteration number that does not
advance) and the clean exit that settles a lost connection; long series thinned to a bounded number of points; and a
log file read as text in chunks: line ends across reads, bytes that are not UTF-8, a cut last character, the byte
bound. The lines are those of tests/doctor_corpus/ or built from the same upstream format strings; nothing is stood
in but the read size and byte bound (module constants, shrunk so that a few bytes cross them)."""

from __future__ import annotations

import statistics

import pytest

from megaprov.errors import UsageError
from megaprov.ops.doctor import signatures
from megaprov.ops.doctor.findings import CODES
from megaprov.training.verdict import mann_kendall

START = "megaprov: node node1 (node rank 0): torchrun starting at 2026-12-02T23:33:40.000Z"


def exited(rc):
    return f"megaprov: node node1 (node rank 0): torchrun exited with {rc} at 2026-12-02T23:40:00.000Z"


def scan(lines, node=""):
    return signatures.scan(lines, signatures.Context("job.log", node))


def seen(lines, node=""):
    """What the operator reads of each finding but its cause and fix: code, node, severity, line and evidence."""
    return [(f.code, f.node, f.severity, f.line, f.evidence) for f in scan(lines, node)]


def sev(code):
    return CODES[code].severity


# ---- the codes whose lines all say the same thing: once per node, with the first line as evidence


SAME_THING = {
    "PEER_LOST": [
        "[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [10.90.87.3]:24792:"
        " Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the application.",
        "[rank1]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer"
        " [10.90.87.3]:6311. This is typically caused by a remote worker crashing.",
    ],
    "RDZV_PORT_IN_USE": [
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 29613,"
        " useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
        "[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29613 (errno: 98 - Address already in use).",
    ],
    "RDZV_TIMEOUT": [
        "torch.distributed.DistStoreError: Timed out after 21 seconds waiting for clients. 1/2 clients joined.",
        "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError",
    ],
    "VOCAB_MISMATCH": [
        "[rank0]: IndexError: index out of range in self",
        "../aten/src/ATen/native/cuda/Indexing.cu:1289: indexSelectLargeIndex: block: [0,0,0], thread: [64,0,0] Assertion"
        " `srcIndex < srcSelectDimSize` failed.",
    ],
    "DATA_PREFIX_MISSING": [
        "[rank0]: AssertionError: One or both of the .idx and .bin files cannot be found at the path prefix"
        " /shared/jobs/corpus/never_prepared_text_document",
        "[rank1]: FileNotFoundError: [Errno 2] No such file or directory: '/shared/jobs/corpus/never_prepared_text_document.idx'",
    ],
    "NCCL_LOOPBACK": [
        "gpu-b01:7101:7101 [0] NCCL INFO Bootstrap: Using lo:127.0.1.1<0>",
        "gpu-b01:7101:7180 [0] misc/socket.cc:484 (socketTryAccept) NCCL WARN socketStartConnect: connect to 127.0.1.1<35519> failed"
        " : Connection refused",
    ],
}


@pytest.mark.parametrize("code", sorted(SAME_THING))
def test_two_different_lines_of_a_code_that_says_one_thing_are_one_finding_with_the_first_as_evidence(code):
    first, second = SAME_THING[code]
    node = "gpu-b01" if code == "NCCL_LOOPBACK" else "node1"
    assert seen([first, "unrelated output", second], "node1") == [(code, node, sev(code), 1, first)]


@pytest.mark.parametrize("code", sorted(SAME_THING))
def test_each_of_those_lines_alone_is_its_code(code):
    for line in SAME_THING[code]:
        assert [f.code for f in scan([line])] == [code]


def test_the_same_thing_on_two_nodes_is_a_finding_per_node():
    journal = "2026-11-30T05:10:02+0000 {node} python[31277]: [rank2]: RuntimeError: CUDA error: uncorrectable ECC error encountered"
    lines = [journal.format(node="gpu-f04"), journal.format(node="gpu-f05"), journal.format(node="gpu-f04")]
    assert seen(lines) == [("GPU_ECC", "gpu-f04", sev("GPU_ECC"), 1, lines[0]), ("GPU_ECC", "gpu-f05", sev("GPU_ECC"), 2, lines[1])]


def test_every_rank_saying_nccl_failed_a_system_call_is_one_finding():
    line = (
        "[rank{r}]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77,"
        " unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.7"
    )
    lines = [line.format(r=8), "[rank8]: socketPollConnect: connect to 172.17.0.1<48213> failed : Connection timed out", line.format(r=9)]
    found = scan(lines, "gpu-c01")
    assert [(f.code, f.line, f.evidence) for f in found] == [("NCCL_SYSTEM_ERROR", 1, lines[0])]


# ---- the codes said once per key: a GPU and its Xid, a rank, a GPU's OOM, a peer and HCA


def xid(where, number, rest="pid=31277, name=python, MMU Fault"):
    return f"2026-11-30T05:10:02+0000 gpu-f04 kernel: NVRM: Xid ({where}): {number}, {rest}"


def test_one_gpus_xid_is_one_finding_however_its_lines_name_the_gpu():
    lines = [
        xid("PCI:0000:3b:00 GPU-I:01 GPU-CI:02", 31),
        xid("PCI:0000:3b:00 GPU-I:05", 31, "pid=31300, name=python, Ch 00000010, MMU Fault"),
        xid("PCI:0000:3b:00", 31),
    ]
    assert seen(lines) == [("GPU_XID", "gpu-f04", "warn", 1, lines[0])]


def test_another_xid_or_another_gpu_is_another_finding():
    lines = [xid("PCI:0000:3b:00", 31), xid("PCI:0000:3b:00", 43, "pid=31277, name=python, Ch 00000010"), xid("PCI:0000:18:00", 31)]
    assert [(f.code, f.line) for f in scan(lines)] == [("GPU_XID", 1), ("GPU_XID", 2), ("GPU_XID", 3)]


def agent(exitcode, lrank, pid=None, at="22:25:07.947000"):
    pid = f" (pid: {pid})" if pid else ""
    return (
        f"E1202 {at} 32053 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: {exitcode})"
        f" local_rank: {lrank}{pid} of binary: /opt/megaprov/venv/bin/python"
    )


def test_torchs_lines_about_one_local_rank_without_a_pid_are_one_finding():
    lines = [agent(-9, 1, at="22:25:07.947000"), agent(-9, 1, at="22:25:08.102000"), agent(-9, 2)]
    assert seen(lines, "node2") == [
        ("RANK_KILLED", "node2", sev("RANK_KILLED"), 1, lines[0]),
        ("RANK_KILLED", "node2", sev("RANK_KILLED"), 3, lines[2]),
    ]


def test_two_killed_ranks_are_two_findings_and_the_summary_of_one_joins_it():
    lines = [agent(-9, 1, 32124), agent(-6, 0, 52008), "  traceback : Signal 9 (SIGKILL) received by PID 32124"]
    assert [(f.line, f.cause.split(":")[0]) for f in scan(lines, "node2")] == [
        (1, "a rank ended on signal 9"),
        (2, "a rank ended on signal 6"),
    ]


def torchrun(node, rc):
    return f"megaprov: node {node} (node rank 1): torchrun exited with {rc} at 2026-12-02T23:01:11.670Z"


def test_torchrun_killed_on_two_nodes_is_a_finding_per_node():
    lines = [torchrun("node2", 137), torchrun("node3", 137)]
    assert seen(lines) == [
        ("RANK_KILLED", "node2", sev("RANK_KILLED"), 1, lines[0]),
        ("RANK_KILLED", "node3", sev("RANK_KILLED"), 2, lines[1]),
    ]


def oom(rank, gpu, ask="2.00 GiB", free="1.06 GiB"):
    text = f"[rank{rank}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {ask}."
    return text + (f" GPU {gpu} has a total capacity of 79.19 GiB of which {free} is free." if gpu is not None else "")


def test_one_gpus_out_of_memory_is_one_finding_however_much_each_try_asked():
    lines = [oom(3, 3), oom(3, 3, "512.00 MiB", "300.00 MiB"), oom(5, 5, "3.91 GiB", "1.62 GiB")]
    found = scan(lines, "gpu1")
    assert [(f.code, f.node, f.line, f.evidence) for f in found] == [("CUDA_OOM", "gpu1", 1, lines[0]), ("CUDA_OOM", "gpu1", 3, lines[2])]
    assert [f.cause for f in found] == [
        "a rank on GPU 3 asked for 2.00 GiB more GPU memory with 1.06 GiB free of 79.19 GiB",
        "a rank on GPU 5 asked for 3.91 GiB more GPU memory with 1.62 GiB free of 79.19 GiB",
    ]


def test_out_of_memory_lines_that_name_no_gpu_are_said_once():
    lines = [oom(0, None), oom(1, None, "1.00 GiB"), oom(2, 2)]
    assert [(f.line, f.cause) for f in scan(lines, "gpu1")] == [
        (1, "a rank asked for 2.00 GiB more GPU memory"),
        (3, "a rank on GPU 2 asked for 2.00 GiB more GPU memory with 1.06 GiB free of 79.19 GiB"),
    ]


WATCHDOG = (
    "[rank{rank}]:[E1130 02:14:07.311208 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] Watchdog caught"
    " collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=134217728, NumelOut=134217728, Timeout(ms)=600000)"
    " ran for {ran} milliseconds before timing out."
)


def test_one_ranks_watchdog_timeouts_are_one_finding_and_each_rank_its_own():
    lines = [
        WATCHDOG.format(rank=8, seq=48211, op="ALLREDUCE", ran=600136),
        WATCHDOG.format(rank=8, seq=48212, op="ALLGATHER", ran=600002),
        WATCHDOG.format(rank=9, seq=48211, op="ALLREDUCE", ran=600153),
    ]
    assert [(f.code, f.line, f.evidence) for f in scan(lines, "gpu-a01")] == [("NCCL_TIMEOUT", 1, lines[0]), ("NCCL_TIMEOUT", 3, lines[2])]


def ib(peer, status, hca):
    return (
        f"gpu-d01:6103:6190 [3] transport/net_ib/p2p.cc:688 (ncclIbCompletionEventProcess) NCCL WARN NET/IB: Got completion from peer"
        f" {peer} with status=IBV_WC_RETRY_EXC_ERR({status}) opcode=IBV_WC_SEND(0) vendor_err=129  hca {hca}"
    )


def test_rdma_failures_are_one_finding_per_peer_and_hca():
    lines = [
        ib("10.10.0.12<40511>", 12, "mlx5_3"),
        ib("10.10.0.12<40511>", 5, "mlx5_3"),  # the flushed requests after the failure: the same broken link
        ib("10.10.0.12<40511>", 12, "mlx5_1"),
        ib("10.10.0.13<40511>", 12, "mlx5_3"),
    ]
    assert [(f.code, f.node, f.line) for f in scan(lines)] == [
        ("IB_COMPLETION_ERROR", "gpu-d01", 1),
        ("IB_COMPLETION_ERROR", "gpu-d01", 3),
        ("IB_COMPLETION_ERROR", "gpu-d01", 4),
    ]


def pyxis(image):
    return f"slurmstepd: error: pyxis: failed to import docker image: {image}"


def test_each_image_that_failed_to_import_is_its_own_finding_and_a_repeat_is_not():
    lines = [pyxis("head:5000/megaprov/trainer:25.01"), pyxis("head:5000/megaprov/tools:1.2"), pyxis("head:5000/megaprov/trainer:25.01")]
    assert [(f.code, f.line, f.cause) for f in scan(lines, "node1")] == [
        (
            "CONTAINER_IMPORT_FAILED",
            1,
            "pyxis could not import image head:5000/megaprov/trainer:25.01 for the job step (enroot's log lines that follow say why)",
        ),
        (
            "CONTAINER_IMPORT_FAILED",
            2,
            "pyxis could not import image head:5000/megaprov/tools:1.2 for the job step (enroot's log lines that follow say why)",
        ),
    ]


# ---- attempts: restarts split the iterations; the latest attempt is the one judged


def iteration(i, ms=100.0, loss=5.0, nan=0):
    """Megatron-LM's training_log line (megatron/training/training.py)."""
    return (
        f" [2026-12-02 10:00:00] iteration {i:8d}/   10000 | consumed samples: {i * 8:12d} | elapsed time per iteration (ms): {ms:.1f} |"
        f" throughput per GPU (TFLOP/s/GPU): {40000 / ms:.1f} | learning rate: 3.000000E-04 | global batch size:     8 | lm loss: {loss:.6E} |"
        f" loss scale: 1.0 | grad norm: 1.000 | number of skipped iterations:   0 | number of nan iterations: {nan:3d} |"
    )


def steady(first, count, ms):
    return [iteration(first + 10 * k, ms) for k in range(count)]


def codes(lines):
    return [f.code for f in scan(lines)]


def test_an_iteration_logged_again_after_a_restart_begins_the_next_attempt():
    # attempt 1 resumed from a checkpoint at 75 and logs 80 again, on slower nodes: steady within itself
    first = steady(10, 8, 100.0)
    again = steady(80, 9, 300.0)
    assert codes(first + again) == []
    assert codes(first + steady(90, 9, 300.0)) == ["THROUGHPUT_FALLING"]  # carrying on: one attempt that slowed down


def test_torchrun_starting_again_begins_an_attempt_even_when_the_iterations_carry_on():
    # a node lost without its exit line: the next start, resumed from the checkpoint at 80, logs on from 90
    lines = [START, *steady(10, 8, 100.0), START, *steady(90, 9, 300.0)]
    assert codes(lines) == []


def test_torchruns_exit_line_alone_begins_no_attempt():
    lines = [START, *steady(10, 4, 100.0), exited(0), *steady(50, 5, 300.0)]
    found = scan(lines)
    assert [(f.code, f.line) for f in found] == [("THROUGHPUT_FALLING", len(lines))]


def test_only_the_third_attempt_is_judged():
    lines = [START, *steady(10, 8, 100.0), START, *steady(90, 8, 100.0), START, *steady(170, 9, 300.0)]
    assert codes(lines) == []
    assert codes([START, *steady(10, 8, 100.0), START, *steady(90, 8, 100.0), *steady(170, 9, 300.0)]) == ["THROUGHPUT_FALLING"]


def test_one_nan_iteration_is_a_non_finite_loss():
    lines = [iteration(10, loss=5.0), iteration(20, loss=4.9), iteration(30, loss=4.8, nan=1)]
    (found,) = scan(lines, "gpu1")
    assert (found.code, found.node, found.line, found.evidence) == (
        "LOSS_NAN",
        "gpu1",
        3,
        "iteration 30, lm loss 4.8, grad norm 1, learning rate 0.0003, ms/iter 100, TFLOP/s/GPU 400, nan iterations 1",
    )
    assert found.cause == "the loss is not finite from iteration 30 at learning rate 0.0003; grad norm before it: 1, 1"


PEER = "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?"


def test_a_peer_lost_before_a_restart_is_not_settled_by_the_next_attempts_clean_exit():
    lines = [START, PEER, START, exited(0)]
    assert seen(lines) == [("PEER_LOST", "", sev("PEER_LOST"), 2, PEER)]


# ---- long series: thinned evenly to MAX_POINTS points and the last


def thinned(items, cap):
    """The series as its docstring says: every stride-th item from the first, stride the least power of two that keeps
    the points within cap, and the last item."""
    stride = 1
    while (len(items) - 1) // stride + 1 > cap:
        stride *= 2
    points = items[::stride]
    return points if (len(items) - 1) % stride == 0 else [*points, items[-1]]


def timer(name, ms):
    return f"    {name} ................................: ({ms / 2:.2f}, {ms:.2f})"


@pytest.mark.parametrize("count", [512, 513, 1000, 1027, 1029, 2047, 2049])
def test_a_long_timer_series_is_judged_on_its_thinned_points(count):
    batch = [float((7 * k) % 101 + k / 10) for k in range(count)]  # uneven, so a wrong choice of points moves the median
    lines = []
    for ms in batch:
        lines += [timer("forward-backward", 100.0), timer("batch-generator", ms)]
    (found,) = scan(lines, "gpu1")
    b = statistics.median(thinned(batch, signatures.MAX_POINTS))
    assert (found.code, found.line, found.evidence) == (
        "DATALOADER_SLOW",
        1,
        f"batch-generator {b:.4g} ms, forward-backward 100 ms (median max across ranks)",
    )


@pytest.mark.parametrize("count", [1027, 1029, 1500])
def test_a_long_loss_series_is_judged_on_its_thinned_points_and_its_last(count):
    low = count * 2 // 3
    losses = [10.0 - 8.0 * k / low if k <= low else 2.0 + 0.01 * (k - low) + 0.05 * (k % 3) for k in range(count)]
    lines = [iteration(10 * (k + 1), loss=loss) for k, loss in enumerate(losses)]
    (found,) = [f for f in scan(lines) if f.code == "LOSS_DIVERGING"]
    kept = thinned(list(enumerate(losses)), signatures.MAX_POINTS)
    at = min(range(len(kept)), key=lambda j: kept[j][1])
    z, _ = mann_kendall([loss for _, loss in kept[at:]])
    (k_low, loss_low), (k_last, loss_last) = kept[at], kept[-1]
    assert k_last == count - 1
    assert found.line == count
    assert found.cause.startswith(
        f"the loss fell to {loss_low:.4g} at iteration {10 * (k_low + 1)} and rose to {loss_last:.4g} by iteration {10 * count}"
        f" (Mann-Kendall z={z:.2f})"
    )


# ---- reading a log file: chunks, line ends, bytes that are not UTF-8, the byte bound


TEXTS = [
    "\nfirst line blank\r\nsecond\r\n",
    "alpha\r\nbeta\rgamma\n\ndelta\u2028eps\r\nzz",
    "a\r\r\nb\n\r\nc\r",
    "\r\n\r\nx\ry\n",
]


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 7, 8, 64])
@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_a_logs_lines_are_those_of_splitlines_whatever_the_read_size(tmp_path, monkeypatch, text, chunk):
    monkeypatch.setattr(signatures, "READ_CHUNK", chunk)
    path = tmp_path / "job.log"
    path.write_bytes(text.encode())
    with signatures.log_lines(path) as lines:
        assert list(lines) == text.splitlines()


def test_a_crlf_log_cut_between_cr_and_lf_by_a_read_keeps_its_line_numbers(tmp_path):
    # a job log written with CRLF ends (a tty), one "\r\n" straddling the 256 KiB read
    filler = "x" * 98
    head = (filler + "\r\n") * (signatures.READ_CHUNK // 100)  # 100 bytes a line
    pad = "y" * (signatures.READ_CHUNK - len(head) - 1)
    line = "[rank0]: IndexError: index out of range in self"
    path = tmp_path / "job.log"
    path.write_bytes((head + pad + "\r\n" + line + "\r\n").encode())
    assert path.read_bytes()[signatures.READ_CHUNK - 1 : signatures.READ_CHUNK + 1] == b"\r\n"
    (found,) = signatures.scan_file(path, "node1")
    assert (found.code, found.line, found.evidence) == ("VOCAB_MISMATCH", signatures.READ_CHUNK // 100 + 2, line)


def test_a_log_that_starts_with_a_blank_line_counts_it(tmp_path):
    path = tmp_path / "job.log"
    path.write_text("\n[rank0]: IndexError: index out of range in self\n")
    (found,) = signatures.scan_file(path)
    assert (found.code, found.line) == ("VOCAB_MISMATCH", 2)


def test_bytes_that_are_not_utf8_are_replaced_and_the_log_still_read(tmp_path):
    path = tmp_path / "job.log"
    path.write_bytes(b"loading /data/corpus_\xe9t\xe9\n[rank0]: IndexError: index out of range in self\n")
    with signatures.log_lines(path) as lines:
        assert list(lines) == ["loading /data/corpus_\ufffdt\ufffd", "[rank0]: IndexError: index out of range in self"]
    assert [(f.code, f.line) for f in signatures.scan_file(path)] == [("VOCAB_MISMATCH", 2)]


@pytest.mark.parametrize("chunk", [2, 4, 64])
def test_a_character_cut_at_the_end_of_the_log_is_shown_replaced(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(signatures, "READ_CHUNK", chunk)
    path = tmp_path / "job.log"
    path.write_bytes("done\nkilled mid-write \u2026".encode()[:-1])  # the job died inside a three-byte character
    with signatures.log_lines(path) as lines:
        assert list(lines) == ["done", "killed mid-write \ufffd"]


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 19, 20, 64])
def test_a_log_over_its_bound_is_read_to_its_last_byte_whatever_the_read_size(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(signatures, "MAX_LOG_BYTES", 20)
    monkeypatch.setattr(signatures, "READ_CHUNK", chunk)
    path = tmp_path / "job.log"
    path.write_bytes(b"first line\nsecond line\nthird\nfourth")  # no end after the last line: its last byte is the log's
    with signatures.log_lines(path) as lines:
        assert list(lines) == ["third", "fourth"]


@pytest.mark.parametrize(("at", "binary"), [(0, True), (4095, True), (4096, False)])
def test_a_nul_in_the_first_4_kib_makes_a_log_binary_and_one_after_it_does_not(tmp_path, at, binary):
    data = bytearray(b"a" * 5000 + b"\n[rank0]: IndexError: index out of range in self\n")
    data[at] = 0
    path = tmp_path / "job.log"
    path.write_bytes(bytes(data))
    if binary:
        with pytest.raises(UsageError) as caught:
            signatures.scan_file(path)
        assert caught.value.message == f"--log {path}: is not a text file"
    else:
        assert [(f.code, f.line) for f in signatures.scan_file(path)] == [("VOCAB_MISMATCH", 2)]


def test_a_log_that_grows_while_it_is_read_is_read_to_its_bound_only(tmp_path, monkeypatch):
    monkeypatch.setattr(signatures, "MAX_LOG_BYTES", 20)
    monkeypatch.setattr(signatures, "READ_CHUNK", 4)
    path = tmp_path / "job.log"
    path.write_bytes(b"aaa\nbbb\n")
    with signatures.log_lines(path) as lines:
        assert next(lines) == "aaa"
        with path.open("ab") as log:  # the job writes on
            log.write(b"ccc\nddd\neee\nfff\nggg\n")
        assert list(lines) == ["bbb", "ccc", "ddd", "eee"]


# ---- the per-place bound and the rules that ignore case


def killed(node, pid):
    return f"2026-11-30T03:12:41+0000 {node} kernel: Out of memory: Killed process {pid} (python) total-vm:412857344kB, anon-rss:1kB"


def test_a_code_is_said_at_most_twenty_times_per_node_and_other_codes_and_nodes_still_count():
    flood = [killed("gpu-e01", 88000 + p) for p in range(signatures.MAX_PER_CODE + 1)]
    other = [
        killed("gpu-e02", 7),
        "2026-11-30T03:12:42+0000 gpu-e01 python[31277]: [rank2]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
    ]
    found = scan([*flood, *other])
    assert [(f.code, f.node, f.line) for f in found] == [
        *(("RANK_OOM_KILLED", "gpu-e01", n) for n in range(1, signatures.MAX_PER_CODE + 1)),
        ("RANK_OOM_KILLED", "gpu-e02", signatures.MAX_PER_CODE + 2),
        ("GPU_ECC", "gpu-e01", signatures.MAX_PER_CODE + 3),
    ]


@pytest.mark.parametrize(
    ("line", "code"),
    [
        ("[rank0]: IndexError: index out of range in self (tokenizer «gpt2», 50257 tokens)", "VOCAB_MISMATCH"),
        ("[rank0]: AssertionError: token ids 50257 to 50303 are outside the vocab of «gpt2»", "VOCAB_MISMATCH"),
        ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError: «job-7» timed out", "RDZV_TIMEOUT"),
        ("[rank0]: INDEXERROR: INDEX OUT OF RANGE IN SELF", "VOCAB_MISMATCH"),
    ],
    ids=["non-ascii", "non-ascii-trainer", "non-ascii-rendezvous", "upper-case"],
)
def test_a_rule_that_ignores_case_matches_lines_with_characters_beyond_ascii(line, code):
    assert [(f.code, f.evidence) for f in scan([line])] == [(code, line)]

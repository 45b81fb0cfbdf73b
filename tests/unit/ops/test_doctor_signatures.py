"""megaprov doctor's log signatures (megaprov/ops/doctor/signatures.py): the corpus under tests/doctor_corpus/ (logs
produced for real with torchrun and megaprov's trainer, and logs built from the upstream format strings) gives each
case's expected codes, and nothing more; the whole-log analyses are tested on iteration series here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from megaprov.ops.doctor import diagnose_logs, job_context, signatures
from megaprov.ops.doctor.findings import CODES, LOG_CODES

CORPUS = Path(__file__).resolve().parents[2] / "doctor_corpus"


def cases():
    out = []
    for manifest in sorted(CORPUS.glob("*/MANIFEST.json")):
        for case in json.loads(manifest.read_text())["cases"]:
            out.append(pytest.param(manifest.parent / case["file"], case, id=f"{manifest.parent.name}/{case['file']}"))
    return out


CASES = cases()


@pytest.mark.parametrize(("path", "case"), CASES)
def test_each_corpus_log_gives_its_expected_codes_and_no_others(path, case):
    found = signatures.scan_file(path)
    wanted = sorted(set(case["expect"]))
    got = sorted({f.code for f in found if f.severity in ("error", "warn")})
    assert got == wanted, [(f.code, f.line, f.evidence[:120]) for f in found]
    for f in found:
        assert f.evidence and f.cause and f.fix and f.line > 0, f
    keys = case.get("key_lines", [])
    lines = path.read_text(errors="replace").splitlines()
    # the evidence is one of the lines that show the failure (an analysis of the iteration lines quotes them instead)
    shown = [f.evidence for f in found] + [lines[f.line - 1] for f in found if 0 < f.line <= len(lines)]
    assert not keys or any(key.strip()[:60] in text for key in keys for text in shown), (keys, shown)


def test_the_corpus_covers_every_log_code():
    expected = {code for _, case in (c.values for c in CASES) for code in case["expect"]}
    assert set(LOG_CODES) <= expected, sorted(set(LOG_CODES) - expected)
    assert set(LOG_CODES) <= set(CODES)


def test_every_failure_that_runs_without_gpus_was_produced_for_real():
    real = {case["file"]: case["expect"] for path, case in (c.values for c in CASES) if path.parent.name == "lab"}
    expected = {"RANK_KILLED", "RDZV_PORT_IN_USE", "DATA_PREFIX_MISSING", "VOCAB_MISMATCH", "LOSS_NAN", "RDZV_TIMEOUT", "PEER_LOST"}
    assert expected <= {code for codes in real.values() for code in codes}, real
    assert real.get("healthy.log") == []


def _series(losses, ms=None, nan=None):
    lines = []
    for i, loss in enumerate(losses, 1):
        t = (ms or [100.0] * len(losses))[i - 1]
        n = (nan or [0] * len(losses))[i - 1]
        lines.append(
            f" [2026-12-02 10:{i // 60:02d}:{i % 60:02d}] iteration {i * 10:8d}/{len(losses) * 10:8d} | consumed samples: {i * 80:12d} |"
            f" elapsed time per iteration (ms): {t:.1f} | throughput per GPU (TFLOP/s/GPU): {40000 / t:.1f} | learning rate: 3.000000E-04 |"
            f" global batch size:     8 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: 1.000 | number of skipped iterations:   0 |"
            f" number of nan iterations: {n:3d} |"
        )
    return lines


def codes(lines):
    return sorted(f.code for f in signatures.scan(lines, signatures.Context("test.log")))


def test_a_falling_loss_with_steady_throughput_is_healthy():
    assert codes(_series([10 - 0.3 * i for i in range(30)])) == []


def test_a_loss_that_falls_then_climbs_is_diverging():
    losses = [10 - 0.4 * i for i in range(15)] + [4.4 + 0.25 * i for i in range(15)]
    assert codes(_series(losses)) == ["LOSS_DIVERGING"]


def test_noise_around_a_plateau_is_not_divergence():
    losses = [10 - 0.4 * i for i in range(15)] + [4.4 + (0.05 if i % 2 else -0.05) for i in range(15)]
    assert codes(_series(losses)) == []


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
def test_a_non_finite_loss_names_the_first_iteration(bad):
    # bf16 and fp16 runs print an overflowed loss as inf, not nan: both are the same failure
    lines = _series([9.0, 8.0, bad, bad])
    found = signatures.scan(lines, signatures.Context("t.log"))
    assert [f.code for f in found] == ["LOSS_NAN"] and "iteration 30" in found[0].cause and found[0].line == 3


def test_time_per_iteration_growing_is_falling_throughput():
    ms = [100.0] * 10 + [100.0 + 15 * i for i in range(1, 11)]
    assert codes(_series([10 - 0.1 * i for i in range(20)], ms=ms)) == ["THROUGHPUT_FALLING"]


START = "megaprov: node node1 (node rank 0): torchrun starting at 2026-12-02T10:00:00.000Z"


def test_a_restarted_job_is_not_judged_on_throughput_across_attempts():
    # Two attempts in one log, each steady, the second on a slower set of nodes: no fall within either run. The doctor
    # once compared the first attempt's head with the second's tail and called it THROUGHPUT_FALLING.
    losses = [10 - 0.1 * i for i in range(20)]
    first, second = _series(losses, ms=[100.0] * 20), _series(losses, ms=[180.0] * 20)
    resumed = [line for line in second if int(line.split("iteration")[1].split("/")[0]) > 100]  # resumed at 100
    assert codes([START, *first, START, *resumed]) == []
    assert codes([*first, *resumed]) == []  # without megaprov's lines: the iteration number going back says it
    assert codes([*first, *second]) == []


def test_a_fall_within_the_latest_attempt_is_still_found():
    losses = [10 - 0.1 * i for i in range(20)]
    falling = _series(losses, ms=[100.0] * 10 + [100.0 + 15 * i for i in range(1, 11)])
    assert codes([START, *_series(losses), START, *falling]) == ["THROUGHPUT_FALLING"]
    # a slow first attempt and a fast second one: nothing fell in the run that counts
    assert codes([START, *falling, START, *_series(losses)]) == []


def test_iterations_carry_their_attempt():
    # a torchrun start after iterations, then (no megaprov line) the iteration number going back: attempts 0, 1, 2
    lines = [START, *_series([5.0] * 3), START, *_series([5.0] * 3)[1:], *_series([5.0] * 2)]
    state = signatures._scanned(lines, signatures.Context("t.log"))
    assert [(it.iteration, it.attempt) for _, it in state.series.values()] == [(10, 0), (20, 0), (30, 0), (20, 1), (30, 1), (10, 2), (20, 2)]


def test_nccl_versions_that_differ_between_ranks():
    lines = ["gpu1:100:100 [0] NCCL INFO NCCL version 2.27.7+cuda13.0", "gpu2:200:200 [0] NCCL INFO NCCL version 2.21.5+cuda12.4"]
    found = signatures.scan(lines, signatures.Context("t.log"))
    assert [f.code for f in found] == ["NCCL_VERSION_MISMATCH"] and "gpu2: NCCL 2.21.5" in found[0].evidence


def test_a_line_names_its_node_where_it_can():
    assert (
        signatures.node_of("2026-12-02T10:00:00+0000 gpu7 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=python, GPU has fallen off the bus.")
        == "gpu7"
    )
    assert signatures.node_of("gpu3:4711:4790 [2] NCCL INFO NCCL version 2.27.7+cuda13.0") == "gpu3"


def test_a_flood_of_one_error_is_said_once_per_place():
    oom = "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.19 GiB"
    lines = [oom + " of which 1.06 GiB is free."] * 50
    assert codes(lines) == ["CUDA_OOM"]


def test_bad_log_paths_are_one_line_errors(tmp_path):
    from megaprov.errors import UsageError

    with pytest.raises(UsageError, match="no such file"):
        diagnose_logs([str(tmp_path / "missing.log")])
    with pytest.raises(UsageError, match="is a directory"):
        diagnose_logs([str(tmp_path)])
    binary = tmp_path / "core"
    binary.write_bytes(b"\x7fELF\0\0\0")
    with pytest.raises(UsageError, match="not a text file"):
        diagnose_logs([str(binary)])


def test_oom_advice_names_the_planners_estimate_and_layout_changes(tmp_path):
    spec = Path(__file__).resolve().parents[3] / "examples" / "jobs" / "llama-8b-2nodes.yml"
    (tmp_path / "spec.yml").write_text(spec.read_text())
    (tmp_path / "job.json").write_text(json.dumps({"gpu": "H100-SXM", "nodes": 2, "gpus_per_node": 8}))
    context = job_context(tmp_path)
    assert 10 < context["memory"]["per_gpu_gib"] < 80
    line = (
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB."
        " GPU 0 has a total capacity of 79.19 GiB of which 2.50 GiB is free."
    )
    found = signatures.scan([line], signatures.Context("t.log", "gpu1", context))
    assert found[0].code == "CUDA_OOM" and "the planner estimated" in found[0].cause and "4.00 GiB" in found[0].cause
    assert "GiB per GPU" in found[0].fix and ("train." in found[0].fix or "parallel." in found[0].fix), found[0].fix


def test_a_job_directory_without_a_plan_gives_the_generic_advice(tmp_path):
    assert job_context(tmp_path) == {}


def test_falling_gpu_utilisation_in_a_jobs_samples():
    steady = [{"util": 95.0} for _ in range(40)]
    assert signatures.gpu_utilisation(steady, "gpu1", "gpu-gpu1.csv") == []
    falling = [{"util": 95.0} for _ in range(20)] + [{"util": 40.0} for _ in range(20)]
    found = signatures.gpu_utilisation(falling, "gpu1", "gpu-gpu1.csv")
    assert [f.code for f in found] == ["THROUGHPUT_FALLING"] and "95 % early, 40 % late" in found[0].evidence
    idle = [{"util": 10.0} for _ in range(20)] + [{"util": 2.0} for _ in range(20)]
    assert signatures.gpu_utilisation(idle, "gpu1", "x") == []  # never busy: the verdict's utilisation check says so, not a fall


def test_a_store_closed_at_the_end_of_a_job_that_exited_cleanly_is_no_peer_loss():
    end = [
        "megaprov: node node2 (node rank 1): torchrun starting at 2026-12-02T23:33:40.000Z",
        "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?",
        "megaprov: node node2 (node rank 1): torchrun exited with 0 at 2026-12-02T23:34:26.000Z",
    ]
    assert codes(end) == []
    restarted = [end[0], end[1], end[2].replace("exited with 0", "exited with 1"), end[0], end[2]]
    assert codes(restarted) == ["PEER_LOST"]  # it failed that attempt: the job restarted


XID_FORMS = [
    # (kernel log line, (domain, bus, device) or None for no Xid line, xid)
    ("NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus.", ("0000", "18", "00"), 79),
    ("NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 31, pid=1234, name=python, Ch 00000008, MMU Fault", ("0000", "3b", "00"), 31),
    ("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid='<unknown>', name=<unknown>, Contained: CE User Channel", ("0000", "01", "00"), 94),
    ("NVRM: Xid (PCI:0000:3b:00): 13, Graphics Engine Exception on (GPC 0, TPC 1)", ("0000", "3b", "00"), 13),
    ("NVRM: Xid (0000:03:00): 14, Channel 00000001", ("0000", "03", "00"), 14),
    ("[ 1234.567890] NVRM: Xid (PCI:0001:c1:00): 48, pid=99, name=python, An uncorrectable double bit error", ("0001", "c1", "00"), 48),
    ("2026-12-02T10:00:00+0000 gpu7 kernel: NVRM: Xid (PCI:0000:18:00.0): 119, pid=1, name=x, Timeout", ("0000", "18", "00"), 119),
    ("NVRM: Xid (PCI:0000:18:00): , no number", None, 0),
    ("NVRM: Xid (PCI:zz:18:00): 79, not an address", None, 0),
    ("NVRM: GPU at PCI:0000:18:00: GPU-1234", None, 0),
]


@pytest.mark.parametrize(("line", "address", "xid"), XID_FORMS, ids=[str(i) for i in range(len(XID_FORMS))])
def test_doctor_diagnoses_and_the_node_collector_counts_every_xid_form(line, address, xid):
    """doctor (a saved kernel log) and the node's metrics collector (the Xid alerts) read the driver's lines with one
    parser (the collection's module_utils/xid.py): the MIG form and the oldest form (no "PCI:") included."""
    from collections import Counter

    from tests.conftest import ROOT, load_module

    collector = load_module(ROOT / "ansible_collections/megaprov/cluster/roles/node_exporter/files/megaprov_gpu_metrics.py", "gpu_metrics_xid")
    counted = collector.parse_xids(line)
    found = [f for f in signatures.scan([line], signatures.Context("kern.log")) if f.code == "GPU_XID"]
    if address is None:
        assert counted == Counter() and found == []
        return
    assert counted == Counter({(":".join(address).lower(), xid): 1})
    assert len(found) == 1 and f"reported Xid {xid} " in found[0].cause
    assert f"GPU {':'.join(address).lower()}" in found[0].cause


def test_doctor_and_the_node_collector_share_the_xid_parser():
    from ansible_collections.megaprov.cluster.plugins.module_utils import xid
    from tests.conftest import ROOT, load_module

    collector = load_module(ROOT / "ansible_collections/megaprov/cluster/roles/node_exporter/files/megaprov_gpu_metrics.py", "gpu_metrics_xid")
    (rule,) = [r for r in signatures.RULES if r.code == "GPU_XID"]
    assert rule.pattern is xid.LINE and rule.needs == (xid.MARKER,)
    assert Path(collector.xid.__file__).samefile(xid.__file__)  # the collector loads the collection's own file


def test_doctor_names_the_mig_instance_of_an_xid():
    line = "NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 31, pid=1234, name=python, Ch 00000008, MMU Fault"
    (found,) = [f for f in signatures.scan([line], signatures.Context("kern.log")) if f.code == "GPU_XID"]
    assert found.cause.startswith("GPU 0000:3b:00 (GPU-I:01 GPU-CI:02) reported Xid 31 ")

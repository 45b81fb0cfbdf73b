"""megaprov doctor's log diagnosis (megaprov/ops/doctor/__init__.py), its parsers of the tools' outputs (parsers.py) and
the Xid catalogue's lookup (xid.py), held to exact results: which files of a job are read or refused and why, the OOM
advice's figures, the table and JSON an operator reads, and every field each parser gives (benchmarks/bench_mutation.py's
survivors of these modules)."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from megaprov.errors import UsageError
from megaprov.ops import doctor
from megaprov.ops.doctor import parsers, xid
from megaprov.ops.doctor.findings import Report, finding
from megaprov.training import jobs

ROOT = Path(__file__).resolve().parents[3]
OOM = (
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    " GPU 0 has a total capacity of 79.19 GiB of which 1.00 GiB is free."
)
SAMPLE = "2026/12/02 10:00:{s:02d}.000, 0, {u}, 1000, 81559"


# ---- logs given by the operator


def test_at_most_256_log_files_are_read(tmp_path):
    names = []
    for i in range(doctor.MAX_LOG_FILES):
        (tmp_path / f"{i}.log").write_text("fine\n")
        names.append(str(tmp_path / f"{i}.log"))
    assert doctor.diagnose_logs(names).checked == names
    with pytest.raises(UsageError) as caught:
        doctor.diagnose_logs([*names, names[0]])
    assert (caught.value.message, caught.value.hint) == ("--log: 257 files", "give at most 256")


# ---- a job's logs


def job_dir(tmp_path: Path) -> Path:
    local = tmp_path / "shared" / "jobs" / "j1"
    (local / "logs").mkdir(parents=True)
    return local


@pytest.fixture
def found_job(monkeypatch):
    def use(local: Path, inventory: str | None = None) -> None:
        def find(name: str, given: str | None) -> SimpleNamespace:
            assert given == inventory  # the job is looked up on the cluster the operator named
            return SimpleNamespace(name=name, local_dir=local)

        monkeypatch.setattr(jobs, "find", find)

    return use


def test_a_jobs_node_logs_and_slurms_output_are_read_and_what_stands_in_their_place_is_refused(tmp_path, found_job):
    local = job_dir(tmp_path)
    logs = local / "logs"
    (logs / "n1.log").write_text("starting\n" + OOM + "\n")
    (logs / "slurm-4411.out").write_text("srun: fine\n")
    for ignored in ("slurm-.out", "slurm-x1.out", "slurm-1x.out", "notes.txt", "gpu-n1.txt", "n2.log.1"):
        (logs / ignored).write_text(OOM + "\n")
    (logs / "n2.log").mkdir()
    (logs / "n3.log").symlink_to("/dev/zero")
    (logs / "gpu-n4.csv").mkdir()
    (logs / "notes.csv").mkdir()  # neither a log nor a GPU sample file: not doctor's concern
    (logs / "gpu-n5.csv").write_text("\n".join(SAMPLE.format(s=i, u=95 if i < 20 else 40) for i in range(40)) + "\n")
    found_job(local)
    report = doctor.diagnose_job("j1", None)
    assert sorted(report.checked) == [str(logs / "n1.log"), str(logs / "slurm-4411.out")]
    got = sorted((f.code, f.node, f.evidence if f.code == "JOB_FILE_REFUSED" else "", Path(f.source).name) for f in report.findings)
    assert got == [
        ("CUDA_OOM", "n1", "", "n1.log"),
        ("JOB_FILE_REFUSED", "n2", "n2.log is a directory", "n2.log"),
        ("JOB_FILE_REFUSED", "n3", "n3.log is not a regular file (a link, a FIFO or a device)", "n3.log"),
        ("JOB_FILE_REFUSED", "n4", "gpu-n4.csv is a directory", "gpu-n4.csv"),
        ("THROUGHPUT_FALLING", "n5", "", "gpu-n5.csv"),
    ]
    (refused,) = [f for f in report.findings if f.node == "n4"]
    assert refused.source == str(logs / "gpu-n4.csv") and refused.severity == "warn"


def test_a_job_without_node_logs_says_where_it_looked(tmp_path, found_job):
    local = job_dir(tmp_path)
    (local / "logs" / "gpu-n1.csv").write_text("")
    found_job(local, "inv.ini")
    with pytest.raises(UsageError) as caught:
        doctor.diagnose_job("j1", "inv.ini")
    assert caught.value.message == f"job j1 has no node logs yet in {local / 'logs'}"
    assert caught.value.hint == "wait for the job to start, or give --log FILE"


def test_a_log_that_is_not_text_is_refused_and_the_others_read(tmp_path, found_job):
    local = job_dir(tmp_path)
    (local / "logs" / "n1.log").write_bytes(b"\x7fELF\0\0\0\0" * 64)
    (local / "logs" / "n2.log").write_text(OOM + "\n")
    found_job(local)
    got = sorted((f.code, f.node, f.evidence) for f in doctor.diagnose_job("j1", None).findings)
    assert [g[:2] for g in got] == [("CUDA_OOM", "n2"), ("JOB_FILE_REFUSED", "n1")]
    assert got[1][2].startswith("n1.log ") and "text" in got[1][2] and "None" not in got[1][2]


def test_only_the_first_max_log_files_are_read(tmp_path, found_job, monkeypatch):
    local = job_dir(tmp_path)
    for name in ("a", "b", "c", "d", "e"):  # entries are taken in name order: the directories first
        (local / "logs" / f"gpu-{name}.csv").mkdir()
    for name in ("n1", "n2", "n3"):
        (local / "logs" / f"{name}.log").write_text(OOM + "\n")
    found_job(local)
    monkeypatch.setattr(doctor, "MAX_LOG_FILES", 2)
    report = doctor.diagnose_job("j1", None)
    assert sorted(f.node for f in report.findings if f.code == "CUDA_OOM") == ["n1", "n2"]
    assert sorted(f.node for f in report.findings if f.code == "JOB_FILE_REFUSED") == ["a", "b", "c", "d"]


def test_the_oom_advice_of_a_job_uses_its_plan(tmp_path, found_job):
    local = job_dir(tmp_path)
    (local / "spec.yml").write_text((ROOT / "examples" / "jobs" / "llama-8b-2nodes.yml").read_text())
    (local / "job.json").write_text(json.dumps({"gpu": "H100-SXM", "nodes": 2, "gpus_per_node": 8}))
    (local / "logs" / "n1.log").write_text(OOM + "\n")
    found_job(local)
    (f,) = doctor.diagnose_job("j1", None).findings
    assert f.code == "CUDA_OOM" and "the planner estimated" in f.cause


def test_the_oom_advice_names_the_estimate_and_at_most_three_changes_that_lower_it_by_a_fifth(tmp_path):
    from megaprov.training import planner, target

    (tmp_path / "spec.yml").write_text((ROOT / "examples" / "jobs" / "llama-8b-2nodes.yml").read_text())
    (tmp_path / "job.json").write_text(json.dumps({"gpu": "H100-SXM", "nodes": 2, "gpus_per_node": 8}))
    context = doctor.job_context(tmp_path)
    spec, _ = target.read(str(tmp_path / "spec.yml"), tmp_path.parent)
    gpu = planner.gpu_named("H100-SXM")
    assert gpu is not None
    cluster = planner.Cluster(2, 8, gpu)
    estimate = planner.memory(spec, planner.Layout.of(spec), cluster).total / planner.GIB
    assert context["memory"] == {"per_gpu_gib": round(estimate, 1), "gpu_gib": gpu.memory_gib}
    assert context["memory"]["per_gpu_gib"] != estimate  # rounded to a tenth for the operator
    changes = planner.fixes(spec, replace(cluster, gpu=replace(gpu, memory_gib=0.8 * estimate)))
    assert context["memory_fix"] == (
        f"the planner put this layout at {estimate:.1f} GiB per GPU of {gpu.memory_gib:g} GiB; changes that lower it by a fifth: "
        + "; ".join(f"{c.field}: {c.value} ({c.memory_gib:.1f} GiB)" for c in changes[:3])
        + " (`megaprov plan` with the changed spec shows the fit)"
    )
    assert all(c.memory_gib <= 0.8 * estimate for c in changes[:3])


@pytest.mark.parametrize(
    "meta",
    [
        [1, 2],
        {"gpu": "H100-SXM", "nodes": 0, "gpus_per_node": 8},
        {"gpu": "H100-SXM", "nodes": 10_001, "gpus_per_node": 8},
        {"gpu": "H100-SXM", "nodes": 2, "gpus_per_node": 0},
        {"gpu": "H100-SXM", "nodes": 2, "gpus_per_node": 65},
        {"gpu": "no-such-gpu", "nodes": 2, "gpus_per_node": 8},
    ],
)
def test_a_job_file_out_of_bounds_gives_the_generic_advice(tmp_path, meta):
    (tmp_path / "spec.yml").write_text((ROOT / "examples" / "jobs" / "llama-8b-2nodes.yml").read_text())
    (tmp_path / "job.json").write_text(json.dumps(meta))
    assert doctor.job_context(tmp_path) == {}


@pytest.mark.parametrize("linked", ["job.json", "spec.yml"])
def test_a_job_file_that_links_out_of_the_job_is_not_read_for_the_advice(tmp_path, linked):
    local = job_dir(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "spec.yml").write_text((ROOT / "examples" / "jobs" / "llama-8b-2nodes.yml").read_text())
    (outside / "job.json").write_text(json.dumps({"gpu": "H100-SXM", "nodes": 2, "gpus_per_node": 8}))
    for name in ("job.json", "spec.yml"):
        if name == linked:
            (local / name).symlink_to(outside / name)
        else:
            (local / name).write_text((outside / name).read_text())
    assert doctor.job_context(local) == {}
    (local / linked).unlink()
    (local / linked).write_text((outside / linked).read_text())
    assert doctor.job_context(local)["memory"]["gpu_gib"] == 79.6


@pytest.mark.parametrize(("nodes", "per_node"), [(1, 1), (10_000, 64)])
def test_a_job_file_at_its_bounds_is_planned(tmp_path, nodes, per_node):
    (tmp_path / "spec.yml").write_text((ROOT / "examples" / "jobs" / "llama-8b-2nodes.yml").read_text())
    (tmp_path / "job.json").write_text(json.dumps({"gpu": "H100-SXM", "nodes": nodes, "gpus_per_node": per_node}))
    assert doctor.job_context(tmp_path)["memory"]["gpu_gib"] == 79.6  # H100-SXM as the planner knows it


# ---- what the operator reads


def test_the_table_shows_where_each_finding_was_seen_errors_first():
    report = Report()
    report.add(
        finding("GPU_CHECKS_SKIPPED", "n2", "no GPU"),
        finding("GPU_ROW_REMAP_PENDING", "", "GPU 2"),
        finding("CUDA_OOM", "n1", "Tried to allocate", source="/j/n1.log", line=7),
    )
    table = doctor.render(report, "megaprov doctor: t")
    assert table is not None
    out = io.StringIO()
    Console(file=out, width=300, no_color=True).print(table)
    text = out.getvalue()
    assert "/j/n1.log:7: Tried to allocate" in text and ": GPU 2" not in text
    assert text.index("error") < text.index("warn") < text.index("info")
    assert doctor.render(Report(), "t") is None


def test_the_table_has_its_title_columns_and_cells():
    report = Report()
    report.add(finding("CUDA_OOM", "n1", "Tried to allocate", source="/j/n1.log", line=7), finding("GPU_ROW_REMAP_PENDING", "", "GPU 2", fix="reset"))
    table = doctor.render(report, "megaprov doctor: n1.log")
    assert table is not None
    assert (table.title, table.title_justify, table.show_lines) == ("megaprov doctor: n1.log", "left", True)
    assert [(c.header, c.overflow) for c in table.columns] == [(h, "fold") for h in ("severity", "code", "node", "evidence", "cause", "fix")]
    cells = [[str(cell) for cell in c.cells] for c in table.columns]
    (oom,) = report.findings[:1]
    assert cells == [
        ["error", "warn"],
        ["CUDA_OOM", "GPU_ROW_REMAP_PENDING"],
        ["n1", "-"],
        ["/j/n1.log:7: Tried to allocate", "GPU 2"],
        [oom.cause, report.findings[1].cause],
        [oom.fix, "reset"],
    ]
    assert [c.style for c in table.columns[0].cells] == ["bold red", "yellow"]


def test_the_json_counts_each_severity_and_is_ok_only_without_errors_and_warnings():
    report = Report(checked=["a.log"])
    report.add(finding("GPU_CHECKS_SKIPPED", "n2"), finding("CUDA_OOM", "n1"), finding("GPU_ROW_REMAP_PENDING", "n1"), finding("CUDA_OOM", "n3"))
    doc = doctor.as_json(report)
    assert doc["ok"] is False and doc["checked"] == ["a.log"]
    assert doc["counts"] == {"error": 2, "warn": 1, "info": 1}
    assert [f["code"] for f in doc["findings"]] == ["CUDA_OOM", "CUDA_OOM", "GPU_ROW_REMAP_PENDING", "GPU_CHECKS_SKIPPED"]
    assert doctor.as_json(Report([finding("GPU_CHECKS_SKIPPED", "n2")]))["ok"] is True


# ---- the Xid catalogue


def test_an_unknown_xid_is_named_by_its_number_with_the_words_to_look_it_up():
    assert xid.lookup(999) == xid.Xid(999, "unknown Xid", "drain", "warn", "not in megaprov's catalogue: look it up in NVIDIA's Xid catalogue")
    assert xid.lookup(79) is xid.CATALOGUE[79]


# ---- parsers: nvidia-smi


FIELDS = (
    "index,pci.bus_id,name,ecc.errors.uncorrected.volatile.total,pcie.link.gen.current,pcie.link.gen.max,"
    "pcie.link.width.current,pcie.link.width.max,driver_version"
)
REMAP = "gpu_bus_id,remapped_rows.pending,remapped_rows.failure"


def test_nvidia_smi_rows_are_read_by_field_and_joined_to_their_remapped_rows_in_any_case():
    text = (
        "0, 00000000:1A:00.0, NVIDIA H100, 2.0, 4, 5, 16, 16, 570.86.15\n"
        "1, 00000000:1B:00.0, NVIDIA H100, [N/A], [Not Supported], N/A, , 16, 570.86.15\n"
        "No devices were found, x, x, x, x, x, x, x, x\n"
        "2, 00000000:1C:00.0, NVIDIA H100, 0, 4, 5, 16, 16, 570.86.15\n"
    )
    remapped = " 00000000:1a:00.0 , 1, 0\n00000000:1b:00.0, true, false\n00000000:1C:00.0, maybe, \n"
    gpus = parsers.nvidia_smi_query(text, FIELDS, remapped, REMAP)
    assert gpus == [
        parsers.Gpu(0, "00000000:1A:00.0", "NVIDIA H100", 2, True, False, 4, 5, 16, 16, "570.86.15"),
        parsers.Gpu(1, "00000000:1B:00.0", "NVIDIA H100", None, True, False, None, None, None, 16, "570.86.15"),
        parsers.Gpu(2, "00000000:1C:00.0", "NVIDIA H100", 0, None, None, 4, 5, 16, 16, "570.86.15"),
    ]
    # a remapped rows answer that names no bus id adds nothing; without one the fields are unknown
    assert parsers.nvidia_smi_query(text, FIELDS)[0].remap_pending is None
    no_bus = parsers.nvidia_smi_query(text, FIELDS, "Yes, Yes\n", "remapped_rows.pending,remapped_rows.failure")
    assert [g.remap_pending for g in no_bus] == [None, None, None]


def test_a_query_without_bus_ids_still_joins_its_remapped_rows():
    (gpu,) = parsers.nvidia_smi_query("0, NVIDIA A100\n", "index,name", "Yes\n", "remapped_rows.pending")
    assert gpu == parsers.Gpu(0, "", "NVIDIA A100", None, True, None, None, None, None, None, "")


def test_yes_and_no_in_every_spelling():
    assert [parsers._yes(t) for t in ("Yes", " 1", "TRUE", "no", "0 ", "False", "", "N/A")] == [True, True, True, False, False, False, None, None]
    assert [parsers._int(t) for t in (" 7 ", "7.9", "[N/A]", "Not Supported", "[Unknown Error]", "", "x")] == [7, 7, None, None, None, None, None]


def test_csv_rows_read_the_fields_as_the_probe_reports_them():
    assert parsers.csv_rows("1, a\n", "index, name") == [{"index": "1", "name": "a"}]
    assert parsers.csv_rows("1, a\n", "index,name,x") == []


# ---- parsers: InfiniBand


IBSTAT = """\
\tPort 9:
\t\tState: Active
CA 'mlx5_0'
\tCA type: MT4123
\tNumber of ports: 2
\tPort 1:
\t\tState: Active
\t\tPhysical state: LinkUp
\t\tRate: 400
\t\tLink layer: InfiniBand

\tPort 2:
\t\tLink layer: Ethernet
CA 'mlx5_1'
CA 'mlx5_2'
\tPort 1:
\t\tState: Down
\t\tPhysical state: Disabled
\t\tRate: 10 (SDR)
"""


def test_ibstat_gives_every_port_of_every_ca_with_what_it_says():
    assert parsers.ibstat(IBSTAT) == [
        parsers.IbPort("mlx5_0", "1", "Active", "LinkUp", 400.0, "InfiniBand"),
        parsers.IbPort("mlx5_0", "2", "", "", None, "Ethernet"),
        parsers.IbPort("mlx5_2", "1", "Down", "Disabled", 10.0, ""),
    ]


def test_sysfs_ports_with_every_state_and_what_is_missing():
    found = {
        "mlx5_1": {
            "2": {"state": "2: INIT", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand"},
            "1": {"state": "1: DOWN", "phys_state": "3: Disabled", "rate": "10 Gb/sec", "link_layer": "InfiniBand"},
        },
        "mlx5_0": {"1": {"state": "3: ARMED", "phys_state": "7: Phy Test"}, "2": {"state": "4: ACTIVE"}, "3": {"state": "5: odd: state"}, "4": {}},
    }
    assert parsers.sysfs_ports(found) == [
        parsers.IbPort("mlx5_0", "1", "Armed", "Phy Test", None, ""),
        parsers.IbPort("mlx5_0", "2", "Active", "", None, ""),
        parsers.IbPort("mlx5_0", "3", "State", "", None, ""),
        parsers.IbPort("mlx5_0", "4", "", "", None, ""),
        parsers.IbPort("mlx5_1", "1", "Down", "Disabled", 10.0, "InfiniBand"),
        parsers.IbPort("mlx5_1", "2", "Initializing", "LinkUp", 400.0, "InfiniBand"),
    ]
    assert parsers.sysfs_ports({"m": {"1": {"state": "POLLING"}}})[0].state == "Polling"


def test_perfquery_counters_in_decimal_and_hex():
    text = "# Port counters\nSymbolErrorCounter:..............57\nPortXmitData:....................0x1F\nnot a counter\n"
    assert parsers.perfquery(text) == {"SymbolErrorCounter": 57, "PortXmitData": 31}


# ---- parsers: dcgmi diag


def test_dcgmi_diag_reads_per_gpu_results_with_their_words():
    doc = {
        "tests": [
            {
                "test_name": "memory",
                "results": [
                    {"gpu_ids": 1, "result": "fail", "info": ["DBE on 1", {"warning": "row remap"}, {"msg": "third"}, 7]},
                    {"entity_id": 2, "Status": "Pass", "errors": {"message": "none"}},
                    {"entityId": 3, "Result": "warn"},
                    {"gpu_id": 0, "status": "Skip", "warnings": {"other": "x"}},
                    {"gpu_id": "", "status": "Pass"},
                    {"status": "Pass"},
                    {"gpu_id": None, "status": "Pass"},
                ],
            },
            {"testName": "pcie", "results": [{"gpu_id": 4, "status": 3}]},
        ]
    }
    assert parsers.dcgmi_diag("dcgmi says:\n" + json.dumps(doc)) == [
        parsers.DiagResult("memory", "1", "Fail", "DBE on 1; row remap; third"),
        parsers.DiagResult("memory", "2", "Pass", "none"),
        parsers.DiagResult("memory", "3", "Warn", ""),
        parsers.DiagResult("memory", "0", "Skip", ""),
        parsers.DiagResult("memory", "", "Pass", ""),
        parsers.DiagResult("memory", "", "Pass", ""),
        parsers.DiagResult("memory", "", "Pass", ""),
        parsers.DiagResult("pcie", "4", "", ""),
    ]


def test_dcgmi_diag_node_wide_tests_and_the_nesting_walked_through():
    doc = {
        "name": "Diagnostic",
        "status": "Fail",
        "test_categories": [
            {
                "category": "Hardware",
                "tests": [
                    {"name": "software", "status": "Fail", "warnings": "no driver"},
                    {"name": "context", "result": "pass", "info": [{"message": "ok"}]},
                    {"name": "nothing", "results": []},
                    {"name": "empty", "results": [1, 2]},
                    {"status": "Fail"},
                ],
            }
        ],
    }
    assert parsers.dcgmi_diag(json.dumps(doc)) == [
        parsers.DiagResult("software", "", "Fail", "no driver"),
        parsers.DiagResult("context", "", "Pass", "ok"),
    ]
    assert parsers.dcgmi_diag(json.dumps({"name": "x", "Result": "Fail", "errors": [{"msg": "e"}], "tests": "not a list"})) == [
        parsers.DiagResult("x", "", "Fail", "e")
    ]
    assert parsers.dcgmi_diag(json.dumps({"name": "x", "Status": "Warn", "tests": []})) == []
    assert parsers.dcgmi_diag("no json here") == [] and parsers.dcgmi_diag("{broken") == []


def test_dcgmi_result_words():
    assert parsers._text({"other": 1}) == "" and parsers._text(3) == "" and parsers._text(["", {"msg": ""}]) == ""


# ---- parsers: chrony


def test_chronyc_tracking_reads_each_field():
    text = (
        "Reference ID    : 7F7F0101 (2001:db8::1)\n"
        "Ref time (UTC)  : Thu Dec 03 10:00:00 2026\n"
        "System time     : 1.500000 seconds fast of NTP time\n"
        "Leap status     : Normal\n"
    )
    got = parsers.chronyc_tracking(text)
    assert (got.synchronised, got.offset_s, got.leap, got.reference) == (True, 1.5, "Normal", "7F7F0101 (2001:db8::1)")
    assert got.extra["Ref time (UTC)"] == "Thu Dec 03 10:00:00 2026"
    nothing = parsers.chronyc_tracking("506 Cannot talk to daemon\n")
    assert (nothing.synchronised, nothing.offset_s, nothing.leap, nothing.reference, nothing.extra) == (None, None, "", "", {})
    assert parsers.chronyc_tracking("System time : 0.25 seconds slow of NTP time\n").offset_s == -0.25

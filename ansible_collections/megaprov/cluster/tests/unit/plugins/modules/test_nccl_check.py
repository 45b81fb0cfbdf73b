"""The nccl role's judge of an nccl-tests run (ansible_collections/megaprov/cluster/plugins/modules/nccl_check.py): the result table, the
out-of-bounds count, the transports NCCL chose, the baseline, and the module run end to end on a fake binary.

The output lines follow nccl-tests' own printf formats (NVIDIA/nccl-tests, read at v2.19.6, commit a0b82b2):
- v2.17.0 src/common.cu: row preamble "%12li  %12li  %8s  %6s  %6s" (root as "%6i"), each half
  "  %7s  %6.2f  %6.2f  %5g" (time "%7.0f" from 10 ms, "%7.1f" from 100 us, else "%7.2f"; "%5s" "N/A" without
  validation), footer "# Out of bounds values : %d %s" and "# Avg bus bandwidth    : %g %s".
- v2.19.6 src/util.cu: the same preamble, each half "  %7s  %6s  %6s  %6g" where time/algbw/busbw come from
  getFloatStr (width 7/6: "%*.2f", else "%*.1f", else "%*.0f", else "%*.1e" (width >= 7) / "%*.0e"), "    N/A"
  without validation; footer "# %-20s : %d %s" ("Out of bounds values") and "# %-20s : %g %s" ("Avg bus bandwidth").
In both, common.cu's CheckData adds one to the out-of-bounds count (errors[0]) for every check that found wrong
elements, and the row's #wrong is the wrong elements summed over all ranks: the two are separate signals.
"""

from __future__ import annotations

# ruff: noqa: UP031  (printf-style on purpose: the lines mirror nccl-tests' C format strings)
import json
import os
import re
import stat
from pathlib import Path

import pytest

from ansible_collections.megaprov.cluster.plugins.modules import nccl_check as nccl
from ansible_collections.megaprov.cluster.tests.unit.plugins.modules import utils as modules

COLLECTION = Path(__file__).resolve().parents[4]

HEADER = [
    "# nccl-tests version 2.19.6 nccl-headers=23007 nccl-library=23007",
    "# Collective test starting: all_reduce_perf",
    "# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0",
    "#",
    "#                                                              out-of-place                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
]


def float_str(value: float, width: int) -> str:
    """getFloatStr of nccl-tests v2.19.6 src/util.cu."""
    for fmt in ("%*.2f", "%*.1f", "%*.0f"):
        text = fmt % (width, value)
        if len(text) <= width:
            return text
    return ("%*.1e" if width >= 7 else "%*.0e") % (width, value)


def half_219(time_us: float, algbw: float, busbw: float, wrong: int | None) -> str:
    body = "  %7s  %6s  %6s" % (float_str(time_us, 7), float_str(algbw, 6), float_str(busbw, 6))
    return body + ("  %6g" % wrong if wrong is not None else "    N/A")


def half_217(time_us: float, algbw: float, busbw: float, wrong: int | None) -> str:
    time = "%7.0f" % time_us if time_us >= 10000 else "%7.1f" % time_us if time_us >= 100 else "%7.2f" % time_us
    return "  %7s  %6.2f  %6.2f  " % (time, algbw, busbw) + ("%5g" % wrong if wrong is not None else "%5s" % "N/A")


def row(size: int, oop: tuple, ip: tuple, version: str = "2.19") -> str:
    """One result line of all_reduce_perf (float, sum, root -1): oop/ip are (time us, algbw, busbw, #wrong or None)."""
    half = half_219 if version == "2.19" else half_217
    return "%12li  %12li  %8s  %6s  %6s" % (size, size // 4, "float", "sum", "%6i" % -1) + half(*oop) + half(*ip)


def footer(oob: int, avg: float, version: str = "2.19") -> list[str]:
    if version == "2.19":
        return [
            "# %-20s : %d %s" % ("Out of bounds values", oob, "FAILED" if oob else "OK"),
            "# %-20s : %g %s" % ("Avg bus bandwidth", avg, ""),
            "#",
            "# Collective test concluded: all_reduce_perf",
        ]
    return ["# Out of bounds values : %d %s" % (oob, "FAILED" if oob else "OK"), "# Avg bus bandwidth    : %g %s" % (avg, ""), "#"]


def output(rows: list[str], oob: int | None = 0, avg: float = 100.0, version: str = "2.19") -> str:
    return "\n".join(HEADER + rows + (footer(oob, avg, version) if oob is not None else [])) + "\n"


def test_the_row_format_is_nccl_tests_own():
    """Hand-typed lines of the two formats (columns counted from the printf widths) equal what the helpers print."""
    assert row(1048576, (55.12, 19.02, 33.29, 0), (54.8, 19.13, 33.48, 0)) == (
        "     1048576        262144     float     sum      -1    55.12   19.02   33.29       0    54.80   19.13   33.48       0"
    )
    assert row(1048576, (55.12, 19.02, 33.29, None), (54.8, 19.13, 33.48, 3), "2.17") == (
        "     1048576        262144     float     sum      -1    55.12   19.02   33.29    N/A    54.80   19.13   33.48      3"
    )


@pytest.mark.parametrize("version", ["2.17", "2.19"])
def test_parse_a_healthy_run(version):
    rows = [
        row(8, (10.5, 0.0, 0.0, 0), (10.1, 0.0, 0.0, 0), version),
        row(1 << 20, (55.12, 19.02, 33.29, 0), (54.8, 19.13, 33.48, 0), version),
        # peak in place in this row, out of place in the next: the peak is the larger of both halves of every row
        row(1 << 30, (4460.0, 240.7, 421.3, 0), (4400.0, 244.0, 427.0, 0), version),
        row(1 << 33, (35000.0, 245.4, 429.5, 0), (35500.0, 242.0, 423.5, 0), version),
    ]
    result = nccl.parse(output(rows, avg=201.35, version=version))
    assert result == {
        "rows": [
            {"bytes": 8, "busbw_oop": 0.0, "busbw_ip": 0.0, "wrong": 0},
            {"bytes": 1048576, "busbw_oop": 33.29, "busbw_ip": 33.48, "wrong": 0},
            {"bytes": 1073741824, "busbw_oop": 421.3, "busbw_ip": 427.0, "wrong": 0},
            {"bytes": 8589934592, "busbw_oop": 429.5, "busbw_ip": 423.5, "wrong": 0},
        ],
        "wrong": 0,
        "avg_busbw": 201.35,
        "peak_busbw": 429.5,
        "out_of_bounds": 0,
    }
    assert nccl.judge(result, ["P2P/IPC"], 429.5, [], [], None, 0.8) == []  # the threshold itself passes


def test_peak_from_the_in_place_half():
    result = nccl.parse(output([row(1 << 30, (4460.0, 240.7, 421.3, 0), (4400.0, 244.0, 427.0, 0))]))
    assert result["peak_busbw"] == 427.0


def test_wrong_elements_of_both_halves_add_up():
    rows = [row(1 << 20, (55.1, 19.0, 33.3, 3), (54.8, 19.1, 33.5, 4)), row(1 << 21, (95.0, 22.0, 38.6, 0), (94.0, 22.3, 39.0, 10))]
    result = nccl.parse(output(rows, oob=3))
    assert [r["wrong"] for r in result["rows"]] == [7, 10] and result["wrong"] == 17 and result["out_of_bounds"] == 3


@pytest.mark.parametrize("version", ["2.17", "2.19"])
def test_no_validation_prints_na_and_counts_nothing(version):
    """all_reduce_perf -c 0: every #wrong column is N/A."""
    result = nccl.parse(output([row(1 << 20, (55.1, 19.0, 33.3, None), (54.8, 19.1, 33.5, None), version)], version=version))
    assert result["rows"] == [{"bytes": 1048576, "busbw_oop": 33.3, "busbw_ip": 33.5, "wrong": 0}]


def test_a_row_slower_than_ten_seconds_is_still_read():
    """v2.19's getFloatStr prints a time of 10 s or more as "%7.1e" ("1.4e+07"): 8 GiB over a 10 GbE socket
    fallback takes that long, and the row (with its #wrong) must not be skipped."""
    line = row(1 << 33, (14300000.0, 0.6, 1.05, 5), (14100000.0, 0.61, 1.07, 0))
    assert "1.4e+07" in line and "1.4e+07" == float_str(14300000.0, 7)
    result = nccl.parse(output([line], oob=1))
    assert result["rows"] == [{"bytes": 8589934592, "busbw_oop": 1.05, "busbw_ip": 1.07, "wrong": 5}]


def test_out_of_bounds_alone_fails_the_run():
    """Every #wrong column 0 but the footer counts out-of-bounds values (e.g. the row that had them was not read):
    nccl-tests itself reports FAILED, and so must the judge."""
    rows = [row(1 << 20, (55.1, 19.0, 33.3, 0), (54.8, 19.1, 33.5, 0)), row(1 << 33, (35000.0, 245.4, 429.5, 0), (35500.0, 242.0, 423.5, 0))]
    result = nccl.parse(output(rows, oob=2))
    assert (result["wrong"], result["out_of_bounds"]) == (0, 2)
    assert nccl.judge(result, [], 0, [], [], None, 0.8) == ["0 wrong elements (2 out-of-bounds sizes): data corruption, check GPUs and links"]


@pytest.mark.parametrize(("oob", "shown"), [(0, "0"), (None, "None")])
def test_wrong_elements_alone_fail_the_run(oob, shown):
    """#wrong non-zero with an out-of-bounds count of 0, or with no footer at all (output cut short)."""
    result = nccl.parse(output([row(1 << 20, (55.1, 19.0, 33.3, 0), (54.8, 19.1, 33.5, 6))], oob=oob))
    assert (result["wrong"], result["out_of_bounds"]) == (6, oob)
    assert nccl.judge(result, [], 0, [], [], None, 0.8) == [f"6 wrong elements ({shown} out-of-bounds sizes): data corruption, check GPUs and links"]


def test_no_footer_and_no_rows():
    result = nccl.parse("NCCL WARN Error : 2 nodes\n")
    assert result == {"rows": [], "wrong": 0, "avg_busbw": None, "peak_busbw": 0.0, "out_of_bounds": None}
    # no rows: nothing else is judged (a bandwidth threshold would only repeat that the test did not run)
    assert nccl.judge(result, [], 100.0, ["NET/IB"], [], 50.0, 0.8) == ["no result rows in the output: the test did not run"]


def test_low_bandwidth_against_the_threshold_and_the_baseline():
    result = nccl.parse(output([row(1 << 33, (35000.0, 171.4, 300.0, 0), (35500.0, 170.0, 297.5, 0))]))
    assert nccl.judge(result, [], 450, [], [], None, 0.8) == ["peak bus bandwidth 300.0 GB/s is under the threshold 450.0 GB/s"]
    assert nccl.judge(result, [], 0, [], [], 400.0, 0.8) == ["peak bus bandwidth 300.0 GB/s is under 80% of the recorded baseline 400.0 GB/s"]
    assert nccl.judge(result, [], 0, [], [], 375.0, 0.8) == []  # exactly 80 % of the baseline passes
    assert nccl.judge(result, [], 0, [], [], 376.0, 0.8) != []


NCCL_LOG = [
    "node1:1234:1234 [0] NCCL INFO NCCL version 2.30.7+cuda13.0",
    "node1:1234:1300 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    "node1:1234:1300 [7] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/Socket/0",
    "node2:4321:4400 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [receive] via NET/Socket/0",
]


def test_transports_only_from_nccl_info_lines():
    assert nccl.transports("\n".join(NCCL_LOG)) == ["NET/Socket/0", "P2P/CUMEM/read"]
    assert nccl.transports("a test prints: sent via NET/IB/0\n") == []


def test_required_and_forbidden_transports():
    result = nccl.parse(output([row(1 << 33, (35000.0, 22.9, 40.0, 0), (35500.0, 22.6, 39.5, 0))]))
    seen = nccl.transports("\n".join(NCCL_LOG))
    assert nccl.judge(result, seen, 0, ["NET/IB", "P2P"], ["NET/Socket"], None, 0.8) == [
        "transport NET/IB never used (NCCL chose: NET/Socket/0, P2P/CUMEM/read)",
        "NCCL fell back to NET/Socket (chose: NET/Socket/0, P2P/CUMEM/read): check the fabric stage and nvidia-peermem",
    ]
    assert nccl.judge(result, [], 0, ["GDRDMA"], [], None, 0.8) == ["transport GDRDMA never used (NCCL chose: nothing logged)"]
    good = nccl.transports("h:1:2 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA")
    assert nccl.judge(result, good, 0, ["NET/IB", "GDRDMA"], ["NET/Socket"], None, 0.8) == []


def test_the_nccl_every_rank_loaded():
    text = "h1:1:1 [0] NCCL INFO NCCL version 2.30.7+cuda13.0\nh2:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.2\n"
    versions = nccl.loaded_versions(text)
    assert versions == ["2.21.5", "2.30.7"]
    result = nccl.parse(output([row(1 << 20, (55.1, 19.0, 33.3, 0), (54.8, 19.1, 33.5, 0))]))
    assert nccl.judge(result, [], 0, [], [], None, 0.8, "2.30.7", versions) == [
        "nccl-tests ran with NCCL 2.21.5, 2.30.7, not 2.30.7 (the NCCL training loads): rebuild nccl-tests against the training environment"
    ]
    assert nccl.judge(result, [], 0, [], [], None, 0.8, "2.30.7", []) == [
        "nccl-tests ran with NCCL of unknown version (no 'NCCL version' line), not 2.30.7 (the NCCL training loads): "
        "rebuild nccl-tests against the training environment"
    ]
    assert nccl.judge(result, [], 0, [], [], None, 0.8, None, versions) == []  # no expectation: any release


# The module end to end: argv runs a fake all_reduce_perf that prints a recorded table, and NCCL's INFO lines only
# when NCCL_DEBUG=INFO reaches it (as NCCL does).
FAKE = """#!/bin/sh
printf '%s\\n' "$NCCL_DEBUG" "$NCCL_IB_HCA" "$NCCL_NCHANNELS" > "$0.env"
cat "$0.out"
if [ "$NCCL_DEBUG" = INFO ]; then cat "$0.info" >&2; fi
if [ -n "$FAKE_SLEEP" ]; then sleep "$FAKE_SLEEP"; fi
if [ -n "$FAKE_DELAY" ]; then sleep "$FAKE_DELAY"; fi
if [ -s "$0.err" ]; then cat "$0.err" >&2; fi
exit "${FAKE_RC:-0}"
"""


def fake_binary(tmp_path: Path, out: str, info: list[str], err: str = "") -> Path:
    binary = tmp_path / "all_reduce_perf"
    binary.write_text(FAKE)
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    Path(f"{binary}.out").write_text(out)
    Path(f"{binary}.info").write_text("\n".join(info) + "\n")
    Path(f"{binary}.err").write_text(err)
    return binary


def run_module(args: dict, capsys) -> tuple[int, dict]:
    return modules.run_module(nccl.main, args, capsys)


GOOD_ROWS = [row(1 << 20, (55.12, 19.02, 33.29, 0), (54.8, 19.13, 33.48, 0)), row(1 << 33, (35000.0, 245.4, 429.5, 0), (35500.0, 242.0, 423.5, 0))]
IB_LOG = ["node1:1:1 [0] NCCL INFO NCCL version 2.30.7+cuda13.0", "node1:1:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA"]


def summary_parts(summary: str) -> tuple[str, float]:
    match = re.fullmatch(r"(.*), ([\d.]+) s", summary)
    assert match, summary
    return match.group(1), float(match.group(2))


def test_module_records_the_first_baseline_and_judges_later_runs_against_it(tmp_path, capsys):
    binary = fake_binary(tmp_path, output(GOOD_ROWS, avg=231.4), IB_LOG)
    baseline = tmp_path / "baselines" / "node1" / "all_reduce.json"  # its directory does not exist yet
    args = {
        "argv": [str(binary), "-b", "8", "-e", "8G"],
        "environment": {"NCCL_IB_HCA": "=mlx5_0:1", "NCCL_NCHANNELS": 4},
        "require_transports": ["NET/IB"],
        "forbid_transports": ["NET/Socket"],
        "baseline_file": str(baseline),
        "expect_nccl_version": "2.30.7",
    }
    rc, result = run_module(args, capsys)
    assert rc == 0 and "failed" not in result, result
    # NCCL_DEBUG=INFO is always set, the role's environment is passed, numbers as strings
    assert Path(f"{binary}.env").read_text().splitlines() == ["INFO", "=mlx5_0:1", "4"]
    assert result["changed"] is True and result["baseline_recorded"] is True and result["baseline_gbps"] is None
    assert result["transports"] == ["NET/IB/0/GDRDMA"] and result["nccl_versions"] == ["2.30.7"]
    assert result["result"]["peak_busbw"] == 429.5 and result["result"]["avg_busbw"] == 231.4
    text, seconds = summary_parts(result["summary"])
    assert text == "NCCL 2.30.7: peak 429.5 GB/s, avg 231.4 GB/s, 0 wrong, transports NET/IB/0/GDRDMA" and 0 <= seconds < 30
    recorded = json.loads(baseline.read_text())
    assert {k: recorded[k] for k in ("peak_busbw_gbps", "avg_busbw_gbps", "argv")} == {
        "peak_busbw_gbps": 429.5,
        "avg_busbw_gbps": 231.4,
        "argv": [str(binary), "-b", "8", "-e", "8G"],
    }
    assert abs(recorded["recorded"] - os.path.getmtime(baseline)) < 60

    # the second run reads the baseline and does not rewrite it
    rc, result = run_module(args, capsys)
    assert rc == 0 and result["changed"] is False and result["baseline_recorded"] is False and result["baseline_gbps"] == 429.5
    # a later run under 80 % of it fails
    slow = [row(1 << 33, (52000.0, 165.2, 289.1, 0), (52500.0, 163.6, 286.3, 0))]
    fake_binary(tmp_path, output(slow, avg=150.0), IB_LOG)
    rc, result = run_module(args, capsys)
    assert rc == 1 and result["failed"] is True
    assert result["msg"] == "peak bus bandwidth 289.1 GB/s is under 80% of the recorded baseline 429.5 GB/s"
    assert json.loads(baseline.read_text())["peak_busbw_gbps"] == 429.5


def test_module_transports_and_versions_also_from_stderr(tmp_path, capsys):
    """mpirun relays the remote ranks' NCCL lines on stderr; the table is read from stdout only."""
    binary = fake_binary(tmp_path, output(GOOD_ROWS), IB_LOG)
    rc, result = run_module({"argv": [str(binary)], "require_transports": ["GDRDMA"], "expect_nccl_version": "2.30.7"}, capsys)
    assert rc == 0 and result["transports"] == ["NET/IB/0/GDRDMA"] and result["nccl_versions"] == ["2.30.7"]
    assert result["changed"] is False and result["baseline_recorded"] is False  # no baseline file asked for


def test_module_failure_names_the_exit_status_and_last_error_line(tmp_path, capsys, monkeypatch):
    binary = fake_binary(tmp_path, "\n".join(f"line {i}" for i in range(40)) + "\n", [], err="first\nNCCL WARN bootstrap: connection refused\n")
    monkeypatch.setenv("FAKE_RC", "3")
    baseline = tmp_path / "b.json"
    rc, result = run_module({"argv": [str(binary)], "baseline_file": str(baseline)}, capsys)
    assert rc == 1 and result["failed"] is True
    assert result["msg"] == (f"{binary} exited 3: NCCL WARN bootstrap: connection refused; no result rows in the output: the test did not run")
    assert result["stdout_tail"] == [f"line {i}" for i in range(10, 40)]  # the last 30 lines
    assert result["transports"] == [] and result["result"]["rows"] == []
    text, dummy = summary_parts(result["summary"])
    assert text == "NCCL ?: peak 0.0 GB/s, avg None GB/s, 0 wrong, transports -"
    assert not baseline.exists()


def test_module_failure_without_error_output(tmp_path, capsys, monkeypatch):
    binary = fake_binary(tmp_path, output(GOOD_ROWS), [])
    monkeypatch.setenv("FAKE_RC", "1")
    rc, result = run_module({"argv": [str(binary)]}, capsys)
    assert rc == 1 and result["msg"] == f"{binary} exited 1: no error output"


def test_module_kills_a_run_past_its_timeout(tmp_path, capsys, monkeypatch):
    binary = fake_binary(tmp_path, output(GOOD_ROWS), [])
    monkeypatch.setenv("FAKE_SLEEP", "20")
    rc, result = run_module({"argv": [str(binary)], "timeout": 1}, capsys)
    dummy, seconds = summary_parts(result["summary"])
    # coreutils timeout exits 124 when it had to kill the command
    assert rc == 1 and result["msg"] == f"{binary} exited 124: no error output" and seconds < 15


def test_module_judges_threshold_and_version_and_summarises_every_rank(tmp_path, capsys, monkeypatch):
    """Two ranks report different NCCL releases and two transports; the peak misses the threshold; the run took 1.2 s."""
    log = [
        "node1:1:1 [0] NCCL INFO NCCL version 2.30.7+cuda13.0",
        "node2:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.2",
        "node1:1:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA",
        "node1:1:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    ]
    binary = fake_binary(tmp_path, output(GOOD_ROWS, avg=231.4), log)
    monkeypatch.setenv("FAKE_DELAY", "1.2")
    baseline = tmp_path / "baseline.json"  # in a directory that exists
    rc, result = run_module({"argv": [str(binary)], "min_busbw_gbps": 500, "expect_nccl_version": "2.30.7", "baseline_file": str(baseline)}, capsys)
    assert rc == 1 and result["msg"] == (
        "nccl-tests ran with NCCL 2.21.5, 2.30.7, not 2.30.7 (the NCCL training loads): rebuild nccl-tests against the training environment; "
        "peak bus bandwidth 429.5 GB/s is under the threshold 500.0 GB/s"
    )
    text, seconds = summary_parts(result["summary"])
    assert text == "NCCL 2.21.5,2.30.7: peak 429.5 GB/s, avg 231.4 GB/s, 0 wrong, transports NET/IB/0/GDRDMA,P2P/CUMEM/read"
    assert 1.2 <= seconds < 60
    assert not baseline.exists()
    # the same run meeting its threshold records the baseline beside existing files
    fake_binary(tmp_path, output(GOOD_ROWS, avg=231.4), log[:1] + log[2:])
    rc, result = run_module({"argv": [str(binary)], "min_busbw_gbps": 429.5, "baseline_file": str(baseline)}, capsys)
    assert rc == 0 and result["baseline_recorded"] is True and json.loads(baseline.read_text())["peak_busbw_gbps"] == 429.5

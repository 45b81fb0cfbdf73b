"""The compute_rate module (plugins/modules/compute_rate.py) to the letter: what a measurement must print to count,
the record stored for a node (rates, rounding, fingerprint), when a stored rate is kept or replaced and the warning a
drop gives, the words of the report, the fact file read back, and main() end to end: the interpreter's argv, the
result, the fact file (content, modes, check mode), the errors the operator reads.

Stood in: the training interpreter (a small executable in tmp_path that notes its argv and prints the answer a test
gives it; Ansible's real run_command runs it) and the clock (time.gmtime). Everything else is the module's real code."""

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.megaprov.cluster.plugins.modules import compute_rate as compute
from ansible_collections.megaprov.cluster.tests.unit.plugins.modules import utils as modules
from ansible_collections.megaprov.cluster.tests.unit.plugins.modules.test_node_facts import CPU_RUN, GPU_RUN

NOW = "2025-11-30T12:00:00Z"

# ---- parse_measurement


def test_only_the_last_json_line_counts():
    first = json.dumps({"backend": "numpy-cpu", "devices": [{"index": 0, "tflops": 0.01}]})
    doc = compute.parse_measurement(first + "\n  {indented is not a result}\n" + CPU_RUN + "\nbye\n")
    assert doc == json.loads(CPU_RUN)


@pytest.mark.parametrize(
    ("devices", "why"),
    [
        (None, "missing"),
        ([], "empty"),
        ([{"index": 0, "tflops": 1.0}, {"index": 1, "tflops": -2.0}], "negative"),
        ([{"index": 0, "tflops": "12.5"}], "a string"),
        ([{"index": 0}], "absent"),
        ([{"index": 0, "tflops": 0}], "zero"),
    ],
)
def test_a_measurement_without_a_positive_rate_on_every_device_is_refused(devices, why):
    doc = {"backend": "torch-cpu"} if devices is None else {"backend": "torch-cpu", "devices": devices}
    line = json.dumps(doc)
    with pytest.raises(ValueError) as error:
        compute.parse_measurement(line)
    assert str(error.value) == "the measurement found no device with a positive rate: " + line


def test_the_refusal_quotes_at_most_200_characters_of_the_line():
    line = json.dumps({"backend": "torch-cpu", "devices": [], "pad": "x" * 400})
    with pytest.raises(ValueError) as error:
        compute.parse_measurement(line)
    assert str(error.value) == "the measurement found no device with a positive rate: " + line[:200]


def test_an_integer_rate_counts():
    assert compute.parse_measurement('{"backend": "numpy-cpu", "devices": [{"index": 0, "tflops": 2}]}')["devices"][0]["tflops"] == 2


def test_an_empty_error_is_no_error():
    doc = compute.parse_measurement('{"error": "", "backend": "numpy-cpu", "devices": [{"index": 0, "tflops": 0.5}]}')
    assert doc["backend"] == "numpy-cpu"


# ---- record, fingerprint, decide


def test_the_record_of_a_numpy_run_without_threads_or_version():
    doc = {"backend": "numpy-cpu", "dtype": "float32", "size": 512, "devices": [{"index": 0, "name": "Xeon", "tflops": 0.01234567891, "cpus": 4}]}
    assert compute.record(doc, NOW) == {
        "version": 1,
        "backend": "numpy-cpu",
        "dtype": "float32",
        "size": 512,
        "threads": 0,
        "library": "",
        "devices": [{"index": 0, "name": "Xeon", "tflops": 0.012346}],
        "tflops_per_device": 0.012346,
        "tflops_node": 0.012346,
        "measured_at": NOW,
    }


def test_the_record_of_a_gpu_run_sums_and_takes_the_slowest():
    doc = {**GPU_RUN, "devices": [{"index": 0, "name": "H100", "tflops": 700.1234564}, {"index": 1, "name": "H100", "tflops": 650.0000004}]}
    rec = compute.record(doc, NOW)
    assert rec["devices"] == [{"index": 0, "name": "H100", "tflops": 700.123456}, {"index": 1, "name": "H100", "tflops": 650.0}]
    assert (rec["tflops_per_device"], rec["tflops_node"], rec["library"], rec["threads"]) == (650.0, 1350.123456, "2.13.0+cu128", 0)


STORED = compute.record(json.loads(CPU_RUN), "t0")


@pytest.mark.parametrize(
    "change",
    [
        {"backend": "numpy-cpu"},
        {"dtype": "bfloat16"},
        {"size": 2048},
        {"threads": 4},
        {"library": "2.14.0+cpu"},
        {"devices": [{"index": 0, "name": "Intel Xeon", "tflops": 0.0156}]},
        {"devices": [{"index": 0, "name": "AMD EPYC", "tflops": 0.0156}, {"index": 1, "name": "AMD EPYC", "tflops": 0.0156}]},
    ],
)
def test_a_stored_rate_of_another_shape_of_node_is_replaced(change):
    fresh = {**STORED, **change, "measured_at": "t1"}
    keep, changed, ratio, warning = compute.decide(STORED, fresh, refresh=False, warn_below=0.5)
    assert keep is fresh and changed is True and ratio == 1.0 and warning == ""


def test_the_same_node_keeps_its_stored_rate_whatever_was_measured():
    fresh = {
        **STORED,
        "tflops_per_device": 0.0149,
        "tflops_node": 0.0149,
        "measured_at": "t1",
        "devices": [dict(STORED["devices"][0], tflops=0.0149)],
    }
    assert compute.decide(STORED, fresh, refresh=False, warn_below=0.5) == (STORED, False, 0.955, "")
    assert compute.fingerprint(STORED) == ("torch-cpu", "float32", 1024, 2, "2.13.0+cpu", ("AMD EPYC",))


def test_an_old_record_without_devices_has_an_empty_fingerprint():
    assert compute.fingerprint({"version": 1, "tflops_per_device": 1.0}) == (None, None, None, None, None, ())


def test_a_drop_below_the_fraction_warns_with_both_rates_and_exactly_at_it_does_not():
    gpu = compute.record(GPU_RUN, "t0")
    slow = {**gpu, "tflops_per_device": 328.0}  # 0.8 of 410
    keep, changed, ratio, warning = compute.decide(gpu, slow, refresh=False, warn_below=0.9)
    assert (keep, changed, ratio) == (gpu, False, 0.8)
    assert warning == (
        "compute rate 328.0 TFLOP/s is 80 % of the stored 410.0 TFLOP/s: the node is throttled or busy (a fresh measurement is stored with refresh)"
    )
    assert compute.decide(gpu, slow, refresh=False, warn_below=0.8)[3] == ""


def test_a_stored_rate_of_zero_gives_a_ratio_of_one():
    zero = {**STORED, "tflops_per_device": 0}
    assert compute.decide(zero, {**zero, "measured_at": "t1"}, refresh=False, warn_below=0.5) == (zero, False, 1.0, "")


# ---- the words


@pytest.mark.parametrize(
    ("tflops", "text"),
    [(0.0156, "15.6 GFLOP/s"), (0.99994, "999.9 GFLOP/s"), (1, "1.0 TFLOP/s"), (1.5, "1.5 TFLOP/s"), (989.44, "989.4 TFLOP/s")],
)
def test_rate_text(tflops, text):
    assert compute.rate_text(tflops) == text


def test_describe_says_gpus_threads_or_cpu():
    gpu = compute.record(GPU_RUN, NOW)
    assert compute.describe(gpu) == f"410.0 TFLOP/s per device, bfloat16 torch-cuda GEMM 8192^3 (8 GPU(s), {NOW})"
    cpu = compute.record(json.loads(CPU_RUN), NOW)
    assert compute.describe(cpu) == f"15.6 GFLOP/s per device, float32 torch-cpu GEMM 1024^3 (2 thread(s), {NOW})"
    numpy = {**cpu, "backend": "numpy-cpu", "threads": 0}
    assert compute.describe(numpy) == f"15.6 GFLOP/s per device, float32 numpy-cpu GEMM 1024^3 (CPU, {NOW})"


# ---- the fact file read back


@pytest.mark.parametrize(
    "content",
    ["{not json", "[1, 2]", '{"version": 2, "tflops_per_device": 1.0}', '{"version": 1, "tflops_per_device": 0}', '{"version": 1}'],
)
def test_a_fact_file_that_is_not_a_rate_is_none(tmp_path, content):
    (tmp_path / "f").write_text(content)
    assert compute.read_stored(str(tmp_path / "f")) is None


def test_a_stored_rate_is_read_back(tmp_path):
    (tmp_path / "f").write_text(json.dumps(STORED))
    assert compute.read_stored(str(tmp_path / "f")) == STORED
    assert compute.read_stored(str(tmp_path / "missing")) is None


# ---- main(), with a stand-in interpreter


class Interpreter:
    """An executable at `path` that notes its argv in argv.json and prints `answer` with exit status `rc`."""

    def __init__(self, root: Path, answer="", rc=0, err=""):
        self.path = root / "venv" / "bin" / "python"
        self.path.parent.mkdir(parents=True)
        self.path.write_text(
            f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(root / 'argv.json')!r}, 'w'))\n"
            f"sys.stdout.write({answer!r})\nsys.stderr.write({err!r})\nsys.exit({rc})\n"
        )
        self.path.chmod(0o755)
        self.argv_file = root / "argv.json"

    @property
    def argv(self):
        return json.loads(self.argv_file.read_text())


@pytest.fixture
def clock(monkeypatch):
    real = time.gmtime
    monkeypatch.setattr(compute.time, "gmtime", lambda *a: real(1764504000))


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def run(args, capsys, check_mode=False):
    if check_mode:
        args = {**args, "_ansible_check_mode": True}
    return modules.run_module(compute.main, args, capsys)


def test_no_interpreter_yet_measures_nothing_and_hands_back_a_stored_rate(tmp_path, capsys):
    fact = tmp_path / "compute.fact"
    python = str(tmp_path / "venv/bin/python")
    rc, out = run({"python": python, "facts_path": str(fact)}, capsys)
    why = f"not measured: no training interpreter at {python} yet (the python stage builds it and measures then)"
    assert rc == 0 and (out["changed"], out["measured"], out["summary"], out["warning"], out["ansible_facts"]) == (False, False, why, "", {})
    fact.write_text(json.dumps(STORED))
    rc, out = run({"python": python, "facts_path": str(fact)}, capsys)
    assert out["ansible_facts"] == {"megaprov_compute": STORED} and out["measured"] is False


def test_a_first_measurement_is_stored_and_reported(tmp_path, capsys, clock, umask_022):
    python = Interpreter(tmp_path, "loading torch\n" + CPU_RUN + "\n")
    fact = tmp_path / "facts.d" / "megaprov_compute.fact"
    rc, out = run({"python": str(python.path), "facts_path": str(fact)}, capsys)
    assert rc == 0
    assert python.argv == ["-c", compute.SCRIPT, "2.0", "1024", "8192"]
    rec = compute.record(json.loads(CPU_RUN), NOW)
    assert out["changed"] is True and out["measured"] is True
    assert out["fresh"] == rec and out["stored"] == rec and out["ratio"] == 1.0 and out["warning"] == ""
    assert out["summary"] == f"15.6 GFLOP/s per device, float32 torch-cpu GEMM 1024^3 (2 thread(s), {NOW}); this run 15.6 GFLOP/s (1.00 x)"
    assert out["ansible_facts"] == {"megaprov_compute": rec}
    assert fact.read_text() == json.dumps(rec, indent=2, sort_keys=True) + "\n"
    assert stat.S_IMODE(fact.stat().st_mode) == 0o644 and stat.S_IMODE(fact.parent.stat().st_mode) == 0o755
    assert os.listdir(fact.parent) == ["megaprov_compute.fact"]


def test_a_rerun_on_the_same_node_keeps_the_file_and_reports_the_fresh_rate(tmp_path, capsys, clock):
    slower = json.loads(CPU_RUN)
    slower["devices"][0]["tflops"] = 0.0078
    python = Interpreter(tmp_path, json.dumps(slower) + "\n")
    fact = tmp_path / "compute.fact"
    fact.write_text(json.dumps(STORED))
    before = fact.stat().st_mtime_ns
    args = {"python": str(python.path), "facts_path": str(fact), "seconds": 0.5, "cpu_size": 256, "gpu_size": 4096, "warn_below": 0.6}
    rc, out = run(args, capsys)
    assert python.argv == ["-c", compute.SCRIPT, "0.5", "256", "4096"]
    assert out["changed"] is False and out["stored"] == STORED and out["ratio"] == 0.5
    assert out["summary"] == "15.6 GFLOP/s per device, float32 torch-cpu GEMM 1024^3 (2 thread(s), t0); this run 7.8 GFLOP/s (0.50 x)"
    assert out["warning"].startswith("compute rate 7.8 GFLOP/s is 50 % of the stored 15.6 GFLOP/s")
    assert fact.stat().st_mtime_ns == before

    rc, out = run({**args, "refresh": True}, capsys)
    assert out["changed"] is True and out["stored"] == out["fresh"] and out["warning"] == ""
    assert json.loads(fact.read_text())["tflops_per_device"] == 0.0078


def test_an_old_fact_without_devices_is_replaced(tmp_path, capsys, clock):
    python = Interpreter(tmp_path, CPU_RUN)
    fact = tmp_path / "compute.fact"
    fact.write_text('{"version": 1, "tflops_per_device": 0.5}')
    rc, out = run({"python": str(python.path), "facts_path": str(fact)}, capsys)
    assert out["changed"] is True and json.loads(fact.read_text()) == compute.record(json.loads(CPU_RUN), NOW)


def test_check_mode_measures_but_writes_and_records_nothing_new(tmp_path, capsys, clock):
    python = Interpreter(tmp_path, CPU_RUN)
    fact = tmp_path / "facts.d" / "compute.fact"
    rc, out = run({"python": str(python.path), "facts_path": str(fact)}, capsys, check_mode=True)
    assert rc == 0 and out["changed"] is True and out["stored"] is None and out["ansible_facts"] == {}
    assert out["fresh"]["tflops_per_device"] == 0.0156 and not fact.parent.exists()
    fact.parent.mkdir()
    fact.write_text(json.dumps(STORED))
    rc, out = run({"python": str(python.path), "facts_path": str(fact), "refresh": True}, capsys, check_mode=True)
    assert out["changed"] is True and out["stored"] == STORED and out["ansible_facts"] == {"megaprov_compute": STORED}
    assert json.loads(fact.read_text()) == STORED


def test_a_failing_interpreter_is_reported_with_the_tail_of_its_error(tmp_path, capsys):
    python = Interpreter(tmp_path, "partial output\n", rc=3, err="Traceback\n" + "x" * 500 + "\nRuntimeError: CUDA error\n")
    rc, out = run({"python": str(python.path), "facts_path": str(tmp_path / "f")}, capsys)
    tail = ("x" * 500 + "\nRuntimeError: CUDA error")[-400:]
    assert rc == 1 and out["msg"] == f"the GEMM measurement failed with {python.path} (rc 3): {tail}"


def test_a_failing_interpreter_without_stderr_quotes_its_output(tmp_path, capsys):
    python = Interpreter(tmp_path, "  Killed  \n", rc=137)
    rc, out = run({"python": str(python.path), "facts_path": str(tmp_path / "f")}, capsys)
    assert out["msg"] == f"the GEMM measurement failed with {python.path} (rc 137): Killed"


def test_an_answer_without_a_result_is_reported(tmp_path, capsys):
    python = Interpreter(tmp_path, '{"error": "neither torch nor numpy in this interpreter"}\n')
    rc, out = run({"python": str(python.path), "facts_path": str(tmp_path / "f")}, capsys)
    assert rc == 1 and out["msg"] == f"the GEMM measurement with {python.path}: neither torch nor numpy in this interpreter"
    assert not (tmp_path / "f").exists()


def test_an_answer_without_a_json_line_is_reported(tmp_path, capsys):
    python = Interpreter(tmp_path, "Segmentation fault\n")
    rc, out = run({"python": str(python.path), "facts_path": str(tmp_path / "f")}, capsys)
    assert rc == 1 and out["msg"] == f"the GEMM measurement with {python.path}: the measurement printed no result"


def test_the_fact_directory_is_made_0755_whatever_the_umask_and_the_file_is_written_beside_it(tmp_path, monkeypatch, capsys, clock):
    python = Interpreter(tmp_path, CPU_RUN)
    fact = tmp_path / "facts.d" / "megaprov_compute.fact"
    # the temporary file goes beside the fact (one rename), never to $TMPDIR, which this node lacks
    monkeypatch.setattr(compute.tempfile, "tempdir", str(tmp_path / "no-tmp"))
    old = os.umask(0)
    try:
        rc, out = run({"python": str(python.path), "facts_path": str(fact)}, capsys)
    finally:
        os.umask(old)
    assert rc == 0 and json.loads(fact.read_text()) == out["fresh"]
    assert stat.S_IMODE(fact.parent.stat().st_mode) == 0o755 and os.listdir(fact.parent) == ["megaprov_compute.fact"]


def test_arguments_as_the_playbook_hands_them_are_converted(tmp_path, monkeypatch, capsys, clock):
    monkeypatch.setenv("HOME", str(tmp_path))
    python = Interpreter(tmp_path, CPU_RUN)
    (tmp_path / "facts.d").mkdir()
    (tmp_path / "facts.d" / "c.fact").write_text(json.dumps(STORED))
    args = {"python": "~/venv/bin/python", "facts_path": "~/facts.d/c.fact", "seconds": 1, "cpu_size": "0256", "gpu_size": "04096"}
    rc, out = run({**args, "refresh": "no", "warn_below": "0.9"}, capsys)
    assert rc == 0 and out["measured"] is True and out["changed"] is False and out["stored"] == STORED
    assert python.argv == ["-c", compute.SCRIPT, "1.0", "256", "4096"]
    assert out["warning"] == ""


@pytest.mark.parametrize("missing", ["python", "facts_path"])
def test_the_interpreter_and_the_fact_file_are_required(tmp_path, capsys, missing):
    args = {"python": str(tmp_path / "python"), "facts_path": str(tmp_path / "f")}
    del args[missing]
    rc, out = run(args, capsys)
    assert rc == 1 and out["msg"] == f"missing required arguments: {missing}"

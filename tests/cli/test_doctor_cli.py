"""`megaprov doctor` from the command line: bad input is one line and exit 2; a log's findings are a table or JSON
with the same fields, exit 6 when something is wrong and 0 when nothing is; hostile log text stays data."""

import json
from pathlib import Path

from megaprov.cli import main
from megaprov.errors import ExitCode

ROOT = Path(__file__).resolve().parents[2]

OOM = (
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    " GPU 0 has a total capacity of 79.19 GiB of which 1.00 GiB is free."
)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err):
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_doctor_needs_something_to_look_at(capsys):
    code, _, err = run(capsys, "doctor")
    assert code == ExitCode.USAGE and "needs -i INVENTORY, --log FILE or --name JOB" in one_line(err)


def test_cluster_flags_need_an_inventory(tmp_path, capsys):
    log = tmp_path / "a.log"
    log.write_text("fine\n")
    for flags in (["--drain"], ["--level", "deep"], ["--node", "n1"]):
        code, _, err = run(capsys, "doctor", "--log", str(log), *flags)
        assert code == ExitCode.USAGE and "pass -i INVENTORY" in one_line(err), flags
        code, _, err = run(capsys, "doctor", "--name", "j1", "-i", "x.ini", *flags)
        assert code == ExitCode.USAGE and "without --name" in one_line(err), flags


def test_a_bad_level_is_refused_by_name(capsys):
    code, _, err = run(capsys, "doctor", "-i", "x.ini", "--level", "thorough")
    assert code == ExitCode.USAGE and "thorough" in err


def test_a_log_with_a_failure_is_a_table_and_exit_6(tmp_path, capsys):
    log = tmp_path / "node2.log"
    log.write_text("starting\n" + OOM + "\n")
    code, out, err = run(capsys, "doctor", "--log", str(log))
    assert code == ExitCode.VERDICT_FAILED
    assert "CUDA_OOM" in out and "micro_batch_size" in out
    assert one_line(err).startswith("megaprov: error: CUDA_OOM on ")


def test_json_has_every_field_of_every_finding(tmp_path, capsys):
    log = tmp_path / "node2.log"
    log.write_text(OOM + "\n")
    code, out, _ = run(capsys, "doctor", "--log", str(log), "--output", "json")
    doc = json.loads(out)
    assert code == 6 and doc["ok"] is False and doc["result"]["counts"] == {"error": 1, "warn": 0, "info": 0}
    (f,) = doc["result"]["findings"]
    assert set(f) == {"code", "severity", "node", "evidence", "cause", "fix", "source", "line"}
    assert f["line"] == 1 and f["source"] == str(log) and "Tried to allocate 2.00 GiB" in f["evidence"]


def test_a_clean_log_is_exit_0(tmp_path, capsys):
    log = tmp_path / "ok.log"
    log.write_text("all good\n")
    code, out, _ = run(capsys, "doctor", "--log", str(log))
    assert code == 0 and "nothing wrong" in out


def test_hostile_log_text_is_printed_as_data(tmp_path, capsys):
    log = tmp_path / "evil.log"
    log.write_text("\x1b]0;pwned\x07[bold red]x[/] " + OOM + " \x1b[2J" + "A" * 100_000 + "\n")
    code, out, _ = run(capsys, "doctor", "--log", str(log), "--output", "json")
    f = json.loads(out)["result"]["findings"][0]
    assert "\x1b" not in f["evidence"] and "\x07" not in f["evidence"] and len(f["evidence"]) <= 400
    code, out, _ = run(capsys, "doctor", "--log", str(log))
    assert "\x1b" not in out and "\x07" not in out
    assert "[bold" in out  # rich markup in a log is shown, not interpreted


def _lab_inventory(tmp_path):
    path = tmp_path / "inventory.ini"
    path.write_text("[head]\nn1 ansible_host=192.0.2.10\n[gpu_nodes]\nn1 ansible_host=192.0.2.10\nn2 ansible_host=192.0.2.11\n")
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("megaprov_gpu_expected: false\n")
    return str(path)


def test_train_exclude_unhealthy_needs_a_recent_doctor_run(tmp_path, capsys, monkeypatch):
    import time

    from megaprov.ops.doctor import health
    from megaprov.ops.doctor.findings import Report, finding

    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    inventory = _lab_inventory(tmp_path)
    job = str(ROOT / "examples" / "jobs" / "lab-tiny.yml")
    code, _, err = run(capsys, "train", "--job", job, "-i", inventory, "--exclude-unhealthy", "--dry-run")
    assert code == ExitCode.USAGE and "megaprov doctor has not checked this cluster" in one_line(err)
    health.record(inventory, Report([finding("SERVICE_DOWN", "n2", "chrony: inactive")]), "passive")
    code, _, err = run(capsys, "train", "--job", job, "-i", inventory, "--exclude-unhealthy", "--dry-run")
    said, error = err.strip().splitlines()
    assert said.startswith("train: leaving out n2 (error findings of megaprov doctor")
    assert code == ExitCode.USAGE and "the job needs 2 nodes; 1 are left without n2" in error
    path = health.findings_file(Path(inventory))
    doc = json.loads(path.read_text())
    doc["at"] = time.time() - 25 * 3600
    path.write_text(json.dumps(doc))
    code, _, err = run(capsys, "train", "--job", job, "-i", inventory, "--exclude-unhealthy", "--dry-run")
    assert code == ExitCode.USAGE and "h old" in one_line(err)

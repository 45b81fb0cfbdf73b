"""The launch's one-call-per-node module (plugins/modules/job_step.py), what the operator and `megaprov train` read of
each step: the node check's exact refusals (the interpreter, podman, the running unit, a port another job holds, read
from the kernel's real table with a real listening socket), the job directory's refusals and the model record written
beside the checkpoints (its exact content and mode), and the unit start (the file written only when it differs, the
exact systemctl calls, a failing systemctl's words). Stood in: systemctl and podman (scripts on PATH that record their
argv), and for step=start the unit directory /etc/systemd/system, rooted in a temporary directory."""

from __future__ import annotations

import base64
import io
import json
import os
import socket
import tarfile
from pathlib import Path

import pytest

from ansible_collections.megaprov.cluster.plugins.modules import job_step as step
from ansible_collections.megaprov.cluster.tests.unit.plugins.modules.utils import run_module

UNIT = "megaprov-job-j.service"
PYTHON_MISSING = (
    "the training interpreter (launch.python) does not exist on gpu07: run `megaprov bootstrap` "
    "(its python stage builds the training environment) or set launch.python"
)
PODMAN_MISSING = (
    "podman, which runs the job's container (launch.container), is not installed on gpu07: run "
    "`megaprov bootstrap --tags containers` with megaprov_containers: true in the inventory"
)


def running(state: str, unit: str = UNIT) -> str:
    return (
        f"job j is running on gpu07 ({unit} is {state}): it cannot start again while it runs; follow it with "
        "`megaprov job status j` and `megaprov job logs j`, or stop it first with `megaprov job stop j`"
    )


def port_busy(port: int) -> str:
    return (
        f"port {port} (launch.master_port) is in use on gpu07, where the ranks meet: another job runs there, not this one "
        "(`megaprov jobs`, `megaprov job stop JOB`) or set launch.master_port to a free port"
    )


# --- check_problems: the exact reasons ---------------------------------------------------------------------------


def test_every_reason_is_said_whole_and_joined_in_order():
    assert step.check_problems("j", "", "inactive", 29500, True, "gpu07", UNIT) == [PYTHON_MISSING, port_busy(29500)]
    assert step.check_problems("j", "", "inactive", 29500, False, "gpu07", UNIT, container=True) == [PODMAN_MISSING]
    assert step.check_problems("j", "/p", "reloading", 29500, True, "gpu07", UNIT) == [running("reloading")]


def test_without_a_unit_name_the_message_says_its_unit():
    assert step.check_problems("j", "/p", "deactivating", 1, False, "gpu07") == [running("deactivating", "its unit")]


# --- listening: the kernel's TCP tables ------------------------------------------------------------------------------

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
LISTENER = "   0: 00000000:733C 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n"


def test_a_table_that_cannot_be_read_is_skipped_for_the_next(tmp_path):
    (tmp_path / "tcp6").write_text(HEADER + LISTENER)
    assert step.listening(29500, (str(tmp_path / "missing"), str(tmp_path / "tcp6")))


def test_an_empty_table_and_short_lines_are_no_listener(tmp_path):
    (tmp_path / "empty").write_text("")
    (tmp_path / "short").write_text(HEADER + "   0: 00000000:733C 00000000:0000\n")
    assert not step.listening(29500, (str(tmp_path / "empty"), str(tmp_path / "short")))
    # a line cut right after its state still says a listener
    (tmp_path / "cut").write_text(HEADER + "   0: 00000000:733C 00000000:0000 0A\n")
    assert step.listening(29500, (str(tmp_path / "cut"),))


# --- shape_problem -----------------------------------------------------------------------------------------------


def test_another_models_record_is_refused_with_both_shapes_and_the_fix():
    problem = step.shape_problem(json.dumps({"num_layers": 2, "hidden_size": 96}), {"num_layers": 2, "hidden_size": 64}, "/c")
    assert problem == (
        "checkpoint.directory /c holds checkpoints of another model (hidden_size=96, num_layers=2; this job has "
        "hidden_size=64, num_layers=2): set checkpoint.directory to a new path or use that model shape"
    )


def test_a_record_that_is_not_an_object_is_quoted_as_it_is():
    assert step.shape_problem("[96, 2]", {"hidden_size": 64}, "/c") == (
        "checkpoint.directory /c holds checkpoints of another model ([96, 2]; this job has hidden_size=64): "
        "set checkpoint.directory to a new path or use that model shape"
    )
    assert step.shape_problem("  \n", {"hidden_size": 64}, "/c") is None  # an empty record is none


# --- step=check through main() -------------------------------------------------------------------------------------


def bin_dir(tmp_path: Path, monkeypatch, tools: dict[str, str], keep_path: bool = True) -> Path:
    """Scripts on PATH in front of (or instead of) the system's, each recording its argv in NAME.log."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    for name, body in tools.items():
        (folder / name).write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {folder}/{name}.log\n{body}\n')
        (folder / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}" if keep_path else str(folder))
    return folder


def calls(folder: Path, name: str) -> list[str]:
    log = folder / f"{name}.log"
    return log.read_text().splitlines() if log.exists() else []


def systemctl_show(state: str) -> str:
    """systemctl answering ActiveState only when asked exactly as systemd documents it."""
    return f'[ "$*" = "show -p ActiveState --value {UNIT}" ] && echo {state}\nexit 0'


def interpreter(tmp_path: Path, mode: int = 0o755) -> str:
    python = tmp_path / "python"
    python.write_text("")
    python.chmod(mode)
    return str(python)


def check_args(**extra) -> dict:
    return {"step": "check", "name": "j", "unit": UNIT, "master_port": 29500, "host": "gpu07", **extra}


def test_a_ready_node_passes_and_systemd_is_asked_for_the_units_state(tmp_path, capsys, monkeypatch):
    tools = bin_dir(tmp_path, monkeypatch, {"systemctl": systemctl_show("inactive")})
    code, result = run_module(step.main, check_args(python=interpreter(tmp_path)), capsys)
    assert (code, result["changed"], result["unit_state"]) == (0, False, "inactive")
    assert calls(tools, "systemctl") == [f"show -p ActiveState --value {UNIT}"]


def test_a_node_without_systemd_answers_unknown_and_is_not_refused_for_it(tmp_path, capsys, monkeypatch):
    bin_dir(tmp_path, monkeypatch, {"systemctl": 'echo "System has not been booted with systemd as init system (PID 1)." >&2\nexit 1'})
    code, result = run_module(step.main, check_args(python=interpreter(tmp_path)), capsys)
    assert (code, result["unit_state"]) == (0, "unknown")


def test_no_systemctl_at_all_fails_naming_the_unit(tmp_path, capsys, monkeypatch):
    bin_dir(tmp_path, monkeypatch, {}, keep_path=False)
    code, result = run_module(step.main, check_args(python=interpreter(tmp_path)), capsys)
    assert code == 1 and result["msg"] == f"cannot ask systemd for {UNIT}: No such file or directory"


def test_an_interpreter_that_is_not_executable_is_missing(tmp_path, capsys, monkeypatch):
    bin_dir(tmp_path, monkeypatch, {"systemctl": systemctl_show("inactive")})
    code, result = run_module(step.main, check_args(python=interpreter(tmp_path, 0o644)), capsys)
    assert (code, result["msg"], result["usage_error"], result["unit_state"]) == (1, PYTHON_MISSING, True, "inactive")
    code, result = run_module(step.main, check_args(python=str(tmp_path / "absent")), capsys)
    assert (code, result["msg"]) == (1, PYTHON_MISSING)


def test_a_container_job_is_checked_for_podman_on_path_not_the_interpreter(tmp_path, capsys, monkeypatch):
    tools = bin_dir(tmp_path, monkeypatch, {"systemctl": systemctl_show("inactive"), "podman": "exit 0"}, keep_path=False)
    code, result = run_module(step.main, check_args(container=True), capsys)
    assert code == 0 and result["unit_state"] == "inactive"
    assert calls(tools, "podman") == []  # found on PATH, not run
    (tools / "podman").unlink()
    code, result = run_module(step.main, check_args(container=True), capsys)
    assert (code, result["msg"]) == (1, PODMAN_MISSING)


def test_a_host_job_needs_no_podman(tmp_path, capsys, monkeypatch):
    bin_dir(tmp_path, monkeypatch, {"systemctl": systemctl_show("inactive")}, keep_path=False)
    code, result = run_module(step.main, check_args(python=interpreter(tmp_path)), capsys)
    assert code == 0


def test_two_reasons_are_one_message(tmp_path, capsys, monkeypatch):
    bin_dir(tmp_path, monkeypatch, {"systemctl": systemctl_show("active")})
    code, result = run_module(step.main, check_args(python=str(tmp_path / "absent")), capsys)
    assert (code, result["msg"], result["unit_state"]) == (1, f"{PYTHON_MISSING}; {running('active')}", "active")


@pytest.fixture
def listener():
    """A real TCP socket listening on a free port: the kernel's own /proc/net/tcp lists it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock.getsockname()[1]
    sock.close()


def test_the_port_where_ranks_meet_is_refused_when_another_process_listens(tmp_path, capsys, monkeypatch, listener):
    assert step.listening(listener)  # the kernel's own tables, as the module reads them
    bin_dir(tmp_path, monkeypatch, {"systemctl": systemctl_show("inactive")})
    args = check_args(python=interpreter(tmp_path), master_port=listener)
    code, result = run_module(step.main, {**args, "check_port": True}, capsys)
    assert (code, result["msg"], result["usage_error"]) == (1, port_busy(listener), True)
    # the other nodes are not where the ranks meet: their check does not look at the port
    code, result = run_module(step.main, args, capsys)
    assert code == 0


def test_a_free_port_is_not_refused(tmp_path, capsys, monkeypatch):
    bin_dir(tmp_path, monkeypatch, {"systemctl": systemctl_show("inactive")})
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    free = sock.getsockname()[1]  # bound, not listening
    try:
        code, result = run_module(step.main, check_args(python=interpreter(tmp_path), master_port=free, check_port=True), capsys)
    finally:
        sock.close()
    assert code == 0


# --- step=dir through main() ---------------------------------------------------------------------------------------


def bundle(files: dict[str, bytes]) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return base64.b64encode(buf.getvalue()).decode()


def dir_args(tmp_path: Path, **extra) -> dict:
    return {
        "step": "dir",
        "name": "j",
        "dir": str(tmp_path / "jobs" / "j"),
        "checkpoint_dir": str(tmp_path / "ckpt"),
        "shape": {"num_layers": 2, "hidden_size": 64},
        "bundle_b64": bundle({"job.json": b"{}\n", "spec.yml": b"name: j\n"}),
        **extra,
    }


def test_the_model_record_is_sorted_indented_json_readable_by_all(tmp_path, capsys):
    code, result = run_module(step.main, dir_args(tmp_path), capsys)
    assert (code, result["changed"], result["files"]) == (0, True, 2)
    record = tmp_path / "ckpt" / "megaprov-model.json"
    assert record.read_text() == '{\n    "hidden_size": 64,\n    "num_layers": 2\n}\n'
    assert record.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["megaprov-model.json"]


def test_the_record_is_written_beside_the_checkpoints_from_any_working_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir("/proc")  # Ansible's become user may run in a directory it cannot write
    code, result = run_module(step.main, dir_args(tmp_path), capsys)
    assert code == 0 and json.loads((tmp_path / "ckpt" / "megaprov-model.json").read_text()) == {"hidden_size": 64, "num_layers": 2}


def test_an_empty_job_directory_is_not_an_existing_job(tmp_path, capsys):
    (tmp_path / "jobs" / "j").mkdir(parents=True)
    code, result = run_module(step.main, dir_args(tmp_path), capsys)
    assert code == 0 and (tmp_path / "jobs" / "j" / "spec.yml").read_text() == "name: j\n"


def test_another_shape_is_refused_naming_the_checkpoint_directory(tmp_path, capsys):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "megaprov-model.json").write_text('{"hidden_size": 96, "num_layers": 2}')
    code, result = run_module(step.main, dir_args(tmp_path), capsys)
    assert code == 1 and result["usage_error"] is True
    assert result["msg"] == (
        f"checkpoint.directory {tmp_path}/ckpt holds checkpoints of another model (hidden_size=96, num_layers=2; this job has "
        "hidden_size=64, num_layers=2): set checkpoint.directory to a new path or use that model shape"
    )


def test_a_record_over_one_mib_is_read_no_further_and_refused_as_not_json(tmp_path, capsys):
    (tmp_path / "ckpt").mkdir()
    big = json.dumps({"hidden_size": 96, "pad": "x" * (3 << 19)})  # 1.5 MiB of valid JSON
    (tmp_path / "ckpt" / "megaprov-model.json").write_text(big)
    code, result = run_module(step.main, dir_args(tmp_path), capsys)
    assert code == 1 and result["msg"] == (
        f"{tmp_path}/ckpt/megaprov-model.json is not JSON: remove it if the checkpoints are this model's, or set checkpoint.directory to a new path"
    )


def test_a_record_that_cannot_be_read_is_named(tmp_path, capsys):
    (tmp_path / "ckpt" / "megaprov-model.json").mkdir(parents=True)
    code, result = run_module(step.main, dir_args(tmp_path), capsys)
    assert code == 1 and result["msg"] == f"cannot read {tmp_path}/ckpt/megaprov-model.json: Is a directory"


@pytest.mark.parametrize(
    ("b64", "why"),
    [
        ("!" + bundle({"a": b"x"}), "Only base64 data is allowed"),
        ("", "empty file"),
        (base64.b64encode(b"plain text").decode(), "not a gzip file"),
    ],
)
def test_a_bundle_that_is_not_a_gzip_tar_in_base64_is_refused(tmp_path, capsys, b64, why):
    code, result = run_module(step.main, dir_args(tmp_path, bundle_b64=b64), capsys)
    assert code == 1 and result["msg"] == f"the job bundle is not usable: {why}" and not (tmp_path / "jobs").exists()


def test_directories_that_cannot_be_made_name_the_user_and_the_storage_stage(tmp_path, capsys):
    (tmp_path / "jobs").write_text("a file where the jobs directory belongs")
    code, result = run_module(step.main, dir_args(tmp_path, user_var="megaprov_cluster_user"), capsys)
    assert code == 1 and result["msg"] == (
        f"megaprov_cluster_user cannot create {tmp_path}/jobs/j and {tmp_path}/ckpt: Not a directory; the storage stage makes "
        "jobs/ and checkpoints/ of the shared directory that user's (`megaprov bootstrap -i INVENTORY --tags storage`); "
        "a checkpoint.directory elsewhere must be a directory it owns"
    )


# --- step=start through main(), the unit directory rooted in tmp_path ---------------------------------------------------

UNITS = "/etc/systemd/system/"


class Rooted:
    """os as the module sees it, with paths under /etc/systemd/system/ moved into a temporary directory."""

    def __init__(self, root: Path):
        self.root = root

    def at(self, path):
        return str(self.root / path[len(UNITS) :]) if isinstance(path, str) and path.startswith(UNITS) else path

    def chmod(self, path, mode):
        os.chmod(self.at(path), mode)

    def replace(self, src, dst):
        os.replace(self.at(src), self.at(dst))

    def __getattr__(self, name):
        return getattr(os, name)


@pytest.fixture
def units(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "system"
    root.mkdir()
    rooted = Rooted(root)
    monkeypatch.setattr(step, "os", rooted)
    monkeypatch.setattr(step, "open", lambda path, *a, **k: open(rooted.at(path), *a, **k), raising=False)
    return root


def start(content: str | None = "[Service]\nExecStart=/bin/true\n", **extra) -> dict:
    return {"step": "start", "name": "j", "unit": UNIT, "content": content, **extra}


def test_start_writes_the_unit_reloads_and_restarts(units, tmp_path, capsys, monkeypatch):
    tools = bin_dir(tmp_path, monkeypatch, {"systemctl": "exit 0"})
    code, result = run_module(step.main, start(), capsys)
    assert (code, result["changed"]) == (0, True)
    assert (units / UNIT).read_text() == "[Service]\nExecStart=/bin/true\n"
    assert (units / UNIT).stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in units.iterdir()) == [UNIT]
    assert calls(tools, "systemctl") == ["daemon-reload", f"restart {UNIT}"]


def test_a_unit_file_that_differs_is_replaced_and_one_that_matches_is_left(units, tmp_path, capsys, monkeypatch):
    bin_dir(tmp_path, monkeypatch, {"systemctl": "exit 0"})
    (units / UNIT).write_text("old\n")
    code, _result = run_module(step.main, start("new\n"), capsys)
    assert code == 0 and (units / UNIT).read_text() == "new\n"
    inode = (units / UNIT).stat().st_ino
    code, result = run_module(step.main, start("new\n"), capsys)
    assert (code, result["changed"]) == (0, True)  # restarted all the same
    assert (units / UNIT).stat().st_ino == inode


def test_an_empty_unit_is_written_empty(units, tmp_path, capsys, monkeypatch):
    bin_dir(tmp_path, monkeypatch, {"systemctl": "exit 0"})
    code, _result = run_module(step.main, start(""), capsys)
    assert code == 0 and (units / UNIT).read_text() == ""


def test_check_mode_writes_and_restarts_nothing(units, tmp_path, capsys, monkeypatch):
    tools = bin_dir(tmp_path, monkeypatch, {"systemctl": "exit 0"})
    code, result = run_module(step.main, {**start(), "_ansible_check_mode": True}, capsys)
    assert (code, result["changed"]) == (0, True)
    assert list(units.iterdir()) == [] and calls(tools, "systemctl") == []


@pytest.mark.parametrize("unit", ["", "megaprov-job-j.timer", "megaprov-job-j.SERVICE"])
def test_start_refuses_what_is_not_a_service_name(units, capsys, unit):
    code, result = run_module(step.main, start(unit=unit), capsys)
    assert (code, result["msg"]) == (1, f"unit {unit!r} is not a service name")


def test_a_failing_restart_fails_with_systemctls_words(units, tmp_path, capsys, monkeypatch):
    tools = bin_dir(
        tmp_path,
        monkeypatch,
        {"systemctl": f'[ "$1" = restart ] && {{ echo "Job for {UNIT} failed because the control process exited." >&2; exit 1; }}\nexit 0'},
    )
    code, result = run_module(step.main, start(), capsys)
    assert code == 1 and result["msg"] == f"systemctl restart {UNIT} failed: Job for {UNIT} failed because the control process exited."
    assert calls(tools, "systemctl") == ["daemon-reload", f"restart {UNIT}"]


def test_a_failing_reload_stops_before_the_restart_and_says_stdout_when_stderr_is_empty(units, tmp_path, capsys, monkeypatch):
    tools = bin_dir(tmp_path, monkeypatch, {"systemctl": '[ "$1" = daemon-reload ] && { echo "  Access denied  "; exit 4; }\nexit 0'})
    code, result = run_module(step.main, start(), capsys)
    assert code == 1 and result["msg"] == "systemctl daemon-reload failed: Access denied"
    assert calls(tools, "systemctl") == ["daemon-reload"]


def test_a_long_failure_keeps_its_last_500_characters(units, tmp_path, capsys, monkeypatch):
    words = "".join(f"{i % 10}" for i in range(700))
    bin_dir(tmp_path, monkeypatch, {"systemctl": f'[ "$1" = restart ] && {{ echo "{words}" >&2; exit 1; }}\nexit 0'})
    code, result = run_module(step.main, start(), capsys)
    assert code == 1 and result["msg"] == f"systemctl restart {UNIT} failed: {words[-500:]}"


# --- the bundle and the options each step needs ------------------------------------------------------------------


def gz(members: list[tuple[str, bytes | None, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data, mode in members:
            info = tarfile.TarInfo(name)
            info.mode = mode
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_files_are_executable_exactly_when_their_owner_could_run_them(tmp_path):
    data = gz([(".", None, 0o755), ("bin", None, 0o700), ("bin/run", b"#!/bin/sh\n", 0o700), ("bin/other", b"x", 0o611), ("a.yml", b"a: 1\n", 0o600)])
    assert step.unpack(data, str(tmp_path)) == 3
    modes = {p.relative_to(tmp_path).as_posix(): p.stat().st_mode & 0o777 for p in tmp_path.rglob("*")}
    assert modes == {"bin": 0o755, "bin/run": 0o755, "bin/other": 0o644, "a.yml": 0o644}
    assert (tmp_path / "bin" / "run").read_bytes() == b"#!/bin/sh\n"


def test_a_file_named_as_the_job_directory_itself_is_refused():
    with pytest.raises(ValueError) as refused:
        step.members(gz([(".", b"x", 0o644)]))
    assert str(refused.value) == "the job bundle holds '.': only files and directories inside the job directory"


def test_the_bundle_may_unpack_to_its_limit_and_not_a_byte_more(monkeypatch):
    monkeypatch.setattr(step, "BUNDLE_MAX", 2 << 20)
    half = b"\0" * (1 << 20)
    assert len(step.members(gz([("a", half, 0o644), ("b", half, 0o644), ("d", None, 0o755)]))) == 3
    with pytest.raises(ValueError) as refused:
        step.members(gz([("a", half, 0o644), ("b", half + b"\0", 0o644)]))
    assert str(refused.value) == "the job bundle unpacks to more than 2 MiB"


@pytest.mark.parametrize(
    ("args", "missing"),
    [
        ({"step": "check"}, "python, unit, master_port"),
        ({"step": "check", "container": True, "unit": UNIT}, "master_port"),
        ({"step": "dir", "shape": {}}, "dir, checkpoint_dir, bundle_b64"),
        ({"step": "start", "unit": UNIT}, "content"),
    ],
)
def test_each_step_names_the_options_it_lacks(capsys, args, missing):
    code, result = run_module(step.main, {"name": "j", **args}, capsys)
    assert (code, result["msg"]) == (1, f"step={args['step']} needs {missing}")

"""The launch's one-call-per-node module (ansible_collections/megaprov/cluster/plugins/modules/job_step.py): the node
check, the job directory (refusals, safe unpacking, the recorded model shape) and the unit start, on temporary trees
and a fake systemctl."""

import base64
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from tests.conftest import load_module
from tests.helpers import modules

ROOT = Path(__file__).resolve().parents[3]
step = load_module(ROOT / "ansible_collections" / "megaprov" / "cluster" / "plugins" / "modules" / "job_step.py", "job_step")

# /proc/net/tcp as the kernel writes it: a listener on 0.0.0.0:29500 (0x733C) and an established connection on 22.
TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:733C 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0200000A:0016 0300000A:C350 01 00000000:00000000 02:0008D3B5 00000000     0        0 2 4 0 20 4 30 10 -1
"""


def tar_gz(files: dict[str, bytes | None], mode: int = 0o644, kind: bytes = tarfile.REGTYPE) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode, info.type = len(data), mode, kind
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_a_listening_port_is_found_in_the_kernels_table(tmp_path):
    (tmp_path / "tcp").write_text(TCP)
    assert step.listening(29500, (str(tmp_path / "tcp"),))
    assert not step.listening(22, (str(tmp_path / "tcp"),))  # connected, not listening
    assert not step.listening(29501, (str(tmp_path / "tcp"), str(tmp_path / "missing")))


def test_each_reason_a_node_cannot_start_names_its_fix():
    assert step.check_problems("j", "/venv/bin/python", "inactive", 29500, False, "node1") == []
    problems = step.check_problems("j", "", "inactive", 29500, True, "node1")
    assert len(problems) == 2
    assert "launch.python" in problems[0] and "megaprov bootstrap" in problems[0]
    assert "port 29500 (launch.master_port) is in use on node1" in problems[1] and "another job runs there" in problems[1]
    # the job's own unit running holds the port itself (once its torchrun has bound it): one reason, not "another job"
    running = step.check_problems("j", "/p", "active", 29500, True, "node1")
    assert len(running) == 1 and "megaprov job stop j" in running[0] and "another job" not in running[0]
    assert (
        "job j is running on node1 (megaprov-job-j.service is active)"
        in step.check_problems("j", "/p", "active", 1, False, "node1", "megaprov-job-j.service")[0]
    )
    assert step.check_problems("j", "/p", "failed", 1, False, "n") == []  # a failed unit of an earlier attempt restarts


def test_the_bundle_unpacks_files_and_directories_with_their_modes(tmp_path):
    data = tar_gz({"launch": None, "launch/node1.sh": b"#!/bin/sh\n", "spec.yml": b"name: j\n", "logs": None})
    assert step.unpack(data, str(tmp_path)) == 2
    assert (tmp_path / "spec.yml").read_text() == "name: j\n" and (tmp_path / "logs").is_dir()
    assert (tmp_path / "spec.yml").stat().st_mode & 0o777 == 0o644
    exe = tar_gz({"bin/t.py": b"x"}, mode=0o755)
    step.unpack(exe, str(tmp_path))
    assert (tmp_path / "bin" / "t.py").stat().st_mode & 0o777 == 0o755


@pytest.mark.parametrize("name", ["../escape", "/etc/passwd", "a/../../b"])
def test_a_member_outside_the_job_directory_is_refused(name):
    with pytest.raises(ValueError, match="inside the job directory"):
        step.members(tar_gz({name: b"x"}))


def test_links_and_devices_are_refused():
    with pytest.raises(ValueError, match="only files and directories"):
        step.members(tar_gz({"link": b""}, kind=tarfile.SYMTYPE))


def test_the_recorded_shape_must_match():
    shape = {"hidden_size": 64, "num_layers": 2}
    assert step.shape_problem(None, shape, "/c") is None
    assert step.shape_problem(json.dumps(shape, indent=4), shape, "/c") is None
    problem = step.shape_problem(json.dumps({"hidden_size": 96, "num_layers": 2}), shape, "/c")
    assert "holds checkpoints of another model (hidden_size=96, num_layers=2; this job has hidden_size=64" in problem
    assert "not JSON" in step.shape_problem("{", shape, "/c")


def dir_args(tmp_path: Path, **extra) -> dict:
    data = tar_gz({"spec.yml": b"name: j\n", "job.json": b"{}\n", "logs": None})
    return {
        "step": "dir",
        "name": "j",
        "dir": str(tmp_path / "jobs" / "j"),
        "checkpoint_dir": str(tmp_path / "checkpoints" / "j"),
        "shape": {"hidden_size": 64},
        "bundle_b64": base64.b64encode(data).decode(),
        **extra,
    }


def test_the_job_directory_is_made_unpacked_and_the_shape_recorded(tmp_path, capsys):
    code, result = modules.run_module(step.main, dir_args(tmp_path), capsys)
    assert code == 0 and result["changed"] and result["files"] == 2
    assert (tmp_path / "jobs" / "j" / "job.json").is_file()
    assert json.loads((tmp_path / "checkpoints" / "j" / "megaprov-model.json").read_text()) == {"hidden_size": 64}
    assert (tmp_path / "jobs" / "j").stat().st_mode & 0o777 == 0o755
    # the same name again is refused as the user's mistake; with resume it is unpacked again
    code, result = modules.run_module(step.main, dir_args(tmp_path), capsys)
    assert code == 1 and result["usage_error"] and "already exists" in result["msg"] and "--resume j" in result["msg"]
    code, result = modules.run_module(step.main, dir_args(tmp_path, resume=True), capsys)
    assert code == 0 and result["changed"]
    # another model on the same checkpoints: refused before anything is written
    code, result = modules.run_module(step.main, dir_args(tmp_path, name="k", dir=str(tmp_path / "jobs" / "k"), shape={"hidden_size": 96}), capsys)
    assert code == 1 and result["usage_error"] and "another model" in result["msg"]
    assert not (tmp_path / "jobs" / "k").exists()


def test_check_mode_writes_nothing(tmp_path, capsys):
    code, result = modules.run_module(step.main, {**dir_args(tmp_path), "_ansible_check_mode": True}, capsys)
    assert code == 0 and result["changed"] and not (tmp_path / "jobs").exists()


def test_a_directory_that_cannot_be_created_names_the_fix(tmp_path, capsys):
    (tmp_path / "jobs").write_text("a file where the jobs directory belongs")
    code, result = modules.run_module(step.main, dir_args(tmp_path), capsys)
    assert code == 1 and "--tags storage" in result["msg"] and not result.get("usage_error")


def fake_systemctl(tmp_path: Path, monkeypatch, state: str) -> Path:
    log = tmp_path / "systemctl.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(f'#!/bin/sh\necho "$@" >> {log}\n[ "$1" = show ] && echo {state}\nexit 0\n')
    (bin_dir / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return log


@pytest.mark.parametrize(("state", "refused"), [("active", True), ("activating", True), ("inactive", False), ("failed", False)])
def test_the_check_refuses_a_running_job_as_the_users_mistake(tmp_path, capsys, monkeypatch, state, refused):
    fake_systemctl(tmp_path, monkeypatch, state)
    python = tmp_path / "python"
    python.write_text("")
    python.chmod(0o755)
    args = {"step": "check", "name": "j", "python": str(python), "unit": "megaprov-job-j.service", "master_port": 1, "host": "gpu07"}
    code, result = modules.run_module(step.main, args, capsys)
    assert result["unit_state"] == state
    if refused:  # named by its inventory name, not the kernel's host name
        assert code == 1 and result["usage_error"] and "job j is running on gpu07 (megaprov-job-j.service is " in result["msg"]
    else:
        assert code == 0 and not result["changed"]


def test_start_refuses_a_unit_that_is_not_a_service(capsys):
    code, result = modules.run_module(step.main, {"step": "start", "name": "j", "unit": "../../etc/x.service", "content": "x"}, capsys)
    assert code == 1 and "not a service name" in result["msg"]


def test_what_megaprov_train_packs_is_what_the_module_unpacks(tmp_path):
    from megaprov.training import jobs

    staging = tmp_path / "staging"
    (staging / "launch").mkdir(parents=True)
    (staging / "launch" / "node1.sh").write_text("#!/bin/bash\ntorchrun\n")
    (staging / "logs").mkdir()
    (staging / "spec.yml").write_text("name: j\n")
    dest = tmp_path / "job"
    dest.mkdir()
    assert step.unpack(jobs._bundle(staging), str(dest)) == 2
    assert (dest / "launch" / "node1.sh").read_text() == "#!/bin/bash\ntorchrun\n" and (dest / "logs").is_dir()


def test_a_container_job_needs_podman_not_the_training_interpreter():
    assert step.check_problems("j", "/usr/bin/podman", "inactive", 29500, False, "node1", container=True) == []
    (missing,) = step.check_problems("j", "", "inactive", 29500, False, "node1", container=True)
    assert "podman" in missing and "launch.container" in missing and "--tags containers" in missing and "launch.python" not in missing

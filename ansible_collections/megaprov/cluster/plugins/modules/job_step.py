#!/usr/bin/python
# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""One step of a training job's launch in one call per node: check the node, prepare the job directory, or
(re)start the job's unit. `megaprov train` runs these three and nothing else, so a launch costs three round
trips per node instead of one per file and command.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: job_step
short_description: Check a node for a training job, prepare its job directory, or start its unit
description:
  - O(step=check) (as root on every node of the job) fails, with the fix, when the training interpreter is missing,
    when the job's unit is already active, or (with O(check_port)) when the rendezvous port is listening.
    It changes nothing.
  - O(step=dir) (as the cluster user, on one node) refuses an existing job unless O(resume), and checkpoints of
    another model shape; creates the job and checkpoint directories; unpacks the job's files from O(bundle_b64)
    (a gzip tar of regular files and directories, nothing outside the job directory); records the model shape
    next to the checkpoints when none is recorded.
  - O(step=start) (as root on every node) writes the unit file when it differs, reloads systemd, and restarts
    the unit.
  - Check mode reports what would change and changes nothing.
options:
  step:
    description: Which step.
    type: str
    choices: [check, dir, start]
    required: true
  name:
    description: The job's name (for messages).
    type: str
    required: true
  python:
    description: The training interpreter that must be executable (O(step=check) without O(container)).
    type: path
  container:
    description: The job runs in a container image (O(step=check)); podman must be installed instead of O(python) existing.
    type: bool
    default: false
  unit:
    description: The job's systemd unit name (O(step=check) and O(step=start)).
    type: str
  master_port:
    description: The rendezvous port (O(step=check)).
    type: int
  host:
    description: The node's name in the inventory, for messages (the kernel's host name when unset).
    type: str
  check_port:
    description: Refuse the node when O(master_port) is listening (the node where the ranks meet).
    type: bool
    default: false
  dir:
    description: The job directory (O(step=dir)).
    type: path
  checkpoint_dir:
    description: The checkpoint directory (O(step=dir)).
    type: path
  resume:
    description: The job exists and continues (O(step=dir)).
    type: bool
    default: false
  shape:
    description: The model shape recorded with the checkpoints (O(step=dir)).
    type: dict
  bundle_b64:
    description: The job's files, a base64 gzip tar (O(step=dir)).
    type: str
  user_var:
    description: The name of the cluster user, for the message when it cannot create the directories.
    type: str
    default: the cluster user
  content:
    description: The unit file (O(step=start)).
    type: str
author:
  - megaprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Check the node
  megaprov.cluster.job_step:
    step: check
    name: gpt-small
    python: /opt/megaprov/venv/bin/python
    unit: megaprov-job-gpt-small.service
    master_port: 29500
    host: "{{ inventory_hostname }}"
    check_port: "{{ inventory_hostname == megaprov_job.hosts[0] }}"
"""

RETURN = r"""
usage_error:
  description: The failure is the job's own settings (an existing name, another model's checkpoints, a busy node), not the node.
  type: bool
  returned: on such failures
unit_state:
  description: The unit's ActiveState before the step (O(step=check)).
  type: str
  returned: when step is check
files:
  description: How many files were unpacked (O(step=dir)).
  type: int
  returned: when step is dir
"""

import base64
import io
import json
import os
import posixpath
import shutil
import subprocess
import tarfile

from ansible.module_utils.basic import AnsibleModule

BUNDLE_MAX = 64 * 1024 * 1024  # the unpacked job files: spec, plan, launch scripts, the lab trainer
ACTIVE = ("active", "activating", "deactivating", "reloading")


def listening(port: int, tables: tuple[str, ...] = ("/proc/net/tcp", "/proc/net/tcp6")) -> bool:
    """Whether a TCP socket listens on ``port`` (state 0A in the kernel's tables), on any address."""
    for table in tables:
        try:
            with open(table) as handle:
                next(handle, None)
                for line in handle:
                    fields = line.split()
                    if len(fields) > 3 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            continue
    return False


def check_problems(
    name: str, python: str, state: str, port: int, port_busy: bool, host: str, unit: str = "its unit", container: bool = False
) -> list[str]:
    """The reasons this node cannot start the job, each with its fix (empty when it can). Pure. With ``container``,
    ``python`` is podman's path (empty when the node has none)."""
    out = []
    if container and not python:
        out.append(
            f"podman, which runs the job's container (launch.container), is not installed on {host}: run "
            "`megaprov bootstrap --tags containers` with megaprov_containers: true in the inventory"
        )
    elif not python:
        out.append(
            f"the training interpreter (launch.python) does not exist on {host}: run `megaprov bootstrap` "
            "(its python stage builds the training environment) or set launch.python"
        )
    if state in ACTIVE:
        out.append(
            f"job {name} is running on {host} ({unit} is {state}): it cannot start again while it runs; follow it with "
            f"`megaprov job status {name}` and `megaprov job logs {name}`, or stop it first with `megaprov job stop {name}`"
        )
    # With the job's own unit running, the port is its own rendezvous (once torchrun binds it): not another job's.
    if port_busy and state not in ACTIVE:
        out.append(
            f"port {port} (launch.master_port) is in use on {host}, where the ranks meet: another job runs there, not this one "
            "(`megaprov jobs`, `megaprov job stop JOB`) or set launch.master_port to a free port"
        )
    return out


def members(data: bytes) -> list[tarfile.TarInfo]:
    """The bundle's members, refused unless every one is a regular file or directory inside it. Pure."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        infos = tar.getmembers()
    for info in infos:
        path = posixpath.normpath(info.name)
        if not (info.isfile() or info.isdir()) or path.startswith(("/", "..")) or path == "." and not info.isdir():
            raise ValueError(f"the job bundle holds {info.name!r}: only files and directories inside the job directory")
    if sum(i.size for i in infos if i.isfile()) > BUNDLE_MAX:
        raise ValueError(f"the job bundle unpacks to more than {BUNDLE_MAX >> 20} MiB")
    return infos


def unpack(data: bytes, dest: str) -> int:
    """Write the bundle's files under ``dest`` (directories 0755, files 0755 or 0644 as packed); the count of files."""
    infos = members(data)
    count = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for info in infos:
            target = os.path.join(dest, posixpath.normpath(info.name))
            if info.isdir():
                os.makedirs(target, mode=0o755, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            source = tar.extractfile(info)
            if source is None:  # members() let only regular files through
                raise ValueError(f"the job bundle's {info.name!r} has no data")
            tmp = f"{target}.megaprov-tmp"
            with open(tmp, "wb") as out:
                out.write(source.read())
            os.chmod(tmp, 0o755 if info.mode & 0o100 else 0o644)
            os.replace(tmp, target)
            count += 1
    return count


def shape_problem(recorded: str | None, shape: dict, checkpoint_dir: str) -> str | None:
    """The refusal when checkpoints of another model shape are recorded in ``checkpoint_dir``. Pure."""
    if not recorded or not recorded.strip():
        return None
    try:
        was = json.loads(recorded)
    except ValueError:
        return f"{checkpoint_dir}/megaprov-model.json is not JSON: remove it if the checkpoints are this model's, or set checkpoint.directory to a new path"
    if was == shape:
        return None

    def text(d: dict) -> str:
        return ", ".join(f"{k}={d[k]}" for k in sorted(d)) if isinstance(d, dict) else str(d)

    return (
        f"checkpoint.directory {checkpoint_dir} holds checkpoints of another model ({text(was)}; this job has {text(shape)}): "
        "set checkpoint.directory to a new path or use that model shape"
    )


def step_check(module: AnsibleModule) -> None:
    p = module.params
    runner = (shutil.which("podman") or "") if p["container"] else p["python"]
    python_ok = bool(runner) and os.access(runner, os.X_OK)
    try:
        proc = subprocess.run(["systemctl", "show", "-p", "ActiveState", "--value", p["unit"]], capture_output=True, text=True, check=False)
        state = proc.stdout.strip() or "unknown"
    except OSError as exc:
        module.fail_json(msg=f"cannot ask systemd for {p['unit']}: {exc.strerror}")
    busy = bool(p["check_port"]) and listening(int(p["master_port"] or 0))
    host = p["host"] or os.uname().nodename
    problems = check_problems(p["name"], runner if python_ok else "", state, int(p["master_port"] or 0), busy, host, p["unit"], p["container"])
    if problems:
        module.fail_json(msg="; ".join(problems), unit_state=state, usage_error=True)
    module.exit_json(changed=False, unit_state=state)


def step_dir(module: AnsibleModule) -> None:
    p = module.params
    job_dir, ckpt = p["dir"], p["checkpoint_dir"]
    if not p["resume"] and os.path.exists(os.path.join(job_dir, "job.json")):
        module.fail_json(
            msg=f"job {p['name']} already exists in {job_dir}: pass --name NEW for a new job, or `megaprov train --resume {p['name']}` to continue it",
            usage_error=True,
        )
    try:
        with open(os.path.join(ckpt, "megaprov-model.json")) as handle:
            recorded: str | None = handle.read(1 << 20)
    except FileNotFoundError:
        recorded = None
    except OSError as exc:
        module.fail_json(msg=f"cannot read {ckpt}/megaprov-model.json: {exc.strerror}")
    problem = shape_problem(recorded, p["shape"] or {}, ckpt)
    if problem:
        module.fail_json(msg=problem, usage_error=True)
    try:
        data = base64.b64decode(p["bundle_b64"] or "", validate=True)
        members(data)
    except (ValueError, tarfile.TarError, EOFError, OSError) as exc:
        module.fail_json(msg=f"the job bundle is not usable: {exc}")
    if module.check_mode:
        module.exit_json(changed=True)
    try:
        for path in (job_dir, ckpt):
            if not os.path.isdir(path):
                os.makedirs(path, mode=0o755)
                os.chmod(path, 0o755)  # whatever the user's umask
    except OSError as exc:
        module.fail_json(
            msg=f"{p['user_var']} cannot create {job_dir} and {ckpt}: {exc.strerror}; the storage stage makes jobs/ and checkpoints/ of the "
            "shared directory that user's (`megaprov bootstrap -i INVENTORY --tags storage`); a checkpoint.directory elsewhere must be a "
            "directory it owns"
        )
    files = unpack(data, job_dir)
    if recorded is None:
        tmp = os.path.join(ckpt, ".megaprov-model.json.tmp")
        with open(tmp, "w") as out:
            out.write(json.dumps(p["shape"] or {}, indent=4, sort_keys=True) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, os.path.join(ckpt, "megaprov-model.json"))
    module.exit_json(changed=True, files=files)


def step_start(module: AnsibleModule) -> None:
    p = module.params
    unit, content = p["unit"], p["content"] or ""
    if not unit or "/" in unit or not unit.endswith(".service"):
        module.fail_json(msg=f"unit {unit!r} is not a service name")
    path = f"/etc/systemd/system/{unit}"
    try:
        with open(path) as handle:
            same = handle.read() == content
    except FileNotFoundError:
        same = False
    if module.check_mode:
        module.exit_json(changed=True)
    if not same:
        tmp = f"{path}.megaprov-tmp"
        with open(tmp, "w") as out:
            out.write(content)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    for argv in (["systemctl", "daemon-reload"], ["systemctl", "restart", unit]):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            module.fail_json(msg=f"{' '.join(argv)} failed: {(proc.stderr or proc.stdout).strip()[-500:]}")
    module.exit_json(changed=True)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "step": {"type": "str", "choices": ["check", "dir", "start"], "required": True},
            "name": {"type": "str", "required": True},
            "python": {"type": "path"},
            "container": {"type": "bool", "default": False},
            "unit": {"type": "str"},
            "master_port": {"type": "int"},
            "host": {"type": "str"},
            "check_port": {"type": "bool", "default": False},
            "dir": {"type": "path"},
            "checkpoint_dir": {"type": "path"},
            "resume": {"type": "bool", "default": False},
            "shape": {"type": "dict"},
            "bundle_b64": {"type": "str"},
            "user_var": {"type": "str", "default": "the cluster user"},
            "content": {"type": "str"},
        },
        supports_check_mode=True,
    )
    wanted = {
        "check": ("unit", "master_port") if module.params["container"] else ("python", "unit", "master_port"),
        "dir": ("dir", "checkpoint_dir", "shape", "bundle_b64"),
        "start": ("unit", "content"),
    }
    missing = [name for name in wanted[module.params["step"]] if module.params[name] is None]
    if missing:
        module.fail_json(msg=f"step={module.params['step']} needs {', '.join(missing)}")
    {"check": step_check, "dir": step_dir, "start": step_start}[module.params["step"]](module)


if __name__ == "__main__":
    main()

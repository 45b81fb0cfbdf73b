"""Job directories on a controller that does not mount the shared directory: read and written through the head.

Where this machine sees the shared directory (the head itself, a login node, ``megaprov_controller_shared_dir``),
megaprov reads the job directory there. Elsewhere (an operator's laptop) it keeps a mirror of ``<shared>/jobs`` under
its state directory and keeps it current through one SSH connection to the head, with the inventory's connection
settings: :mod:`megaprov.training.jobdir_helper` runs there as the cluster user (files on the shared directory are
the cluster user's), answers scans and reads of a job's files (growing logs are read from where the mirror ends), and
writes what the controller writes (job.json's state, the report). Everything else in megaprov reads the mirror as it
would read the mount, so the output is the same either way.
"""

from __future__ import annotations

import base64
import hashlib
import json
import select
import shlex
import subprocess
import zlib
from pathlib import Path
from typing import Any

from megaprov import values
from megaprov.cluster import inventory as inv
from megaprov.errors import HostsUnreachable, RunFailed

HELPER = Path(__file__).with_name("jobdir_helper.py")
ORIGIN = "origin.json"  # in a mirror's root: the inventory and shared directory it mirrors
TIMEOUT = 60.0  # seconds one answer of the head may take
MAX_LISTED = 4096  # entries of one scan looked at (the helper lists at most MAX_FILES)
MAX_FILE = 256 * 1024 * 1024  # a mirrored file larger than this is not mirrored (logs are bounded by the nodes' log size)
CHUNK = 4 * 1024 * 1024


def mirror_root(found: inv.Inventory, shared: str) -> Path:
    """The mirror of ``<shared>/jobs`` of this cluster (one per inventory and shared directory)."""
    from megaprov.paths import state_dir

    key = hashlib.sha256(f"{found.path.resolve()}\0{shared}".encode()).hexdigest()[:16]
    root = state_dir() / "remote" / key
    (root / "jobs").mkdir(parents=True, exist_ok=True, mode=0o700)
    origin = {"inventory": str(found.path.resolve()), "shared_dir": shared}
    if not (root / ORIGIN).is_file() or json.loads((root / ORIGIN).read_text()) != origin:
        (root / ORIGIN).write_text(json.dumps(origin) + "\n")
    return root


def _mirror_of(path: Path) -> Path | None:
    """The mirror root that ``path`` (a job's local directory) lies in, or None: a local mount."""
    for parent in (path, *path.parents):
        if (parent / ORIGIN).is_file() and (parent / "jobs").is_dir():
            return parent
    return None


def is_remote(local_dir: Path) -> bool:
    return _mirror_of(local_dir) is not None


def helper_command(python: str, root: str) -> list[str]:
    """The argv that runs the helper program (jobdir_helper.py) with ``python`` on the head, its jobs directory
    ``root`` as its argument. The program travels inside the command line, compressed: one argument of Linux's
    at most 128 KiB (MAX_ARG_STRLEN) holds it whatever it grows to, and nothing is written on the head first."""
    packed = base64.b64encode(zlib.compress(HELPER.read_bytes(), 9)).decode("ascii")
    return [python, "-c", f"import base64,zlib;exec(zlib.decompress(base64.b64decode('{packed}')))", root]


class Channel:
    """One SSH connection to the head running the helper as the cluster user; one JSON request and answer per line."""

    def __init__(self, found: inv.Inventory, shared: str) -> None:
        from megaprov.cluster.sshcmd import ssh_argv

        head = found.head
        user = str(found.host_var(found.hosts_of("gpu_nodes")[0], "megaprov_cluster_user", "megaprov"))
        values.posix_user(user, "megaprov_cluster_user")
        python = str(found.host_var(head, "ansible_python_interpreter", "") or "python3")
        if "{{" in python or python.startswith("auto"):  # a template, or Ansible's own discovery (auto, auto_silent, ...)
            python = "python3"
        login = str(found.host_var(head, "ansible_user", "") or "")
        command = helper_command(python, f"{shared.rstrip('/')}/jobs")
        if login == "root":
            command = ["runuser", "-u", user, "--", *command]
        elif login != user:
            command = ["sudo", "-n", "-u", user, "--", *command]
        self.head = head
        self.argv = [*ssh_argv(found, head), shlex.join(command)]
        self.proc = subprocess.Popen(  # noqa: S603 (argv, no local shell; the remote command is quoted)
            self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self._line()  # {"ready": true}

    def _line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], TIMEOUT)
        line = self.proc.stdout.readline() if ready else b""
        if not line:
            self.proc.kill()
            said = self.proc.stderr.read(4000).decode(errors="replace").strip() if self.proc.stderr else ""
            raise HostsUnreachable(
                f"the job directory cannot be read through the head {self.head}"
                + (f": {values.printable(said.splitlines()[-1])[:300]}" if said else " (no answer)"),
                "check that the head answers SSH with the inventory's settings and that the cluster user may run python3 there",
            )
        doc = json.loads(line)
        if not isinstance(doc, dict):
            raise RunFailed(f"the head {self.head} answered {line[:100]!r}", "see the head's python3")
        return doc

    def call(self, **request: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # _line says why
        return self._line()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


_CHANNELS: dict[Path, Channel] = {}


def channel(root: Path) -> Channel:
    """The open channel of a mirror (one per process), opened on first use from the mirror's origin."""
    if root not in _CHANNELS or _CHANNELS[root].proc.poll() is not None:
        from megaprov import paths

        origin = json.loads((root / ORIGIN).read_text())
        found = inv.load(origin["inventory"], paths.roles_dir(), paths.cluster_defaults())
        _CHANNELS[root] = Channel(found, str(origin["shared_dir"]))
    return _CHANNELS[root]


def list_jobs(root: Path) -> list[str]:
    answer = channel(root).call(op="list")
    if not answer.get("ok"):
        if answer.get("missing"):
            return []
        raise RunFailed(f"the head cannot list the jobs: {answer.get('error')}", "check the shared directory on the head")
    return [str(n) for n in answer.get("jobs", []) if isinstance(n, str)]


def _state(local: Path) -> dict[str, list[int]]:
    path = local / ".mirror.json"
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


FOLLOWED = ("logs/", "launch/")  # what the nodes write while a job runs (the controller writes the rest)


def refresh(local_dir: Path, only: tuple[str, ...] = ()) -> bool:
    """Bring a job's mirror up to the head's files: new files whole, grown files from where the mirror ends (logs),
    changed ones again; with ``only``, the files under those prefixes. Returns whether anything changed; a job the
    head does not have leaves the mirror as it is."""
    root = _mirror_of(local_dir)
    if root is None:
        return False
    name = local_dir.name
    values.job_name(name, "job name")
    conn = channel(root)
    answer = conn.call(op="scan", path=name)
    if not answer.get("ok"):
        if answer.get("missing"):
            return False
        raise RunFailed(f"the head cannot list job {name}: {answer.get('error')}", "check the shared directory on the head")
    known = _state(local_dir)
    changed = False
    local_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    listed = answer.get("files")
    for item in listed[:MAX_LISTED] if isinstance(listed, list) else []:
        if not isinstance(item, list) or len(item) != 3:
            continue
        rel, size, mtime = item
        if not (isinstance(rel, str) and isinstance(size, int) and isinstance(mtime, int)) or not 0 <= size <= MAX_FILE:
            continue
        if ".." in rel.split("/") or rel.startswith("/") or "\0" in rel:
            continue
        if only and not rel.startswith(only):
            continue
        target = local_dir / rel
        have = known.get(rel)
        if have == [size, mtime] and target.is_file():
            continue
        grown = rel.startswith("logs/") and target.is_file() and have is not None and size >= target.stat().st_size
        offset = target.stat().st_size if grown else 0
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with target.open("ab" if grown else "wb") as out:
            while offset < size:
                part = conn.call(op="read", path=f"{name}/{rel}", offset=offset, length=min(CHUNK, size - offset))
                if not part.get("ok"):
                    break
                data = base64.b64decode(part["data"])
                if not data:
                    break
                out.write(data)
                offset += len(data)
        known[rel] = [size, mtime]
        changed = True
    if changed:
        (local_dir / ".mirror.json").write_text(json.dumps(known))
    return changed


def push(local_dir: Path, *names: str) -> None:
    """Write the controller's files of a job (job.json, the report) to the head's job directory, as the cluster user."""
    root = _mirror_of(local_dir)
    if root is None:
        return
    conn = channel(root)
    for rel in names:
        path = local_dir / rel
        if not path.is_file():
            continue
        answer = conn.call(op="write", path=f"{local_dir.name}/{rel}", data=base64.b64encode(path.read_bytes()).decode())
        if not answer.get("ok"):
            raise RunFailed(f"the head did not take {local_dir.name}/{rel}: {answer.get('error')}", "check the shared directory on the head")


def event_lines(job: Any, relative: str, what: str, prefix: str) -> list[str]:
    """A launcher's own lines about the job from ``relative`` in its directory (the cluster user can write the file:
    read bounded and from its end, a link or FIFO refused), those that start with ``prefix``, shown as text."""
    from megaprov import untrusted
    from megaprov.errors import UsageError

    try:
        text = untrusted.read_text(job.local_dir / relative, what, 1 << 20, untrusted.job_root(job.local_dir), tail=True, strict=False)
    except UsageError:
        return []
    return [values.printable(line.removeprefix("megaprov: ")) for line in text.splitlines() if line.startswith(prefix)]

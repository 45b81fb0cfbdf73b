#!/usr/bin/python
# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Incremental proofs: whether a slow verification already passed on this node with the same inputs."""

from __future__ import annotations

DOCUMENTATION = r"""
module: proof
short_description: Remember a passing verification and the digest of what it depended on
description:
  - "A slow verification (all SSH pairs, the shared directory's writers x readers, the compute rate, munge across
    nodes, the Slurm step, NCCL, the training environment's checks) proves nothing new on a node where nothing it
    depends on changed. O(state=query) digests the inputs on the node (O(inputs) values, the content of files and
    the listing of directories in O(paths), the mount table line of each of O(mounts), the node's shape with
    O(node_shape)) and says whether a passing result with the same digests is recorded under O(store)."
  - O(state=record) keeps a passing result with the digests a query returned (the inputs as they were when the
    verification ran), as C(<store>/<name>.json), 0600 root in a 0700 directory.
  - O(force) (C(megaprov bootstrap --verify)) makes every query answer that the proof must run again.
  - The record is a cache of evidence, not configuration, so it never reports changed (as a check's scratch file);
    in check mode nothing is written.
options:
  name:
    description: The proof's name, the file name of its record (letters, digits, C(.), C(_), C(-)).
    type: str
    required: true
  state:
    description: C(query) to ask, C(record) to keep a passing result.
    type: str
    choices: [query, record]
    default: query
  inputs:
    description: Values the proof depends on (compared by their JSON digest).
    type: dict
    default: {}
  paths:
    description:
      - Files (content) and directories (names, types and file sizes one level down) the proof depends on; a
        missing path is an input too. Shell-style patterns are expanded, sorted (a venv's C(lib/python3*/site-packages)).
    type: list
    elements: str
    default: []
  mounts:
    description: Mount points whose mount table line (source, type, options) the proof depends on.
    type: list
    elements: str
    default: []
  node_shape:
    description: Depend on the node's shape (CPU model and count, memory in GiB, NVIDIA PCI devices, kernel release).
    type: bool
    default: false
  force:
    description: Answer that the proof must run, whatever is recorded (C(megaprov bootstrap --verify)).
    type: bool
    default: false
  digests:
    description: With O(state=record), the digests the query returned before the verification ran.
    type: dict
    default: {}
  rehash:
    description:
      - "With O(state=record), paths among the query's O(paths) that the verification itself writes (the fact file a
        measurement stores), digested again as they are after it."
    type: list
    elements: str
    default: []
  result:
    description: With O(state=record), the verification's passing result, returned by later queries.
    type: dict
    default: {}
  action:
    description: With O(state=record), the module whose result O(result) is (the report shows a cached result as that module's).
    type: str
    default: ""
  store:
    description: Directory of the records.
    type: path
    default: /var/lib/megaprov/proofs
author:
  - megaprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Look for a recorded proof of this node's SSH pairs
  megaprov.cluster.proof:
    name: ssh_mesh
    inputs:
      peers: {node2: node2, node3: node3}
    paths: [/etc/ssh/ssh_known_hosts, /home/megaprov/.ssh]
    force: false
  register: ssh_proof

- name: Record the passing check
  megaprov.cluster.proof:
    name: ssh_mesh
    state: record
    digests: "{{ ssh_proof.digests }}"
    result: "{{ ssh_check_result }}"
    action: megaprov.cluster.ssh_check
"""

RETURN = r"""
name:
  description: The proof's name.
  type: str
  returned: always
recorded:
  description: True for O(state=record) (this task kept a result), false for a query.
  type: bool
  returned: always
valid:
  description: A passing result with the same digests is recorded and O(force) is off (query).
  type: bool
  returned: always
reason:
  description: "Why: C(inputs unchanged), C(no record), C(inputs changed: <which>), C(forced (--verify))."
  type: str
  returned: always
digests:
  description: The digest of each input (query), to pass to the record.
  type: dict
  returned: always
verified_at:
  description: When the recorded proof passed (UTC, ISO 8601); empty without a record.
  type: str
  returned: always
result:
  description: The recorded result when valid, else empty.
  type: dict
  returned: always
action:
  description: The module the recorded result came from.
  type: str
  returned: always
summary:
  description: One line for the report.
  type: str
  returned: always
"""

import glob
import hashlib
import json
import os
import platform
import re
import time

from ansible.module_utils.basic import AnsibleModule

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
DROPPED = ("invocation", "changed", "failed", "skipped", "diff", "ansible_facts", "warnings", "deprecations")


def digest(value):
    """Pure: a stable digest of a JSON value (keys sorted)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def mount_line(mounts_text, mount_point):
    """Pure: 'source type options' of the last mount on mount_point in /proc/self/mounts text, else 'not mounted'."""
    target = mount_point.rstrip("/") or "/"
    found = "not mounted"
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1].replace("\\040", " ") == target:
            found = " ".join((fields[0], fields[2], fields[3]))
    return found


def shape(cpuinfo, cpus, meminfo, nvidia, release):
    """Pure: what the node is made of, as a dict (none of it moves while the node runs)."""
    models = sorted({l.split(":", 1)[1].strip() for l in cpuinfo.splitlines() if l.startswith("model name")})
    mem = next((l.split()[1] for l in meminfo.splitlines() if l.startswith("MemTotal:")), "0")
    return {"cpu_models": models, "cpus": cpus, "memory_gib": int(mem) // (1024 * 1024), "nvidia_pci": sorted(nvidia), "kernel": release}


def compare(record, digests, force):
    """Pure: (valid, reason) for a record (or None) against this run's digests."""
    if force:
        return False, "forced (--verify)"
    if not isinstance(record, dict) or not record.get("passed"):
        return False, "no record"
    held = record.get("digests") if isinstance(record.get("digests"), dict) else {}
    changed = sorted(k for k in set(held) | set(digests) if held.get(k) != digests.get(k))
    if changed:
        return False, "inputs changed: " + ", ".join(changed)
    return True, "inputs unchanged"


def keep(result):
    """Pure: the part of a registered result worth recording (Ansible's own keys dropped)."""
    return {k: v for k, v in (result or {}).items() if k not in DROPPED and not k.startswith("_ansible")}


def summary(valid, reason, verified_at):
    """Pure: the report's words for a proof."""
    if valid:
        return "verified at %s, inputs unchanged; --verify re-proves" % verified_at
    return "proved this run (%s)" % reason


def path_digest(path):
    """sha256 of a file's content, of a directory's listing (names, types, file sizes), 'absent', or 'unreadable'
    (root squashed on a shared directory: the record then holds until the path becomes readable or goes)."""
    try:
        return _path_digest(path)
    except OSError as exc:
        return "unreadable: %s" % (exc.strerror or exc.__class__.__name__)


def _path_digest(path):
    if os.path.isdir(path):
        rows = []
        for entry in sorted(os.scandir(path), key=lambda e: e.name):
            kind = "d" if entry.is_dir(follow_symlinks=False) else "l" if entry.is_symlink() else "f"
            size = entry.stat(follow_symlinks=False).st_size if kind == "f" else 0
            rows.append("%s %s %d" % (kind, entry.name, size))
        return digest(rows)
    if os.path.isfile(path):
        sha = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                sha.update(block)
        return sha.hexdigest()
    return "absent"


def read(path, default=""):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return default


def node_shape():
    nvidia = []
    for dev in sorted(glob.glob("/sys/bus/pci/devices/*")):
        if read(os.path.join(dev, "vendor")).strip() == "0x10de":
            nvidia.append("%s %s" % (os.path.basename(dev), read(os.path.join(dev, "device")).strip()))
    return shape(read("/proc/cpuinfo"), len(os.sched_getaffinity(0)), read("/proc/meminfo"), nvidia, platform.release())


def paths_digests(patterns):
    out = {}
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        for path in matches or [pattern]:
            out["path " + path] = path_digest(path)
    return out


def input_digests(params):
    out = {"inputs": digest(params["inputs"])}
    out.update(paths_digests(params["paths"]))
    if params["mounts"]:
        text = read("/proc/self/mounts")
        for point in params["mounts"]:
            out["mount " + point] = digest(mount_line(text, point))
    if params["node_shape"]:
        out["node shape"] = digest(node_shape())
    return out


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["query", "record"], "default": "query"},
            "inputs": {"type": "dict", "default": {}},
            "paths": {"type": "list", "elements": "str", "default": []},
            "mounts": {"type": "list", "elements": "str", "default": []},
            "node_shape": {"type": "bool", "default": False},
            "force": {"type": "bool", "default": False},
            "digests": {"type": "dict", "default": {}},
            "rehash": {"type": "list", "elements": "str", "default": []},
            "result": {"type": "dict", "default": {}},
            "action": {"type": "str", "default": ""},
            "store": {"type": "path", "default": "/var/lib/megaprov/proofs"},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not NAME.match(p["name"]):
        module.fail_json(msg="name=%r: use letters, digits, '.', '_' and '-' (at most 64)" % p["name"])
    path = os.path.join(p["store"], p["name"] + ".json")
    if p["state"] == "record":
        if not p["digests"]:
            module.fail_json(msg="state=record needs digests: pass the query's digests (register it, then digests: \"{{ q.digests }}\")")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        digests = dict(p["digests"], **paths_digests(p["rehash"]))
        doc = {"version": 1, "name": p["name"], "passed": True, "verified_at": now, "digests": digests,
               "action": p["action"], "result": keep(p["result"])}
        if not module.check_mode:
            os.makedirs(p["store"], mode=0o700, exist_ok=True)
            os.chmod(p["store"], 0o700)
            tmp = "%s.%d" % (path, os.getpid())
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                json.dump(doc, handle, sort_keys=True)
            os.replace(tmp, path)
        module.exit_json(changed=False, name=p["name"], recorded=True, valid=True, reason="recorded", digests=digests, verified_at=now, result={},
                         action=p["action"], summary="recorded at %s" % now)
    digests = input_digests(p)
    try:
        record = json.loads(read(path, "null"))
    except ValueError:
        record = None
    valid, reason = compare(record, digests, p["force"])
    verified_at = record.get("verified_at", "") if isinstance(record, dict) else ""
    module.exit_json(changed=False, name=p["name"], recorded=False, valid=valid, reason=reason, digests=digests, verified_at=verified_at,
                     result=record.get("result", {}) if valid else {}, action=record.get("action", "") if isinstance(record, dict) else "",
                     summary=summary(valid, reason, verified_at))


if __name__ == "__main__":
    main()

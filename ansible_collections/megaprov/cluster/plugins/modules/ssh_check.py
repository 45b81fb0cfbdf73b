#!/usr/bin/python
# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Check that this node reaches each peer over SSH by name, without any prompt."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ssh_check
short_description: SSH from this node to each peer, non-interactively, with strict host key checking
description:
  - Runs C(ssh -o BatchMode=yes -o StrictHostKeyChecking=yes PEER hostname) to every peer in parallel as the
    calling user and compares the answer with the peer's expected hostname. Read-only.
options:
  source:
    description: Inventory name of this node (for the report).
    type: str
    required: true
  peers:
    description: Peer name to the hostname it must answer with.
    type: dict
    required: true
  timeout:
    description: Seconds each connection may take.
    type: int
    default: 10
  left_out:
    description: Mesh hosts left out of the check because Ansible found them unreachable; returned as given, for the report.
    type: list
    elements: str
    default: []
author:
  - megaprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Check SSH from this node to every other node of the mesh
  megaprov.cluster.ssh_check:
    source: "{{ inventory_hostname }}"
    peers:
      node2: node2.cluster.example
      node3: node3.cluster.example
    timeout: 10
  register: mesh
"""

RETURN = r"""
pairs:
  description: "One {source, peer, ok, seconds, line} per peer."
  type: list
  elements: dict
  returned: always
left_out:
  description: The hosts that were not tried because they are unreachable.
  type: list
  elements: str
  returned: always
"""

import time
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule


def ssh_argv(peer, timeout):
    return ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=%d" % timeout,
            "-o", "LogLevel=ERROR", peer, "hostname"]


def classify(source, peer, expected, rc, out, err, seconds):
    """Pure: the report row of one pair."""
    answer = out.strip()
    if rc == 0 and (not expected or answer == expected):
        return {"source": source, "peer": peer, "ok": True, "seconds": seconds, "line": "%s -> %s: ok (%.2fs)" % (source, peer, seconds)}
    if rc == 0:
        reason = "answered as %r, expected %r" % (answer, expected)
    else:
        lines = [l for l in err.strip().splitlines() if l.strip()]
        reason = lines[-1] if lines else "ssh exited %d" % rc
    return {"source": source, "peer": peer, "ok": False, "seconds": seconds, "line": "%s -> %s: %s" % (source, peer, reason)}


def to_probe(peers, left_out):
    """Pure: the (peer, expected hostname) pairs to try, in order, never one with a host left out as unreachable."""
    skip = set(left_out)
    return sorted((peer, expected) for peer, expected in peers.items() if peer not in skip)


def main():
    module = AnsibleModule(
        argument_spec={"source": {"type": "str", "required": True}, "peers": {"type": "dict", "required": True},
                       "timeout": {"type": "int", "default": 10},
                       "left_out": {"type": "list", "elements": "str", "default": []}},
        supports_check_mode=True,
    )
    source, timeout = module.params["source"], module.params["timeout"]

    def probe(item):
        peer, expected = item
        start = time.monotonic()
        rc, out, err = module.run_command(ssh_argv(peer, timeout))
        return classify(source, peer, expected, rc, out, err, round(time.monotonic() - start, 2))

    left_out = sorted(set(module.params["left_out"]))
    peers = to_probe(module.params["peers"], left_out)
    with ThreadPoolExecutor(max_workers=min(32, max(1, len(peers)))) as pool:
        pairs = list(pool.map(probe, peers))
    module.exit_json(changed=False, pairs=pairs, left_out=left_out)


if __name__ == "__main__":
    main()

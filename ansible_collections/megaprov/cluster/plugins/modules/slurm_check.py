#!/usr/bin/python
# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""On the Slurm controller: wait until every node of the cluster is up in sinfo, bring back nodes that only lost
contact, run one step on every node as the cluster user, and compare the Gres each node registered with the
GPUs it was configured with."""

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_check
short_description: Every Slurm node up, a step on all of them, and their Gres as configured
description:
  - Polls C(sinfo) until every node in O(nodes) is up (idle, or running jobs) or O(timeout) passes.
  - A node that is down or not responding only because slurmctld lost contact with it (reason "Not responding",
    or a node that came back with a new address) gets one C(scontrol reconfigure) and C(scontrol update
    state=resume); a node drained for another reason (the health check, an operator) is reported with its reason.
  - Runs C(srun -N<all> hostname) as O(user) and checks that every node answered (not in check mode, and not
    while a node runs jobs, for which the step would wait). A step whose tasks did not launch in time (srun says
    "timeout waiting for task launch" or "Socket timed out" when slurmd just restarted or the node is loaded) is
    tried again, up to 3 times; any other failure fails at once.
  - Compares the Gres of each node (C(scontrol show node)) with O(gres).
  - Resuming a node is the only change it can make (reported as changed); in check mode nothing is resumed.
options:
  nodes:
    description: Slurm node names that must be up.
    type: list
    elements: str
    required: true
  gres:
    description: Node name to the Gres it must register (for example C(gpu:h100:8)); "" for none.
    type: dict
    default: {}
  user:
    description: Account that runs the test step (the cluster user).
    type: str
    required: true
  timeout:
    description: Seconds to wait for every node to come up.
    type: int
    default: 120
  step:
    description: Run the srun step.
    type: bool
    default: true
author:
  - megaprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Check the Slurm cluster
  megaprov.cluster.slurm_check:
    nodes: [node1, node2]
    gres: {node1: "gpu:2", node2: "gpu:2"}
    user: megaprov
"""

RETURN = r"""
states:
  description: Node name to its sinfo state (and reason, when drained or down) at the end.
  returned: always
  type: dict
summary:
  description: One line for the bootstrap report.
  returned: success
  type: str
resumed:
  description: Nodes brought back after they lost contact.
  returned: always
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule

UP = ("idle", "mixed", "allocated", "completing")
# srun's words for a step whose tasks did not launch in time: slurmd answered late, not a misconfiguration
LAUNCH_TIMEOUTS = ("timeout waiting for task launch", "Socket timed out", "aborted before step completely launched")
STEP_ATTEMPTS = 3
LOST = ("not responding", "node unexpectedly rebooted")


def parse_sinfo(text):
    """``sinfo -h -N -o '%N|%T|%E'`` lines -> {node: (state, reason)}; a node in several partitions appears once."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) == 3 and parts[0]:
            out[parts[0]] = (parts[1].lower(), "" if parts[2] == "none" else parts[2])
    return out


def is_up(state):
    """sinfo's %T state word: a trailing * means not responding, ~ powered off, # powering up, ! powering down."""
    return state in UP


def parse_gres(text):
    """``scontrol show node -o`` -> {node: Gres}, Gres as configured ("" for none; "(null)" is none)."""
    out = {}
    for line in text.splitlines():
        fields = dict(word.partition("=")[::2] for word in line.split() if "=" in word)
        if "NodeName" in fields:
            # "gpu:h100:8(S:0-1)" -> "gpu:h100:8"; Slurm's "(null)", an empty value or no Gres word at all -> ""
            out[fields["NodeName"]] = fields.get("Gres", "").split("(")[0]
    return out


def main():
    module = AnsibleModule(
        argument_spec={
            "nodes": {"type": "list", "elements": "str", "required": True},
            "gres": {"type": "dict", "default": {}},
            "user": {"type": "str", "required": True},
            "timeout": {"type": "int", "default": 120},
            "step": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    nodes, timeout = module.params["nodes"], module.params["timeout"]
    deadline = time.monotonic() + timeout
    resumed, reconfigured, states = [], False, {}
    while True:
        rc, out, err = module.run_command(["sinfo", "-h", "-N", "-o", "%N|%T|%E"])
        if rc != 0:
            module.fail_json(msg="sinfo failed (%d): %s" % (rc, err.strip()[-300:]), resumed=resumed, states={})
        found = parse_sinfo(out)
        states = {n: found.get(n, ("absent", "")) for n in nodes}
        if all(is_up(s) for s, _r in states.values()):
            break
        lost = [n for n, (s, r) in states.items() if not is_up(s) and (s.endswith("*") or any(x in r.lower() for x in LOST) or s == "unknown")]
        if lost and not reconfigured and not module.check_mode:
            # A node that came back (or came back at a new address) stays "not responding" until slurmctld re-reads it.
            module.run_command(["scontrol", "reconfigure"])
            reconfigured = True
        for n in lost:
            state, reason = states[n]
            if not module.check_mode and n not in resumed and state.rstrip("*~#!%$@^-") in ("down", "drained", "draining") and reason:
                if any(x in reason.lower() for x in LOST):
                    module.run_command(["scontrol", "update", "nodename=" + n, "state=resume"])
                    resumed.append(n)
        if time.monotonic() > deadline:
            bad = ["%s %s%s" % (n, s, " (%s)" % r if r else "") for n, (s, r) in sorted(states.items()) if not is_up(s)]
            module.fail_json(
                msg="Slurm nodes not up after %d s: %s; see `sinfo -R` and /var/log/slurm/slurmd.log on them" % (timeout, "; ".join(bad)),
                states={n: " ".join(filter(None, v)) for n, v in states.items()},
                resumed=resumed,
            )
        time.sleep(2)
    rc, out, err = module.run_command(["scontrol", "show", "node", "-o"])
    if rc != 0:
        module.fail_json(msg="scontrol show node failed: %s" % err.strip()[-300:])
    registered = parse_gres(out)
    wrong = ["%s has Gres=%s, configured %s" % (n, registered.get(n, "?") or "none", want or "none")
             for n, want in sorted(module.params["gres"].items()) if registered.get(n, "") != want]
    if wrong:
        module.fail_json(msg="Slurm Gres differ from the GPU facts: " + "; ".join(wrong), states={n: v[0] for n, v in states.items()})
    step = ""
    busy = [n for n in nodes if states[n][0] in ("mixed", "allocated", "completing")]
    if module.params["step"] and module.check_mode:
        step = "; no srun step in check mode"
    elif module.params["step"] and busy:  # a re-run on a cluster at work: the step would wait for the jobs
        step = "; no srun step: %s run jobs" % ", ".join(busy)
    elif module.params["step"]:
        started = time.monotonic()
        argv = ["runuser", "-u", module.params["user"], "--", "srun", "--immediate=60", "-N%d" % len(nodes), "-w", ",".join(nodes),
                "--ntasks-per-node=1", "-t", "1", "hostname", "-s"]
        for attempt in range(1, STEP_ATTEMPTS + 1):
            rc, out, err = module.run_command(argv)
            answered = sorted(set(out.split()))
            if rc == 0 and len(answered) == len(nodes):
                break
            if attempt == STEP_ATTEMPTS or not any(words in err for words in LAUNCH_TIMEOUTS):
                module.fail_json(msg="srun -N%d hostname as %s: rc=%d, answered %s%s: %s" % (
                    len(nodes), module.params["user"], rc, ",".join(answered) or "nobody",
                    " (attempt %d)" % attempt if attempt > 1 else "", err.strip()[-300:]))
            time.sleep(5)
        retried = " (attempt %d: the tasks did not launch in time before)" % attempt if attempt > 1 else ""
        step = "; srun -N%d hostname as %s answered from %s in %.1f s%s" % (
            len(nodes), module.params["user"], ", ".join(answered), time.monotonic() - started, retried)
        # The step's epilog ran (or runs) on every node: a node it drained ("Epilog error") is not fit for jobs.
        after = time.monotonic() + 30
        while True:
            rc, out, err = module.run_command(["sinfo", "-h", "-N", "-o", "%N|%T|%E"])
            found = parse_sinfo(out) if rc == 0 else {}
            states = {n: found.get(n, ("absent", "")) for n in nodes}
            if all(is_up(s) and s != "completing" for s, _r in states.values()) or time.monotonic() > after:
                break
            time.sleep(1)
        bad = ["%s %s%s" % (n, s, " (%s)" % r if r else "") for n, (s, r) in sorted(states.items()) if not is_up(s)]
        if bad:
            module.fail_json(msg="Slurm nodes left unfit by a test step: %s; see `sinfo -R` and the prolog/epilog in /etc/slurm" % "; ".join(bad))
    gres = sorted(set(registered.get(n, "") or "none" for n in nodes))
    summary = "%d/%d node(s) up (%s)%s; gres %s" % (
        len(nodes), len(nodes), ", ".join("%s %s" % (n, states[n][0]) for n in nodes), step, ", ".join(gres))
    module.exit_json(changed=bool(resumed), resumed=resumed, summary=summary, states={n: v[0] for n, v in states.items()})


if __name__ == "__main__":
    main()

"""One command on one host of the cluster, through a collection playbook and ansible-runner: what ``logs`` (journalctl
on the head) and ``status`` (sinfo on the Slurm controller) ask. The run, its progress line and the mapping of its
failures to megaprov's exit codes (unreachable 4, failed 3) are here; the run is cluster/plays.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from megaprov.cluster import plays
from megaprov.errors import HostsUnreachable, RunFailed
from megaprov.output import Reporter


def command_output(
    inventory: Path, playbook: str, extravars: dict[str, Any], *, command: str, role: str, host: str, doing: str, limit: int, report: Reporter
) -> str:
    """The standard output of the playbook's command tasks (at most ``limit`` characters). ``command`` names the
    megaprov command, ``role`` the host ("the head"), ``doing`` what failed ("the journals ... could not be read")."""
    result = plays.run(playbook, inventory, extravars, report, hosts=1, collect=("ansible.builtin.command", "command"))
    if not result.ok:
        why = result.failures[0].message if result.failures else result.error_line or result.status
        if any(f.unreachable for f in result.failures):
            raise HostsUnreachable(f"{command}: {role} {host} is unreachable: {why}", "check that it runs and answers SSH")
        raise RunFailed(f"{command}: {doing} on {host}: {why}", f"see {result.artifacts}/stdout")
    if not result.results:  # the play matched no host (rc 0): an answer from nobody is not an empty answer
        raise HostsUnreachable(
            f"{command}: {role} {host} returned nothing: the play reached no host",
            f"check that {host} is a host of {inventory} as Ansible reads it (ansible-inventory -i {inventory} --graph)",
        )
    return "".join(str(t.res.get("stdout", "")) for t in result.results)[:limit]

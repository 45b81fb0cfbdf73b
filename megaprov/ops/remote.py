"""One command on one host of the cluster, through a collection playbook and ansible-runner: what ``logs`` (journalctl
on the head) and ``status`` (sinfo on the Slurm controller) ask. The run, its progress line and the mapping of its
failures to megaprov's exit codes (unreachable 4, failed 3) are here, once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from megaprov import paths
from megaprov.cluster import runner
from megaprov.errors import HostsUnreachable, RunFailed
from megaprov.output import Reporter
from megaprov.paths import fact_cache_dir, state_dir


def command_output(
    inventory: Path, playbook: str, extravars: dict[str, Any], *, command: str, role: str, host: str, doing: str, limit: int, report: Reporter
) -> str:
    """The standard output of the playbook's command tasks (at most ``limit`` characters). ``command`` names the
    megaprov command, ``role`` the host ("the head"), ``doing`` what failed ("the journals ... could not be read")."""
    spec = runner.RunSpec(
        playbook=paths.playbook(playbook),
        inventories=(inventory,),
        private_data_dir=runner.new_private_dir(state_dir(), command),
        collections_root=paths.collections_root(),
        fact_cache_dir=fact_cache_dir(inventory),
        options=runner.RunOptions(extravars=extravars),
    )
    progress = report.run(1)
    try:
        result = runner.run(spec, progress, ("ansible.builtin.command", "command"))
    finally:
        progress.stop()
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

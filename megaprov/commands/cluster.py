"""bootstrap, preflight, inventory check, init and self-check: the cluster's own commands."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from megaprov import __version__
from megaprov.cluster.runner import STRATEGIES
from megaprov.commands.base import Outcome, command, extravars, family, inventory_flag, need_inventory, reporter, upto
from megaprov.errors import ExitCode, UsageError
from megaprov.output import console


def _run_flags(p: argparse.ArgumentParser) -> None:
    inventory_flag(p)
    # the positional form of the first releases: kept for one release, with a note
    p.add_argument("inventory_positional", nargs="?", metavar="INVENTORY", help=argparse.SUPPRESS)
    p.add_argument("--limit", help="only these hosts/groups (Ansible pattern)")
    p.add_argument("-e", "--extra-vars", action="append", default=[], metavar="KEY=VALUE", help="set a variable (or @file.yml)")
    p.add_argument("--forks", type=upto(1000), help="parallel hosts (default from ansible.cfg)")
    p.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default=os.environ.get("MEGAPROV_STRATEGY", "linear"),
        help="Ansible strategy; mitogen is faster, opt-in (env MEGAPROV_STRATEGY)",
    )
    p.add_argument("--flush-cache", action="store_true", help="forget cached facts (after a node was reinstalled or readdressed)")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more Ansible output in the artifacts")


def register(sub: Any) -> None:
    boot = command(
        sub,
        "bootstrap",
        "bootstrap",
        "provision and validate the cluster",
        [
            "megaprov bootstrap -i inventory.ini",
            "megaprov bootstrap -i inventory.ini --check            # dry run: what would change",
            "megaprov bootstrap -i inventory.ini --tags ssh_mesh --limit node1,node2",
            "megaprov bootstrap -i inventory.ini --verify -o json   # every verification again, one JSON document",
        ],
    )
    _run_flags(boot)
    boot.add_argument("--tags", default="", help="only these stages/roles (comma separated)")
    boot.add_argument("--skip-tags", default="", help="skip these stages/roles")
    boot.add_argument("--check", action="store_true", help="dry run on the hosts: report what would change (`inventory check` contacts none)")
    boot.add_argument("--diff", action="store_true", help="show file differences")
    boot.add_argument(
        "--bundle",
        metavar="DIR",
        help="offline bundle (megaprov bundle build): checked against its manifest and the inventory before anything is applied",
    )
    boot.add_argument(
        "--verify", action="store_true", help="run every verification again, even those a recorded proof with unchanged inputs already passed"
    )
    boot.set_defaults(handler=_bootstrap)

    pre = command(
        sub,
        "preflight",
        "preflight",
        "collect node facts and judge them against the requirements",
        ["megaprov preflight -i inventory.ini", "megaprov preflight -i inventory.ini --limit gpu01 -o json"],
    )
    _run_flags(pre)
    pre.set_defaults(handler=_preflight)

    inv_sub = family(
        sub,
        "inventory",
        "check an inventory offline",
        ["megaprov inventory check -i inventory.ini"],
        "inventory_command",
    )
    check = command(
        inv_sub,
        "check",
        "inventory check",
        "validate an inventory and its variables without contacting any host",
        ["megaprov inventory check -i inventories/example/inventory.ini", "megaprov inventory check -i inventory.ini -o json"],
    )
    inventory_flag(check)
    check.set_defaults(handler=_inventory_check)

    init = command(
        sub,
        "init",
        "init",
        "write a starting inventory (head, nodes and the settings that matter) into a new directory",
        [
            "megaprov init --head 10.0.0.10 --nodes 10.0.0.11,10.0.0.12 --gpu H100-SXM --dir mycluster",
            "megaprov init --head head01=10.0.0.10 --nodes 'gpu[01:04]' --gpu H200 --scheduler slurm --fabric infiniband --dir mycluster",
        ],
    )
    init.add_argument("--head", required=True, metavar="[NAME=]ADDRESS", help="the head (controller, NFS, Slurm controller, Prometheus)")
    init.add_argument(
        "--nodes", required=True, metavar="HOSTS", help="the GPU nodes: [NAME=]ADDRESS,... or a range such as gpu[01:04] (names that resolve)"
    )
    init.add_argument("--gpu", help="the GPU model, as nvidia-smi or megaprov names it (H100-SXM, 'NVIDIA H100 80GB HBM3', A100-80GB, ...)")
    init.add_argument("--gpus-per-node", type=upto(64), default=8, help="GPUs per node (default 8)")
    init.add_argument("--user", default="ubuntu", help="the SSH user with sudo on the nodes (default ubuntu)")
    init.add_argument("--shared-dir", default="/shared", help="the shared directory (default /shared, served by the head over NFS)")
    init.add_argument("--fabric", choices=("ethernet", "infiniband"), default="ethernet", help="the training network (default ethernet)")
    init.add_argument("--scheduler", choices=("none", "slurm"), default="none", help="systemd units (none, default) or Slurm")
    init.add_argument("--dir", required=True, metavar="DIR", help="a new directory for inventory.ini and group_vars/")
    init.set_defaults(handler=_init)

    selfcheck = command(
        sub,
        "self-check",
        "self-check",
        "check this machine's megaprov install: Python, ansible-core, the collection, ssh, podman",
        ["megaprov self-check", "megaprov self-check -o json"],
    )
    selfcheck.set_defaults(handler=_self_check)


def request(args: argparse.Namespace, more_vars: dict[str, Any] | None = None, **flags: Any) -> Any:
    from megaprov.cluster import provision, runner

    if args.strategy not in STRATEGIES:  # argparse does not check a default taken from the environment
        raise UsageError(f"MEGAPROV_STRATEGY={args.strategy!r} is not a strategy", "use " + ", ".join(STRATEGIES))
    options = runner.RunOptions(
        limit=args.limit,
        forks=args.forks,
        extravars={**extravars(args.extra_vars), **(more_vars or {})},
        strategy=args.strategy,
        verbosity=args.verbose,
        flush_cache=args.flush_cache,
        **flags,
    )
    return provision.Request(inventory=Path(args.inventory), options=options, report=reporter(args))


def _bootstrap(args: argparse.Namespace) -> Outcome:
    from megaprov.cluster import provision

    need_inventory(args)
    req = request(
        args,
        {"megaprov_verify": True} if args.verify else None,
        tags=tuple(t for t in args.tags.split(",") if t),
        skip_tags=tuple(t for t in args.skip_tags.split(",") if t),
        check=args.check,
        diff=args.diff,
    )
    if args.bundle:  # before anything is applied: a bundle that does not match refuses the whole run
        from megaprov.cluster import bundle

        req = bundle.bootstrap_request(req, Path(args.bundle))
    report = provision.bootstrap(req)
    return Outcome("bootstrap", report, report.exit_code, report.error, text=lambda: provision.render_bootstrap(report))


def _preflight(args: argparse.Namespace) -> Outcome:
    from megaprov.cluster import provision

    need_inventory(args)
    report = provision.preflight(request(args))
    return Outcome("preflight", report, report.exit_code, report.error, text=lambda: provision.render_preflight(report))


def _inventory_check(args: argparse.Namespace) -> Outcome:
    from megaprov.cluster import inventory as inv
    from megaprov.cluster import scaffold

    path = need_inventory(args)
    found = scaffold.summary(inv.load(path, *scaffold.sources()))

    def show() -> None:
        out = console()
        out.print(f"{found['inventory']}: valid; no host was contacted (`megaprov preflight` checks the nodes themselves)", markup=False)
        for key, value in found["settings"].items():
            out.print(f"  {key:<22} {value if value != '' else '(unset)'}", markup=False)
        out.print(f"  {'head':<22} {found['head']}", markup=False)
        out.print(
            f"  {'gpu_nodes':<22} {len(found['gpu_nodes'])}: {', '.join(found['gpu_nodes'][:8])}" + (" ..." if len(found["gpu_nodes"]) > 8 else ""),
            markup=False,
        )
        for line in found["notes"]:
            out.print(f"  note: {line}", markup=False)

    return Outcome("inventory check", found, text=show)


def _init(args: argparse.Namespace) -> Outcome:
    from megaprov.cluster import scaffold
    from megaprov.training import planner

    gpu = planner.gpu_model(args.gpu, "--gpu") if args.gpu else None
    written = scaffold.init(
        Path(args.dir),
        scaffold.InitRequest(args.head, args.nodes, gpu, args.gpus_per_node, args.user, args.shared_dir, args.fabric, args.scheduler),
    )

    def show() -> None:
        out = console()
        out.print(f"init: wrote {', '.join(str(p) for p in written)}", markup=False)
        out.print(f"next: edit them, then `megaprov inventory check -i {args.dir}` (offline) and `megaprov preflight -i {args.dir}`", markup=False)

    return Outcome("init", {"directory": args.dir, "files": [str(p) for p in written]}, text=show)


def _self_check(args: argparse.Namespace) -> Outcome:
    from megaprov import selfcheck

    found = selfcheck.checks()
    failed = [c for c in found if c.status == selfcheck.FAIL]

    def show() -> None:
        out = console()
        for check in found:
            out.print(f"{check.status:<4}  {check.name:<16} {check.detail}", markup=False, soft_wrap=True)
            if check.hint and check.status != selfcheck.PASS:
                out.print(f"      {'':<16} fix: {check.hint}", markup=False, soft_wrap=True)

    error = f"{failed[0].name}: {failed[0].detail} ({failed[0].hint})" if failed else None
    code = ExitCode.ENVIRONMENT if failed else ExitCode.OK
    return Outcome("self-check", {"version": __version__, "checks": found}, code, error, text=show)

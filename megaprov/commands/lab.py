"""lab: the local container lab of cluster nodes."""

from __future__ import annotations

import argparse
import time
from typing import Any

from megaprov.commands.base import Outcome, command, family, positive, reporter
from megaprov.output import console


def register(sub: Any) -> None:
    lab_sub = family(
        sub,
        "lab",
        "local container lab of cluster nodes",
        ["megaprov lab up --nodes 3", "megaprov lab status", "megaprov lab down"],
        "lab_command",
    )
    up = command(
        lab_sub,
        "up",
        "lab up",
        "start N nodes and write their inventory",
        ["megaprov lab up --nodes 3", "megaprov lab up --name ci --nodes 2 -o json"],
    )
    up.add_argument("--nodes", type=positive, default=2)
    up.add_argument("--name", default="default")
    image = command(lab_sub, "image", "lab image", "build the node image (cached)", ["megaprov lab image"])
    status = command(lab_sub, "status", "lab status", "list lab nodes", ["megaprov lab status", "megaprov lab status -o json"])
    inventory = command(
        lab_sub,
        "inventory",
        "lab inventory",
        "print the path of a lab's inventory (for scripts)",
        ["INV=$(megaprov lab inventory)", "export MEGAPROV_INVENTORY=$(megaprov lab inventory --name ci)"],
    )
    inventory.add_argument("--name", default="default")
    down = command(lab_sub, "down", "lab down", "remove what lab up made", ["megaprov lab down", "megaprov lab down --name ci"])
    down.add_argument("--name", default="default")
    for p, handler in ((up, _up), (image, _image), (status, _status), (inventory, _inventory), (down, _down)):
        p.set_defaults(handler=handler)
    for action, text in (("stop", "stop one node (its disk and address stay)"), ("start", "start a stopped node; wait for boot and SSH")):
        node = command(lab_sub, action, f"lab {action}", text, [f"megaprov lab {action} node3"])
        node.add_argument("node", metavar="NODE", help="inventory name of the node, e.g. node3")
        node.add_argument("--name", default="default")
        node.set_defaults(handler=_node)


def _progress(args: argparse.Namespace) -> Any:
    say = reporter(args)
    return lambda message: say.say(f"lab: {message}")


def _up(args: argparse.Namespace) -> Outcome:
    from megaprov.cluster import lab
    from megaprov.paths import state_dir

    inventory, members = lab.up(state_dir(), args.name, args.nodes, _progress(args))
    return Outcome(
        "lab up",
        {"name": args.name, "inventory": str(inventory), "nodes": members},
        text=lambda: console().print(f"lab {args.name}: {len(members)} node(s) up; inventory: {inventory}", markup=False),
    )


def _image(args: argparse.Namespace) -> Outcome:
    from megaprov.cluster import lab

    tag = lab.ensure_image(_progress(args))
    return Outcome("lab image", {"image": tag}, text=lambda: console().print(f"lab: node image {tag}", markup=False))


def _status(args: argparse.Namespace) -> Outcome:
    from megaprov.cluster import lab
    from megaprov.paths import state_dir

    found = lab.labs()

    def show() -> None:
        out = console()
        if not found:
            out.print("no lab is running")
        for name, members in found.items():
            out.print(f"lab {name}: " + ", ".join(f"{n.name} {n.address or '-'} {n.state}" for n in members), markup=False)
            out.print(f"  inventory: {lab.inventory_path(state_dir(), name)}", markup=False)

    # the JSON document keeps its shape (name -> nodes); `lab inventory -o json` gives the path
    return Outcome("lab status", {name: members for name, members in found.items()}, text=show)


def _inventory(args: argparse.Namespace) -> Outcome:
    from megaprov.cluster import lab
    from megaprov.errors import UsageError
    from megaprov.paths import state_dir

    path = lab.inventory_path(state_dir(), args.name)
    if not path.is_file():
        raise UsageError(f"lab {args.name}: no inventory at {path}", f"start the lab with `megaprov lab up --name {args.name}`")
    return Outcome(
        "lab inventory", {"name": args.name, "inventory": str(path)}, text=lambda: console().print(str(path), markup=False, soft_wrap=True)
    )


def _down(args: argparse.Namespace) -> Outcome:
    from megaprov.cluster import lab
    from megaprov.paths import state_dir

    removed = lab.down(state_dir(), args.name, _progress(args))
    text = f"lab {args.name}: removed {len(removed)} object(s)" if removed else f"lab {args.name}: nothing to remove"
    return Outcome("lab down", {"name": args.name, "removed": removed}, text=lambda: console().print(text, markup=False))


def _node(args: argparse.Namespace) -> Outcome:
    from megaprov.cluster import lab
    from megaprov.paths import state_dir

    action = args.command_path.split()[-1]
    began = time.monotonic()
    node = lab.stop(args.name, args.node) if action == "stop" else lab.start(state_dir(), args.name, args.node, _progress(args))
    seconds = round(time.monotonic() - began, 1)
    where = f" at {node.address}, host key unchanged" if action == "start" else ""
    return Outcome(
        f"lab {action}",
        {"name": args.name, "node": node, "seconds": seconds},
        text=lambda: console().print(f"lab {args.name}: {node.name} {node.state}{where} ({seconds}s)", markup=False),
    )

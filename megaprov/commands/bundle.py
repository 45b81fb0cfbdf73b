"""bundle build and bundle verify: offline bundles for air-gapped sites."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from megaprov.commands.base import Outcome, command, family, inventory_flag, need_inventory, reporter
from megaprov.output import console


def register(sub: Any) -> None:
    bundle_sub = family(
        sub,
        "bundle",
        "offline bundle for air-gapped sites: what the bootstrap fetches, with a manifest",
        ["megaprov bundle build -i inventory.ini --dir bundle/", "megaprov bundle verify bundle/ -i inventory.ini"],
        "bundle_command",
    )
    build = command(
        bundle_sub,
        "build",
        "bundle build",
        "collect what the inventory's bootstrap fetches (apt, wheels, git, sources) and container images into a new directory",
        [
            "megaprov bundle build -i inventory.ini --dir bundle/",
            "megaprov bundle build -i inventory.ini --dir bundle/ --image nvcr.io/nvidia/pytorch:25.01-py3",
            "megaprov bundle build -i inventory.ini --dir bundle/ --distribution ubuntu-24.04 --arch arm64 -o json",
        ],
    )
    inventory_flag(build)
    build.add_argument("--dir", dest="directory", metavar="DIR", help="new directory for the bundle")
    build.add_argument("--distribution", default="debian-12", help="the nodes' distribution: debian-12 (default), ubuntu-22.04, ubuntu-24.04")
    build.add_argument("--arch", default="amd64", help="the nodes' architecture: amd64 (default) or arm64")
    build.add_argument("--security-mirror", help="the distribution's security archive ('' for none; default: the distribution's own)")
    build.add_argument(
        "--image",
        dest="images",
        action="append",
        default=[],
        metavar="IMAGE",
        help="a container image to carry (REGISTRY/NAME:TAG; this machine's podman saves it, pulling it unless it holds it); repeatable",
    )
    build.set_defaults(handler=_build)
    verify = command(
        bundle_sub,
        "verify",
        "bundle verify",
        "check a bundle's files against its manifest, and its versions against an inventory",
        ["megaprov bundle verify bundle/", "megaprov bundle verify bundle/ -i inventory.ini -o json"],
    )
    verify.add_argument("directory", metavar="DIR")
    inventory_flag(verify, "also check that the bundle holds the versions this inventory asks for")
    verify.set_defaults(handler=_verify)


def _build(args: argparse.Namespace) -> Outcome:
    from megaprov.cluster import bundle
    from megaprov.errors import UsageError

    if not args.directory:
        raise UsageError("megaprov bundle build needs --dir DIR", "give a new directory for the bundle (-o is the report's format)")
    inventory = need_inventory(args)
    say = reporter(args)
    dist = bundle.distribution(args.distribution)
    built = bundle.build(
        Path(inventory), Path(args.directory), dist, args.arch, args.security_mirror, lambda message: say.say(f"bundle: {message}"), args.images
    )

    def show() -> None:
        timing = ", ".join(f"{part} {seconds:.0f}s" for part, seconds in built.seconds.items())
        console().print(
            f"bundle {built.directory}: {built.files:,} files, {built.bytes / 1e6:,.1f} MB ({built.apt} packages, {built.wheels} wheels, "
            f"git: {', '.join(built.git) or 'none'}, sources: {', '.join(built.sources) or 'none'}, images: {', '.join(built.images) or 'none'}); "
            f"{timing}",
            markup=False,
        )

    return Outcome("bundle build", built, text=show)


def _verify(args: argparse.Namespace) -> Outcome:
    from megaprov.cluster import bundle

    verified = bundle.verify(Path(args.directory), Path(args.inventory) if args.inventory else None)
    against = f", and it holds what {args.inventory} asks for" if args.inventory else ""
    return Outcome(
        "bundle verify",
        {"directory": verified.directory, "files": verified.files, "bytes": verified.bytes, "seconds": verified.seconds},
        text=lambda: console().print(
            f"bundle {verified.directory}: {verified.files:,} files, {verified.bytes / 1e6:,.1f} MB match the manifest"
            f"{against} ({verified.seconds:.1f}s)",
            markup=False,
        ),
    )

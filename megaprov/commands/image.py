"""image pull: a container image into the head's registry, fetched once for the cluster (the image_registry role)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from megaprov.commands.base import Outcome, command, family, inventory_flag, need_inventory, reporter
from megaprov.output import write_lines


def register(sub: Any) -> None:
    image_sub = family(
        sub,
        "image",
        "container images for training: fetched once per cluster into the head's registry",
        ["megaprov image pull nvcr.io/nvidia/pytorch:25.01-py3 -i inventory.ini"],
        "image_command",
    )
    pull = command(
        image_sub,
        "pull",
        "image pull",
        "pull an image on the head (or load an archive) into the head's registry, and import it for enroot where installed",
        [
            "megaprov image pull nvcr.io/nvidia/pytorch:25.01-py3 -i inventory.ini",
            "megaprov image pull ubuntu:22.04 -i inventory.ini -o json",
            "megaprov image pull nvcr.io/nvidia/pytorch:25.01-py3 -i inventory.ini --archive pytorch.tar   # air-gapped",
            "megaprov image pull nvcr.io/nvidia/pytorch:25.01-py3 -i inventory.ini --bundle bundle/   # from an offline bundle",
        ],
    )
    pull.add_argument("image", metavar="IMAGE", help="a registry reference, REGISTRY/NAME:TAG (docker.io when no registry is named)")
    inventory_flag(pull)
    source = pull.add_mutually_exclusive_group()
    source.add_argument("--archive", metavar="FILE", help="a `podman save`/`docker save` archive here, loaded on the head instead of pulling")
    source.add_argument("--bundle", metavar="DIR", help="an offline bundle here that carries the image (bundle build --image), loaded on the head")
    pull.set_defaults(handler=_pull)


def _pull(args: argparse.Namespace) -> Outcome:
    from megaprov import paths, values
    from megaprov.cluster import image
    from megaprov.cluster import inventory as inv
    from megaprov.errors import UsageError

    ref = values.image_reference(args.image, "IMAGE")
    if ref.startswith("/"):
        raise UsageError(
            f"IMAGE {ref} is a squashfs file: image pull fetches from a registry or an archive",
            "give a registry reference (nvcr.io/nvidia/pytorch:25.01-py3); a job spec's launch.container takes the .sqsh as it is",
        )
    image.names(ref)  # refused here, before the inventory is read
    archive = image.archive_path(args.archive) if args.archive is not None else None
    path = need_inventory(args)
    if args.bundle is not None:
        from megaprov.cluster import bundle

        archive = bundle.image_archive(Path(args.bundle), ref)
    inv.load(path, paths.roles_dir(), paths.cluster_defaults())
    pulled = image.pull(Path(path), ref, archive, reporter(args))
    # what a job's probe recorded for this name was another image's: the next job probes it again
    from megaprov.training import imagefacts

    imagefacts.forget(Path(path), ref)
    if pulled.squashfs:
        imagefacts.forget(Path(path), pulled.squashfs)
    result = {
        "image": pulled.image,
        "mirror": pulled.mirror,
        "enroot": pulled.enroot,
        "squashfs": pulled.squashfs or None,
        "bytes": pulled.bytes,
        "digest": pulled.digest,
    }

    def show() -> None:
        write_lines(
            [
                f"image: {pulled.image}",
                f"mirror: {pulled.mirror}",
                f"enroot: {pulled.enroot}",
                f"squashfs: {pulled.squashfs or 'none (enroot is not installed on the head)'}",
                f"bytes: {pulled.bytes}",
                f"digest: {pulled.digest}",
            ]
        )

    return Outcome("image pull", result, text=show)

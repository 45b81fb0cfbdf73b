"""The NVIDIA driver x CUDA x PyTorch x GPU compatibility table (``compat.yml``) and the rules built on it.

Pure functions over the table: which CUDA a driver branch runs, which torch wheel a CUDA toolkit selects, and
:func:`problems`, every way a cluster's settings cannot work together, each as one line that names the variables
and the fix. :mod:`megaprov.cluster.inventory` calls it before any host is contacted; the cuda and pytorch roles read the
same file on the controller (``lookup``), so the nodes apply the same table.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

_TAG = re.compile(r"^cu([0-9]{2})([0-9])$")
_RELEASE = re.compile(r"^([0-9]+)\.([0-9]+)(?:\.[0-9]+)?(?:[+a-z].*)?$")


@functools.lru_cache(maxsize=4)
def table(path: Path | None = None) -> dict[str, Any]:
    """The table, from the collection's ``meta/compat.yml`` (the roles read the same file) unless ``path`` is given."""
    if path is None:
        from megaprov.paths import collection_dir

        path = collection_dir() / "meta" / "compat.yml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a mapping")
    return data


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def cuda_releases() -> list[str]:
    """The CUDA toolkit releases the table knows, oldest first."""
    return sorted(table()["cuda"], key=_key)


def toolkit_driver(cuda: str) -> int | None:
    """The driver branch of ``cuda``'s toolkit driver (what the toolkit needs in full), or None if unknown."""
    row = table()["cuda"].get(cuda)
    return int(row["driver"]) if row else None


def family_driver(cuda: str) -> int | None:
    """The oldest branch that runs applications of ``cuda``'s major release (minor version compatibility)."""
    found = table()["cuda_family_driver"].get(cuda.split(".")[0])
    return int(found) if found is not None else None


def max_cuda(branch: int) -> str | None:
    """The newest CUDA release whose toolkit driver ``branch`` is (what nvidia-smi prints as "CUDA Version")."""
    fits = [c for c in cuda_releases() if int(table()["cuda"][c]["driver"]) <= branch]
    return fits[-1] if fits else None


def torch_release(version: str) -> str | None:
    """``2.13.0`` (or ``2.13.0+cu130``) -> ``2.13``; None for what is not a version."""
    match = _RELEASE.match(version.strip())
    return f"{match.group(1)}.{match.group(2)}" if match else None


def torch_builds(version: str) -> dict[str, dict[str, Any]] | None:
    """The CUDA builds ``tag -> {cuda, gpus}`` of a torch release, or None if the table does not have it."""
    release = torch_release(version)
    row = table()["torch"].get(release) if release else None
    return dict(row["builds"]) if row else None


def torch_aarch64(version: str) -> list[str] | None:
    release = torch_release(version)
    row = table()["torch"].get(release) if release else None
    return list(row["aarch64"]) if row and row.get("aarch64") else None


def tag_cuda(tag: str) -> str | None:
    """``cu130`` -> ``13.0``; None when ``tag`` is not of that form."""
    match = _TAG.match(tag)
    return f"{int(match.group(1))}.{match.group(2)}" if match else None


def derive_tag(torch_version: str, cuda: str) -> str | None:
    """The torch build for a cluster whose CUDA toolkit is ``cuda``: the newest build of the same CUDA major that is
    not newer than the toolkit (nvcc's major must match torch's for apex/TE builds; the toolkit's driver then runs
    the wheel in full). None when the release has no such build or is not in the table. The pytorch role derives
    ``pytorch_cuda_tag`` by the same rule (roles/pytorch/vars/main.yml; a unit test keeps both equal)."""
    builds = torch_builds(torch_version)
    if builds is None or not re.fullmatch(r"[0-9]+\.[0-9]+", cuda):
        return None
    major = cuda.split(".")[0]
    fits = [t for t, b in builds.items() if str(b["cuda"]).split(".")[0] == major and _key(str(b["cuda"])) <= _key(cuda)]
    return max(fits, key=lambda t: _key(str(builds[t]["cuda"]))) if fits else None


def releases_with(tag: str) -> list[str]:
    """The torch releases of the table that offer build ``tag``."""
    return sorted((r for r, row in table()["torch"].items() if tag in row["builds"]), key=_key)


@dataclass(frozen=True)
class Gpu:
    model: str
    generation: str
    arch: str | None
    open_modules: str  # required, recommended, unsupported
    min_cuda: str | None
    max_cuda_major: int | None
    min_driver: int | None
    max_driver: int | None


def gpu(model: str) -> Gpu | None:
    """A GPU model (case-insensitive, as ``megaprov_gpu_model`` names it) with its generation's requirements."""
    found = next((name for name in table()["gpus"] if name.lower() == model.strip().lower()), None)
    if found is None:
        return None
    row = table()["gpus"][found]
    gen = table()["generations"][row["generation"]]

    def opt_int(value: Any) -> int | None:
        return int(value) if value is not None else None

    return Gpu(
        model=found,
        generation=str(row["generation"]),
        arch=row.get("arch"),
        open_modules=str(row.get("open_modules", gen["open_modules"])),
        min_cuda=gen.get("min_cuda"),
        max_cuda_major=opt_int(gen.get("max_cuda_major")),
        min_driver=opt_int(gen.get("min_driver")),
        max_driver=opt_int(gen.get("max_driver")),
    )


@dataclass(frozen=True)
class Stack:
    """One node's GPU-stack settings. None = unknown (unset, or a Jinja expression megaprov cannot evaluate before it
    connects): every check that needs the value is skipped, and Ansible's roles check it on the node."""

    branch: str | None  # nvidia_driver_branch
    cuda: str | None  # cuda_version
    toolkit: bool = True  # cuda_method installs or verifies nvcc (not none)
    torch: str | None = None  # pytorch_version
    tag: str | None = None  # pytorch_cuda_tag when set explicitly; None: derived from the table
    torch_cuda: bool = True  # the node gets a CUDA torch build (pytorch_build not cpu)
    gpu_model: str | None = None  # megaprov_gpu_model
    open_modules: bool | None = None  # nvidia_driver_open (None: auto or unknown)
    driver_installed_by_megaprov: bool = True  # nvidia_driver_method is not preinstalled
    apex: bool = False  # apex_enabled: its build needs torch's CUDA release to equal nvcc's exactly


@dataclass(frozen=True)
class Problem:
    """``{variable}={value}`` (where) ``{text}``: ``{hint}``."""

    variable: str
    value: str
    text: str
    hint: str


def _gen(name: str) -> str:
    return name.capitalize()


def problems(s: Stack) -> list[Problem]:
    """Every reason the settings cannot work together, most basic first. Pure."""
    out: list[Problem] = []
    known_cuda = cuda_releases()
    branch: int | None = None
    if s.branch is not None:
        if not re.fullmatch(r"[0-9]{3}", s.branch):
            return [Problem("nvidia_driver_branch", s.branch, "is not a driver branch", 'write the 3-digit branch, e.g. "580"')]
        branch = int(s.branch)
    cuda = s.cuda
    if cuda is not None and cuda not in known_cuda and (s.toolkit or (s.torch_cuda and s.tag is None)):
        return [Problem("cuda_version", cuda, "is not a CUDA toolkit release megaprov knows", f"use one of {', '.join(known_cuda)}")]
    if cuda is not None and cuda not in known_cuda:
        cuda = None  # only names the wheels, and an explicit pytorch_cuda_tag does that
    if s.toolkit and cuda is not None and branch is not None:
        need = toolkit_driver(cuda)
        if need is not None and branch < need:
            out.append(
                Problem(
                    "nvidia_driver_branch",
                    str(branch),
                    f"is too old for cuda_version={cuda}, which needs driver branch >= {need}",
                    f'set nvidia_driver_branch: "{need}" or newer, or a lower cuda_version',
                )
            )
    card = gpu(s.gpu_model) if s.gpu_model else None
    if card is not None:
        out += _gpu_problems(s, card, branch, cuda)
    if s.torch_cuda and s.torch is not None:
        out += _torch_problems(s, s.torch, card, branch, cuda)
    return out


def _gpu_problems(s: Stack, card: Gpu, branch: int | None, cuda: str | None) -> list[Problem]:
    out: list[Problem] = []
    what = f"megaprov_gpu_model={card.model} ({_gen(card.generation)})"
    if branch is not None and card.min_driver is not None and branch < card.min_driver:
        out.append(
            Problem(
                "nvidia_driver_branch",
                str(branch),
                f"is too old for {what}, which needs driver branch >= {card.min_driver}",
                f'set nvidia_driver_branch: "{max(card.min_driver, 580)}" (or another branch >= {card.min_driver})',
            )
        )
    if branch is not None and card.max_driver is not None and branch > card.max_driver:
        out.append(
            Problem(
                "nvidia_driver_branch",
                str(branch),
                f"no longer supports {what}: R{card.max_driver} is the last branch for it",
                f'set nvidia_driver_branch: "{card.max_driver}"',
            )
        )
    if s.driver_installed_by_megaprov and s.open_modules is False and card.open_modules == "required":
        out.append(Problem("nvidia_driver_open", "false", f"but {what} runs only with NVIDIA's open kernel modules", "set nvidia_driver_open: true"))
    if s.driver_installed_by_megaprov and s.open_modules is True and card.open_modules == "unsupported":
        out.append(
            Problem("nvidia_driver_open", "true", f"but {what} has no open kernel modules (Turing and newer only)", "set nvidia_driver_open: false")
        )
    if s.toolkit and cuda is not None:
        if card.min_cuda is not None and _key(cuda) < _key(card.min_cuda):
            out.append(
                Problem(
                    "cuda_version",
                    cuda,
                    f"cannot build for {what}, which needs CUDA >= {card.min_cuda}",
                    f"set cuda_version to {card.min_cuda} or newer",
                )
            )
        if card.max_cuda_major is not None and int(cuda.split(".")[0]) > card.max_cuda_major:
            out.append(
                Problem(
                    "cuda_version",
                    cuda,
                    f"cannot build for {what}: CUDA {card.max_cuda_major + 1} dropped Maxwell, Pascal and Volta",
                    f"use a CUDA {card.max_cuda_major}.x release (e.g. 12.6)",
                )
            )
    return out


def _torch_problems(s: Stack, torch: str, card: Gpu | None, branch: int | None, cuda: str | None) -> list[Problem]:
    release = torch_release(torch)
    builds = torch_builds(torch)
    names = ", ".join(builds) if builds else ""
    if s.tag is not None:
        tag, var, value = s.tag, "pytorch_cuda_tag", s.tag
        if tag_cuda(tag) is None:
            return [Problem(var, value, "is not a CUDA wheel tag", "write it as cu<major><minor>, e.g. cu130")]
        if builds is not None and tag not in builds:
            return [Problem(var, value, f"is not a build of torch {release} (download.pytorch.org has {names})", f"use one of {names}")]
        tag_major, cuda_major = (tag_cuda(tag) or "").split(".")[0], (cuda or "").split(".")[0]
        if s.toolkit and cuda is not None and tag_major != cuda_major:
            return [
                Problem(
                    var,
                    value,
                    f"is a CUDA {tag_major} build but cuda_version={cuda} installs CUDA {cuda_major}"
                    " (apex and Transformer Engine need nvcc's major to match torch's)",
                    f"use a cu{cuda_major}x build, or a CUDA {tag_major} cuda_version",
                )
            ]
    else:
        var = "pytorch_version"
        value = torch
        if builds is None:
            if release is None:
                return [Problem(var, value, "is not a torch version", "write it as major.minor.patch, e.g. 2.13.0")]
            known = sorted(table()["torch"], key=_key)
            return [
                Problem(
                    var,
                    value,
                    "is a torch release megaprov has no CUDA build table for (the collection's meta/compat.yml)",
                    f"set pytorch_cuda_tag (e.g. cu130) yourself, or use torch {known[0]}-{known[-1]}",
                )
            ]
        if cuda is None:
            return []
        derived = derive_tag(torch, cuda)
        if derived is None:
            major = cuda.split(".")[0]
            offered = [str(b["cuda"]) for b in builds.values()]
            others = releases_with("cu" + cuda.replace(".", ""))
            return [
                Problem(
                    var,
                    value,
                    f"has no CUDA {major} build for cuda_version={cuda} (torch {release} is built for CUDA {', '.join(offered)}"
                    f" on download.pytorch.org; none of CUDA {major} is <= {cuda})",
                    f"set cuda_version to one of {', '.join(offered)} (with a driver branch for it)"
                    + (f", or pytorch_version to a {'/'.join(others)} release" if others else ""),
                )
            ]
        tag = derived
    build = builds.get(tag) if builds else None
    wheel_cuda = tag_cuda(tag) or ""
    family = family_driver(wheel_cuda)
    label = f"torch {torch} {tag}"
    out: list[Problem] = []
    if s.apex and s.toolkit and cuda is not None and wheel_cuda and wheel_cuda != cuda:
        # apex 25.09's setup.py compares torch.version.cuda with nvcc's release, minor included (roles/apex cuda_check).
        out.append(
            Problem(
                "cuda_version",
                cuda,
                f"differs from {label}'s CUDA {wheel_cuda}, and apex_enabled builds apex, which needs them equal",
                f'set cuda_version: "{wheel_cuda}" (with a driver branch for it), or apex_enabled: false',
            )
        )
    if branch is not None and family is not None and branch < family:
        out.append(
            Problem(
                "nvidia_driver_branch",
                str(branch),
                f"is too old for {label} (CUDA {wheel_cuda.split('.')[0]} wheels need driver branch >= {family})",
                f'set nvidia_driver_branch: "{max(family, 580)}" or newer, or a cuda_version/pytorch_version with a CUDA 12 build',
            )
        )
    if card is not None and build is not None and card.generation not in build["gpus"]:
        carried = ", ".join(_gen(g) for g in build["gpus"])
        out.append(
            Problem(
                "pytorch_cuda_tag" if s.tag is not None else "cuda_version",
                tag if s.tag is not None else str(cuda),
                f"selects {label}, which has no kernels for megaprov_gpu_model={card.model} ({_gen(card.generation)}; it carries {carried})",
                _builds_for(builds or {}, card.generation),
            )
        )
    aarch64 = torch_aarch64(torch)
    if card is not None and card.arch == "aarch64" and aarch64 is not None and tag not in aarch64:
        out.append(
            Problem(
                "pytorch_cuda_tag" if s.tag is not None else "cuda_version",
                tag if s.tag is not None else str(cuda),
                f"selects {label}, which has no Linux aarch64 wheels for {card.model} (aarch64 builds: {', '.join(aarch64)})",
                f"use one of {', '.join(aarch64)}",
            )
        )
    return out


def _builds_for(builds: dict[str, dict[str, Any]], generation: str) -> str:
    fits = [f"{t} (cuda_version {b['cuda']})" for t, b in builds.items() if generation in b["gpus"]]
    return f"use one of {', '.join(fits)}" if fits else "use a torch release with kernels for this GPU"


def summary() -> list[tuple[str, str]]:
    """Driver branch -> newest CUDA, for documentation and reports."""
    branches = sorted({int(row["driver"]) for row in table()["cuda"].values()})
    return [(str(b), max_cuda(b) or "") for b in branches]

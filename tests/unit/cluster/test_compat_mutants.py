"""The driver x CUDA x torch x GPU rules (compat.py), case by case: every problem the operator reads (variable, value,
text, fix) for a bad wheel tag, a bad torch version, a release without a build for the toolkit's CUDA (with and
without other releases to suggest), a build without kernels or aarch64 wheels for the GPU (tag set or derived), an
unknown CUDA release that only names the wheels, a GPU next to a driver problem; the branch summary; and ordering by
version, not by string (12.10 after 12.9, 2.10 after 2.9).

Stood in: nothing for the shipped table (the collection's meta/compat.yml, read as the roles read it); a small table
(``compat.table`` replaced) only where a rule needs a shape the shipped table does not have yet.
"""

from __future__ import annotations

from typing import Any

import pytest

from megaprov.cluster import compat
from megaprov.cluster.compat import Problem, Stack

NO_KERNELS_V100 = "which has no kernels for megaprov_gpu_model=V100 (Volta; it carries Turing, Ampere, Ada, Hopper, Blackwell)"


# ---- the shipped table


def test_a_tag_that_is_no_cuda_wheel_tag_is_named_with_how_to_write_it():
    stack = Stack(branch=None, cuda=None, toolkit=False, torch="2.9.0", tag="cuda13")
    assert compat.problems(stack) == [Problem("pytorch_cuda_tag", "cuda13", "is not a CUDA wheel tag", "write it as cu<major><minor>, e.g. cu130")]


def test_a_torch_version_that_is_no_version_is_named_with_how_to_write_it():
    assert compat.problems(Stack(branch=None, cuda=None, torch="latest")) == [
        Problem("pytorch_version", "latest", "is not a torch version", "write it as major.minor.patch, e.g. 2.13.0")
    ]


def test_a_release_without_a_build_for_the_cuda_major_suggests_the_releases_that_have_it_in_version_order():
    assert compat.problems(Stack(branch="580", cuda="13.0", torch="2.6.0")) == [
        Problem(
            "pytorch_version",
            "2.6.0",
            "has no CUDA 13 build for cuda_version=13.0 (torch 2.6 is built for CUDA 12.4, 12.6 on download.pytorch.org; none of CUDA 13 is <= 13.0)",
            "set cuda_version to one of 12.4, 12.6 (with a driver branch for it), or pytorch_version to a 2.9/2.10/2.11/2.12/2.13/2.14 release",
        )
    ]
    assert compat.releases_with("cu130") == ["2.9", "2.10", "2.11", "2.12", "2.13", "2.14"]


def test_a_release_without_a_build_for_the_cuda_and_no_other_release_with_it_suggests_only_the_cuda():
    assert compat.problems(Stack(branch="580", cuda="12.0", torch="2.6.0")) == [
        Problem(
            "pytorch_version",
            "2.6.0",
            "has no CUDA 12 build for cuda_version=12.0 (torch 2.6 is built for CUDA 12.4, 12.6 on download.pytorch.org; none of CUDA 12 is <= 12.0)",
            "set cuda_version to one of 12.4, 12.6 (with a driver branch for it)",
        )
    ]


def test_a_build_without_kernels_for_the_gpu_names_the_tag_when_it_is_set():
    stack = Stack(branch=None, cuda=None, toolkit=False, torch="2.9.0", tag="cu130", gpu_model="V100")
    assert compat.problems(stack) == [
        Problem(
            "pytorch_cuda_tag",
            "cu130",
            f"selects torch 2.9.0 cu130, {NO_KERNELS_V100}",
            "use one of cu126 (cuda_version 12.6), cu128 (cuda_version 12.8)",
        )
    ]


def test_a_build_without_kernels_for_the_gpu_names_the_cuda_version_when_the_tag_is_derived():
    assert compat.problems(Stack(branch="580", cuda="13.0", torch="2.9.0", gpu_model="V100")) == [
        Problem(
            "cuda_version",
            "13.0",
            "cannot build for megaprov_gpu_model=V100 (Volta): CUDA 13 dropped Maxwell, Pascal and Volta",
            "use a CUDA 12.x release (e.g. 12.6)",
        ),
        Problem(
            "cuda_version", "13.0", f"selects torch 2.9.0 cu130, {NO_KERNELS_V100}", "use one of cu126 (cuda_version 12.6), cu128 (cuda_version 12.8)"
        ),
    ]


def test_volta_builds_with_every_cuda_12_release_up_to_its_last():
    assert compat.problems(Stack(branch="580", cuda="12.9", gpu_model="V100")) == []
    assert compat.problems(Stack(branch="580", cuda="12.6", torch="2.9.0", gpu_model="V100")) == []


def test_a_build_without_aarch64_wheels_names_the_tag_when_set_and_the_cuda_version_when_derived():
    text = "selects torch 2.7.0 cu126, which has no Linux aarch64 wheels for GH200 (aarch64 builds: cu128)"
    assert compat.problems(Stack(branch=None, cuda=None, toolkit=False, torch="2.7.0", tag="cu126", gpu_model="GH200")) == [
        Problem("pytorch_cuda_tag", "cu126", text, "use one of cu128")
    ]
    assert compat.problems(Stack(branch="580", cuda="12.6", torch="2.7.0", gpu_model="GH200")) == [
        Problem("cuda_version", "12.6", text, "use one of cu128")
    ]


def test_an_unknown_cuda_release_is_refused_where_it_selects_the_wheels_and_ignored_where_it_does_not():
    known = "use one of 12.0, 12.1, 12.2, 12.3, 12.4, 12.5, 12.6, 12.8, 12.9, 13.0, 13.1, 13.2, 13.3"
    unknown = [Problem("cuda_version", "11.8", "is not a CUDA toolkit release megaprov knows", known)]
    # no toolkit, but the CUDA torch build is derived from cuda_version: refused
    assert compat.problems(Stack(branch="580", cuda="11.8", toolkit=False, torch="2.9.0")) == unknown
    # no toolkit and a CPU torch build, or an explicit pytorch_cuda_tag: cuda_version selects nothing
    assert compat.problems(Stack(branch="580", cuda="11.8", toolkit=False, torch="2.9.0", torch_cuda=False)) == []
    assert compat.problems(Stack(branch="580", cuda="11.8", toolkit=False, torch="2.9.0", tag="cu126")) == []
    assert compat.problems(Stack(branch="580", cuda="11.8", toolkit=False, tag="cu126")) == []


def test_a_gpu_keeps_the_driver_problem_found_before_it():
    assert compat.problems(Stack(branch="535", cuda="12.6", gpu_model="H100")) == [
        Problem(
            "nvidia_driver_branch",
            "535",
            "is too old for cuda_version=12.6, which needs driver branch >= 560",
            'set nvidia_driver_branch: "560" or newer, or a lower cuda_version',
        )
    ]


def test_the_summary_gives_each_driver_branch_its_newest_cuda():
    assert compat.summary() == [
        ("525", "12.0"),
        ("530", "12.1"),
        ("535", "12.2"),
        ("545", "12.3"),
        ("550", "12.4"),
        ("555", "12.5"),
        ("560", "12.6"),
        ("570", "12.8"),
        ("575", "12.9"),
        ("580", "13.0"),
        ("590", "13.1"),
        ("595", "13.2"),
        ("610", "13.3"),
    ]


def test_what_is_not_in_the_table_or_not_of_the_form_is_none():
    assert compat.family_driver("12.4") == 525 and compat.family_driver("13.2") == 580
    assert compat.family_driver("11.8") is None
    assert compat.tag_cuda("cu130") == "13.0" and compat.tag_cuda("cpu") is None
    assert compat.torch_release("2.13.0+cu130") == "2.13" and compat.torch_release("latest") is None
    assert compat.torch_builds("latest") is None and compat.torch_aarch64("latest") is None


# ---- a small table, for shapes the shipped one does not have


def small_table() -> dict[str, Any]:
    hopper = {"open_modules": "recommended", "min_cuda": "11.8"}
    return {
        "cuda": {"12.9": {"driver": 575}, "12.10": {"driver": 578}, "12.8": {"driver": 570}},
        "cuda_family_driver": {"12": 525},
        "generations": {"volta": {"open_modules": "unsupported", "max_cuda_major": 12}, "hopper": hopper},
        "gpus": {"V100": {"generation": "volta"}, "GH200": {"generation": "hopper", "arch": "aarch64", "open_modules": "required"}},
        "torch": {
            "3.0": {
                "builds": {
                    "cu126": {"cuda": "12.6", "gpus": ["hopper"]},
                    "cu128": {"cuda": "12.8", "gpus": ["hopper"]},
                    "cu129": {"cuda": "12.9", "gpus": ["hopper"]},
                },
                "aarch64": ["cu128", "cu129"],
            }
        },
    }


@pytest.fixture
def small(monkeypatch):
    data = small_table()
    monkeypatch.setattr(compat, "table", lambda path=None: data)
    return data


def test_cuda_releases_are_ordered_as_versions(small):
    assert compat.cuda_releases() == ["12.8", "12.9", "12.10"]
    assert compat.max_cuda(578) == "12.10" and compat.max_cuda(575) == "12.9"
    assert compat.summary() == [("570", "12.8"), ("575", "12.9"), ("578", "12.10")]
    assert compat.problems(Stack(branch="580", cuda="13.0")) == [
        Problem("cuda_version", "13.0", "is not a CUDA toolkit release megaprov knows", "use one of 12.8, 12.9, 12.10")
    ]


def test_a_release_with_no_build_for_the_gpu_says_to_pick_another_release(small):
    stack = Stack(branch=None, cuda=None, toolkit=False, torch="3.0.0", tag="cu128", gpu_model="V100")
    assert compat.problems(stack) == [
        Problem(
            "pytorch_cuda_tag",
            "cu128",
            "selects torch 3.0.0 cu128, which has no kernels for megaprov_gpu_model=V100 (Volta; it carries Hopper)",
            "use a torch release with kernels for this GPU",
        )
    ]


def test_the_aarch64_builds_are_listed_each_once(small):
    stack = Stack(branch=None, cuda=None, toolkit=False, torch="3.0.0", tag="cu126", gpu_model="GH200")
    assert compat.problems(stack) == [
        Problem(
            "pytorch_cuda_tag",
            "cu126",
            "selects torch 3.0.0 cu126, which has no Linux aarch64 wheels for GH200 (aarch64 builds: cu128, cu129)",
            "use one of cu128, cu129",
        )
    ]

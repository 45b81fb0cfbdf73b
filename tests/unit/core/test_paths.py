"""Where megaprov finds its collection and keeps its state (megaprov/paths.py): the XDG base directories, the
variables that override them, and the collection beside the package or under MEGAPROV_ROOT."""

from pathlib import Path

import pytest

from megaprov import paths
from megaprov.errors import EnvironmentProblem

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def bare_env(monkeypatch, tmp_path):
    for name in ("MEGAPROV_STATE", "MEGAPROV_CACHE", "MEGAPROV_ROOT", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def test_state_and_cache_default_to_the_xdg_directories_of_the_user(bare_env):
    """The XDG Base Directory spec's defaults: $HOME/.local/state and $HOME/.cache."""
    assert paths.state_dir() == bare_env / "home" / ".local" / "state" / "megaprov"
    assert paths.cache_dir() == bare_env / "home" / ".cache" / "megaprov"


def test_xdg_variables_move_state_and_cache(bare_env, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(bare_env / "s"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(bare_env / "c"))
    assert paths.state_dir() == bare_env / "s" / "megaprov"
    assert paths.cache_dir() == bare_env / "c" / "megaprov"


def test_a_relative_xdg_path_is_ignored_as_the_spec_says(bare_env, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")
    assert paths.state_dir() == bare_env / "home" / ".local" / "state" / "megaprov"


def test_megaprov_variables_win_over_xdg(bare_env, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(bare_env / "s"))
    monkeypatch.setenv("MEGAPROV_STATE", str(bare_env / "mine"))
    monkeypatch.setenv("MEGAPROV_CACHE", str(bare_env / "cached"))
    assert paths.state_dir() == bare_env / "mine"
    assert paths.cache_dir() == bare_env / "cached"


def test_the_fact_cache_and_lab_inventories_live_under_state(bare_env, monkeypatch):
    from megaprov.cluster import lab

    monkeypatch.setenv("MEGAPROV_STATE", str(bare_env / "st"))
    inventory = bare_env / "inv.ini"
    assert paths.fact_cache_dir(inventory).parent == bare_env / "st" / "facts"
    assert lab.inventory_path(paths.state_dir(), "x") == bare_env / "st" / "lab" / "x" / "inventory.ini"


def test_the_collection_is_found_beside_the_package(bare_env):
    """In a checkout and in an installed wheel alike, ansible_collections/ is the package's sibling."""
    assert paths.collections_root() == ROOT
    assert paths.collection_dir() == ROOT / "ansible_collections" / "megaprov" / "cluster"
    assert paths.playbook("bootstrap.yml").is_file()
    assert paths.cluster_defaults().is_file()


def test_megaprov_root_names_another_checkout(bare_env, monkeypatch, tmp_path):
    other = tmp_path / "other"
    (other / "ansible_collections" / "megaprov" / "cluster" / "playbooks").mkdir(parents=True)
    monkeypatch.setenv("MEGAPROV_ROOT", str(other))
    assert paths.collection_dir() == other / "ansible_collections" / "megaprov" / "cluster"


def test_a_missing_collection_is_one_line_with_the_fix(bare_env, monkeypatch, tmp_path):
    monkeypatch.setenv("MEGAPROV_ROOT", str(tmp_path / "nothing"))
    with pytest.raises(EnvironmentProblem) as info:
        paths.collection_dir()
    assert "no collection megaprov.cluster under MEGAPROV_ROOT=" in info.value.message
    assert "unset MEGAPROV_ROOT" in (info.value.hint or "")

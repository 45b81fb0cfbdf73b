"""The collection's metadata: galaxy.yml and the package agree on the version, runtime.yml's range holds the
ansible-core pyproject.toml allows, and every changelog fragment is one antsibull-changelog can fold."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = ROOT / "ansible_collections" / "megaprov" / "cluster"


def test_galaxy_names_the_collection_and_its_version_is_megaprovs():
    from megaprov import __version__

    galaxy = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())
    assert (galaxy["namespace"], galaxy["name"]) == ("megaprov", "cluster")
    assert galaxy["version"] == __version__  # one release: the wheel carries this collection
    assert (COLLECTION / galaxy["readme"]).is_file()
    assert galaxy["dependencies"] == {}  # the roles use ansible.builtin and the collection's own plugins only


def test_runtime_range_is_the_one_pyproject_installs():
    runtime = yaml.safe_load((COLLECTION / "meta" / "runtime.yml").read_text())
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    core = next(d for d in pyproject["project"]["dependencies"] if d.startswith("ansible-core"))
    lower, upper = re.fullmatch(r"ansible-core>=([\d.]+),<([\d.]+)", core).groups()
    assert runtime["requires_ansible"] == f">={lower}.0,<{upper}.0"


def test_every_changelog_fragment_uses_a_configured_section():
    config = yaml.safe_load((COLLECTION / "changelogs" / "config.yaml").read_text())
    sections = {name for name, _ in config["sections"]} | {config["prelude_section_name"], config["trivial_section_name"]}
    fragments = sorted((COLLECTION / "changelogs" / "fragments").glob("*.y*ml"))
    assert fragments, "no changelog fragment: every change to the collection adds one"
    for path in fragments:
        data = yaml.safe_load(path.read_text())
        assert isinstance(data, dict) and set(data) <= sections, f"{path.name}: sections {sorted(set(data) - sections)}"
        for section, entries in data.items():
            if section == config["prelude_section_name"]:
                assert isinstance(entries, str), path.name
            else:
                assert isinstance(entries, list) and all(isinstance(e, str) and e.strip() for e in entries), f"{path.name}: {section}"

"""A local fact file (/etc/ansible/facts.d/NAME.fact) that a later play reads as ansible_local.NAME is read
again (setup, filter ansible_local) by the task right after the one that writes it. With gathering=smart and a
2-hour fact cache (megaprov/ansible.cfg), ansible_local is otherwise not read again in the same run, nor on a re-run
within the cache's lifetime: the slurm role saw 0 GPUs, the nccl check a stale megaprov_fabric."""

import re

import pytest
import yaml

from tests.conftest import ROOT

COLLECTION = ROOT / "ansible_collections" / "megaprov" / "cluster"
# Modules that write a fact file named by their facts_path option.
FACT_MODULES = ("megaprov.cluster.node_facts", "megaprov.cluster.compute_rate")
WRITERS = ("megaprov.cluster.files", "ansible.builtin.copy", "ansible.builtin.template")


def read_facts():
    """Names NAME read as ansible_local.NAME anywhere in the collection's roles and playbooks (YAML and templates)."""
    names = set()
    for path in [*COLLECTION.glob("roles/**/*.yml"), *COLLECTION.glob("roles/**/*.j2"), *COLLECTION.glob("playbooks/**/*.yml")]:
        names.update(re.findall(r"ansible_local\.(megaprov_[a-z_]+)", path.read_text()))
    return names


def written_fact(task):
    """The NAME of the fact file this task writes, or None."""
    for module in FACT_MODULES:
        if isinstance(task.get(module), dict):
            found = re.search(r"([a-z_]+)\.fact$", str(task[module].get("facts_path", "")))
            return found.group(1) if found else None
    for module in WRITERS:
        args = task.get(module)
        if not isinstance(args, dict):
            continue
        files = args.get("files", [])
        listed = [f.get("path", "") for f in files if isinstance(f, dict)] if isinstance(files, list) else [str(files)]  # a template of a list
        paths = listed if module == "megaprov.cluster.files" else [args.get("dest", "")]
        for path in paths:
            found = re.search(r"facts\.d/([a-z_]+)\.fact", str(path))
            if found:
                return found.group(1)
    return None


def refreshes_local_facts(task):
    setup = task.get("ansible.builtin.setup") if isinstance(task, dict) else None
    return isinstance(setup, dict) and "ansible_local" in setup.get("filter", []) and "local" in setup.get("gather_subset", [])


def task_lists(data):
    """Every list of tasks in a task file, blocks included."""
    if isinstance(data, list):
        yield data
        for task in data:
            if isinstance(task, dict):
                for key in ("block", "rescue", "always"):
                    if key in task:
                        yield from task_lists(task[key])


def writers():
    found = []
    for path in sorted(COLLECTION.glob("roles/*/tasks/*.yml")):
        for tasks in task_lists(yaml.safe_load(path.read_text())):
            for i, task in enumerate(tasks):
                name = written_fact(task) if isinstance(task, dict) else None
                if name:
                    found.append((path.relative_to(COLLECTION).as_posix(), task.get("name", ""), name, tasks[i + 1] if i + 1 < len(tasks) else None))
    return found


def test_the_writers_are_found():
    names = {name for _, _, name, _ in writers()}
    assert {"megaprov_preflight", "megaprov_fabric", "megaprov_cache"} <= names
    assert {"megaprov_preflight", "megaprov_fabric", "megaprov_cache"} <= read_facts()


@pytest.mark.parametrize(
    ("path", "task", "name", "following"), [w for w in writers() if w[2] in read_facts()], ids=lambda v: v if isinstance(v, str) else ""
)
def test_a_fact_later_plays_read_is_read_again_right_after_it_is_written(path, task, name, following):
    assert refreshes_local_facts(following), (
        f"{path}: '{task}' writes {name}.fact, which later plays read as ansible_local.{name}; the next task must be "
        "ansible.builtin.setup with gather_subset [!all, !min, local] and filter [ansible_local]"
    )
    # not in check mode (nothing was written), and only when the file changed
    assert "not ansible_check_mode" in str(following.get("when", ""))

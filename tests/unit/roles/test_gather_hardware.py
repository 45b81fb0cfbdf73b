"""Whoever reads a hardware fact gathers it. The stage plays gather `[min]` or `[min, network]`
(the `gather_subset` of megaprov's ansible.cfg was ignored: ansible-core 2.18 removed the setting), neither of which
holds ansible_memtotal_mb or ansible_processor_nproc (ansible-core's `hardware` subset does): apex then built with
MAX_JOBS=1 and nccl-tests with make -j4 whatever the node. And with `gathering = smart` a play's own gather_subset does
not help: once any play (or the fact cache) holds facts for a host, later plays gather nothing. So a play whose roles
read hardware facts gathers them itself, with a setup task before the task that reads them (usable alone, whatever the
play gathered)."""

import configparser
import json
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
COLLECTION = ROOT / "ansible_collections/megaprov/cluster"
CFG = configparser.ConfigParser(interpolation=None)
CFG.read(ROOT / "megaprov" / "ansible.cfg")
# What the stage plays name (cache.yml, the first to gather in a bootstrap: [min, network]), and then some.
STAGE_SUBSET = "!all,min,network,virtual"
ANSIBLE = str(Path(sys.executable).with_name("ansible"))
PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))


def ansible_env(tmp: Path) -> dict:
    """Ansible without megaprov's fact cache or a user's configuration: the settings under test are passed in."""
    return dict(
        os.environ,
        ANSIBLE_CONFIG=str(tmp / "none.cfg"),
        ANSIBLE_CACHE_PLUGIN="memory",
        ANSIBLE_GATHERING=CFG["defaults"]["gathering"],
        ANSIBLE_LOCALHOST_WARNING="False",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
        ANSIBLE_LOCAL_TEMP=str(tmp / "tmp"),
        ANSIBLE_HOME=str(tmp / "home"),
    )


@cache
def setup_facts(subset: str) -> dict:
    """What ansible-core's setup module returns on this machine for a gather_subset (the real module, ~2 s)."""
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"megaprov-gather-{os.getpid()}"
    tmp.mkdir(exist_ok=True)
    (tmp / "none.cfg").write_text("[defaults]\n")
    tree = tmp / subset.replace(",", "_").replace("!", "no-")
    subprocess.run(
        [
            ANSIBLE,
            "localhost",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            "-m",
            "ansible.builtin.setup",
            "-a",
            f"gather_subset={subset}",
            "--tree",
            str(tree),
        ],
        capture_output=True,
        text=True,
        env=ansible_env(tmp),
        timeout=60,
        check=True,
    )
    result = json.loads((tree / "localhost").read_text())
    return {k: v for k, v in result["ansible_facts"].items() if k not in ("gather_subset", "module_setup")}


def hardware_fact_names() -> set[str]:
    """The facts the hardware subset adds to the stage plays' (it also brings the platform facts it needs)."""
    return set(setup_facts("!all,!min,hardware")) - set(setup_facts(STAGE_SUBSET))


def test_only_the_hardware_subset_has_memory_and_cores():
    stage, hardware = setup_facts(STAGE_SUBSET), setup_facts("!all,!min,hardware")
    for name in ("ansible_memtotal_mb", "ansible_processor_nproc"):
        assert name not in stage and name in hardware
    # the cores this process may use (a cpuset or container limit counts), what make -j and MAX_JOBS must follow
    assert hardware["ansible_processor_nproc"] == len(os.sched_getaffinity(0))
    mem_kib = int(next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal:")).split()[1])
    assert hardware["ansible_memtotal_mb"] == mem_kib // 1024


def _load(path: Path):
    return yaml.safe_load(path.read_text()) or []


def _walk_tasks(tasks):
    for task in tasks or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _walk_tasks(task.get(key))


def _gathers_hardware(task) -> bool:
    setup = task.get("ansible.builtin.setup", task.get("setup"))
    if not isinstance(setup, dict):
        return False
    subset = setup.get("gather_subset", ["all"])
    subset = subset.split(",") if isinstance(subset, str) else subset
    return ("hardware" in subset or "all" in subset) and "!hardware" not in subset


def _task_files(role: str, entry: str) -> list[Path]:
    """The role's task files a run from `entry` reads, in order, following include_tasks/import_tasks."""
    tasks_dir = COLLECTION / "roles" / role / "tasks"
    seen: list[Path] = []

    def visit(name: str) -> None:
        path = tasks_dir / (name if name.endswith(".yml") else name + ".yml")
        if path in seen or not path.is_file():
            return
        seen.append(path)
        for task in _walk_tasks(_load(path)):
            for key in ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks", "include_tasks", "import_tasks"):
                target = task.get(key)
                if target:
                    visit(target["file"] if isinstance(target, dict) else target)

    visit(entry)
    return seen


def hardware_reads(role: str, entry: str, names: set[str]) -> list[tuple[str, bool]]:
    """Every task of the role (from ``entry``) that reads a hardware fact, directly or through a default or var whose
    value reads one (those are templated where a task uses them), and whether the role gathered the hardware subset
    before it."""
    facts = re.compile(r"\bansible_(?:facts(?:\[['\"]|\.))?(" + "|".join(sorted(n.removeprefix("ansible_") for n in names)) + r")\b")
    derived: dict[str, str] = {}
    for part in ("defaults", "vars"):
        path = COLLECTION / "roles" / role / part / "main.yml"
        for name, value in (_load(path) or {}).items() if path.is_file() else ():
            match = facts.search(yaml.safe_dump(value))
            if match:
                derived[name] = f"ansible_{match.group(1)} through {name}"
    uses = re.compile(r"\b(" + "|".join(map(re.escape, derived)) + r")\b") if derived else None
    found: list[tuple[str, bool]] = []
    gathered = False
    for path in _task_files(role, entry):
        for task in _walk_tasks(_load(path)):
            if _gathers_hardware(task):
                gathered = True
                continue
            text = yaml.safe_dump({k: v for k, v in task.items() if k not in ("block", "rescue", "always")})
            reads = [f"ansible_{m}" for m in facts.findall(text)] + ([derived[m] for m in uses.findall(text)] if uses else [])
            found += [(f"{role}/tasks/{path.name}: {task.get('name')}: {read}", gathered) for read in dict.fromkeys(reads)]
    return found


def uncovered_hardware_reads(role: str, entry: str, names: set[str]) -> list[str]:
    """The reads of :func:`hardware_reads` that the role does not gather for first."""
    return [where for where, covered in hardware_reads(role, entry, names) if not covered]


def plays():
    for path in sorted((COLLECTION / "playbooks").glob("*.yml")):
        for play in _load(path):
            if "hosts" in play:
                yield path.name, play


def _roles_run(play):
    """(role, entry task file) for every role the play runs; a role listed with `when: false` runs no task."""
    for role in play.get("roles", []):
        if role.get("when") is not False:
            yield role["role"].removeprefix("megaprov.cluster."), "main"
    for section in ("pre_tasks", "tasks", "post_tasks"):
        for task in _walk_tasks(play.get(section)):
            for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
                if key in task:
                    yield task[key]["name"].removeprefix("megaprov.cluster."), task[key].get("tasks_from", "main")


def test_gathering_is_smart_so_a_plays_gather_subset_is_not_enough():
    """The premise of the rule below: with smart gathering the implicit gathering is skipped for hosts with facts;
    and no gather_subset in ansible.cfg pretends otherwise (ansible-core >= 2.18 ignores it)."""
    assert CFG["defaults"]["gathering"] == "smart"
    assert "gather_subset" not in CFG["defaults"]


def test_every_play_gathers_the_hardware_facts_its_roles_read():
    names = hardware_fact_names()
    assert {"ansible_memtotal_mb", "ansible_processor_nproc"} <= names
    missing = []
    for playbook, play in plays():
        reads = [read for role, entry in _roles_run(play) for read in uncovered_hardware_reads(role, entry, names)]
        gathered = any(_gathers_hardware(task) for task in _walk_tasks(play.get("pre_tasks")))
        if reads and not gathered:
            missing.append(f"{playbook} ({play['name']}): {reads}")
    assert missing == []


def test_the_users_of_hardware_facts_are_known():
    """Guards the scan above: it finds the two known readers (apex's MAX_JOBS, nccl-tests' make -j), each
    covered by its own role's setup task (usable alone, whatever the play gathered)."""
    names = hardware_fact_names()
    apex = hardware_reads("apex", "main", names)
    assert [where for where, _ in apex] == [
        "apex/tasks/enabled.yml: Build and install apex with its extensions, MAX_JOBS bounded by memory: ansible_memtotal_mb through apex_max_jobs"
    ]
    assert all(covered for _, covered in apex)
    nccl = hardware_reads("nccl", "main", names)
    assert [where for where, _ in nccl] == [
        "nccl/tasks/install.yml: Build nccl-tests with MPI against the NCCL of {{ nccl_tests_nccl }}: ansible_processor_nproc"
    ]
    assert all(covered for _, covered in nccl)
    install = _load(COLLECTION / "roles/nccl/tasks/install.yml")
    build = next(i for i, t in enumerate(install) if t["name"].startswith("Build nccl-tests"))
    assert "make -j{{ ansible_processor_nproc }}" in install[build]["ansible.builtin.shell"]["cmd"]  # no fixed fallback
    for tasks in (install, _load(COLLECTION / "roles/apex/tasks/enabled.yml")):
        assert not [t for t in tasks if _gathers_hardware(t) and "run_once" in t]  # run_once would copy one host's facts onto all


def test_the_stage_plays_gather_the_facts_on_a_real_host(tmp_path):
    """ansible-playbook on this machine with megaprov's gathering settings: after an earlier play gathered the default
    subset, a play asking for [min, hardware] still has no memory or core count (smart gathering), while the python
    apex and nccl roles' own setup tasks (taken from the files) provide both."""
    nproc = len(os.sched_getaffinity(0))
    apex_gather = [{**t, "when": True} for t in _load(COLLECTION / "roles/apex/tasks/enabled.yml") if _gathers_hardware(t)]
    install = _load(COLLECTION / "roles/nccl/tasks/install.yml")
    nccl_gather = [t for t in install if _gathers_hardware(t)]
    has = "ansible_memtotal_mb is defined and ansible_processor_nproc is defined"
    check = {"name": "Check", "ansible.builtin.assert": {"that": [has, f"ansible_processor_nproc == {nproc}"]}}
    playbook = [
        {"name": "An earlier stage", "hosts": "all", "gather_facts": True, "gather_subset": ["min", "network"], "tasks": []},
        {
            "name": "Play-level subset only",
            "hosts": "all",
            "gather_facts": True,
            "gather_subset": ["min", "hardware"],
            "tasks": [{"name": "Skipped by smart gathering", "ansible.builtin.assert": {"that": f"not ({has})"}}],
        },
        {"name": "Python environment", "hosts": "python", "gather_facts": True, "gather_subset": ["min"], "tasks": [*apex_gather, check]},
        {
            "name": "NCCL",
            "hosts": "nccl",
            "gather_facts": True,
            "gather_subset": ["min"],
            "vars": {"nccl_tests": True},
            "tasks": [*nccl_gather, check],
        },
    ]
    (tmp_path / "none.cfg").write_text("[defaults]\n")
    (tmp_path / "play.yml").write_text(yaml.safe_dump(playbook, sort_keys=False))
    (tmp_path / "hosts.ini").write_text(
        f"[python]\np1\n[nccl]\nn1\n[all:vars]\nansible_connection=local\nansible_python_interpreter={sys.executable}\n"
    )
    run = subprocess.run(
        [PLAYBOOK, "-i", str(tmp_path / "hosts.ini"), str(tmp_path / "play.yml")],
        capture_output=True,
        text=True,
        env=ansible_env(tmp_path),
        timeout=120,
    )
    assert run.returncode == 0, (run.stdout[-4000:], run.stderr[-2000:])
    assert apex_gather and nccl_gather

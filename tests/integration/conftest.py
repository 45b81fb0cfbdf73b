import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAB = "itest"
README_LAB = "readme-ci"
CONTAINERS_CONF = str(ROOT / "megaprov" / "cluster" / "lab_files" / "containers.conf")


def megaprov(*argv, check_json=True):
    """Run the real console entry point; return (exit code, parsed JSON envelope or None, stderr)."""
    proc = subprocess.run(
        [sys.executable, "-m", "megaprov", *argv], capture_output=True, text=True, cwd=ROOT, env={**os.environ, "NO_COLOR": "1"}, timeout=900
    )
    doc = json.loads(proc.stdout) if check_json and proc.stdout.strip().startswith("{") else None
    return proc.returncode, doc, proc.stderr


def train_and_kill_a_rank(inventory, spec, job_dir, node, pattern, restart_within, output="json"):
    """``megaprov train`` of SPEC, and just past its checkpoint at iteration 20 a SIGKILL, on lab node NODE, of every
    process whose command line matches PATTERN (the rank and its torchrun agent, as the kernel's OOM killer would);
    the node's unit must be active again within RESTART_WITHIN seconds (RestartSec, not TimeoutStopSec: nothing of
    the job waits on orphans). Returns (train's exit code, its stderr, the seconds from the kill to the unit active);
    with OUTPUT text, that stderr holds train's progress lines."""
    metrics = job_dir / "metrics.jsonl"
    unit = f"megaprov-job-{job_dir.name}.service"
    proc = subprocess.Popen(
        [sys.executable, "-m", "megaprov", "train", "--job", spec, "-i", inventory, "--output", output],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            # Just past the save at 20: the kill (podman exec, about a second later; 3-5 iterations on a quiet machine)
            # lands well before the save at 30, so the run must lose fewer than the 10 iterations of a save interval.
            if metrics.is_file() and len(metrics.read_text().splitlines()) >= 22:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        else:
            pytest.fail("the job never reached iteration 22")
        killed = podman_exec(node, "pkill", "-9", "-f", pattern)
        killed_at = time.monotonic()
        assert killed.returncode == 0, f"no process matching {pattern!r} to kill on {node}"
        restarted = None
        while time.monotonic() - killed_at < 120:
            show = podman_exec(node, "systemctl", "show", unit, "--property=NRestarts,ActiveState").stdout
            state = dict(line.partition("=")[::2] for line in show.splitlines())
            if state.get("NRestarts") == "1" and state.get("ActiveState") == "active":
                restarted = time.monotonic() - killed_at
                break
            time.sleep(0.5)
        assert restarted is not None and restarted < restart_within, f"{node}'s unit restarted {restarted} s after the kill"
        print(f"{node}'s unit active again {restarted:.1f} s after the kill")
        _, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    return proc.returncode, err, restarted


def podman_exec(container, *cmd):
    return subprocess.run(
        ["podman", "exec", container, *cmd], capture_output=True, text=True, env={**os.environ, "CONTAINERS_CONF": CONTAINERS_CONF}, check=False
    )


def pytest_collection_modifyitems(config, items):
    # Tests marked last (removing the session's lab) run after every other file's tests.
    items.sort(key=lambda item: item.get_closest_marker("last") is not None)
    if shutil.which("podman") is None:
        skip = pytest.mark.skip(reason="skipped: podman is not installed (run scripts/setup.sh)")
        for item in items:
            if "lab" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def lab3():
    """A 3-node lab for the whole session, removed at the end whatever happens."""
    megaprov("lab", "down", "--name", LAB, "--output", "json")  # leftovers of an interrupted run
    code, doc, err = megaprov("lab", "up", "--nodes", "3", "--name", LAB, "--output", "json")
    try:
        assert code == 0, err
        yield doc["result"]
    finally:
        megaprov("lab", "down", "--name", LAB, "--output", "json")


def git_head(root: Path) -> str:
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def fresh_env() -> dict[str, str]:
    """The environment of a newcomer's shell: none of this checkout's venv, no podman settings of the test run."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONTAINERS_CONF", "MEGAPROV_STATE", "MEGAPROV_ROOT", "PYTHONPATH")}
    here = str(ROOT / ".venv" / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "/usr/bin:/bin").split(os.pathsep) if p != here)
    env["NO_COLOR"] = "1"
    return env


@pytest.fixture(scope="session")
def readme_run(tmp_path_factory):
    """The README's main command, `./scripts/run-lab.sh`, from a fresh clone of the commit under test: its own venv,
    its own 3-node lab, bootstrap, data, and the training run to the verdict, with one core of this machine kept
    busy from the end of the bootstrap on (the verdict must hold on a busy machine). The bootstrapped lab it leaves
    is the cluster of the tests that need one; it is removed at the end of the session."""
    clone = tmp_path_factory.mktemp("readme") / "megaprov"
    subprocess.run(["git", "clone", "-q", "--no-local", str(ROOT), str(clone)], check=True)
    # a newcomer's megaprov keeps its state in XDG_STATE_HOME: here one of the clone's own
    env = {**fresh_env(), "MEGAPROV_LAB_NAME": README_LAB, "XDG_STATE_HOME": str(clone.parent / "xdg-state")}
    megaprov_clone = [str(clone / ".venv" / "bin" / "megaprov")]
    if (clone / ".venv").exists():
        pytest.fail("the fresh clone already has a .venv")
    subprocess.run(megaprov_clone + ["lab", "down", "--name", README_LAB], env=env, capture_output=True, check=False) if Path(
        megaprov_clone[0]
    ).exists() else None
    # leftovers of an interrupted run, removed by name with podman itself (the clone has no megaprov yet)
    podman_env = {**os.environ, "CONTAINERS_CONF": CONTAINERS_CONF}
    names = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True, env=podman_env).stdout.split()
    stale = [n for n in names if n.startswith(f"megaprov-{README_LAB}-")]
    if stale:
        subprocess.run(["podman", "rm", "-f", "-t", "0", *stale], capture_output=True, env=podman_env, check=False)
    subprocess.run(["podman", "network", "rm", "-f", f"megaprov-{README_LAB}"], capture_output=True, env=podman_env, check=False)
    subprocess.run(["podman", "volume", "rm", "-f", f"megaprov-lab-{README_LAB}-shared"], capture_output=True, env=podman_env, check=False)

    started = time.monotonic()
    log_path = clone.parent / "run-lab.log"
    burner = None
    marks: dict[str, float] = {}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            ["./scripts/run-lab.sh"], cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL
        )
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if line.startswith("bootstrap ok") and burner is None:
                    marks["bootstrap"] = time.monotonic() - started
                    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
                if line.startswith("verdict for job"):
                    marks["train"] = time.monotonic() - started
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
            if burner is not None:
                burner.kill()
                burner.wait()
    output = log_path.read_text()
    inventory = clone.parent / "xdg-state" / "megaprov" / "lab" / README_LAB / "inventory.ini"
    try:
        yield {
            "clone": clone,
            "code": code,
            "output": output,
            "seconds": round(time.monotonic() - started, 1),
            "marks": marks,
            "burner": burner is not None,
            "inventory": str(inventory),
            "nodes": _lab_nodes(inventory) if inventory.is_file() else [],
            "env": env,
        }
    finally:
        if Path(megaprov_clone[0]).exists():
            subprocess.run(megaprov_clone + ["lab", "down", "--name", README_LAB], env=env, capture_output=True, check=False, timeout=300)


def _lab_nodes(inventory: Path) -> list[dict[str, str]]:
    """name, address and container of each node of a lab inventory (as `lab up --output json` gives them)."""
    lab = inventory.parent.name
    nodes = []
    for line in inventory.read_text().splitlines():
        match = re.match(r"^(node\d+) .*ansible_host=(\S+)", line)
        if match and match.group(1) not in [n["name"] for n in nodes]:
            nodes.append({"name": match.group(1), "address": match.group(2), "container": f"megaprov-{lab}-{match.group(1)}"})
    return nodes


@pytest.fixture(scope="session")
def bootstrapped(request):
    """The README run's lab: bootstrapped, trained once; the cluster of every test that needs a converged lab.
    MEGAPROV_TEST_BOOTSTRAPPED=INVENTORY (development only) names a converged lab made by a clone's run-lab.sh
    instead (with MEGAPROV_TEST_CLONE=the clone and the XDG_STATE_HOME that run had), so that one test can be rerun
    without the 10-minute README run."""
    given = os.environ.get("MEGAPROV_TEST_BOOTSTRAPPED")
    if given:
        inventory = Path(given).resolve()
        clone = Path(os.environ.get("MEGAPROV_TEST_CLONE", ROOT))
        found = {"inventory": str(inventory), "nodes": _lab_nodes(inventory), "lab": inventory.parent.name}
        return {**found, "megaprov": str(clone / ".venv" / "bin" / "megaprov"), "env": fresh_env()}
    readme_run = request.getfixturevalue("readme_run")
    if readme_run["code"] != 0 or not readme_run["nodes"]:
        pytest.fail(f"the README's main command failed (exit {readme_run['code']}): {readme_run['output'][-3000:]}")
    clone_megaprov = str(readme_run["clone"] / ".venv" / "bin" / "megaprov")
    return {
        "inventory": readme_run["inventory"],
        "nodes": readme_run["nodes"],
        "lab": README_LAB,
        "megaprov": clone_megaprov,
        "env": readme_run["env"],
    }

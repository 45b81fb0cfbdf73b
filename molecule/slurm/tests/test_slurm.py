"""Slurm as it really runs: slurmctld on the controller (no compute node), slurmd configless on the gpu_nodes, every
node idle with the Gres its slurm_gpus_per_node says, jobs placed by the cluster user, GPU requests honoured or
refused, the health check draining and resuming a node, and the epilog killing what a job left behind."""

import pytest
from conftest import node_states

from tests.molecule.inventory import USER, as_user, controller, names, node, variable, wait

HEAD = names("head")
COMPUTE = names("gpu_nodes")


@pytest.mark.parametrize("name", HEAD)
def test_slurmctld_runs_on_the_controller(name):
    host = node(name)
    service = host.service("slurmctld")
    assert service.is_running and service.is_enabled
    assert host.file("/etc/slurm/slurm.conf").is_file
    assert not host.package("slurmd").is_installed  # the controller is not a compute node here


@pytest.mark.parametrize("name", COMPUTE)
def test_slurmd_runs_configless_on_the_compute_nodes(name):
    host = node(name)
    service = host.service("slurmd")
    assert service.is_running and service.is_enabled
    assert not host.file("/etc/slurm/slurm.conf").exists, "configless: slurm.conf lives on the controller only"
    fetched = host.file("/run/slurm/conf/slurm.conf")
    assert fetched.is_file, "slurmd did not fetch its configuration from slurmctld"
    assert fetched.content_string == controller().file("/etc/slurm/slurm.conf").content_string


@pytest.mark.parametrize("name", COMPUTE)
def test_slurmd_loads_its_pmix_plugin(name):
    # mpi/pmix dlopens libpmix.so (the -dev package's link): without it slurmd logs this at every start
    log = node(name).check_output("cat /var/log/slurm/slurmd.log")
    assert "can not load PMIx library" not in log and "slurmd started" in log


def test_every_compute_node_is_idle_and_only_they_are_nodes():
    out = controller().check_output("sinfo -h -N -o '%N %T'")
    states = dict(line.split() for line in out.splitlines())
    assert states == {name: "idle" for name in COMPUTE}, out


def test_a_step_on_every_node_as_the_cluster_user():
    out = as_user(controller(), f"srun -N{len(COMPUTE)} hostname")
    assert out.rc == 0, (out.rc, out.stdout, out.stderr)
    assert sorted(out.stdout.split()) == sorted(COMPUTE)


def test_gpus_asked_for_are_given():
    out = as_user(controller(), f"srun -N{len(COMPUTE)} --gpus-per-node=2 printenv CUDA_VISIBLE_DEVICES")
    assert out.rc == 0, (out.rc, out.stdout, out.stderr)
    assert out.stdout.split() == ["0,1"] * len(COMPUTE)


def test_more_gpus_than_a_node_has_are_refused():
    out = as_user(controller(), "srun -N1 --gpus-per-node=3 true")
    assert out.rc != 0
    assert "Requested node configuration is not available" in out.stderr, out.stderr


@pytest.mark.parametrize("name", COMPUTE)
def test_each_node_registered_the_gres_of_its_gpus(name):
    line = controller().check_output(f"scontrol show node {name} -o")
    fields = dict(word.partition("=")[::2] for word in line.split() if "=" in word)
    gpus = int(variable(name, "slurm_gpus_per_node"))
    assert gpus > 0
    assert fields["Gres"] == f"gpu:{gpus}", line


# The health check, on the last compute node; the epilog test, on the first (each leaves its node idle).
SICK = COMPUTE[-1]
HEALTH = "/usr/local/sbin/megaprov-slurm-health"


def reasons():
    """{node: reason} from `sinfo -R` on the controller."""
    out = controller().check_output("sinfo -R -h -N -o '%N|%E'")
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


@pytest.fixture
def gpu_device_gone():
    """SICK without /dev/nvidia1 (a GPU fallen off the bus); afterwards the device is back (the character device
    podman mapped there: /dev/zero, 1:5), the health check has run and the node is idle again."""
    host = node(SICK)
    assert host.run("test -c /dev/nvidia1").rc == 0, "no stand-in GPU device (molecule.yml's devices)"
    host.check_output("rm /dev/nvidia1")
    try:
        yield host
    finally:
        host.run("test -c /dev/nvidia1 || mknod -m 0666 /dev/nvidia1 c 1 5")
        host.run(HEALTH)
        if not wait(lambda: node_states().get(SICK, ("", ""))[0] == "idle", timeout=30):
            controller().run(f"scontrol update nodename={SICK} state=resume")


def test_the_health_check_drains_a_node_missing_a_gpu_and_resumes_it(gpu_device_gone):
    host = gpu_device_gone
    dry = host.run(f"{HEALTH} --dry-run")
    assert dry.rc == 1 and dry.stdout.strip() == "megaprov health: /dev/nvidia1 missing", (dry.rc, dry.stdout, dry.stderr)
    assert node_states()[SICK][0] == "idle"  # --dry-run changes nothing

    host.check_output(HEALTH)
    drained = wait(lambda: reasons().get(SICK, "").startswith("megaprov health:"), timeout=20)
    assert drained, f"sinfo -R: {reasons()}"
    assert reasons()[SICK] == "megaprov health: /dev/nvidia1 missing"
    assert node_states()[SICK][0] in ("drained", "draining")
    others = {n: s for n, (s, _r) in node_states().items() if n != SICK}
    assert set(others.values()) == {"idle"}, others

    host.check_output("mknod -m 0666 /dev/nvidia1 c 1 5")
    assert host.run(f"{HEALTH} --dry-run").stdout.strip() == "healthy"
    host.check_output(HEALTH)
    assert wait(lambda: node_states()[SICK] == ("idle", ""), timeout=20), node_states()
    assert SICK not in reasons()


def test_the_health_check_leaves_an_operators_drain_alone(gpu_device_gone):
    host = gpu_device_gone
    controller().check_output(f"scontrol update nodename={SICK} state=drain reason='maintenance by ops'")
    try:
        host.check_output(HEALTH)  # a problem (the missing device) on a node an operator drained
        assert reasons().get(SICK) == "maintenance by ops", reasons()
        host.check_output("mknod -m 0666 /dev/nvidia1 c 1 5")
        host.check_output(HEALTH)  # healthy again: still the operator's to resume
        assert reasons().get(SICK) == "maintenance by ops" and node_states()[SICK][0] == "drained", (reasons(), node_states())
    finally:
        controller().run(f"scontrol update nodename={SICK} state=resume")


STRAY = "sleep 1000"


def strays(host):
    return host.run(f"pgrep -u {USER} -x -f '{STRAY}'").stdout.split()


def test_the_epilog_kills_what_a_job_left_behind():
    name = COMPUTE[0]
    host = node(name)
    assert strays(host) == []
    out = as_user(controller(), f"srun -N1 -w {name} bash -c 'echo $SLURM_JOB_ID; setsid {STRAY} </dev/null >/dev/null 2>&1 & disown; exit 0'")
    assert out.rc == 0, (out.rc, out.stdout, out.stderr)
    job = out.stdout.strip()
    assert job.isdigit(), out.stdout
    assert wait(lambda: strays(host) == [], timeout=30), f"left on {name}: {strays(host)}"
    # the epilog (not the step's end) killed it, and says so
    log = host.check_output("journalctl -q -t megaprov-slurm-epilog -o cat")
    assert f"job {job}: killing 1 process(es) left behind" in log, log
    assert wait(lambda: node_states()[name] == ("idle", ""), timeout=20), node_states()


def test_accounting_records_jobs_and_keeps_its_password_private():
    head = controller()
    assert head.service("slurmdbd").is_running and head.service("slurmdbd").is_enabled
    assert head.service("mariadb").is_running
    conf = head.file("/etc/slurm/slurmdbd.conf")
    assert (conf.user, conf.group, conf.mode) == ("slurm", "slurm", 0o600)
    password = head.file("/etc/megaprov/slurm/dbd.password")
    assert (password.user, password.mode, head.file("/etc/megaprov/slurm").mode) == ("root", 0o600, 0o700)
    secret = password.content_string.strip()
    assert len(secret) >= 32 and f"StoragePass={secret}" in head.check_output("cat /etc/slurm/slurmdbd.conf")
    config = dict(line.split("=", 1) for line in head.check_output("scontrol show config").splitlines() if "=" in line)
    assert {k.strip(): v.strip() for k, v in config.items()}["AccountingStorageType"] == "accounting_storage/slurmdbd"
    out = as_user(head, f"srun -N1 -w {COMPUTE[0]} true; echo done")
    assert out.rc == 0, out.stderr

    # the step's job reaches the database (slurmctld sends it on completion; give it a moment)
    def states():
        rows = head.check_output(f"sacct -n -X -P -u {USER} -o JobID,State").splitlines()
        return [row.split("|")[1] for row in rows if "|" in row]

    assert wait(lambda: "COMPLETED" in states(), timeout=30), head.run(f"sacct -n -X -u {USER}").stdout
    # the cluster is registered with slurmdbd
    assert "megaprov" in head.check_output("sacctmgr -n -P show cluster format=cluster").split()

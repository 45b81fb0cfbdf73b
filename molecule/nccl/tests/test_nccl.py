"""nccl-tests really built, as the cluster user on the share, against the NCCL training loads.

The node has two NCCLs: the system libnccl2 2.21.5 (pinned and held, from the fixture repository) and the training
environment's nvidia-nccl-cu13 wheel. The binary must resolve libnccl.so.2 to the wheel (RUNPATH, ldd) and report
the wheel's version when it runs; both versions are printed for the record."""

import json

from tests.molecule.inventory import scenario_hosts

testinfra_hosts = list(scenario_hosts().values())  # from Molecule's inventory

TESTS = "/srv/shared/opt/nccl-tests-v2.17.1"
BINARY = f"{TESTS}/build/all_reduce_perf"
VENV = "/opt/megaprov/venv"


def status(host, name):
    return host.check_output(f"dpkg-query -W -f='${{Version}} ${{db:Status-Abbrev}}' {name}").split()


def training_nccl(host):
    """What the training environment's NCCL wheel holds, asked with the environment's own Python."""
    code = (
        "import importlib.metadata as m, os, json;"
        "d = m.distribution('nvidia-nccl-cu13');"
        "lib = [os.path.realpath(d.locate_file(f)) for f in d.files if str(f).endswith('libnccl.so.2')][0];"
        "print(json.dumps({'version': d.version, 'lib': lib}))"
    )
    return json.loads(host.check_output(f'{VENV}/bin/python -c "{code}"'))


def test_system_nccl_pinned_for_its_cuda_version_and_held(host):
    # The fixture repository also serves 2.23.4-1+cuda12.6, which apt would pick without the pin.
    assert status(host, "libnccl2") == ["2.21.5-1+cuda12.4", "hi"]
    assert status(host, "libnccl-dev") == ["2.21.5-1+cuda12.4", "hi"]


def test_mpi_for_nccl_tests(host):
    assert host.exists("mpirun") and host.package("libopenmpi-dev").is_installed


def test_nccl_tests_checked_out_and_built_by_the_cluster_user(host):
    checkout = host.file(TESTS)
    assert checkout.is_directory and checkout.user == "megaprov"
    tag = host.check_output(f"git -C {TESTS} -c safe.directory='*' describe --tags --exact-match")
    assert tag == "v2.17.1"
    binary = host.file(BINARY)
    assert binary.is_file and binary.user == "megaprov" and binary.mode & 0o111
    # Root-squash: nothing on the share belongs to root (a squashed root could not have written it).
    assert host.check_output("find /srv/shared -not -user megaprov -printf '%p\\n'") == ""


def test_the_binary_is_real_cuda_code_for_the_gpu_model(host):
    # megaprov_gpu_model H100-SXM: NVCC_GENCODE=sm_90 only. cuobjdump reads the fat binary nvcc embedded.
    cuobjdump = "/usr/local/cuda-13.0/bin/cuobjdump"
    if host.file(cuobjdump).exists:
        assert "sm_90" in host.check_output(f"{cuobjdump} --list-elf {BINARY}")
    assert "nv_fatbin" in host.check_output(f"readelf -S -W {BINARY}")


def test_the_binary_links_the_training_environments_nccl(host):
    wheel = training_nccl(host)
    runpath = host.check_output(f"readelf -d {BINARY}")
    assert "RUNPATH" in runpath and wheel["lib"].rsplit("/", 1)[0] in runpath
    # As the cluster user runs it: the dynamic linker picks the wheel, not /usr/lib/x86_64-linux-gnu/libnccl.so.2.
    ldd = host.check_output(f"runuser -u megaprov -- ldd {BINARY}")
    line = next(x for x in ldd.splitlines() if x.strip().startswith("libnccl.so.2"))
    loaded = host.check_output(f"readlink -f {line.split('=>')[1].split()[0]}")
    assert loaded == wheel["lib"], ldd
    assert "libmpi.so" in ldd and "libcudart.so.13" in ldd and "not found" not in ldd


def test_running_it_reports_the_training_nccl_and_not_the_system_one(host):
    wheel = training_nccl(host)
    run = host.run(f"runuser -u megaprov -- mpirun -np 1 {BINARY}")
    first = run.stdout.splitlines()[0]
    major, minor, patch = (int(x) for x in wheel["version"].split("."))
    code = major * 10000 + minor * 100 + patch
    assert f"nccl-headers={code} nccl-library={code} mpi=1" in first, run.stdout + run.stderr
    assert "# no GPU" in run.stdout  # and exits non-zero: there is no GPU here
    system = status(host, "libnccl2")[0]
    print(f"NCCL versions: training environment {wheel['version']} (nccl-tests runs it), system libnccl2 {system}")
    assert not system.startswith(wheel["version"])


def test_the_build_stamp_names_what_it_was_built_with(host):
    stamps = host.check_output(f"cat {TESTS}/build/.megaprov-*")
    assert "nccl=" in stamps and "libnccl.so.2 2.30.7" in stamps and "gencode=-gencode=arch=compute_90,code=sm_90" in stamps

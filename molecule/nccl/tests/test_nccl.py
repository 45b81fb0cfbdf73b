"""NCCL pinned for CUDA 12.4 and held; nccl-tests at its tag in the shared directory, owned by the cluster user."""

testinfra_hosts = ["podman://nccl1"]


def status(host, name):
    return host.check_output(f"dpkg-query -W -f='${{Version}} ${{db:Status-Abbrev}}' {name}").split()


def test_nccl_pinned_for_the_cuda_version_and_held(host):
    # The fixture repository also serves 2.23.4-1+cuda12.6, which apt would pick without the pin.
    assert status(host, "libnccl2") == ["2.21.5-1+cuda12.4", "hi"]
    assert status(host, "libnccl-dev") == ["2.21.5-1+cuda12.4", "hi"]


def test_mpi_for_nccl_tests(host):
    assert host.exists("mpirun") and host.package("libopenmpi-dev").is_installed


def test_nccl_tests_checked_out_at_the_tag_by_the_cluster_user(host):
    checkout = host.file("/srv/shared/opt/nccl-tests-v2.17.1")
    assert checkout.is_directory and checkout.user == "megaprov"
    tag = host.check_output("git -C /srv/shared/opt/nccl-tests-v2.17.1 -c safe.directory='*' describe --tags --exact-match")
    assert tag == "v2.17.1"
    # No GPU and no nvcc here: nothing was built.
    assert not host.file("/srv/shared/opt/nccl-tests-v2.17.1/build").exists

"""The infiniband role's detection on fake sysfs trees: InfiniBand, RoCE, ports down, and no device."""

from pathlib import Path

from tests.conftest import load_module

ROOT = Path(__file__).resolve().parents[2]
rdma = load_module(ROOT / "roles" / "infiniband" / "library" / "megaprov_rdma_facts.py", "megaprov_rdma_facts")


def fake_port(root: Path, dev: str, port: int, state: str, rate: str, layer: str) -> None:
    d = root / dev / "ports" / str(port)
    d.mkdir(parents=True)
    (d / "state").write_text(state + "\n")
    (d / "rate").write_text(rate + "\n")
    (d / "link_layer").write_text(layer + "\n")


def test_infiniband_ports(tmp_path):
    fake_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "400 Gb/sec (4X NDR)", "InfiniBand")
    fake_port(tmp_path, "mlx5_1", 1, "4: ACTIVE", "400 Gb/sec (4X NDR)", "InfiniBand")
    fake_port(tmp_path, "mlx5_2", 1, "1: DOWN", "10 Gb/sec (4X SDR)", "InfiniBand")
    found = rdma.ports(str(tmp_path))
    assert [(p["device"], p["state"]) for p in found] == [("mlx5_0", "ACTIVE"), ("mlx5_1", "ACTIVE"), ("mlx5_2", "DOWN")]
    env, summary = rdma.nccl_env(found, "ens1f0", 3, {})
    assert env == {"NCCL_SOCKET_IFNAME": "ens1f0", "GLOO_SOCKET_IFNAME": "ens1f0", "NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1"}
    assert summary.startswith("RDMA: 2 active port(s) (InfiniBand): mlx5_0:1,mlx5_1:1")


def test_roce_gets_a_gid_index(tmp_path):
    fake_port(tmp_path, "mlx5_bond_0", 1, "4: ACTIVE", "200 Gb/sec (4X HDR)", "Ethernet")
    env, summary = rdma.nccl_env(rdma.ports(str(tmp_path)), "bond0", 3, {"NCCL_IB_QPS_PER_CONNECTION": 4})
    assert env["NCCL_IB_GID_INDEX"] == "3" and env["NCCL_IB_HCA"] == "mlx5_bond_0:1"
    assert env["NCCL_IB_QPS_PER_CONNECTION"] == "4"
    assert "(RoCE)" in summary


def test_devices_with_no_active_port_fall_back_to_sockets_and_say_so(tmp_path):
    fake_port(tmp_path, "mlx5_0", 1, "1: DOWN", "10 Gb/sec", "InfiniBand")
    env, summary = rdma.nccl_env(rdma.ports(str(tmp_path)), "eth0", 3, {})
    assert env["NCCL_IB_DISABLE"] == "1" and "NCCL_IB_HCA" not in env
    assert summary == "RDMA devices present but no port is ACTIVE (mlx5_0:1 DOWN): NCCL will use TCP sockets on eth0"


def test_no_device(tmp_path):
    env, summary = rdma.nccl_env(rdma.ports(str(tmp_path / "absent")), "eth0", 3, {})
    assert env == {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "1"}
    assert summary == "no RDMA device: NCCL will use TCP sockets on eth0"


bw = load_module(ROOT / "roles" / "infiniband" / "library" / "megaprov_ib_write_bw.py", "megaprov_ib_write_bw")

# perftest's result table (ib_write_bw -D 5 -F --report_gbits), as printed by the client.
IB_WRITE_BW_OUTPUT = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF          Device         : mlx5_0
 Number of qps   : 1            Transport type : IB
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      3741120          0.00               392.27               0.748204
---------------------------------------------------------------------------------------
"""


def test_ib_write_bw_average_is_parsed():
    assert bw.parse_average_gbps(IB_WRITE_BW_OUTPUT) == 392.27


def test_ib_write_bw_without_a_table():
    assert bw.parse_average_gbps(" Couldn't connect to 10.0.0.2:18515\n") is None

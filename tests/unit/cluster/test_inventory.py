import textwrap
from pathlib import Path

import pytest

from megaprov.cluster import inventory as inv
from megaprov.errors import InventoryError

ROOT = Path(__file__).resolve().parents[3]
ROLES = ROOT / "ansible_collections/megaprov/cluster/roles"
DEFAULTS = ROOT / "ansible_collections/megaprov/cluster/roles/megaprov/defaults/main.yml"


def write(tmp_path, text, group_vars=None):
    path = tmp_path / "inventory.ini"
    path.write_text(textwrap.dedent(text))
    for name, body in (group_vars or {}).items():
        (tmp_path / "group_vars").mkdir(exist_ok=True)
        (tmp_path / "group_vars" / name).write_text(textwrap.dedent(body))
    return path


def load(path):
    return inv.load(path, ROLES, DEFAULTS)


GOOD = """
    [head]
    head1 ansible_host=10.0.0.1

    [gpu_nodes]
    gpu[01:03] ansible_user=ubuntu

    [gpu_nodes:vars]
    megaprov_gpus_per_node=8
"""


def test_a_valid_inventory_expands_ranges_and_merges_vars(tmp_path):
    inventory = load(write(tmp_path, GOOD, {"all.yml": "megaprov_cluster_user: trainer\n"}))
    assert inventory.hosts_of("gpu_nodes") == ["gpu01", "gpu02", "gpu03"]
    assert inventory.head == "head1"
    assert inventory.host_var("gpu02", "megaprov_gpus_per_node") == 8  # a Python literal in [group:vars], as Ansible reads it
    assert inventory.host_var("gpu02", "megaprov_cluster_user") == "trainer"
    assert inventory.host_var("head1", "megaprov_shared_dir") == "/shared"  # from inventories/defaults.yml
    assert inventory.hosts["gpu03"].vars["ansible_user"] == "ubuntu"


def test_children_groups_resolve(tmp_path):
    inventory = load(
        write(
            tmp_path,
            """
        [head]
        h1
        [rack_a]
        a1
        a2
        [gpu_nodes:children]
        rack_a
    """,
        )
    )
    assert inventory.hosts_of("gpu_nodes") == ["a1", "a2"]
    assert "gpu_nodes" in inventory.hosts["a1"].groups


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[head]\nh1\n", r"group \[gpu_nodes\] is missing or empty"),
        ("[gpu_nodes]\nn1\n", r"group \[head\] is missing or empty"),
        ("[head]\nh1\nh2\n[gpu_nodes]\nn1\n", r"\[head\] has 2 hosts"),
        ("[head]\nh1\n[gpu_nodes]\nn1\nn1\n", r"host 'n1' is listed twice in \[gpu_nodes\]"),
        ("[head]\nh1 ansible_host=10.0.0.1\n[gpu_nodes]\nn1 ansible_host=10.0.0.1\n", r"both point at 10.0.0.1:22"),
        ("[head\nh1\n", r"unclosed section header"),
        ("[head:hosts]\nh1\n", r"unknown section kind ':hosts'"),
        ("[head]\nh1 ansible_port\n", r"'ansible_port' is not key=value"),
        ("[head]\nh1 ansible_port=abc\n[gpu_nodes]\nn1\n", r"ansible_port='abc' must be a whole number"),
        ("[head]\nh1 ansible_port=70000\n[gpu_nodes]\nn1\n", r"must be between 1 and 65535"),
        ("[head]\nbad_host!\n", r"'bad_host!' is not a valid host name"),
        ("[head]\nn[3:1]\n", r"empty host range"),
        ("[my-group]\nh1\n", r"invalid group name 'my-group'"),
        ("[head]\nh1\n[gpu_nodes:children]\nracks\n", r"names group 'racks', which is not defined"),
        ("[head]\nh1\n[gpu_nodes]\nn1\n[all:vars]\nmegaprov_gpu_expected=maybe\n", r"megaprov_gpu_expected='maybe' must be true or false"),
        ("[head]\nh1\n[gpu_nodes]\nn1\n[all:vars]\nmegaprov_shared_dir=shared\n", r"must be an absolute path"),
        (
            "[head]\nh1\n[gpu_nodes]\nn1\n[all:vars]\nmegaprov_cluster_usr=x\n",
            r"unknown variable megaprov_cluster_usr: did you mean megaprov_cluster_user\?",
        ),
        ("[head]\nh1\n[gpu_nodes]\nn1\n[all:vars]\nssh_mesh_check_timeout=soon\n", r"ssh_mesh_check_timeout='soon' must be a whole number"),
        ("[head]\nh1\n[gpu_nodes]\nn1\n[all:vars]\npreflight_write_below_min=ignore\n", r"must be one of warn, fail"),
        ("[head]\nh1\n[gpu_nodes]\nn1 x='unclosed\n", r"close the quotes"),
    ],
)
def test_bad_inventories_name_the_problem(tmp_path, text, expected):
    with pytest.raises(InventoryError, match=expected):
        load(write(tmp_path, text))


def test_group_vars_are_type_checked_with_the_file_named(tmp_path):
    path = write(tmp_path, GOOD, {"gpu_nodes.yml": "megaprov_gpus_per_node: eight\n"})
    with pytest.raises(InventoryError) as err:
        load(path)
    assert "group_vars/gpu_nodes.yml: megaprov_gpus_per_node='eight' must be a whole number" in err.value.one_line()


def test_group_vars_for_an_unknown_group_are_rejected(tmp_path):
    with pytest.raises(InventoryError, match="group_vars for unknown group 'gpus'"):
        load(write(tmp_path, GOOD, {"gpus.yml": "x: 1\n"}))


def test_invalid_yaml_reports_the_line(tmp_path):
    with pytest.raises(InventoryError, match=r"all.yml:[23]: invalid YAML"):
        load(write(tmp_path, GOOD, {"all.yml": "a: 1\nb: [unclosed\n"}))


def test_templated_values_are_left_to_ansible(tmp_path):
    # a role's own setting, which megaprov neither reads nor types (megaprov_* settings must be literal)
    load(write(tmp_path, GOOD, {"all.yml": "preflight_min_cpus: '{{ cpus }}'\n"}))


def test_missing_and_yaml_inventories(tmp_path):
    with pytest.raises(InventoryError, match="does not exist"):
        load(tmp_path / "nope.ini")
    (tmp_path / "hosts.yml").write_text("all: {}\n")  # read by Ansible: no groups in it
    with pytest.raises(InventoryError, match=r"group \[head\] is missing or empty"):
        load(tmp_path / "hosts.yml")


def test_the_cluster_settings_are_the_megaprov_roles_options():
    """The megaprov_* settings are the options of the collection's `megaprov` role: its defaults pass their own types,
    and every megaprov_* variable a playbook or role reads (but megaprov_job, megaprov's extra var) is one of them."""
    import re

    import yaml

    defaults = yaml.safe_load(DEFAULTS.read_text())
    specs = inv.role_specs(ROLES)
    assert {name for name, spec in specs.items() if spec["role"] == "megaprov"} == set(defaults)
    for name, value in defaults.items():
        assert inv.check_type(name, value, specs[name]) is None, name
    collection = ROLES.parent
    read = set()
    for path in [*collection.glob("playbooks/*.yml"), *ROLES.glob("*/*/*.yml"), *ROLES.glob("*/templates/*.j2")]:
        read |= set(re.findall(r"\b(megaprov_[a-z_]+)\b", path.read_text()))
    # local facts (facts.d), a registered result and the extra var megaprov passes
    local_facts = {"megaprov_preflight", "megaprov_compute", "megaprov_python", "megaprov_fabric", "megaprov_cache"}
    local_facts |= {"megaprov_job", "megaprov_job_unit_state", "megaprov_logs", "megaprov_logs_read", "megaprov_doctor"}
    local_facts |= {"megaprov_status", "megaprov_status_sinfo"}  # megaprov status's extra var and its sinfo result
    local_facts |= {"megaprov_probe", "megaprov_check", "megaprov_image"}  # the extra vars of train's image probe and checks, and of image pull
    # the observe stage's metric families and the files of its collectors (megaprov_gpu.prom, megaprov_jobs.prom, ...)
    local_facts |= {"megaprov_node_info", "megaprov_node_gpus_expected", "megaprov_shared_dir_info", "megaprov_node", "megaprov_gpu"}
    local_facts |= {"megaprov_gpu_metrics", "megaprov_job_metrics", "megaprov_jobs", "megaprov_alert_recorder"}
    assert read - local_facts <= set(defaults), sorted(read - local_facts - set(defaults))


def test_the_example_inventory_is_valid():
    example = inv.load(ROOT / "inventories" / "example" / "inventory.ini", ROLES, DEFAULTS)
    assert example.hosts_of("gpu_nodes") == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert example.host_var("gpu03", "megaprov_gpus_per_node") == 8
    assert example.host_var("head01", "megaprov_gpu_expected") is False


STORAGE_BASE = "[head]\nh ansible_host=10.0.0.1\n[gpu_nodes]\ng1 ansible_host=10.0.0.2\n"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("[nfs_server]\ng1\nh\n", "[nfs_server] has 2 hosts: put exactly one host in [nfs_server]"),
        ("[all:vars]\nmegaprov_shared_dir=shared\n", "megaprov_shared_dir='shared' must be an absolute path"),
        ("[all:vars]\nmegaprov_shared_dir=/\n", "the shared directory '/' must be an absolute path other than /"),
        ("[all:vars]\nmegaprov_shared_dir=/var\n", "the shared directory /var and megaprov_scratch_dir=/var/tmp (host"),
        ("[all:vars]\nnfs_server_clients_cidr=10.0.0.0/33\n", "nfs_server_clients_cidr='10.0.0.0/33' is not a CIDR"),
    ],
)
def test_storage_settings_are_checked_before_connecting(tmp_path, extra, message):
    path = tmp_path / "inventory.ini"
    path.write_text(STORAGE_BASE + extra)
    with pytest.raises(InventoryError) as info:
        inv.load(
            path, ROOT / "ansible_collections/megaprov/cluster/roles", ROOT / "ansible_collections/megaprov/cluster/roles/megaprov/defaults/main.yml"
        )
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("group_vars", "expected"),
    [
        (
            "nvidia_driver_branch: '535'\ncuda_version: '12.4'\n",
            "nvidia_driver_branch=535 (host gpu01) is too old for cuda_version=12.4, which needs driver branch >= 550",
        ),
        ("cuda_version: '12.7'\n", "cuda_version=12.7 (host gpu01) is not a CUDA toolkit release"),
        # The old defaults (driver 550, CUDA 12.4) with torch 2.13: cu124 ends at torch 2.6 (the collection's meta/compat.yml).
        (
            "nvidia_driver_branch: '550'\ncuda_version: '12.4'\n",
            "pytorch_version=2.13.0 (host gpu01) has no CUDA 12 build for cuda_version=12.4 (torch 2.13 is built for CUDA 12.6, 13.0, 13.2",
        ),
        (
            "nvidia_driver_branch: '550'\ncuda_version: '13.0'\n",
            "nvidia_driver_branch=550 (host gpu01) is too old for cuda_version=13.0, which needs driver branch >= 580",
        ),
        # No toolkit on the nodes, but torch's CUDA 13 wheels still need a CUDA 13 driver (torch saw 0 GPUs on 550).
        (
            "cuda_method: none\nnvidia_driver_branch: '550'\n",
            "nvidia_driver_branch=550 (host gpu01) is too old for torch 2.13.0 cu130 (CUDA 13 wheels need driver branch >= 580)",
        ),
        (
            "pytorch_cuda_tag: cu124\n",
            "pytorch_cuda_tag=cu124 (host gpu01) is not a build of torch 2.13 (download.pytorch.org has cu126, cu130, cu132)",
        ),
        (
            "megaprov_gpu_model: B200\nnvidia_driver_branch: '560'\ncuda_version: '12.6'\n",
            "nvidia_driver_branch=560 (host gpu01) is too old for megaprov_gpu_model=B200 (Blackwell), which needs driver branch >= 570",
        ),
        (
            "megaprov_gpu_model: B200\nnvidia_driver_open: false\n",
            "nvidia_driver_open=false (host gpu01) but megaprov_gpu_model=B200 (Blackwell) runs only with NVIDIA's open kernel modules: "
            "set nvidia_driver_open: true",
        ),
        ("nvidia_driver_method: runfile\n", "nvidia_driver_method='runfile' must be one of cuda_repo, distro, preinstalled"),
        ("megatron_core_version: '0.15.0'\n", "megatron_core_version=0.15.0 (host gpu01) does not match megatron_version=core_v0.16.1"),
        ("pytorch_source: wheelhouse\n", "pytorch_source=wheelhouse (host gpu01) but pytorch_wheelhouse is unset"),
        (
            "megaprov_offline: true\nnvidia_driver_repo_url: http://mirror/cuda/\n",
            "megaprov_offline is true but nvidia_driver_keyring_url, nccl_tests_repo, megatron_repo, "
            "pytorch_index_url (or pytorch_source: wheelhouse)",
        ),
    ],
)
def test_gpu_stack_settings_fail_before_any_connection(tmp_path, group_vars, expected):
    with pytest.raises(InventoryError) as err:
        load(write(tmp_path, GOOD, {"gpu_nodes.yml": group_vars}))
    assert expected in str(err.value)


def test_gpu_stack_settings_that_fit_pass(tmp_path):
    offline = """\
        megaprov_offline: true
        nvidia_driver_branch: '570'
        cuda_version: '12.8'
        nvidia_driver_repo_url: http://mirror/cuda/
        nvidia_driver_keyring_url: http://mirror/cuda/cuda-keyring_1.1-1_all.deb
        nccl_tests_repo: http://mirror/git/nccl-tests.git
        megatron_repo: http://mirror/git/Megatron-LM.git
        pytorch_source: wheelhouse
        pytorch_wheelhouse: /shared/wheels
        """
    inventory = load(write(tmp_path, GOOD, {"gpu_nodes.yml": offline}))
    assert inventory.host_var("gpu01", "cuda_version") == "12.8"  # torch 2.13's cu126 under nvcc 12.8: same major
    # Neither the toolkit nor a CUDA torch build: the driver branch does not matter.
    load(write(tmp_path, GOOD, {"gpu_nodes.yml": "cuda_method: none\npytorch_build: cpu\nnvidia_driver_branch: '470'\n"}))
    # The defaults (driver 580, CUDA 13.0, torch 2.13.0 cu130) on the generations that need the most.
    for model in ("B200", "GB200", "GH200", "H100-SXM", "A100-80GB"):
        load(write(tmp_path, GOOD, {"gpu_nodes.yml": f"megaprov_gpu_model: {model}\n"}))


def test_templated_gpu_stack_values_skip_only_their_checks(tmp_path):
    # megaprov cannot evaluate a Jinja expression before it connects: the checks that need it are left to the roles.
    load(write(tmp_path, GOOD, {"gpu_nodes.yml": "cuda_version: \"{{ site_cuda }}\"\nnvidia_driver_branch: '550'\n"}))
    load(write(tmp_path, GOOD, {"gpu_nodes.yml": "nvidia_driver_branch: \"{{ site_branch }}\"\ncuda_version: '13.0'\n"}))
    with pytest.raises(InventoryError, match="pytorch_cuda_tag=cu124 .host gpu01. is not a build of torch 2.13"):
        load(write(tmp_path, GOOD, {"gpu_nodes.yml": 'nvidia_driver_branch: "{{ site_branch }}"\npytorch_cuda_tag: cu124\n'}))


def test_inline_comments_are_read_as_ansible_reads_them(tmp_path):
    # ansible-inventory --list on this text: n2's foo is "bar", x is 8080, z is "/srv/shared" (checked with ansible-core 2.19)
    path = write(
        tmp_path,
        """
        [head] # the controller
        n1 ansible_host=10.0.0.1 # the head
        [gpu_nodes]
        n2 ansible_host="10.0.0.2" foo=bar#baz  # a worker
        [gpu_nodes:children] # none
        [all:vars]
        x=8080 # a port
        megaprov_shared_dir='/srv/shared' # quoted, so the comment is dropped
    """,
    )
    inventory = load(path)
    assert inventory.hosts["n1"].vars == {"ansible_host": "10.0.0.1"}
    assert inventory.hosts["n2"].vars == {"ansible_host": "10.0.0.2", "foo": "bar"}
    assert inventory.host_var("n2", "x") == 8080 and inventory.host_var("n2", "megaprov_shared_dir") == "/srv/shared"


def test_an_unquoted_value_with_a_comment_is_named(tmp_path):
    with pytest.raises(InventoryError, match="Ansible keeps ' #...' as part of an unquoted value"):
        load(write(tmp_path, "[head]\nn1\n[gpu_nodes]\nn1\n[all:vars]\nmegaprov_shared_dir=/srv # here\n"))


def test_parsing_is_linear(tmp_path):
    import time

    hosts = "\n".join(f"node{i}" for i in range(10_000))
    path = write(tmp_path, f"[head]\nnode0\n[gpu_nodes]\n{hosts}\n")
    # CPU time of this process, not wall time: on a loaded machine (mutation runs, parallel CI jobs) the wall
    # clock of a 1 s parse passed 10 s. Measured here: about 1.2 s of CPU for 10,000 hosts.
    start = time.process_time()
    assert len(load(path).hosts_of("gpu_nodes")) == 10_000
    assert time.process_time() - start < 10  # was quadratic: 40,000 hosts took 66 s


def test_a_huge_range_is_refused_without_expanding_it(tmp_path):
    with pytest.raises(InventoryError, match="expands to 100,000,000 hosts"):
        load(write(tmp_path, "[head]\nh1\n[gpu_nodes]\nnode[0:99999999]\n"))


# ---- read as Ansible reads it (each case checked with `ansible-inventory --list/--host`, ansible-core 2.19.14)


def test_a_zero_padded_range_needs_bounds_of_one_width(tmp_path):
    # Ansible refuses n[01:100] ("host range must specify equal-length begin and end formats"); megaprov took it as
    # n01..n99, n100 and the play then failed to parse the inventory megaprov had accepted.
    with pytest.raises(InventoryError) as err:
        load(write(tmp_path, "[head]\nh1\n[gpu_nodes]\nn[01:100]\n"))
    line = err.value.one_line()
    assert "'n[01:100]'" in line and "same number of digits" in line and "[001:100]" in line
    # What Ansible accepts: padded bounds of one width; an unpadded first bound (a lone 0 is not padding).
    assert load(write(tmp_path, "[head]\nh1\n[gpu_nodes]\nn[001:100]\n")).hosts_of("gpu_nodes")[::33] == ["n001", "n034", "n067", "n100"]
    assert load(write(tmp_path, "[head]\nh1\n[gpu_nodes]\nn[0:10]\n")).hosts_of("gpu_nodes") == [f"n{i}" for i in range(11)]
    assert load(write(tmp_path, "[head]\nh1\n[gpu_nodes]\nn[1:100]\n")).hosts_of("gpu_nodes")[-2:] == ["n99", "n100"]


def test_host_vars_of_a_dotted_host_name(tmp_path):
    # host_vars/n1.example.org.yml belongs to n1.example.org; megaprov cut the name at the first dot and refused
    # the file as "host_vars for unknown host 'n1'".
    path = write(tmp_path, "[head]\nh1\n[gpu_nodes]\nn1.example.org\nn2.example.org\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "n1.example.org.yml").write_text("ansible_user: alice\n")
    (tmp_path / "host_vars" / "n2.example.org").write_text("ansible_user: bob\n")
    inventory = load(path)
    assert inventory.host_var("n1.example.org", "ansible_user") == "alice"
    assert inventory.host_var("n2.example.org", "ansible_user") == "bob"


def test_hidden_files_and_backups_in_vars_directories_are_skipped(tmp_path):
    # A .gitkeep in group_vars/ was "group_vars for unknown group ''"; a hidden or backup file inside group_vars/all/
    # was read although Ansible skips it (ansible-inventory --host n1 shows only b).
    path = write(tmp_path, "[head]\nh1\n[gpu_nodes]\nn1\n")
    gv = tmp_path / "group_vars"
    (gv / "all" / "sub").mkdir(parents=True)
    (gv / ".gitkeep").write_text("")
    (gv / "all.yml~").write_text("a: 1\n")
    (gv / "all" / "main.yml").write_text("b: 2\n")
    (gv / "all" / ".old.yml").write_text("c: 3\n")
    (gv / "all" / "main.yml~").write_text("d: 4\n")
    (gv / "all" / "notes.txt").write_text("e: 5\n")
    (gv / "all" / "sub" / "more").write_text("f: 6\n")
    inventory = load(path)
    assert {k: inventory.host_var("n1", k) for k in "abcdef"} == {"a": None, "b": 2, "c": None, "d": None, "e": None, "f": 6}


def test_a_vars_directory_hides_the_file_of_the_same_name(tmp_path):
    # Ansible's loader takes the first of group_vars/all (file or directory), all.yml, all.yaml, all.json and
    # stops: with both all/ and all.yml, all.yml is never read (ansible-inventory --host n1 shows only b).
    path = write(tmp_path, "[head]\nh1\n[gpu_nodes]\nn1\n")
    (tmp_path / "group_vars" / "all").mkdir(parents=True)
    (tmp_path / "group_vars" / "all.yml").write_text("a: 1\nmegaprov_gpus_per_node: eight\n")  # not read, so not checked
    (tmp_path / "group_vars" / "all" / "main.yml").write_text("b: 2\n")
    inventory = load(path)
    assert (inventory.host_var("n1", "a"), inventory.host_var("n1", "b")) == (None, 2)
    (tmp_path / "group_vars" / "gpu_nodes.yml").write_text("c: 3\n")
    (tmp_path / "group_vars" / "gpu_nodes.json").write_text('{"c": 4, "d": 5}\n')
    inventory = load(path)
    assert (inventory.host_var("n1", "c"), inventory.host_var("n1", "d")) == (3, None)


def test_a_templated_port_is_left_to_ansible(tmp_path):
    # check_type leaves '{{ ... }}' to Ansible; the duplicate-address check then ran int() on it: a ValueError traceback.
    inventory = load(write(tmp_path, '[head]\nh1\n[gpu_nodes]\nn1 ansible_port="{{ site_port }}"\nn2\n'))
    assert inventory.host_var("n1", "ansible_port") == "{{ site_port }}"
    # Literal ports are still compared: the same address on the same port twice is refused.
    with pytest.raises(InventoryError, match="hosts 'n1' and 'n2' both point at n:2222"):
        load(write(tmp_path, "[head]\nh1\n[gpu_nodes]\nn1 ansible_host=n ansible_port=2222\nn2 ansible_host=n ansible_port='2222'\n"))


def test_a_float_variable_must_be_a_number(tmp_path):
    # Four role options are `type: float` (roles/*/meta/argument_specs.yml); no check existed for that type, so
    # infiniband_bw_threshold_gbps=fast passed megaprov and failed in the infiniband role's argument validation.
    base = "[head]\nh1\n[gpu_nodes]\nn1\n[all:vars]\n"
    for value in ("fast", "true", "[1]", "'1,5'"):
        with pytest.raises(InventoryError) as err:
            load(write(tmp_path, base + f"infiniband_bw_threshold_gbps={value}\n"))
        assert "infiniband_bw_threshold_gbps=" in err.value.message and "must be a number" in err.value.message
        assert err.value.hint == "Minimum ib_write_bw average per pair in Gb/s (0 reports without failing)."  # its description
    # What Ansible's float check takes: numbers, and strings float() reads.
    for value, expected in (("2.5", 2.5), ("3", 3), ("'40'", "40"), ("1e3", 1000.0)):
        assert load(write(tmp_path, base + f"infiniband_bw_threshold_gbps={value}\n")).host_var("n1", "infiniband_bw_threshold_gbps") == expected
    assert inv.check_type("x", 0.8, {"type": "float"}) is None
    assert inv.check_type("x", " 2.5 ", {"type": "float"}) is None
    assert inv.check_type("x", None, {"type": "float"}) == "must be a number"


@pytest.mark.parametrize(
    ("host_line", "message", "fix"),
    [
        ("h1 ansible_port=abc", "ansible_port='abc' must be a whole number", "the host's SSH port, a number from 1 to 65535"),
        ("h1 ansible_port=0", "ansible_port=0 must be between 1 and 65535", "the host's SSH port, a number from 1 to 65535"),
        ("h1 ansible_become=maybe", "ansible_become='maybe' must be true or false", "whether Ansible becomes root on the host: true or false"),
        (
            "h1 ansible_ssh_private_key_file=id_rsa",
            "ansible_ssh_private_key_file='id_rsa' must be an absolute path",
            "the absolute path of the SSH private key on this machine",
        ),
    ],
)
def test_a_bad_connection_variable_names_its_fix(tmp_path, host_line, message, fix):
    # The hint of a connection variable was "see roles//README.md": they come from no role.
    with pytest.raises(InventoryError) as err:
        load(write(tmp_path, f"[head]\n{host_line}\n[gpu_nodes]\nn1\n"))
    assert err.value.message.endswith(message) and "host h1" in err.value.message
    assert err.value.hint == fix


def test_a_vars_directory_is_walked_as_ansible_walks_it(tmp_path):
    top = tmp_path / "all"
    (top / "b" / "c").mkdir(parents=True)
    (top / "x.d").mkdir()  # a directory with an extension is not walked (ansible's _get_dir_vars_files)
    for rel in ("z.yml", "a.json", "b/c/deep.yaml", "b/plain", "x.d/skipped.yml", "readme.txt"):
        (top / rel).write_text("{}\n")
    (top / "gone.yml").symlink_to(tmp_path / "nowhere")  # kept, so that reading it names the dangling link
    got = [p.relative_to(top).as_posix() for p in inv._dir_vars_files(top)]
    assert got == ["a.json", "b/c/deep.yaml", "b/plain", "gone.yml", "z.yml"]  # depth first, in sorted order
    path = write(tmp_path, "[head]\nh1\n[gpu_nodes]\nn1\n")
    (tmp_path / "group_vars" / "all").mkdir(parents=True)
    (tmp_path / "group_vars" / "all" / "x.yml").symlink_to(tmp_path / "nowhere")
    with pytest.raises(InventoryError, match=r"group_vars/all/x.yml does not exist \(a dangling symlink\)"):
        load(path)


def test_a_vars_directory_has_at_most_max_hosts_entries(tmp_path):
    # Every entry counts, skipped ones too (the work is bounded whatever the tree holds): 10,000 pass, 10,001 do not.
    top = tmp_path / "all"
    top.mkdir()
    for i in range(9_999):
        (top / f".{i}").touch()
    (top / "vars.yml").write_text("a: 1\n")
    assert inv._dir_vars_files(top) == [top / "vars.yml"]
    (top / ".one-more").touch()
    with pytest.raises(InventoryError) as err:
        inv._dir_vars_files(top)
    assert (err.value.message, err.value.hint) == (f"{top}: more than 10,000 entries", "keep a variables directory to a few files")


def test_an_offline_cluster_with_a_bundle_on_the_head_needs_only_nvidias_repository_named(tmp_path):
    """The bundle served by the package cache carries the git mirrors and the wheels (the roles' defaults follow the
    cache's fact); NVIDIA's apt repository still needs its mirror."""
    bundled = "megaprov_offline: true\nmegaprov_package_cache: true\npackage_cache_bundle: /srv/megaprov/bundle\n"
    with pytest.raises(InventoryError) as err:
        load(write(tmp_path, GOOD, {"gpu_nodes.yml": bundled}))
    assert "nvidia_driver_repo_url, nvidia_driver_keyring_url (host" in str(err.value)
    assert "megatron_repo" not in str(err.value) and "pytorch_index_url" not in str(err.value)
    mirrors = "nvidia_driver_repo_url: http://mirror/cuda/\nnvidia_driver_keyring_url: http://mirror/cuda/cuda-keyring_1.1-1_all.deb\n"
    load(write(tmp_path, GOOD, {"gpu_nodes.yml": bundled + mirrors}))
    # without the cache, the same inventory names every source
    with pytest.raises(InventoryError, match="megatron_repo"):
        load(write(tmp_path, GOOD, {"gpu_nodes.yml": bundled.replace("megaprov_package_cache: true", "megaprov_package_cache: false") + mirrors}))


def test_an_offline_cluster_with_containers_names_their_sources_unless_a_bundle_carries_them(tmp_path):
    """The containers stage downloads NVIDIA's toolkit (its repository and key) and, under Slurm, enroot's .debs and
    pyxis's archive: offline, each needs a mirror, or the bundle on the head, which carries them."""
    mirrors = (
        "megaprov_offline: true\nnvidia_driver_method: preinstalled\nnccl_tests: false\nmegatron_checkout: false\n"
        "pytorch_source: wheelhouse\npytorch_wheelhouse: /shared/wheels\nmegaprov_containers: true\n"
    )
    with pytest.raises(InventoryError) as err:
        load(write(tmp_path, GOOD, {"gpu_nodes.yml": mirrors}))
    assert "container_toolkit_repo_url, container_toolkit_key_url (host" in str(err.value) and "enroot_base_url" not in str(err.value)
    with pytest.raises(InventoryError) as err:
        load(write(tmp_path, GOOD, {"gpu_nodes.yml": mirrors + "megaprov_scheduler: slurm\n"}))
    assert "container_toolkit_key_url, enroot_base_url, pyxis_source_url (host" in str(err.value)
    bundled = mirrors + "megaprov_scheduler: slurm\nmegaprov_package_cache: true\npackage_cache_bundle: /srv/megaprov/bundle\n"
    load(write(tmp_path, GOOD, {"gpu_nodes.yml": bundled}))

"""Every refusal of the inventory reader names the file or line, the thing at fault and the fix; and the pure
helpers behind it (host ranges, variable precedence, booleans) on hand-worked cases. Where a case is about what
Ansible accepts, it was checked with ansible-inventory (ansible-core 2.19.14)."""

import textwrap
from pathlib import Path

import pytest

from megaprov import values
from megaprov.cluster import inventory as inv
from megaprov.errors import InventoryError

ROOT = Path(__file__).resolve().parents[3]
ROLES = ROOT / "ansible_collections/megaprov/cluster/roles"
DEFAULTS = ROOT / "ansible_collections/megaprov/cluster/roles/megaprov/defaults/main.yml"
BASE = "[head]\nh1\n[gpu_nodes]\nn1\n"


def write(tmp_path: Path, text: str, files: dict[str, str] | None = None) -> Path:
    path = tmp_path / "inventory.ini"
    path.write_text(textwrap.dedent(text))
    for rel, body in (files or {}).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(body))
    return path


def refused(path: Path) -> InventoryError:
    with pytest.raises(InventoryError) as err:
        inv.load(path, ROLES, DEFAULTS)
    return err.value


def parse_refused(text: str) -> InventoryError:
    with pytest.raises(InventoryError) as err:
        inv.parse_ini(text, "f.ini")
    return err.value


# ---- the INI text


@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        (
            "\ufeff[head]\nh1\n",
            "f.ini:1: the file starts with a UTF-8 byte-order mark, which Ansible's INI parser reads as part of the first line",
            "save it as UTF-8 without BOM",
        ),
        ("[head\n", "f.ini:1: unclosed section header '[head'", "write it as [group], [group:vars] or [group:children]"),
        ("[head:hosts]\n", "f.ini:1: unknown section kind ':hosts' in '[head:hosts]'", "use [group], [group:vars] or [group:children]"),
        ("[my-group]\n", "f.ini:1: invalid group name 'my-group'", "group names use letters, digits and _ (no dashes)"),
        ("[all:vars]\nflag\n", "f.ini:2: 'flag' in [all:vars] is not name=value", "write one variable per line as name=value"),
        ("[all:vars]\n1x=2\n", "f.ini:2: '1x=2' in [all:vars] is not name=value", "write one variable per line as name=value"),
        (
            "[all:vars]\nx=/srv # note\n",
            "f.ini:2: x='/srv # note': Ansible keeps ' #...' as part of an unquoted value in [all:vars]",
            "quote the value (x='...' # comment) or move the comment to its own line",
        ),
        ("[g:children]\nrack-a\n", "f.ini:2: invalid child group 'rack-a'", "list one group name per line"),
        ("[head]\nh1 x='open\n", 'f.ini:2: cannot split "h1 x=\'open" (No closing quotation)', "close the quotes"),
        ("[head]\nh1 flag\n", "f.ini:2: 'flag' is not key=value", "write host variables as name=value"),
        ("[head]\nh1 1x=2\n", "f.ini:2: '1x' is not a valid variable name", "use letters, digits and _"),
        ("[head]\nh1:ssh\n", "f.ini:2: bad port in 'h1:ssh'", "write host:port with a number, or ansible_port=N"),
        ("[head]\nbad_host\n", "f.ini:2: 'bad_host' is not a valid host name", "use letters, digits, dots and dashes (it goes into /etc/hosts)"),
        ("[head]\nh1\nh1\n", "f.ini:3: host 'h1' is listed twice in [head] (first at f.ini:2)", "remove one of the two lines"),
        (
            "[head]\nh1 a=1\n[g]\nh1 a=2\n",
            "f.ini:4: host 'h1' is defined again with a=2 (was 1 at f.ini:2)",
            "define each host's variables once",
        ),
        ("[head]\nn[1-3]\n", "f.ini:2: bad host range in 'n[1-3]'", "write ranges as node[01:08] or node[a:c]"),
        ("[head]\nn[1:c]\n", "f.ini:2: bad host range in 'n[1:c]'", "both ends must be numbers or both letters"),
        ("[head]\nn[3:1]\n", "f.ini:2: empty host range in 'n[3:1]'", "the first bound must not exceed the second"),
        ("[head]\nn[c:a]\n", "f.ini:2: empty host range in 'n[c:a]'", "the first bound must not exceed the second"),
        ("[head]\nn[0:10000]\n", "f.ini:2: host range 'n[0:10000]' expands to 10,001 hosts", "a cluster has at most 10,000 (MAX_HOSTS)"),
        ("[head]\n" + "n" * 301 + "\n", "f.ini:2: host pattern '" + "n" * 56 + "... is 301 characters long", "a host name has at most 253"),
    ],
)
def test_ini_problems_name_the_line_and_the_fix(text, message, hint):
    err = parse_refused(text)
    assert (err.message, err.hint) == (message, hint)


def test_the_host_count_is_bounded_at_max_hosts():
    assert values.MAX_HOSTS == 10_000
    hosts, _, _, _ = inv.parse_ini("[head]\nh1\n[g]\nn[2:10000]\n", "f.ini")  # 1 + 9,999 = 10,000: the most
    assert len(hosts) == 10_000
    err = parse_refused("[head]\nh1\n[g]\nn[1:10000]\n")  # 10,001
    assert (err.message, err.hint) == ("f.ini:4: more than 10,000 hosts", "a cluster has at most 10,000 (MAX_HOSTS)")


def test_a_300_character_pattern_is_still_read():
    name = "n" * 63 + "." + "n" * 63 + "." + "n" * 63 + "." + "n" * 61 + "[1:2]"  # 256 + 5 characters
    hosts = inv._expand_ranges(name, "w")
    assert [len(h) for h in hosts] == [254, 254]
    long = "a" * 295 + "[1:2]"  # 300 characters: not refused for its length, but each name is over 253
    assert len(long) == 300 and len(inv._expand_ranges(long, "w")) == 2


def test_what_the_ini_reader_keeps():
    hosts, groups, gvars, children = inv.parse_ini(
        textwrap.dedent(
            """\
            # a comment
            ; another
            loose1
            [head]
            h1:2222 ansible_user=root
            [g]
            n[1:2]:2200 rack=a
            n9:2201 ansible_port=22
            [g:vars]
            weight=3
            name = 'x y'
            [all:vars]
            [top:children]
            g # its members
            head
            """
        ),
        "f.ini",
    )
    assert groups == {"ungrouped": ["loose1"], "head": ["h1"], "g": ["n1", "n2", "n9"]}
    assert hosts["h1"].vars == {"ansible_user": "root", "ansible_port": 2222}
    assert hosts["n1"].vars == hosts["n2"].vars == {"rack": "a", "ansible_port": 2200}
    assert hosts["n9"].vars == {"ansible_port": 22}  # an explicit ansible_port wins over host:port, as in Ansible
    assert (hosts["n2"].line, hosts["n9"].line) == ("f.ini:7", "f.ini:8")
    assert gvars == {"g": {"weight": 3, "name": "x y"}, "all": {}}
    assert children == {"top": ["g", "head"]}
    # the same host in two groups with the same (or no) variables is one host in both
    hosts, groups, _, _ = inv.parse_ini("[head]\nh1 a=1\n[g]\nh1 a=1\n[k]\nh1\n", "f.ini")
    assert list(hosts) == ["h1"] and groups["g"] == groups["k"] == ["h1"] and hosts["h1"].line == "f.ini:2"


# ---- host ranges


@pytest.mark.parametrize(
    ("pattern", "size"),
    [("n1", 1), ("n[1:3]", 3), ("n[08:11]", 4), ("n[a:d]", 4), ("n[1:3]-[a:b]", 6), ("n[3:1]", 0), ("n[d:a]", 0), ("n[1:c]", 1), ("n[5:5]", 1)],
)
def test_range_size_without_expanding(pattern, size):
    assert inv._range_size(pattern) == size


def test_ranges_expand_in_order_with_their_padding():
    assert inv._expand_ranges("rack[a:b]-n[08:10]", "w") == ["racka-n08", "racka-n09", "racka-n10", "rackb-n08", "rackb-n09", "rackb-n10"]
    assert inv._expand_ranges("n[9:11].lan", "w") == ["n9.lan", "n10.lan", "n11.lan"]
    assert inv._expand_ranges("n[0:2]", "w") == ["n0", "n1", "n2"]
    assert inv._expand_ranges("plain", "w") == ["plain"]
    assert inv._expand_ranges("n[0:9999]", "w")[-1] == "n9999"  # exactly MAX_HOSTS names


# ---- values


def test_literals_as_ansible_reads_them():
    assert inv._literal("8") == 8 and inv._literal("'8'") == "8" and inv._literal("[1, 'a']") == [1, "a"]
    assert inv._literal("eight") == "eight" and inv._literal("a b(") == "a b("  # not Python: the text as it is


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (False, False), ("yes", True), (" On ", True), ("1", True), (1, True), ("t", True), ("Y", True), ("TRUE", True)]
    + [("no", False), ("0", False), (0, False), ("false", False), ("maybe", False), ("", False), (None, False)],
)
def test_as_bool(value, expected):
    assert inv.as_bool(value) is expected


@pytest.mark.parametrize(
    ("value", "spec", "problem"),
    [
        ("{{ x }}", {"type": "int"}, None),
        ("Yes", {"type": "bool"}, None),
        ("f", {"type": "bool"}, None),
        ("nope", {"type": "bool"}, "must be true or false"),
        (True, {"type": "int"}, "must be a whole number"),
        (2.0, {"type": "int"}, "must be a whole number"),
        (" -3 ", {"type": "int"}, None),
        ("3a", {"type": "int"}, "must be a whole number"),
        (1, {"type": "int", "min": 1, "max": 3}, None),
        (3, {"type": "int", "min": 1, "max": 3}, None),
        (0, {"type": "int", "min": 1, "max": 3}, "must be between 1 and 3"),
        (4, {"type": "int", "min": 1, "max": 3}, "must be between 1 and 3"),
        ("4", {"type": "int", "min": 1, "max": 3}, "must be between 1 and 3"),
        (-5, {"type": "int", "min": 1}, "must be between 1 and None"),
        (10**9, {"type": "int"}, None),
        ("text", {}, None),  # str is the default type
        ({"a": 1}, {}, "must be a string"),
        ([1], {"type": "raw_str"}, "must be a string"),
        ("~/x", {"type": "path"}, None),
        ("x/y", {"type": "path"}, "must be an absolute path"),
        ("x", {"type": "list"}, "must be a list"),
        ([], {"type": "list"}, None),
        ([], {"type": "dict"}, "must be a mapping"),
        ({}, {"type": "dict"}, None),
        ("anything", {"type": "raw"}, None),
        ("c", {"type": "str", "choices": ["a", "b"]}, "must be one of a, b"),
        ("a", {"type": "str", "choices": ["a", "b"]}, None),
        (5, {"type": "int", "choices": [1, 2]}, "must be one of 1, 2"),
        ("x", {"type": "int", "choices": [1, 2]}, "must be a whole number"),  # the type first
    ],
)
def test_check_type(value, spec, problem):
    assert inv.check_type("v", value, spec) == problem


# ---- variables


def test_variable_precedence_all_then_groups_by_name_then_host(tmp_path):
    inventory = inv.load(
        write(
            tmp_path,
            """
            [head]
            h1
            [gpu_nodes]
            n1 x=host
            n2
            [b_rack]
            n1
            n2
            [a_rack]
            n2
            [all:vars]
            x=all
            y=all
            [a_rack:vars]
            x=a
            [b_rack:vars]
            x=b
            """,
        ),
        ROLES,
        DEFAULTS,
    )
    assert inventory.host_var("n1", "x") == "host"
    assert inventory.host_var("n2", "x") == "b"  # groups in name order: b_rack after a_rack
    assert inventory.host_var("h1", "x") == "all"
    assert inventory.host_var("h1", "z", "default") == "default"
    assert inventory.host_var("n2", "megaprov_shared_dir") == "/shared"  # inventories/defaults.yml under all
    moved = inv.with_extra_vars(inventory, {"x": "extra"})
    assert moved.host_var("n1", "x") == moved.host_var("h1", "x") == "extra"  # -e wins over everything
    assert inventory.host_var("n1", "x") == "host"  # the original is unchanged
    names = inventory.hosts_of("gpu_nodes")
    names.append("zz")
    assert inventory.hosts_of("gpu_nodes") == ["n1", "n2"] and inventory.hosts_of("nope") == []
    assert inventory.head == "h1"


@pytest.mark.parametrize(
    ("files", "message", "hint"),
    [
        ({"group_vars/all.yml": "- a\n"}, "group_vars/all.yml: must be a mapping of variable: value, not list", "write name: value lines"),
        ({"group_vars/all.yml": "a: 1\nb: [x\n"}, "group_vars/all.yml:3: invalid YAML", "fix the YAML syntax"),
        (
            {"group_vars/gpus.yml": "a: 1\n"},
            "group_vars/gpus.yml: group_vars for unknown group 'gpus'",
            "rename it to one of: gpu_nodes, head, ungrouped",
        ),
        ({"host_vars/n2.yml": "a: 1\n"}, "host_vars/n2.yml: host_vars for unknown host 'n2'", "rename it to a host of the inventory"),
        (
            {"group_vars/all.yml": "'bad key': 1\n"},
            "group_vars/all.yml: 'bad key' is not a variable name",
            "use letters, digits and _ (not starting with a digit)",
        ),
        (
            {"group_vars/all.yml": "megaprov_qqqqqqqqqqqqqqqqqqqqqqqqqqqqqq: 1\n"},
            "group_vars/all.yml: unknown variable megaprov_qqqqqqqqqqqqqqqqqqqqqqqqqqqqqq",
            "see the role README for its variables",
        ),
        ({"host_vars/n1.yml": "nccl_tests_rep: 1\n"}, "host_vars/n1.yml: unknown variable nccl_tests_rep", "did you mean nccl_tests_repo?"),
        (
            {"group_vars/all/x.yml": "megaprov_cluster_user: 'a\\nb'\n"},
            "group_vars/all/x.yml: megaprov_cluster_user",
            None,
        ),
    ],
)
def test_variables_files_name_the_file_and_the_fix(tmp_path, files, message, hint):
    err = refused(write(tmp_path, BASE, files))
    assert message in err.message
    assert err.message.startswith(str(tmp_path))
    if hint is not None:
        assert err.hint == hint


def test_variables_of_no_role_are_left_alone(tmp_path):
    inventory = inv.load(write(tmp_path, BASE, {"group_vars/all.yml": "site_rack_map: {a: 1}\n"}), ROLES, DEFAULTS)
    assert inventory.host_var("n1", "site_rack_map") == {"a": 1}


def test_an_empty_variables_file_is_no_variables(tmp_path):
    inventory = inv.load(write(tmp_path, BASE, {"group_vars/gpu_nodes.yml": "# nothing yet\n"}), ROLES, DEFAULTS)
    assert inventory.group_vars["gpu_nodes"] == {}


def test_a_type_error_hint_is_the_option_description(tmp_path):
    err = refused(write(tmp_path, BASE, {"group_vars/all.yml": "megaprov_gpus_per_node: many\n"}))
    assert err.message.endswith("group_vars/all.yml: megaprov_gpus_per_node='many' must be a whole number")
    assert err.hint == "GPUs each gpu_nodes host must have (0: any)."  # the megaprov role's argument spec
    spec = {"type": "int", "role": "nccl"}  # an option without a description points at its role's README
    with pytest.raises(InventoryError) as info:
        inv._check_spec("nccl_x", "many", "f", {"nccl_x": spec}, {"nccl"})
    assert info.value.hint == "see the README of the role megaprov.cluster.nccl"


# ---- the inventory as a whole


@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        ("[head]\nh1\n", "group [gpu_nodes] is missing or empty", "add [head] with the one controller host and [gpu_nodes] with the training nodes"),
        (
            "[head]\n[gpu_nodes]\nn1\n",
            "group [head] is missing or empty",
            "add [head] with the one controller host and [gpu_nodes] with the training nodes",
        ),
        ("[head]\nh1\nh2\n[gpu_nodes]\nn1\n", "[head] has 2 hosts (h1, h2)", "put exactly one host in [head]"),
        (
            "[head]\nh1\n[gpu_nodes:children]\nracks\n",
            "[gpu_nodes:children] names group 'racks', which is not defined",
            "add a [racks] section or remove it",
        ),
        (BASE + "[rack:vars]\nx=1\n", "[rack:vars] for a group that has no hosts section", "add [rack] or rename the section"),
        (
            "[head]\nh1\n[gpu_nodes:children]\na\n[a:children]\nb\n[b:children]\na\n",
            "group 'a' contains itself through [a:children]",
            "remove the cycle",
        ),
        (
            "[head]\nh1 ansible_host=10.0.0.9\n[gpu_nodes]\nn1 ansible_host=10.0.0.9\n",
            "hosts 'h1' and 'n1' both point at 10.0.0.9:22",
            "give each host its own ansible_host (a duplicate would be provisioned twice)",
        ),
        (
            "[head]\nh1 ansible_port=2200\n[gpu_nodes]\nn1 ansible_host=h1 ansible_port=2200\n",
            "hosts 'h1' and 'n1' both point at h1:2200",
            "give each host its own ansible_host (a duplicate would be provisioned twice)",
        ),
    ],
)
def test_inventory_problems_name_the_fix(tmp_path, text, message, hint):
    err = refused(write(tmp_path, text))
    assert err.message == f"{tmp_path / 'inventory.ini'}: {message}"
    assert err.hint == hint


def test_children_and_groups_without_hosts(tmp_path):
    inventory = inv.load(
        write(tmp_path, "[head]\nh1\n[gpu_nodes:children]\nrack_a\nrack_b\n[rack_a]\nn1\nn2\n[rack_b]\nn2\nn3\n[empty]\n[empty:vars]\nx=1\n"),
        ROLES,
        DEFAULTS,
    )
    assert inventory.hosts_of("gpu_nodes") == ["n1", "n2", "n3"]  # in order, each once
    assert inventory.hosts["n2"].groups == {"gpu_nodes", "rack_a", "rack_b"}
    assert inventory.hosts_of("empty") == []
    # the same host on another port is another host
    inv.load(write(tmp_path, "[head]\nh1 ansible_host=10.0.0.9\n[gpu_nodes]\nn1 ansible_host=10.0.0.9 ansible_port=2200\n"), ROLES, DEFAULTS)


def test_the_inventory_file_itself(tmp_path):
    missing = refused(tmp_path / "nope.ini")
    assert (missing.message, missing.hint) == (
        f"inventory {tmp_path / 'nope.ini'} does not exist",
        "pass an inventory: INI, YAML, a directory or a script (megaprov lab up writes one)",
    )
    for name, text in (("hosts.yml", "all: {}\n"), ("hosts.yaml", "all: {}\n"), ("hosts.json", '{"all": {}}\n')):  # read by Ansible: empty
        (tmp_path / name).write_text(text)
        err = refused(tmp_path / name)
        assert err.message == f"{tmp_path / name}: group [head] is missing or empty", err.message
    for name in ("hosts.yml", "hosts.yaml", "hosts.json"):
        (tmp_path / name).unlink()
    err = refused(tmp_path)  # an empty directory: Ansible reads no source in it
    assert "Ansible cannot read this inventory" in err.message, err.message
    (tmp_path / "hosts").write_text("[head]\nh3\n[gpu_nodes]\nn3\n")
    assert inv.load(tmp_path, ROLES, DEFAULTS).head == "h3"
    (tmp_path / "hosts.ini").write_text("[head]\nh2\n[gpu_nodes]\nn2\n")
    assert inv.load(tmp_path, ROLES, DEFAULTS).head == "h2"  # hosts.ini before hosts
    write(tmp_path, BASE)
    found = inv.load(tmp_path, ROLES, DEFAULTS)
    assert found.head == "h1" and found.path == (tmp_path / "inventory.ini").resolve()  # inventory.ini first
    (tmp_path / "inventory.ini").write_bytes(b"[head]\nh1\n[gpu_nodes]\nn\xe91\n")
    err = refused(tmp_path / "inventory.ini")
    assert (err.message, err.hint) == (f"{tmp_path / 'inventory.ini'}:4: not UTF-8 (byte 0xe9)", "save the inventory as UTF-8")


def test_without_a_defaults_file(tmp_path):
    inventory = inv.load(write(tmp_path, BASE), ROLES, None)
    assert inventory.host_var("n1", "megaprov_shared_dir") is None and "all" not in inventory.group_vars


# ---- storage settings


@pytest.mark.parametrize(
    ("extra", "message", "hint"),
    [
        ("[nfs_server]\n", "[nfs_server] has 0 hosts", "put exactly one host in [nfs_server] (or remove the group: [head] serves NFS)"),
        (
            "[all:vars]\nmegaprov_shared_dir=/\n",
            "the shared directory '/' must be an absolute path other than /",
            "set megaprov_shared_dir to e.g. /shared",
        ),
        # nfs_server_export_dir=~/srv: typed for /etc/exports (tests/unit/cluster/test_inventory_server_config.py)
        (
            "[all:vars]\nmegaprov_shared_dir=/var/tmp/shared\n",
            "the shared directory /var/tmp/shared and megaprov_scratch_dir=/var/tmp (host h1) overlap",
            "keep node-local scratch outside the NFS export",
        ),
        (
            "[all:vars]\nmegaprov_scratch_dir=/shared\n",
            "the shared directory /shared and megaprov_scratch_dir=/shared (host h1) overlap",
            "keep node-local scratch outside the NFS export",
        ),
        (
            "[all:vars]\nnfs_server_clients_cidr=10.0.0/8x\n",
            "nfs_server_clients_cidr='10.0.0/8x' is not a CIDR",
            "write it as ADDRESS/PREFIX, e.g. 10.0.0.0/16",
        ),
    ],
)
def test_storage_problems_name_the_fix(tmp_path, extra, message, hint):
    err = refused(write(tmp_path, BASE + extra))
    assert (err.message, err.hint) == (f"{tmp_path / 'inventory.ini'}: {message}", hint)


def test_storage_settings_are_read_on_the_nfs_server_and_each_host(tmp_path):
    # The export is the [nfs_server] host's setting (else [head]'s); scratch is checked on every host.
    text = "[head]\nh1\n[gpu_nodes]\nn1\nn2 megaprov_scratch_dir=/export/tmp\n[nfs_server]\nn1 nfs_server_export_dir=/export\n"
    err = refused(write(tmp_path, text))
    assert err.message.endswith("the shared directory /export and megaprov_scratch_dir=/export/tmp (host n2) overlap")
    # the same export set on the head only does not matter while [nfs_server] names n1
    inv.load(write(tmp_path, "[head]\nh1 nfs_server_export_dir=/var\n[gpu_nodes]\nn1\n[nfs_server]\nn1\n"), ROLES, DEFAULTS)
    # without [nfs_server], the head's setting is the export
    err = refused(write(tmp_path, "[head]\nh1 nfs_server_export_dir=/var\n[gpu_nodes]\nn1\n"))
    assert "the shared directory /var and megaprov_scratch_dir=/var/tmp (host h1) overlap" in err.message
    inv.load(
        write(tmp_path, BASE + "[all:vars]\nmegaprov_shared_dir=/shared2\nmegaprov_scratch_dir=/shared22\nnfs_server_clients_cidr=10.1.2.3\n"),
        ROLES,
        DEFAULTS,
    )


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ("/shared", "/shared", True),
        ("/shared", "/shared/tmp", True),
        ("/data/tmp", "/data", True),
        ("/shared", "/shared2", False),
        ("/a/b", "/a/c", False),
    ],
)
def test_overlap(a, b, overlap):
    assert inv._overlap(a, b) is overlap


# ---- GPU-stack settings that need each other


@pytest.mark.parametrize(
    ("group_vars", "message", "hint"),
    [
        (
            "megatron_core_version: '0.15.0'\n",
            "megatron_core_version=0.15.0 (host n1) does not match megatron_version=core_v0.16.1",
            "remove megatron_core_version: it follows the tag",
        ),
        (
            "pytorch_source: wheelhouse\n",
            "pytorch_source=wheelhouse (host n1) but pytorch_wheelhouse is unset",
            "set pytorch_wheelhouse to the directory of wheels on the nodes",
        ),
        (
            "megaprov_offline: true\napex_enabled: true\nnvidia_driver_method: distro\nnccl_tests: false\n"
            "megatron_checkout: false\npytorch_index_url: http://m/\n",
            "megaprov_offline is true but apex_repo (host n1) still point(s) at the internet",
            "set each to your mirror (an apt repository, git remote or wheel index the nodes reach)",
        ),
    ],
)
def test_gpu_stack_problems_name_the_fix(tmp_path, group_vars, message, hint):
    err = refused(write(tmp_path, BASE, {"group_vars/gpu_nodes.yml": group_vars}))
    assert (err.message, err.hint) == (f"{tmp_path / 'inventory.ini'}: {message}", hint)


def test_offline_settings_that_fit(tmp_path):
    offline = (
        "megaprov_offline: 'yes'\nnvidia_driver_method: preinstalled\nnccl_tests: 'no'\nmegatron_checkout: false\npytorch_index_url: http://m/\n"
    )
    inv.load(write(tmp_path, BASE, {"group_vars/gpu_nodes.yml": offline}), ROLES, DEFAULTS)
    # a matching megatron_core_version, or a templated one, passes
    inv.load(write(tmp_path, BASE, {"group_vars/gpu_nodes.yml": "megatron_core_version: '0.16.1'\n"}), ROLES, DEFAULTS)
    inv.load(write(tmp_path, BASE, {"group_vars/gpu_nodes.yml": "megatron_core_version: '{{ v }}'\n"}), ROLES, DEFAULTS)
    # the checks apply to gpu_nodes: the head is not a training node
    inv.load(write(tmp_path, BASE, {"group_vars/head.yml": "pytorch_source: wheelhouse\n"}), ROLES, DEFAULTS)


def test_plain_values():
    assert inv._plain(None) is None and inv._plain("{{ x }}") is None and inv._plain("{% if a %}") is None
    assert inv._plain(" 580 ") == "580" and inv._plain(12.8) == "12.8"


@pytest.mark.parametrize(
    ("group_vars", "needle"),
    [
        # only the driver branch set: the cuda role's default (13.0, roles/cuda/defaults/main.yml) is what it must run
        ("nvidia_driver_branch: '550'\n", "nvidia_driver_branch=550 (host n1) is too old for cuda_version=13.0"),
        # only the toolkit set: the nvidia_driver role's default branch 580 is too old for CUDA 13.2 (its driver is 595)
        ("cuda_version: '13.2'\n", "nvidia_driver_branch=580 (host n1) is too old for cuda_version=13.2"),
        # apex builds against nvcc: torch 2.13's cu126 wheel under nvcc 12.8 differs in the minor release
        ("apex_enabled: true\nnvidia_driver_branch: '570'\ncuda_version: '12.8'\n", "apex_enabled builds apex"),
    ],
)
def test_gpu_stack_checks_read_role_defaults_for_what_is_unset(tmp_path, group_vars, needle):
    err = refused(write(tmp_path, BASE, {"group_vars/gpu_nodes.yml": group_vars}))
    assert needle in err.message


def test_gpu_stack_checks_that_do_not_apply(tmp_path):
    for group_vars in (
        "apex_enabled: false\nnvidia_driver_branch: '570'\ncuda_version: '12.8'\n",  # no apex build
        "apex_enabled: '{{ site_apex }}'\nnvidia_driver_branch: '570'\ncuda_version: '12.8'\n",  # unknown before connecting
        # a driver megaprov does not install: the open-modules rule of Blackwell is the site's business
        "megaprov_gpu_model: B200\nnvidia_driver_open: false\nnvidia_driver_method: preinstalled\n",
        "megaprov_gpu_model: B200\nnvidia_driver_open: '{{ x }}'\n",
    ):
        inv.load(write(tmp_path, BASE, {"group_vars/gpu_nodes.yml": group_vars}), ROLES, DEFAULTS)


# ---- sections, merging and precedence across the INI file and the variables files


def test_sections_may_repeat_and_are_merged():
    hosts, groups, gvars, children = inv.parse_ini(
        "[ gpu_nodes ]\nn1\n[head]\nh1\n[gpu_nodes]\nn2\n[g:vars]\na = 1 \n[g:vars]\nb='x #y'\n[p:children]\ngpu_nodes\n[p:children]\nhead\n",
        "f.ini",
    )
    assert groups["gpu_nodes"] == ["n1", "n2"]  # the section read twice; spaces inside the brackets ignored
    assert gvars == {"g": {"a": 1, "b": "x #y"}}  # a quoted value keeps its '#'
    assert children == {"p": ["gpu_nodes", "head"]}
    hosts, groups, _, _ = inv.parse_ini("[head]\nr[a:b]-n[1:2]:2200\n", "f.ini")  # the port after the last range
    assert groups["head"] == ["ra-n1", "ra-n2", "rb-n1", "rb-n2"] and hosts["rb-n2"].vars == {"ansible_port": 2200}


def test_variables_files_win_over_the_ini_file(tmp_path):
    # Ansible's precedence: group_vars/ files over [group:vars], host_vars/ files over the host line, [all:vars] over
    # megaprov's defaults (inventories/defaults.yml).
    inventory = inv.load(
        write(
            tmp_path,
            "[head]\nh1\n[gpu_nodes]\nn1 x=line\nn2\n[gpu_nodes:vars]\ny=ini\nz=ini\n[all:vars]\nmegaprov_scratch_dir=/scratch\n",
            {"group_vars/gpu_nodes.yml": "y: file\n", "host_vars/n1.yml": "x: file\n"},
        ),
        ROLES,
        DEFAULTS,
    )
    assert (inventory.host_var("n1", "x"), inventory.host_var("n2", "y"), inventory.host_var("n2", "z")) == ("file", "file", "ini")
    assert inventory.host_var("h1", "megaprov_scratch_dir") == "/scratch"
    assert inventory.host_var("h1", "megaprov_cluster_user") == "megaprov"  # the rest of defaults.yml stays


def test_groups_sharing_a_child_are_no_cycle(tmp_path):
    inventory = inv.load(
        write(tmp_path, "[head]\nh1\n[gpu_nodes:children]\na\nb\n[a:children]\nc\n[b:children]\nc\n[c]\nn1\n[other:children]\nc\n"),
        ROLES,
        DEFAULTS,
    )
    assert inventory.hosts["n1"].groups == {"a", "b", "c", "gpu_nodes", "other"}
    assert inv.resolve_children({"z": [], "x": ["h"], "y": ["g"]}, {"y": ["x"], "z": ["y"]}, "f") == {"x": ["h"], "y": ["g", "h"], "z": ["g", "h"]}


def test_role_specs_and_their_roles(tmp_path):
    specs = inv.role_specs(ROLES)
    assert specs["nccl_tests_repo"]["role"] == "nccl" and specs["nfs_server_export_dir"]["type"] == "path"
    specs, prefixes = inv.all_specs(ROLES)
    assert {"nccl", "nvidia_driver", "ssh_mesh"} <= prefixes and "ansible_port" in specs and "megaprov_lab" in specs
    (tmp_path / "r" / "empty" / "meta").mkdir(parents=True)
    (tmp_path / "r" / "empty" / "meta" / "argument_specs.yml").write_text("")
    (tmp_path / "r" / "bare" / "meta").mkdir(parents=True)
    (tmp_path / "r" / "bare" / "meta" / "argument_specs.yml").write_text("argument_specs:\n  main: {}\n")
    assert inv.role_specs(tmp_path / "r") == {}
    specs, prefixes = inv.all_specs(tmp_path / "none")
    assert prefixes == set() and set(specs) == set(inv.ANSIBLE_VARS)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("1: x\n", "group_vars/all.yml: 1 is not a variable name"),
        ('megaprov_cluster_user: "a\\tb"\n', "contains the control character"),
        # any variable, nested values too: it may be rendered into a script or a unit
        ('site_note: "a\\u2028b"\n', "group_vars/all.yml: site_note='a\\u2028b' contains the control character \\u2028"),
        ('site_map: {k: [ok, "x\\ty"]}\n', "group_vars/all.yml: site_map.k[1]='x\\ty' contains the control character \\t"),
        ("a: &x 1\nb: *x\n", "group_vars/all.yml:1: YAML anchors and aliases are not allowed here"),
    ],
)
def test_variables_files_are_checked_before_use(tmp_path, body, needle):
    err = refused(write(tmp_path, BASE, {"group_vars/all.yml": body}))
    assert needle in err.message


def test_values_keep_what_follows_the_first_equals_sign():
    hosts, groups, gvars, _ = inv.parse_ini("[head]\nXen1 opts=a=b\n[g:vars]\nplain = abc \nargs=--x=1\n", "f.ini")
    assert groups["head"] == ["Xen1"]  # a host name may start with any letter ('#' and ';' start comments)
    assert hosts["Xen1"].vars == {"opts": "a=b"}
    assert gvars["g"] == {"plain": "abc", "args": "--x=1"}  # an unquoted value is stripped


def test_storage_defaults_without_a_defaults_file(tmp_path):
    # without inventories/defaults.yml: the export is /shared and scratch /var/tmp, the roles' own defaults
    err = refused_without_defaults(write(tmp_path, BASE + "[all:vars]\nmegaprov_shared_dir=/var\n"))
    assert err.message.endswith("the shared directory /var and megaprov_scratch_dir=/var/tmp (host h1) overlap")
    err = refused_without_defaults(write(tmp_path, BASE + "[all:vars]\nmegaprov_scratch_dir=/shared/tmp\n"))
    assert err.message.endswith("the shared directory /shared and megaprov_scratch_dir=/shared/tmp (host h1) overlap")
    # a network written with host bits set is still the network (as exportfs reads 10.0.0.1/16)
    inv.load(write(tmp_path, BASE + "[all:vars]\nnfs_server_clients_cidr=10.0.0.1/16\n"), ROLES, None)


def refused_without_defaults(path: Path) -> InventoryError:
    with pytest.raises(InventoryError) as err:
        inv.load(path, ROLES, None)
    return err.value

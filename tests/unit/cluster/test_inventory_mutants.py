"""The inventory parser and validator (megaprov/cluster/inventory.py) as every command meets it: the exact one-line
error naming the file, line or variable and the fix; the values it parses (numbers, booleans, literals, host
ranges, ports); the types of the values that become server configuration (numbers, Slurm and Prometheus words,
lists, optional addresses, the IPoIB address, NCCL's environment); variable precedence; children; storage checks.

The value checkers are built here from the module's factories (``_number``, ``_word``, ``_list_of``,
``_optional``) as SERVER_CONFIG builds them, and also reached through real inventories on disk read by the real
loader with the collection's real roles. Nothing is stood in: no host is contacted before these checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from megaprov import values
from megaprov.cluster import inventory as inv
from megaprov.errors import InventoryError

ROOT = Path(__file__).resolve().parents[3]
ROLES = ROOT / "ansible_collections/megaprov/cluster/roles"
DEFAULTS = ROLES / "megaprov/defaults/main.yml"
HOSTS = "[head]\nh1 ansible_host=10.0.0.1\n[gpu_nodes]\nn1 ansible_host=10.0.0.2\n"


def bad(check: inv.Checker, value: Any, field: str = "f") -> tuple[str, str]:
    with pytest.raises(values.BadValue) as err:
        check(value, field)
    return err.value.message, err.value.hint


def refused(text: str, tmp_path: Path, all_vars: dict[str, Any] | None = None) -> tuple[str, str]:
    path = tmp_path / "inventory.ini"
    path.write_text(text)
    if all_vars is not None:
        (tmp_path / "group_vars").mkdir(exist_ok=True)
        (tmp_path / "group_vars" / "all.yml").write_text(yaml.safe_dump(all_vars))
    with pytest.raises(InventoryError) as err:
        inv.load(path, ROLES, DEFAULTS)
    return err.value.message.replace(str(path.resolve()), "INV").replace(str(path), "INV"), err.value.hint


def loaded(text: str, tmp_path: Path) -> inv.Inventory:
    path = tmp_path / "inventory.ini"
    path.write_text(text)
    return inv.load(path, ROLES, DEFAULTS)


# ---- numbers: an INI value is text, its digits are the number


def test_a_number_is_read_from_its_digits_with_surrounding_spaces():
    port = inv._number(1, 65535)
    assert port(" 8080 ", "f") == 8080
    assert port("22", "f") == 22
    assert port(443, "f") == 443
    assert port("1", "f") == 1 and port("65535", "f") == 65535
    assert inv._number(-5, 5)("-3", "f") == -3


def test_a_number_out_of_its_range_names_the_field_and_the_range():
    port = inv._number(1, 65535)
    assert bad(port, "0", "grafana_port") == ("grafana_port=0 is out of range", "use a value from 1 to 65535")
    assert bad(port, 70000, "grafana_port") == ("grafana_port=70000 is out of range", "use a value from 1 to 65535")
    assert bad(inv._number(30, 10**6), "29", "slurm_kill_wait") == ("slurm_kill_wait=29 is out of range", "use a value from 30 to 1000000")


def test_what_is_not_a_whole_number_is_refused_as_written():
    port = inv._number(1, 65535)
    assert bad(port, "80x", "prometheus_port") == ("prometheus_port='80x' is not a whole number", "write an integer")
    assert bad(port, "1234567890123") == ("f='1234567890123' is not a whole number", "write an integer")
    assert bad(port, 1.5) == ("f=1.5 is not a whole number", "write an integer")
    assert bad(port, True) == ("f=True is not a whole number", "write an integer")
    assert bad(port, None) == ("f=None is not a whole number", "write an integer")


# ---- words of a target's syntax


def test_a_word_matches_in_full_and_a_number_is_read_as_its_digits():
    word = inv._word(r"[a-z]{1,10}|[0-9]+", "a word", "write letters", 5)
    assert word("abc", "f") == "abc"
    assert word("abcde", "f") == "abcde"  # exactly max_len
    assert word(12, "f") == "12"
    assert bad(word, "abcdef") == ("f='abcdef' is not a word", "write letters")
    assert bad(word, "ab1") == ("f='ab1' is not a word", "write letters")
    assert bad(word, "ABC", "slurm_gpu_type") == ("slurm_gpu_type='ABC' is not a word", "write letters")
    assert bad(word, True) == ("f=True is not a word", "write letters")
    assert bad(word, ["abc"]) == ("f=['abc'] is not a word", "write letters")
    assert bad(word, None) == ("f=None is not a word", "write letters")


def test_a_word_of_length_max_len_plus_one_is_refused_even_when_it_matches():
    word = inv._word(r"[a-z]+", "a name", "shorten it", 3)
    assert word("abc", "f") == "abc"
    assert bad(word, "abcd") == ("f='abcd' is not a name", "shorten it")
    default_len = inv._word(r"[a-z]+", "a name", "shorten it")
    assert default_len("a" * 500, "f") == "a" * 500
    assert bad(default_len, "a" * 501)[1] == "shorten it"


def test_only_a_string_or_a_whole_number_is_a_word_whatever_its_text_would_match():
    interface = inv._word(r"([A-Za-z0-9_.:-]{1,15})?", "a network interface name", "use the name `ip link` shows, e.g. ib0")
    assert interface("ib0", "f") == "ib0" and interface(0, "f") == "0"
    assert bad(interface, None, "infiniband_ipoib_interface") == (
        "infiniband_ipoib_interface=None is not a network interface name",
        "use the name `ip link` shows, e.g. ib0",
    )
    assert bad(interface, 1.5) == ("f=1.5 is not a network interface name", "use the name `ip link` shows, e.g. ib0")
    assert bad(interface, False) == ("f=False is not a network interface name", "use the name `ip link` shows, e.g. ib0")


def test_server_config_words_refuse_what_their_file_would_misread():
    assert inv.SERVER_CONFIG["slurm_cluster_name"]("gpu-lab", "slurm_cluster_name") == "gpu-lab"
    assert bad(inv.SERVER_CONFIG["slurm_cluster_name"], "Lab", "slurm_cluster_name") == (
        "slurm_cluster_name='Lab' is not a Slurm cluster name",
        "use lower-case letters, digits, _ and - (at most 40, starting with a letter)",
    )
    assert inv.SERVER_CONFIG["prometheus_retention_time"]("1y30d", "x") == "1y30d"
    assert bad(inv.SERVER_CONFIG["prometheus_retention_time"], "30 d", "prometheus_retention_time") == (
        "prometheus_retention_time='30 d' is not a Prometheus duration",
        "write it as 15s, 1m, 30d or 1y30d (no spaces)",
    )
    assert inv.SERVER_CONFIG["common_memlock"](65536, "common_memlock") == "65536"


# ---- lists and optional values


def test_a_list_checks_each_item_under_its_index():
    addresses = inv._list_of(inv.ip_address, "IP addresses")
    assert addresses(["10.0.0.1", "::1"], "f") == ["10.0.0.1", "::1"]
    assert addresses([], "f") == []
    assert bad(addresses, "10.0.0.1", "nfs_server_client_addresses") == (
        "nfs_server_client_addresses='10.0.0.1' is not a list of IP addresses",
        "write a YAML list: [IP addresses, ...]",
    )
    assert bad(addresses, ["10.0.0.1", "gpu1"], "nfs_server_client_addresses") == (
        "nfs_server_client_addresses[1]='gpu1' is not an IP address",
        "give the address the service listens on, e.g. 10.0.0.1",
    )


def test_an_optional_value_may_be_empty_or_unset_and_is_checked_otherwise():
    maybe = inv._optional(inv.ip_address)
    assert maybe("", "f") == ""
    assert maybe(None, "f") is None
    assert maybe("10.0.0.7", "f") == "10.0.0.7"
    assert bad(maybe, "gpu1", "nfs_client_server") == (
        "nfs_client_server='gpu1' is not an IP address",
        "give the address the service listens on, e.g. 10.0.0.1",
    )
    assert bad(maybe, "XXXX") == ("f='XXXX' is not an IP address", "give the address the service listens on, e.g. 10.0.0.1")


def test_an_ip_address_is_normalised_and_a_zone_or_name_is_refused():
    assert inv.ip_address("::FFFF:10.0.0.1", "f") == "::ffff:a00:1"
    assert inv.ip_address("10.0.0.1", "f") == "10.0.0.1"
    for value in ("fe80::1%eth0", "head", 10, None):
        assert bad(inv.ip_address, value)[0] == f"f={values.shown(value)} is not an IP address"


def test_the_ipoib_address_is_an_ipv4_address_with_its_prefix():
    assert inv._ipoib_address("10.1.0.5/16", "f") == "10.1.0.5/16"
    hint = "write it as 10.1.0.5/16"
    assert bad(inv._ipoib_address, "10.1.0.5", "infiniband_ipoib_address") == (
        "infiniband_ipoib_address='10.1.0.5' is not an IPv4 address with its prefix",
        hint,
    )
    assert bad(inv._ipoib_address, "10.1.0.5/33") == ("f='10.1.0.5/33' is not an IPv4 address with its prefix", hint)
    assert bad(inv._ipoib_address, "300.1.0.5/16") == ("f='300.1.0.5/16' is not an IPv4 address with its prefix", hint)
    assert bad(inv._ipoib_address, 16) == ("f=16 is not an IPv4 address with its prefix", hint)
    assert bad(inv._ipoib_address, ["10.1.0.5/16"]) == ("f=['10.1.0.5/16'] is not an IPv4 address with its prefix", hint)


# ---- NCCL's environment file


def test_nccl_env_takes_plain_values_and_an_empty_one():
    env = {"NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1", "NCCL_DEBUG": None, "NCCL_NET_GDR_LEVEL": 5, "NCCL_IB_DISABLE": False}
    assert inv.nccl_env(env, "infiniband_nccl_env") is env


def test_nccl_env_refuses_what_a_shell_would_read_otherwise():
    field = "infiniband_nccl_env"
    assert bad(inv.nccl_env, ["NCCL_IB_HCA=mlx5_0"], field) == (
        "infiniband_nccl_env=['NCCL_IB_HCA=mlx5_0'] is not a mapping of NCCL variables",
        "write e.g. {NCCL_IB_HCA: mlx5_0}",
    )
    assert bad(inv.nccl_env, {"1NCCL": "x"}, field) == (
        "infiniband_nccl_env key='1NCCL' is not an environment variable name",
        "use letters, digits and _, not starting with a digit",
    )
    assert bad(inv.nccl_env, {"NCCL_IB_HCA": ["mlx5_0"]}, field) == (
        "infiniband_nccl_env.NCCL_IB_HCA=['mlx5_0'] is not a plain value",
        "give a string or a number",
    )
    assert bad(inv.nccl_env, {"NCCL_X": {"a": 1}}, field) == ("infiniband_nccl_env.NCCL_X={'a': 1} is not a plain value", "give a string or a number")
    assert bad(inv.nccl_env, {"NCCL_SOCKET_IFNAME": "eth0 $(reboot)"}, field) == (
        "infiniband_nccl_env.NCCL_SOCKET_IFNAME='eth0 $(reboot)' is not a plain NCCL setting",
        "use letters, digits and _.,:=^+/@%- (nccl.env is sourced by a shell, unquoted)",
    )


def test_nccl_env_in_an_inventory_is_one_line_naming_the_file(tmp_path):
    message, hint = refused(HOSTS, tmp_path, {"infiniband_nccl_env": {"NCCL_IB_HCA": "mlx5_0;reboot"}})
    assert message == f"{tmp_path}/group_vars/all.yml: infiniband_nccl_env.NCCL_IB_HCA='mlx5_0;reboot' is not a plain NCCL setting"
    assert hint == "use letters, digits and _.,:=^+/@%- (nccl.env is sourced by a shell, unquoted)"


# ---- partitions and receivers


def test_slurm_partitions_refuse_two_defaults_a_bad_time_and_unknown_keys():
    field = "slurm_partitions"
    ok = [{"name": "gpu", "default": "yes", "max_time": "1-00:00", "nodes": ["n1"]}, {"name": "debug", "default": False}]
    assert inv.slurm_partitions(ok, field) is ok
    assert bad(inv.slurm_partitions, [], field) == (
        "slurm_partitions=[] is not a list of partitions",
        "write e.g. [{name: gpu, default: true, max_time: INFINITE}]",
    )
    assert bad(inv.slurm_partitions, [{"default": True}], field) == (
        "slurm_partitions[0]={'default': True} is not a partition",
        "write it as {name: gpu, default: true, max_time: INFINITE}",
    )
    assert bad(inv.slurm_partitions, [{"name": "gpu", "zz": 1, "aa": 2}], field) == (
        "slurm_partitions[0].aa=2 is not a partition setting",
        "a partition has name, default, max_time and nodes",
    )
    assert bad(inv.slurm_partitions, [{"name": "gpu"}, {"name": "gpu"}], field) == (
        "slurm_partitions[1].name='gpu' names a partition twice",
        "give each partition its own name",
    )
    assert bad(inv.slurm_partitions, [{"name": "gpu", "default": "maybe"}], field) == (
        "slurm_partitions[0].default='maybe' must be true or false",
        "mark one partition default: true",
    )
    assert bad(inv.slurm_partitions, [{"name": "a", "default": True}, {"name": "b", "default": "true"}], field) == (
        "slurm_partitions=['a', 'b'] marks 2 partitions default",
        "mark at most one default: true",
    )
    assert bad(inv.slurm_partitions, [{"name": "gpu", "max_time": "1 day"}], field)[0] == "slurm_partitions[0].max_time='1 day' is not a Slurm time"
    assert bad(inv.slurm_partitions, [{"name": "gpu", "nodes": ["n 1"]}], field)[0] == "slurm_partitions[0].nodes[0]='n 1' is not a valid host name"
    assert bad(inv.slurm_partitions, [{"name": "g p u"}], field)[0] == "slurm_partitions[0].name='g p u' is not a Slurm partition name"


def test_alert_receivers_need_a_name_and_a_way_to_reach_someone():
    field = "prometheus_alertmanager_receivers"
    ok = [{"name": "ops", "webhook_url": "https://hooks.example.org/x"}, {"name": "mail", "email_to": "a@b.org", "email_smarthost": "smtp:25"}]
    assert inv.alert_receivers(ok, field) is ok
    assert inv.alert_receivers([], field) == []
    assert bad(inv.alert_receivers, {"name": "ops"}, field) == (
        "prometheus_alertmanager_receivers={'name': 'ops'} is not a list of receivers",
        "write e.g. [{name: ops, webhook_url: https://...}]",
    )
    assert bad(inv.alert_receivers, [{"webhook_url": "https://x"}], field)[1] == (
        "write {name: ops, webhook_url: URL} or {name: ops, email_to: A, email_smarthost: H:P}"
    )
    assert bad(inv.alert_receivers, [{"name": "ops", "slack": "x"}], field) == (
        "prometheus_alertmanager_receivers[0].slack='x' is not a receiver setting",
        "a receiver has name, webhook_url, email_to, email_from, email_smarthost",
    )
    assert bad(inv.alert_receivers, [{"name": "ops", "email_to": "a@b.org"}], field) == (
        "prometheus_alertmanager_receivers[0]={'name': 'ops', 'email_to': 'a@b.org'} has no webhook_url and no email_to with email_smarthost",
        "give the receiver one of them",
    )
    twice = [{"name": "ops", "webhook_url": "https://x"}, {"name": "ops", "webhook_url": "https://y"}]
    assert bad(inv.alert_receivers, twice, field) == (
        "prometheus_alertmanager_receivers[1].name='ops' names a receiver twice",
        "give each receiver its own name",
    )
    assert bad(inv.alert_receivers, [{"name": "ops", "webhook_url": "ftp://x"}], field) == (
        "prometheus_alertmanager_receivers[0].webhook_url='ftp://x' is not an http(s) URL",
        "write http(s)://HOST[:PORT]/PATH",
    )


# ---- paths written into a server's configuration


def test_a_config_path_has_plain_characters_and_a_directory_is_not_root():
    assert inv.config_path("/shared/data_1.x-y", "f") == "/shared/data_1.x-y"
    assert bad(inv.config_path, "/shared *(rw)", "megaprov_shared_dir") == (
        "megaprov_shared_dir='/shared *(rw)' has the character ' ', which exports, fstab, systemd units or a config file would read",
        "use letters, digits and ._/- (e.g. /shared)",
    )
    long = "/" + "a" * 200
    assert bad(inv.config_path, long)[0].endswith("is longer than 200 characters, which exports, fstab, systemd units or a config file would read")
    assert inv.config_path("/" + "a" * 199, "f") == "/" + "a" * 199
    assert bad(inv.config_path, "shared")[0] == "f='shared' is not an absolute path"
    assert bad(inv._directory, "/", "slurm_plugin_dir") == (
        "slurm_plugin_dir='/' is the root directory",
        "give a directory of its own (e.g. /var/lib/NAME)",
    )
    assert inv._directory("/var/lib/x", "f") == "/var/lib/x"


# ---- types from the argument specs


def test_check_type_reads_each_kind_as_ansible_does():
    assert inv.check_type("x", "{{ port }}", {"type": "int"}) is None
    assert inv.check_type("x", "yes", {"type": "bool"}) is None
    assert inv.check_type("x", "maybe", {"type": "bool"}) == "must be true or false"
    assert inv.check_type("x", " 12 ", {"type": "int", "min": 1, "max": 12}) is None
    assert inv.check_type("x", 13, {"type": "int", "min": 1, "max": 12}) == "must be between 1 and 12"
    assert inv.check_type("x", 0, {"type": "int", "min": 1}) == "must be between 1 and None"
    assert inv.check_type("x", True, {"type": "int"}) == "must be a whole number"
    assert inv.check_type("x", "1.5", {"type": "int"}) == "must be a whole number"
    assert inv.check_type("x", "1e3", {"type": "float"}) is None
    assert inv.check_type("x", "fast", {"type": "float"}) == "must be a number"
    assert inv.check_type("x", False, {"type": "float"}) == "must be a number"
    assert inv.check_type("x", [1], {"type": "float"}) == "must be a number"
    assert inv.check_type("x", {"a": 1}, {}) == "must be a string"
    assert inv.check_type("x", "rel/key", {"type": "path"}) == "must be an absolute path"
    assert inv.check_type("x", "~/key", {"type": "path"}) is None
    assert inv.check_type("x", "a", {"type": "list"}) == "must be a list"
    assert inv.check_type("x", [], {"type": "dict"}) == "must be a mapping"
    assert inv.check_type("x", "c", {"type": "str", "choices": ["a", "b"]}) == "must be one of a, b"
    assert inv.check_type("x", "b", {"type": "str", "choices": ["a", "b"]}) is None


def test_as_bool_and_is_number_follow_ansible():
    assert [inv.as_bool(v) for v in (True, "yes", " On ", "1", "t", 1)] == [True] * 6
    assert [inv.as_bool(v) for v in (False, "no", "off", "0", "", None, "nope")] == [False] * 7
    assert inv._is_number("1.5") and inv._is_number(3) and not inv._is_number("x")


def test_a_type_error_in_an_inventory_names_the_host_line_and_the_hint(tmp_path):
    message, hint = refused(HOSTS.replace("n1 ansible_host=10.0.0.2", "n1 ansible_host=10.0.0.2 ansible_port=70000"), tmp_path)
    assert message == "INV (INV:4, host n1): ansible_port=70000 must be between 1 and 65535"
    assert hint == "the host's SSH port, a number from 1 to 65535"


def test_an_unknown_role_variable_suggests_the_closest(tmp_path):
    message, hint = refused(HOSTS + "[all:vars]\nmegaprov_shared_dri=/shared\n", tmp_path)
    assert message == "INV [all:vars]: unknown variable megaprov_shared_dri"
    assert hint == "did you mean megaprov_shared_dir?"
    message, hint = refused(HOSTS + "[all:vars]\nslurm_zzzzzzzzzzzzzzzzzzzzzzz=1\n", tmp_path)
    assert (message, hint) == ("INV [all:vars]: unknown variable slurm_zzzzzzzzzzzzzzzzzzzzzzz", "see the role README for its variables")


def test_a_template_in_a_value_megaprov_reads_is_refused(tmp_path):
    message, hint = refused(HOSTS + "[all:vars]\nprometheus_port='{{ p }}'\n", tmp_path)
    assert message == "INV [all:vars]: prometheus_port='{{ p }}' is a template: megaprov reads this value before Ansible templates it"
    assert hint == "give a literal value"


def test_templated_and_read_literally():
    assert inv.templated("{{ x }}") and inv.templated("{% if %}") and inv.templated("{# c #}")
    assert inv.templated({"a": ["b", "{{ c }}"]}) and inv.templated({"{{ k }}": 1}) and inv.templated(("{{ x }}",))
    assert not inv.templated({"a": ["b", 1]}) and not inv.templated(5) and not inv.templated("{ x }")
    specs, _ = inv.all_specs(ROLES)
    assert inv.read_literally("megaprov_shared_dir", specs)
    assert inv.read_literally("prometheus_port", specs)
    assert inv.read_literally("package_cache_bundle", specs)
    assert not inv.read_literally("ansible_host", specs)
    assert not inv.read_literally("cuda_version", specs)


def test_validate_vars_refuses_a_name_and_a_control_character():
    specs, prefixes = inv.all_specs(ROLES)
    with pytest.raises(InventoryError) as err:
        inv.validate_vars({"1x": 1}, "src", specs, prefixes)
    assert (err.value.message, err.value.hint) == ("src: '1x' is not a variable name", "use letters, digits and _ (not starting with a digit)")
    with pytest.raises(InventoryError) as err:
        inv.validate_vars({"megaprov_shared_dir": "/sh\nared"}, "src", specs, prefixes)
    assert err.value.message.startswith("src: megaprov_shared_dir=")
    with pytest.raises(InventoryError) as err:
        inv.validate_vars({"megaprov_shared_dir": "/a b"}, "src", specs, prefixes)
    assert (
        err.value.message == "src: megaprov_shared_dir='/a b' has the character ' ', which exports, fstab, systemd units or a config file would read"
    )
    inv.validate_vars({"unrelated_thing": [1, 2], "prometheus_port": "9090"}, "src", specs, prefixes)


# ---- the INI reader


def test_host_lines_give_ports_ranges_and_literal_values():
    hosts, groups, gvars, children = inv.parse_ini(
        "n[1:2]:2222 a=1 b='x y' c=[1,2] d=True e=plain # note\n[g]\nh[a:b]\n[g:vars]\nk = {'x': 1}\n[p:children]\ng # c\n", "S"
    )
    assert groups == {"ungrouped": ["n1", "n2"], "g": ["ha", "hb"]}
    assert hosts["n1"].vars == {"a": 1, "b": "x y", "c": [1, 2], "d": True, "e": "plain", "ansible_port": 2222}
    assert hosts["n2"].line == "S:1" and hosts["hb"].line == "S:3"
    assert gvars == {"g": {"k": {"x": 1}}}
    assert children == {"p": ["g"]}


@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        (
            "\ufeff[head]\n",
            "S:1: the file starts with a UTF-8 byte-order mark, which Ansible's INI parser reads as part of the first line",
            "save it as UTF-8 without BOM",
        ),
        ("[head\n", "S:1: unclosed section header '[head'", "write it as [group], [group:vars] or [group:children]"),
        ("[head:hosts]\n", "S:1: unknown section kind ':hosts' in '[head:hosts]'", "use [group], [group:vars] or [group:children]"),
        ("[gpu-nodes]\n", "S:1: invalid group name 'gpu-nodes'", "group names use letters, digits and _ (no dashes)"),
        ("[g:vars]\nnovalue\n", "S:2: 'novalue' in [g:vars] is not name=value", "write one variable per line as name=value"),
        (
            "[g:vars]\nx=a #c\n",
            "S:2: x='a #c': Ansible keeps ' #...' as part of an unquoted value in [g:vars]",
            "quote the value (x='...' # comment) or move the comment to its own line",
        ),
        ("[g:children]\na b\n", "S:2: invalid child group 'a b'", "list one group name per line"),
        ("n1 'open\n", 'S:1: cannot split "n1 \'open" (No closing quotation)', "close the quotes"),
        ("n1 flag\n", "S:1: 'flag' is not key=value", "write host variables as name=value"),
        ("n1 1x=2\n", "S:1: '1x' is not a valid variable name", "use letters, digits and _"),
        ("n1:ssh\n", "S:1: bad port in 'n1:ssh'", "write host:port with a number, or ansible_port=N"),
        ("n_1\n", "S:1: 'n_1' is not a valid host name", "use letters, digits, dots and dashes (it goes into /etc/hosts)"),
        ("n1\nn1\n", "S:2: host 'n1' is listed twice in [ungrouped] (first at S:1)", "remove one of the two lines"),
        ("n1 a=1\n[g]\nn1 a=2\n", "S:3: host 'n1' is defined again with a=2 (was 1 at S:1)", "define each host's variables once"),
        ("n[1:a]\n", "S:1: bad host range in 'n[1:a]'", "both ends must be numbers or both letters"),
        ("n[2:1]\n", "S:1: empty host range in 'n[2:1]'", "the first bound must not exceed the second"),
        ("n[1]\n", "S:1: bad host range in 'n[1]'", "write ranges as node[01:08] or node[a:c]"),
        (
            "n[01:100]\n",
            "S:1: host range 'n[01:100]' pads its first bound to 2 digits but not its last",
            "write both bounds with the same number of digits, e.g. [001:100], or drop the leading zero",
        ),
        (
            "n1 x={{8}}\n",
            "S:1: x='{{8}}': Ansible's INI reader cannot read this value (TypeError: unhashable type: 'set')",
            "give a literal value, or write the variable in group_vars/ as YAML",
        ),
    ],
)
def test_each_ini_mistake_is_one_line_with_its_place_and_fix(text, message, hint):
    with pytest.raises(InventoryError) as err:
        inv.parse_ini(text, "S")
    assert (err.value.message, err.value.hint) == (message, hint)


def test_host_ranges_keep_padding_and_nest():
    assert inv._expand_ranges("gpu[08:10]", "S") == ["gpu08", "gpu09", "gpu10"]
    assert inv._expand_ranges("r[1:2]n[a:b]", "S") == ["r1na", "r1nb", "r2na", "r2nb"]
    assert inv._expand_ranges("n[1:1]", "S") == ["n1"]
    assert inv._range_size("r[1:10]n[a:c]") == 30 and inv._range_size("n[5:1]") == 0 and inv._range_size("n") == 1
    with pytest.raises(InventoryError) as err:
        inv._expand_ranges("n[1:99999999]", "S")
    assert err.value.message == "S: host range 'n[1:99999999]' expands to 99,999,999 hosts"
    assert err.value.hint == f"a cluster has at most {values.MAX_HOSTS:,} (MAX_HOSTS)"
    with pytest.raises(InventoryError) as err:
        inv._expand_ranges("n" * 301, "S")
    assert err.value.message.endswith("is 301 characters long") and err.value.hint == "a host name has at most 253"


def test_is_ini_by_suffix_and_not_executable(tmp_path):
    for name in ("hosts", "inv.ini", "a.cfg", "b.hosts", "c.txt"):
        (tmp_path / name).write_text("")
        assert inv.is_ini(tmp_path / name), name
    (tmp_path / "inv.yml").write_text("")
    assert not inv.is_ini(tmp_path / "inv.yml")
    script = tmp_path / "dyn"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert not inv.is_ini(script)


# ---- the loaded inventory


def test_variables_follow_ansible_precedence_all_then_groups_then_host(tmp_path):
    text = (
        "[head]\nh1\n[gpu_nodes]\nn1 megaprov_scratch_dir=/scratch\nn2\n[b_group]\nn2\n"
        "[all:vars]\nx_k=all\n[gpu_nodes:vars]\nx_k=gpu\n[b_group:vars]\nx_k=b\n"
    )
    inventory = loaded(text, tmp_path)
    assert inventory.head == "h1"
    assert inventory.hosts_of("gpu_nodes") == ["n1", "n2"] and inventory.hosts_of("nothing") == []
    assert inventory.host_var("h1", "x_k") == "all"
    assert inventory.host_var("n1", "x_k") == "gpu"
    assert inventory.host_var("n2", "x_k") == "gpu"  # groups in sorted order: b_group, then gpu_nodes
    assert inventory.host_var("n1", "megaprov_scratch_dir") == "/scratch"
    assert inventory.host_var("n1", "unset_thing", 7) == 7
    with_e = inv.with_extra_vars(inventory, {"x_k": "e"})
    assert with_e.host_var("n1", "x_k") == "e" and inventory.host_var("n1", "x_k") == "gpu"


def test_children_resolve_in_order_and_a_cycle_is_named():
    groups = {"a": ["h1"], "b": ["h2", "h1"], "c": []}
    resolved = inv.resolve_children(groups, {"c": ["b", "a"], "d": ["c"]}, "S")
    assert resolved == {"a": ["h1"], "b": ["h2", "h1"], "c": ["h2", "h1"]}
    with pytest.raises(InventoryError) as err:
        inv.resolve_children({"a": [], "b": []}, {"a": ["b"], "b": ["a"]}, "S")
    assert (err.value.message, err.value.hint) == ("S: group 'a' contains itself through [a:children]", "remove the cycle")


@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        (
            "[head]\nh1\n",
            "INV: group [gpu_nodes] is missing or empty",
            "add [head] with the one controller host and [gpu_nodes] with the training nodes",
        ),
        ("[head]\nh1\nh2\n[gpu_nodes]\nn1\n", "INV: [head] has 2 hosts (h1, h2)", "put exactly one host in [head]"),
        (HOSTS + "[p:children]\nzz\n", "INV: [p:children] names group 'zz', which is not defined", "add a [zz] section or remove it"),
        (HOSTS + "[other:vars]\na=1\n", "INV: [other:vars] for a group that has no hosts section", "add [other] or rename the section"),
        (
            HOSTS + "[nfs_server]\nh1\nn1\n",
            "INV: [nfs_server] has 2 hosts",
            "put exactly one host in [nfs_server] (or remove the group: [head] serves NFS)",
        ),
        (
            "[head]\nh1 ansible_host=10.0.0.1\n[gpu_nodes]\nn1 ansible_host=10.0.0.1\n",
            "INV: hosts 'h1' and 'n1' both point at 10.0.0.1:22",
            "give each host its own ansible_host (a duplicate would be provisioned twice)",
        ),
        (
            HOSTS + "[all:vars]\nmegaprov_scratch_dir=/shared/tmp\n",
            "INV: the shared directory /shared and megaprov_scratch_dir=/shared/tmp (host h1) overlap",
            "keep node-local scratch outside the NFS export",
        ),
        (
            HOSTS + "[all:vars]\nnfs_server_clients_cidr=10.0.0.0/99\n",
            "INV: nfs_server_clients_cidr='10.0.0.0/99' is not a CIDR",
            "write it as ADDRESS/PREFIX, e.g. 10.0.0.0/16",
        ),
    ],
)
def test_each_inventory_mistake_is_refused_before_any_host_is_contacted(tmp_path, text, message, hint):
    assert refused(text, tmp_path) == (message, hint)


def test_same_address_on_other_ports_and_templated_ports_are_two_hosts(tmp_path):
    text = (
        "[head]\nh1 ansible_host=10.0.0.1\n[gpu_nodes]\nn1 ansible_host=10.0.0.1 ansible_port=2222\nn2 ansible_host=10.0.0.1 ansible_port='{{ p }}'\n"
    )
    assert sorted(loaded(text, tmp_path).hosts) == ["h1", "n1", "n2"]


def test_overlap_is_the_same_path_or_one_inside_the_other():
    assert inv._overlap("/shared", "/shared") and inv._overlap("/shared", "/shared/x") and inv._overlap("/shared/x", "/shared")
    assert not inv._overlap("/shared", "/shared2") and not inv._overlap("/shared", "/var/tmp")


def test_vars_files_are_read_as_ansibles_loader_finds_them(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "1.yml").write_text("")
    (tmp_path / "a" / "2").write_text("")
    (tmp_path / "a" / ".hidden.yml").write_text("")
    (tmp_path / "a" / "3.yml~").write_text("")
    (tmp_path / "a" / "4.txt").write_text("")
    (tmp_path / "a" / "sub").mkdir()
    (tmp_path / "a" / "sub" / "5.json").write_text("")
    (tmp_path / "a" / "skip.d").mkdir()
    (tmp_path / "a" / "skip.d" / "6.yml").write_text("")
    assert [p.relative_to(tmp_path).as_posix() for p in inv._vars_dir(tmp_path, "a")] == ["a/1.yml", "a/2", "a/sub/5.json"]
    (tmp_path / "b.yaml").write_text("")
    (tmp_path / "b.json").write_text("")
    assert inv._vars_dir(tmp_path, "b") == [tmp_path / "b.yaml"]
    assert inv._vars_dir(tmp_path, "c") == []
    assert inv._ignored(Path(".gitkeep")) and inv._ignored(Path("all.yml~")) and not inv._ignored(Path("all.yml"))


def test_group_and_host_vars_for_unknown_names_are_refused(tmp_path):
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gpus.yml").write_text("a: 1\n")
    message, hint = refused(HOSTS, tmp_path)
    assert message == f"{tmp_path}/group_vars/gpus.yml: group_vars for unknown group 'gpus'"
    assert hint == "rename it to one of: gpu_nodes, head, ungrouped"
    (tmp_path / "group_vars" / "gpus.yml").unlink()
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "n9.yml").write_text("a: 1\n")
    assert refused(HOSTS, tmp_path) == (f"{tmp_path}/host_vars/n9.yml: host_vars for unknown host 'n9'", "rename it to a host of the inventory")


def test_a_vars_file_must_be_a_mapping_of_valid_yaml(tmp_path):
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("- a\n- b\n")
    assert refused(HOSTS, tmp_path) == (f"{tmp_path}/group_vars/all.yml: must be a mapping of variable: value, not list", "write name: value lines")
    (tmp_path / "group_vars" / "all.yml").write_text("a: [1\n")
    message, hint = refused(HOSTS, tmp_path)
    assert message.startswith(f"{tmp_path}/group_vars/all.yml:2: invalid YAML (") and hint == "fix the YAML syntax"
    (tmp_path / "group_vars" / "all.yml").write_text("")
    assert loaded(HOSTS, tmp_path).group_vars["all"]["megaprov_shared_dir"] == "/shared"


def test_the_stack_read_for_compatibility_ignores_templates():
    assert inv._plain(None) is None and inv._plain("{{ x }}") is None and inv._plain("{% x %}") is None
    assert inv._plain(" 12.4 ") == "12.4" and inv._plain(550) == "550"


def test_an_ansible_failure_is_one_line_with_its_origin():
    stderr = "[WARNING]: Failed to parse /x/inv.yml with yaml plugin: bad indentation\n  Origin: /x/inv.yml:7:3\n[ERROR]: other\n"
    error = inv._ansible_failure(Path("/x/inv.yml"), stderr)
    assert error.message == "/x/inv.yml:7: Ansible cannot read this inventory (Failed to parse /x/inv.yml with yaml plugin: bad indentation)"
    assert error.hint == "fix it until `ansible-inventory -i /x/inv.yml --list` reads it"
    assert inv._ansible_failure(Path("/x/i"), "[ERROR]: nope\n").message == "/x/i: Ansible cannot read this inventory ([ERROR]: nope)"
    assert inv._ansible_failure(Path("/x/i"), "").message == "/x/i: Ansible cannot read this inventory (no hosts could be read)"


# ---- the GPU stack, offline sources and the file itself

OFFLINE_HINT = "set each to your mirror (an apt repository, git remote or wheel index the nodes reach)"


@pytest.mark.parametrize(
    ("extra", "unset"),
    [
        ("megaprov_offline=true", "nvidia_driver_repo_url, nvidia_driver_keyring_url, nccl_tests_repo, megatron_repo, pytorch_index_url"),
        (
            "megaprov_offline=true\nmegaprov_containers=true",
            "nvidia_driver_repo_url, nvidia_driver_keyring_url, nccl_tests_repo, megatron_repo, container_toolkit_repo_url, "
            "container_toolkit_key_url, pytorch_index_url",
        ),
        (
            "megaprov_offline=true\nmegaprov_scheduler=slurm\nmegaprov_containers=true",
            "nvidia_driver_repo_url, nvidia_driver_keyring_url, nccl_tests_repo, megatron_repo, container_toolkit_repo_url, "
            "container_toolkit_key_url, enroot_base_url, pyxis_source_url, pytorch_index_url",
        ),
        ("megaprov_offline=true\nmegaprov_package_cache=true\npackage_cache_bundle=/srv/b", "nvidia_driver_repo_url, nvidia_driver_keyring_url"),
    ],
)
def test_offline_names_every_source_that_still_points_at_the_internet(tmp_path, extra, unset):
    message, hint = refused(HOSTS + "[all:vars]\n" + extra + "\n", tmp_path)
    unset = unset.replace("pytorch_index_url", "pytorch_index_url (or pytorch_source: wheelhouse)")
    assert (message, hint) == (f"INV: megaprov_offline is true but {unset} (host n1) still point(s) at the internet", OFFLINE_HINT)


def test_offline_with_every_mirror_set_loads(tmp_path):
    mirrors = "\n".join(
        f"{name}=https://mirror.lab/{name}"
        for name in ("nvidia_driver_repo_url", "nvidia_driver_keyring_url", "nccl_tests_repo", "megatron_repo", "pytorch_index_url")
    )
    inventory = loaded(HOSTS + "[all:vars]\nmegaprov_offline=true\n" + mirrors + "\n", tmp_path)
    assert inventory.host_var("n1", "megaprov_offline") == "true"


def test_gpu_stack_settings_that_do_not_fit_together_are_refused(tmp_path):
    assert refused(HOSTS + "[all:vars]\npytorch_source=wheelhouse\n", tmp_path) == (
        "INV: pytorch_source=wheelhouse (host n1) but pytorch_wheelhouse is unset",
        "set pytorch_wheelhouse to the directory of wheels on the nodes",
    )
    message, hint = refused(HOSTS + "[all:vars]\nmegatron_core_version=0.1.0\n", tmp_path)
    assert message.startswith("INV: megatron_core_version=0.1.0 (host n1) does not match megatron_version=core_v")
    assert hint == "remove megatron_core_version: it follows the tag"
    message, hint = refused(HOSTS + "[all:vars]\ncuda_version=11.0\n", tmp_path)
    assert message == "INV: cuda_version=11.0 (host n1) is not a CUDA toolkit release megaprov knows" and hint.startswith("use one of 12.0, ")
    assert loaded(HOSTS + "[all:vars]\nmegatron_core_version='{{ x }}'\n", tmp_path).host_var("n1", "megatron_core_version") == "{{ x }}"


def test_an_extra_var_is_checked_as_the_play_sees_it(tmp_path):
    inventory = loaded(HOSTS, tmp_path)
    with pytest.raises(InventoryError) as err:
        inv.gpu_stack_checks(inv.with_extra_vars(inventory, {"pytorch_source": "wheelhouse"}), ROLES)
    assert err.value.message == f"{inventory.path}: pytorch_source=wheelhouse (host n1) but pytorch_wheelhouse is unset"


def test_the_inventory_file_must_exist_and_be_utf8(tmp_path):
    with pytest.raises(InventoryError) as err:
        inv.load(tmp_path / "missing.ini", ROLES, DEFAULTS)
    assert (err.value.message, err.value.hint) == (
        f"inventory {tmp_path}/missing.ini does not exist",
        "pass an inventory: INI, YAML, a directory or a script (megaprov lab up writes one)",
    )
    path = tmp_path / "inventory.ini"
    path.write_bytes(HOSTS.encode() + b"n2 x=\xff\n")
    with pytest.raises(InventoryError) as err:
        inv.load(path, ROLES, DEFAULTS)
    assert (err.value.message, err.value.hint) == (f"{path}:5: not UTF-8 (byte 0xff)", "save the inventory as UTF-8")


def test_a_directory_is_read_through_its_inventory_file_and_group_vars(tmp_path):
    (tmp_path / "hosts.ini").write_text(HOSTS)
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gpu_nodes.yml").write_text("megaprov_scratch_dir: /scratch\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "n1").mkdir()
    (tmp_path / "host_vars" / "n1" / "a.yml").write_text("ansible_user: ops\n")
    inventory = inv.load(tmp_path, ROLES, DEFAULTS)
    assert inventory.path == (tmp_path / "hosts.ini").resolve()
    assert inventory.host_var("n1", "megaprov_scratch_dir") == "/scratch" and inventory.host_var("h1", "megaprov_scratch_dir") == "/var/tmp"
    assert inventory.host_var("n1", "ansible_user") == "ops" and inventory.host_var("h1", "ansible_user") is None
    assert inventory.groups == {"ungrouped": [], "head": ["h1"], "gpu_nodes": ["n1"]}
    assert inventory.hosts["n1"].groups == {"gpu_nodes"}

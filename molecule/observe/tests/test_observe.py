"""The observe stage as an operator sees it: Prometheus's API on the head, the exporters on the nodes, the journals on the
head, and the alerts that fire when something breaks."""

import json
import shlex
from pathlib import Path

import yaml
from conftest import address, api

from tests.molecule.inventory import PROJECT, names, node, wait

RULES = yaml.safe_load(open(f"{PROJECT}/ansible_collections/megaprov/cluster/roles/prometheus/files/rules/megaprov.rules.yml"))
HEAD = names("head")[0]


def prom(path):
    return api(HEAD, f"http://{address(HEAD)}:9090{path}")


def query(expr):
    from urllib.parse import quote

    return prom(f"/api/v1/query?query={quote(expr)}")["data"]["result"]


def test_every_node_exporter_is_a_target_and_up():
    targets = prom("/api/v1/targets?state=active")["data"]["activeTargets"]
    node_targets = {t["labels"]["node"]: t for t in targets if t["labels"]["job"] == "node"}
    assert sorted(node_targets) == sorted(names("head") + names("gpu_nodes"))
    for name, target in node_targets.items():
        assert target["health"] == "up", (name, target["lastError"])
        assert target["labels"]["instance"] == f"{address(name)}:9100"
    assert {t["labels"]["job"] for t in targets if t["health"] == "up"} >= {"node", "prometheus", "alertmanager"}


def test_the_alert_rules_are_loaded():
    groups = prom("/api/v1/rules?type=alert")["data"]["groups"]
    loaded = {r["name"] for g in groups if g["file"] == "/etc/prometheus/rules/megaprov.rules.yml" for r in g["rules"]}
    expected = {r["alert"] for g in RULES["groups"] for r in g["rules"] if "alert" in r}
    assert loaded == expected and len(expected) >= 20


def test_the_exporters_listen_on_the_cluster_address_only():
    for name in names("head") + names("gpu_nodes"):
        listening = node(name).check_output("ss -Htln")
        assert f"{address(name)}:9100" in listening, listening
        assert "*:9100" not in listening and "0.0.0.0:9100" not in listening and "[::]:9100" not in listening
    head = node(HEAD).check_output("ss -Htln")
    for port in (9090, 9093, 19532):
        assert f"{address(HEAD)}:{port}" in head and f"*:{port}" not in head and f"0.0.0.0:{port}" not in head, (port, head)


def test_node_exporter_serves_megaprov_s_textfile():
    for name in names("gpu_nodes"):
        found = query(f'megaprov_node_info{{node="{name}"}}')
        assert [r["metric"]["role"] for r in found] == ["gpu_node"]
    assert [r["metric"]["role"] for r in query(f'megaprov_node_info{{node="{HEAD}"}}')] == ["head"]
    assert [r["metric"]["mountpoint"] for r in query(f'megaprov_shared_dir_info{{node="{HEAD}"}}')] == ["/shared"]
    assert query("sum(node_textfile_scrape_error)")[0]["value"][1] == "0"


def test_the_gpu_collector_exports_the_replayed_gpus():
    gpu_node = names("gpu_nodes")[0]
    info = wait(lambda: query(f'megaprov_gpu_info{{node="{gpu_node}"}}'), 60)
    assert len(info) == 8 and {r["metric"]["gpu"] for r in info} == {str(i) for i in range(8)}
    util = query(f'megaprov_gpu_utilization_ratio{{node="{gpu_node}"}}')
    assert len(util) == 8 and all(0.0 <= float(r["value"][1]) <= 1.0 for r in util)
    assert query(f'megaprov_gpu_collector_success{{node="{gpu_node}"}}')[0]["value"][1] == "1"
    assert query(f'megaprov_node_gpus_expected{{node="{gpu_node}"}}')[0]["value"][1] == "8"


def test_the_collector_s_parsers_are_the_collection_s_own():
    """The GPU collector imports the collection's Xid parser and nvidia-smi queries from beside itself: the role puts
    the module_utils files there, byte for byte, root's and read-only to others."""
    gpu_node = node(names("gpu_nodes")[0])
    for name in ("xid.py", "gpu_query.py"):
        installed = gpu_node.file(f"/usr/local/lib/megaprov/{name}")
        shipped = Path(PROJECT) / "ansible_collections/megaprov/cluster/plugins/module_utils" / name
        assert installed.user == "root" and installed.mode == 0o644
        assert installed.content_string == shipped.read_text()


def test_a_line_logged_on_a_node_is_found_on_the_head():
    sender = names("gpu_nodes")[1]
    message = f"megaprov molecule observe {address(sender)}"
    node(sender).check_output(f"logger --tag megaprov-test {shlex.quote(message)}")

    def found():
        out = node(HEAD).run("journalctl --directory=/var/log/journal/remote -o json --no-pager SYSLOG_IDENTIFIER=megaprov-test").stdout
        return [json.loads(line) for line in out.splitlines() if json.loads(line).get("MESSAGE") == message]

    entries = wait(found, 60)
    assert entries and entries[0]["_HOSTNAME"] == node(sender).check_output("hostname")


def test_the_head_keeps_each_host_s_journal_in_its_own_files():
    files = node(HEAD).check_output("ls /var/log/journal/remote").split()
    assert len([f for f in files if f.startswith("remote-")]) >= len(names("head") + names("gpu_nodes")), files
    assert node(HEAD).service("megaprov-journal-vacuum.timer").is_enabled


def test_grafana_s_provisioning_is_in_place_with_megaprov_s_dashboards():
    head = node(HEAD)
    source = yaml.safe_load(head.file("/etc/grafana/provisioning/datasources/megaprov.yml").content_string)
    (datasource,) = source["datasources"]
    assert datasource["uid"] == "megaprov-prometheus" and datasource["url"] == f"http://{address(HEAD)}:9090"
    provider = yaml.safe_load(head.file("/etc/grafana/provisioning/dashboards/megaprov.yml").content_string)
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards/megaprov"
    shipped = f"{PROJECT}/ansible_collections/megaprov/cluster/roles/grafana/files/dashboards"
    for uid in ("megaprov-cluster", "megaprov-node", "megaprov-job"):
        installed = json.loads(head.file(f"/var/lib/grafana/dashboards/megaprov/{uid}.json").content_string)
        assert installed == json.load(open(f"{shipped}/{uid}.json")) and installed["uid"] == uid
    # the dashboards' queries answer from this Prometheus: one of each dashboard's first panel's expressions
    assert query('count(up{job="node"})')[0]["value"][1] == str(len(names("head") + names("gpu_nodes")))


def test_the_replayed_xid_79_fires_its_alert_naming_the_node_and_gpu():
    gpu_node = names("gpu_nodes")[0]

    def recorded():
        out = node(HEAD).run("cat /var/lib/megaprov-alerts/alerts.jsonl").stdout
        return [a for a in map(json.loads, out.splitlines()) if a["labels"].get("alertname") == "GpuXid79FallenOffBus"]

    fired = wait(recorded, 120, 5)
    assert fired, "GpuXid79FallenOffBus did not reach the alert recorder within 120 s"
    labels, annotations = fired[0]["labels"], fired[0]["annotations"]
    assert (labels["node"], labels["gpu"], labels["severity"]) == (gpu_node, "3", "critical")
    assert "Xid 79" in annotations["action"] and gpu_node in annotations["summary"]


def dcgm_node():
    """The GPU node with DCGM (molecule.yml: megaprov_gpu_expected there)."""
    return names("gpu_nodes")[0]


def test_dcgm_s_hostengine_and_exporter_run_as_their_packages_ship_them_with_megaprov_s_command_line():
    host = node(dcgm_node())
    for package in ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13", "datacenter-gpu-manager-4-proprietary"):
        assert host.package(package).version == "1:4.5.3-1", package
    assert host.package("datacenter-gpu-manager-exporter").version == "4.8.2-1"
    for unit in ("nvidia-dcgm", "nvidia-dcgm-exporter"):
        assert host.service(unit).is_running and host.service(unit).is_enabled, unit
    assert host.check_output("dcgmi discovery -l --host 127.0.0.1").startswith("8 GPUs found")
    argv = host.check_output("cat /proc/$(systemctl show -p MainPID --value nvidia-dcgm-exporter)/cmdline | tr '\\0' ' '")
    assert "-f /etc/dcgm-exporter/megaprov-counters.csv" in argv and "-r 127.0.0.1:5555" in argv and "--hpc-job-mapping-dir /run/megaprov/dcgm-job-mapping" in argv
    listening = host.check_output("ss -Htln")
    assert f"{address(dcgm_node())}:9400" in listening and "*:9400" not in listening and "0.0.0.0:9400" not in listening
    assert "127.0.0.1:5555" in listening  # the hostengine on localhost only
    # no DCGM where GPUs are not expected
    assert not node(names("gpu_nodes")[1]).package("datacenter-gpu-manager-4-core").is_installed


def test_prometheus_scrapes_dcgm_s_fields_with_the_node_label():
    gpu_node = dcgm_node()
    targets = prom("/api/v1/targets?state=active")["data"]["activeTargets"]
    dcgm = [t for t in targets if t["labels"]["job"] == "dcgm"]
    assert [(t["labels"]["node"], t["labels"]["instance"], t["health"]) for t in dcgm] == [(gpu_node, f"{address(gpu_node)}:9400", "up")], dcgm
    for field in ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"):
        found = wait(lambda f=field: query(f'{f}{{node="{gpu_node}"}}'), 60)
        assert len(found) == 8, (field, found)
    (pending,) = query(f'DCGM_FI_DEV_ROW_REMAP_PENDING{{node="{gpu_node}"}} == 1')
    assert pending["metric"]["gpu"] == "5"
    (xid,) = query(f'DCGM_EXP_XID_ERRORS_COUNT{{node="{gpu_node}",xid="79"}}')
    assert (xid["metric"]["gpu"], xid["metric"]["window_size_in_ms"]) == ("3", "600000")


def test_a_running_job_labels_dcgm_s_series_through_the_job_mapping():
    """A training job's unit on the node: node_exporter's GPU collector writes its name per GPU index where dcgm-exporter
    reads it, and Prometheus turns dcgm-exporter's hpc_job into job, as on megaprov's own GPU series."""
    gpu_node = dcgm_node()
    host = node(gpu_node)
    host.check_output("systemd-run --unit megaprov-job-dcgm-probe sleep 300")
    try:
        host.check_output("systemctl start megaprov-gpu-metrics.service")
        assert host.check_output("cat /run/megaprov/dcgm-job-mapping/3") == "dcgm-probe"
        found = wait(lambda: query(f'DCGM_FI_DEV_GPU_UTIL{{node="{gpu_node}",job="dcgm-probe"}}'), 60)
        assert len(found) == 8 and "hpc_job" not in found[0]["metric"]
    finally:
        host.run("systemctl stop megaprov-job-dcgm-probe")
        host.run("systemctl start megaprov-gpu-metrics.service")
    assert host.run("ls /run/megaprov/dcgm-job-mapping").stdout.split() == []

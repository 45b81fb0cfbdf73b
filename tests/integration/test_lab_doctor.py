"""megaprov doctor on the README run's lab: nothing wrong on the healthy lab and in its training job's logs; then one
thing broken on each node at once (the host name resolving to 127.0.1.1, a stopped service, another torch version, a
full shared directory) and doctor names each on its node, drains the nodes with errors in Slurm, and `train
--exclude-unhealthy` leaves them out; repaired, it finds nothing again.

The lab's containers share the host's clock (chronyd only tracks there): clock skew cannot be made on them, so the
clock checks are tested on recorded readings (tests/unit/ops/test_doctor_health.py); a stopped chrony is the service."""

import pytest
from conftest import ROOT, megaprov, podman_exec

pytestmark = pytest.mark.lab

VENV = "/opt/megaprov/venv"


def doctor(inventory, *extra):
    code, doc, err = megaprov("doctor", "-i", inventory, "--output", "json", *extra)
    assert doc is not None, err
    return code, doc, err


def wrong(doc):
    return sorted((f["code"], f["node"]) for f in doc["result"]["findings"] if f["severity"] in ("error", "warn"))


def sh(container, script):
    out = podman_exec(container, "bash", "-c", script)
    assert out.returncode == 0, (script, out.stdout, out.stderr)
    return out.stdout


def test_doctor_finds_nothing_wrong_on_the_healthy_lab_nor_in_its_jobs_logs(bootstrapped):
    code, doc, err = doctor(bootstrapped["inventory"])
    assert code == 0 and wrong(doc) == [], (doc["result"]["findings"], err)
    assert sorted(doc["result"]["checked"]) == sorted(n["name"] for n in bootstrapped["nodes"])
    assert {f["code"] for f in doc["result"]["findings"]} <= {"GPU_CHECKS_SKIPPED"}  # CPU nodes: said, not wrong
    code, jobs_doc, err = megaprov("jobs", "-i", bootstrapped["inventory"], "--output", "json")
    names = [j["name"] for j in jobs_doc["result"]["jobs"] if j["name"].startswith("lab-tiny-")]
    assert names, jobs_doc
    code, doc, err = megaprov("doctor", "--name", names[0], "-i", bootstrapped["inventory"], "--output", "json")
    # The job ran while the suite's other parts loaded this machine's 2 cores: its rate may fall (a THROUGHPUT_FALLING
    # warning, which is true of this machine); nothing else may be found in a job that passed its verdict.
    assert [f for f in doc["result"]["findings"] if f["code"] != "THROUGHPUT_FALLING"] == [], (doc, err)
    assert all(f["severity"] == "warn" for f in doc["result"]["findings"]) and code in (0, 6), (doc, err)
    # the job's node logs, one per node it ran on (lab-tiny: 2), and no health check of the cluster with --job
    checked = doc["result"]["checked"]
    assert len(checked) == 2 and all(c.endswith(".log") and f"/jobs/{names[0]}/logs/" in c for c in checked), checked


def test_doctor_names_each_broken_thing_on_its_node_drains_them_and_train_leaves_them_out(bootstrapped):
    inventory = bootstrapped["inventory"]
    (c1, c2, c3), (n1, n2, n3) = ([n[k] for n in bootstrapped["nodes"][:3]] for k in ("container", "name"))
    export = "/srv/megaprov/export"
    torch_meta = sh(c3, f"ls -d {VENV}/lib/python3*/site-packages/torch-*.dist-info").strip() + "/METADATA"

    def repair_node1_and_node2():
        podman_exec(c1, "bash", "-c", f"if [ -f /root/hosts.doctor ]; then cp /root/hosts.doctor /etc/hosts; fi; rm -f {export}/cache/doctor-fill")
        podman_exec(c2, "systemctl", "start", "chrony")

    try:
        # node1: Debian's trap, the host name resolving to 127.0.1.1 before the cluster address
        sh(c1, f"cp /etc/hosts /root/hosts.doctor && {{ echo '127.0.1.1 {n1}'; cat /root/hosts.doctor; }} > /etc/hosts")
        # node2: a service megaprov enabled, stopped; and drained by an operator for a reason of theirs, which stays
        sh(c2, "systemctl stop chrony")
        sh(c1, f"scontrol update NodeName={n2} State=DRAIN Reason='operator: reseat cable'")
        # node3: another torch in the training environment (as a partial upgrade leaves it)
        sh(c3, f"cp {torch_meta} /root/METADATA.doctor && sed -i 's/^Version: 2\\./Version: 1./' {torch_meta}")
        # the shared directory (on node1, the NFS server) filled, by the cluster user, past a floor set 1 GiB under its free space
        avail = int(sh(c1, f"df -B1 --output=avail {export} | tail -n 1"))
        sh(c1, f"runuser -u megaprov -- fallocate -l 3G {export}/cache/doctor-fill")
        code, doc, err = doctor(inventory, "-e", f"doctor_shared_min_free_gib={(avail - 2**30) / 2**30:.3f}", "--drain")
        found = wrong(doc)
        assert code == 6 and "megaprov: error:" in err, err
        for expected in (("HOST_LOOPBACK", n1), ("DISK_FULL", n1), ("SERVICE_DOWN", n2), ("VERSION_MISMATCH", n3)):
            assert expected in found, doc["result"]["findings"]
        assert len(found) == 4, found  # nothing else
        by_code = {f["code"]: f for f in doc["result"]["findings"]}
        assert "127.0.1.1" in by_code["HOST_LOOPBACK"]["evidence"] and "--tags base" in by_code["HOST_LOOPBACK"]["fix"]
        assert by_code["SERVICE_DOWN"]["evidence"].startswith("chrony: inactive")
        assert "torch: " in by_code["VERSION_MISMATCH"]["evidence"] and "has 1.13" in by_code["VERSION_MISMATCH"]["evidence"]
        assert by_code["DISK_FULL"]["evidence"].startswith(f"shared directory {export}:")
        # --drain: every GPU node with an error is drained in Slurm, its codes the reason
        assert doc["result"]["drained"] == {
            n1: "megaprov doctor: DISK_FULL,HOST_LOOPBACK",
            n2: "kept: operator: reseat cable",
            n3: "megaprov doctor: VERSION_MISMATCH",
        }, doc["result"]["drained"]
        reasons = sh(c1, "sinfo -R -h -o '%n|%E'")
        assert f"{n3}|megaprov doctor: VERSION_MISMATCH" in reasons and f"{n2}|operator: reseat cable" in reasons, reasons

        # node1 and node2 repaired: doctor names node3 alone, and train leaves it out
        repair_node1_and_node2()
        code, doc, err = doctor(inventory)
        assert code == 6 and wrong(doc) == [("VERSION_MISMATCH", n3)], doc["result"]["findings"]
        job = str(ROOT / "examples" / "jobs" / "lab-tiny.yml")
        code, plan_doc, err = megaprov("train", "--job", job, "-i", inventory, "--exclude-unhealthy", "--dry-run", "--output", "json")
        assert code == 0, err
        assert [n["host"] for n in plan_doc["result"]["launch"]["nodes"]] == [n1, n2]
        code, plan_doc, err = megaprov("train", "--job", job, "-i", inventory, "--exclude-unhealthy", "--nodes", "3", "--dry-run")
        assert code == 2 and f"without {n3}" in err, err
    finally:
        repair_node1_and_node2()
        podman_exec(c3, "bash", "-c", f"if [ -f /root/METADATA.doctor ]; then cp /root/METADATA.doctor {torch_meta}; fi")
        for name in (n1, n2, n3):
            podman_exec(c1, "scontrol", "update", f"NodeName={name}", "State=RESUME")
    code, doc, err = doctor(inventory)
    assert code == 0 and wrong(doc) == [], doc["result"]["findings"]
    assert doc["result"]["drained"] == {}

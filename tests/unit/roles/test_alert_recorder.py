"""The lab's alert recorder (roles/prometheus/files/megaprov_alert_recorder.py): Alertmanager's webhook payload in,
one JSON line per alert out, bodies bounded."""

from __future__ import annotations

import http.client
import json
import threading
import urllib.error
import urllib.request
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import load_module

SCRIPT = Path(__file__).parents[3] / "ansible_collections/megaprov/cluster/roles/prometheus/files/megaprov_alert_recorder.py"

# Alertmanager 0.25's webhook payload (version 4), as its notifier/webhook sends it
PAYLOAD = {
    "version": "4",
    "groupKey": '{}:{alertname="NodeDown"}',
    "status": "firing",
    "receiver": "megaprov-alert-recorder",
    "groupLabels": {"alertname": "NodeDown"},
    "commonLabels": {"alertname": "NodeDown", "severity": "critical"},
    "externalURL": "http://10.0.0.1:9093",
    "alerts": [
        {
            "status": "firing",
            "labels": {"alertname": "NodeDown", "node": "node3", "severity": "critical"},
            "annotations": {"summary": "node3 is down"},
            "startsAt": "2026-12-01T23:40:00.000Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://10.0.0.1:9090/graph",
            "fingerprint": "abc",
        },
        "not an alert",
    ],
}


def load() -> ModuleType:
    return load_module(SCRIPT, "megaprov_alert_recorder")


def test_each_alert_becomes_one_record():
    recorder = load()
    (record,) = recorder.records(PAYLOAD, 1.5)
    assert record == {
        "received": 1.5,
        "receiver": "megaprov-alert-recorder",
        "status": "firing",
        "labels": {"alertname": "NodeDown", "node": "node3", "severity": "critical"},
        "annotations": {"summary": "node3 is down"},
        "startsAt": "2026-12-01T23:40:00.000Z",
        "endsAt": "0001-01-01T00:00:00Z",
    }
    assert recorder.records({"alerts": "x"}, 0) == [] and recorder.records([], 0) == []


def test_the_server_records_posts_and_refuses_what_is_too_big_or_not_json(tmp_path: Path):
    recorder = load()
    out = tmp_path / "alerts.jsonl"
    server = ThreadingHTTPServer(("127.0.0.1", 0), recorder.handler(str(out)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        request = urllib.request.Request(url, json.dumps(PAYLOAD).encode(), {"Content-Type": "application/json"})
        assert urllib.request.urlopen(request, timeout=5).status == 200
        with pytest.raises(urllib.error.HTTPError) as bad:
            urllib.request.urlopen(urllib.request.Request(url, b"{not json"), timeout=5)
        assert bad.value.code == 400
        # a body announced past the bound is refused before it is read (headers only: nothing to send after them)
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
        conn.putrequest("POST", "/")
        conn.putheader("Content-Length", str(recorder.MAX_BODY + 1))
        conn.endheaders()
        assert conn.getresponse().status == 413
        conn.close()
    finally:
        server.shutdown()
    (line,) = out.read_text().splitlines()
    assert json.loads(line)["labels"]["node"] == "node3"

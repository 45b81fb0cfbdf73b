# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""An Alertmanager webhook receiver that records what it is told (the prometheus role's alert recorder).

Alertmanager POSTs its webhook payload (version 4: status, groupLabels, alerts with status, labels, annotations,
startsAt, endsAt); each alert becomes one JSON line in the output file with the time it was received. Bodies are at
most MAX_BODY bytes; the file is rotated to ``.1`` past MAX_FILE. The lab's tests read it to see what fired. Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 1 << 20
MAX_FILE = 16 << 20
LOCK = threading.Lock()


def records(payload: object, received: float) -> list[dict[str, object]]:
    """The alerts of one webhook payload, one record each. Pure."""
    if not isinstance(payload, dict) or not isinstance(payload.get("alerts"), list):
        return []
    out = []
    for alert in payload["alerts"][:1000]:
        if not isinstance(alert, dict):
            continue
        out.append(
            {
                "received": round(received, 3),
                "receiver": str(payload.get("receiver", ""))[:200],
                "status": str(alert.get("status", ""))[:20],
                "labels": alert.get("labels") if isinstance(alert.get("labels"), dict) else {},
                "annotations": alert.get("annotations") if isinstance(alert.get("annotations"), dict) else {},
                "startsAt": str(alert.get("startsAt", ""))[:64],
                "endsAt": str(alert.get("endsAt", ""))[:64],
            }
        )
    return out


def append(path: str, lines: list[dict[str, object]]) -> None:
    with LOCK:
        try:
            if os.path.getsize(path) > MAX_FILE:
                os.replace(path, path + ".1")
        except OSError:
            pass
        with open(path, "a") as handle:
            handle.write("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))


def handler(output: str) -> type[BaseHTTPRequestHandler]:
    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            try:
                length = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                length = -1
            if length < 0 or length > MAX_BODY:
                self.send_error(413 if length > MAX_BODY else 400)
                return
            try:
                payload = json.loads(self.rfile.read(length) or b"null")
            except ValueError:
                self.send_error(400, "not JSON")
                return
            append(output, records(payload, time.time()))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:  # noqa: N802
            body = b"megaprov alert recorder\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return

    return Receiver


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    ThreadingHTTPServer((args.listen, args.port), handler(args.output)).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())

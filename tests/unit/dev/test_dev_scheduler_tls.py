"""`dev up --with-scheduler` serves the API over HTTPS with a CA of its own, and `dev env` hands the CLI that CA."""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from learnerkit.dev.prometheus import file_sd_targets
from learnerkit.dev.scheduler import SCHEDULER_SERVICE, certificates
from learnerkit.dev.service import Launch
from learnerkit.scheduler.api.certificates import create_certificates


class Healthz(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


def serving(cert: Path | None, key: Path | None) -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Healthz)
    if cert is not None and key is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Launch:
    folder = tmp_path_factory.mktemp("scheduler")
    prepared = Launch("scheduler", folder, {"api": 18080}, {"ETCD_ENDPOINTS": "127.0.0.1:2379", "S3_ENDPOINT_URL": "x"})
    SCHEDULER_SERVICE.prepare(prepared)
    return prepared


def test_the_first_start_makes_the_certificates_and_later_ones_keep_them(launch: Launch) -> None:
    files = certificates(launch)
    before = files.cert.read_bytes(), files.ca.read_bytes()
    SCHEDULER_SERVICE.prepare(launch)
    assert (files.cert.read_bytes(), files.ca.read_bytes()) == before


def test_serve_gets_the_pair_and_dev_env_the_ca_and_an_https_url(launch: Launch) -> None:
    files = certificates(launch)
    argv = SCHEDULER_SERVICE.argv(launch)
    assert argv[argv.index("--tls-cert") + 1] == str(files.cert)
    assert argv[argv.index("--tls-key") + 1] == str(files.key)
    exports = SCHEDULER_SERVICE.exports(launch)
    assert exports["LEARNERKIT_SCHEDULER_URL"] == "https://127.0.0.1:18080"
    assert exports["LEARNERKIT_SCHEDULER_CA"] == str(files.ca)
    assert SCHEDULER_SERVICE.endpoint(launch.ports) == "https://127.0.0.1:18080"


def test_the_probe_trusts_the_dev_ca_alone(launch: Launch, tmp_path: Path) -> None:
    files = certificates(launch)
    for port in serving(files.cert, files.key):
        assert SCHEDULER_SERVICE.probe(Launch("scheduler", launch.folder, {"api": port}))
    stranger = create_certificates(tmp_path / "stranger")
    for port in serving(stranger.cert, stranger.key):
        assert not SCHEDULER_SERVICE.probe(Launch("scheduler", launch.folder, {"api": port}))
    for port in serving(None, None):
        assert not SCHEDULER_SERVICE.probe(Launch("scheduler", launch.folder, {"api": port})), "no plain HTTP"


def test_prometheus_scrapes_the_scheduler_over_https(launch: Launch) -> None:
    target = SCHEDULER_SERVICE.scrape_target(launch.ports)
    assert target == "https://127.0.0.1:18080/metrics"
    assert file_sd_targets((target, "127.0.0.1:2379/metrics")) == [
        {"targets": ["127.0.0.1:18080"], "labels": {"__metrics_path__": "/metrics", "__scheme__": "https"}},
        {"targets": ["127.0.0.1:2379"], "labels": {"__metrics_path__": "/metrics", "__scheme__": "http"}},
    ]

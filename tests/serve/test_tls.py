"""TLS through uvicorn's options: the service answers over HTTPS with the operator's certificate, and
with ``--tls-ca`` refuses a client that presents no certificate."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serve.conftest import Server

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def _self_signed(tmp: Path, name: str) -> tuple[Path, Path]:
    cert, key = tmp / f"{name}.crt", tmp / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


class TlsServer(Server):
    def start(self, timeout_s: float = 60.0) -> Server:
        self.base = self.base.replace("http://", "https://")
        import time

        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*self._cmd()], stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            try:
                with socket_ready(self.port):
                    return self
            except OSError:
                time.sleep(0.1)
        raise AssertionError("TLS server did not start")

    def _cmd(self) -> list[str]:
        from tests.conftest import canary_cmd

        return [*canary_cmd(), "--db", self.db_url, "serve", "--port", str(self.port), *self.args]


def socket_ready(port: int) -> Any:
    import socket

    return socket.create_connection(("127.0.0.1", port), timeout=2)


def test_https_with_the_operators_certificate(store_url: str, tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path, "server")
    server = TlsServer(store_url, tmp_path, "--tls-cert", str(cert), "--tls-key", str(key), "--no-auth")
    server.start()
    try:
        trusted = ssl.create_default_context(cafile=str(cert))
        assert httpx.get(f"{server.base}/healthz", verify=trusted, timeout=30).json()["status"] == "ok"
        with pytest.raises(httpx.ConnectError):  # a client that does not trust the certificate
            httpx.get(f"{server.base}/healthz", timeout=30)
        with pytest.raises(httpx.HTTPError):  # plain HTTP on the TLS port gets no answer
            httpx.get(server.base.replace("https://", "http://") + "/healthz", timeout=30)
    finally:
        server.stop()


@pytest.mark.slow
def test_mutual_tls_refuses_a_client_without_certificate(store_url: str, tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path, "server")
    client_cert, client_key = _self_signed(tmp_path, "client")
    server = TlsServer(store_url, tmp_path, "--tls-cert", str(cert), "--tls-key", str(key),
                       "--tls-ca", str(client_cert), "--no-auth")
    server.start()
    try:
        with_cert = ssl.create_default_context(cafile=str(cert))
        with_cert.load_cert_chain(str(client_cert), str(client_key))
        assert httpx.get(f"{server.base}/healthz", verify=with_cert, timeout=30).status_code == 200
        without = ssl.create_default_context(cafile=str(cert))
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{server.base}/healthz", verify=without, timeout=30)
    finally:
        server.stop()

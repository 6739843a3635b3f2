"""``canary fit|admit --server https://…`` reaches a server that requires client certificates (mTLS,
``canary serve --tls-ca``): ``--tls-ca`` trusts the server's certificate, ``--tls-cert/--tls-key``
present the client's, each defaulting to ``$CANARY_TLS_CA``/``$CANARY_TLS_CERT``/``$CANARY_TLS_KEY``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import canary_cmd, cli_env
from tests.serve.conftest import EX
from tests.serve.test_tls import TlsServer, _self_signed

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")]

PROFILE = str(EX / "profiles" / "embedding-service.yaml")


def _fit(tmp_path: Path, db: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*canary_cmd(), "--db", db, "fit", *args, "h100-sxm", PROFILE, "--json"],
                          capture_output=True, text=True, env=cli_env(tmp_path) | (env or {}), timeout=180)


def test_cli_reaches_a_mutual_tls_server(store_url: str, tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path, "server")
    client_cert, client_key = _self_signed(tmp_path, "client")
    server = TlsServer(store_url, tmp_path, "--tls-cert", str(cert), "--tls-key", str(key),
                       "--tls-ca", str(client_cert), "--no-auth")
    server.start()
    try:
        url = server.base
        ok = _fit(tmp_path, store_url, "--server", url, "--tls-ca", str(cert), "--tls-cert", str(client_cert),
                  "--tls-key", str(client_key))
        assert ok.returncode == 0, ok.stderr  # an idle H100 admits the embedding service
        assert '"verdict": "admit"' in ok.stdout or '"verdict":"admit"' in ok.stdout
        by_env = _fit(tmp_path, store_url, env={"CANARY_SERVER": url, "CANARY_TLS_CA": str(cert),
                                                "CANARY_TLS_CERT": str(client_cert), "CANARY_TLS_KEY": str(client_key)})
        assert by_env.returncode == 0, by_env.stderr
        # No client certificate: the server refuses the handshake; the message says which options help.
        without = _fit(tmp_path, store_url, "--server", url, "--tls-ca", str(cert))
        assert without.returncode == 4, without.stderr
        assert "--tls-cert" in without.stderr and "Traceback" not in without.stderr
        # A file that is not what it should be is bad input naming the option and the file.
        missing = _fit(tmp_path, store_url, "--server", url, "--tls-ca", str(tmp_path / "nope.crt"))
        assert missing.returncode == 2 and "--tls-ca" in missing.stderr and "nope.crt" in missing.stderr, missing.stderr
        swapped = _fit(tmp_path, store_url, "--server", url, "--tls-ca", str(cert), "--tls-cert", str(client_key),
                       "--tls-key", str(client_cert))
        assert swapped.returncode == 2 and "--tls-cert" in swapped.stderr, swapped.stderr
        lone_key = _fit(tmp_path, store_url, "--server", url, "--tls-ca", str(cert), "--tls-key", str(client_key))
        assert lone_key.returncode == 2 and "--tls-key" in lone_key.stderr, lone_key.stderr
    finally:
        server.stop()

"""Bad operator input is exit 2 with one message naming the option or field and the file, before
anything is announced or written: ``canary serve``'s TLS files and node devices, and the URL
``canary fit/admit --server`` (or ``$CANARY_SERVER``) is given."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import canary_cmd, cli_env
from tests.serve.conftest import EX
from tests.support.cli import run_in_process

PROFILE = str(EX / "profiles" / "embedding-service.yaml")
needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def _serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    db = f"sqlite:///{tmp_path / 'serve.sqlite3'}"
    return subprocess.run([*canary_cmd(), "--db", db, "serve", "--port", "0", *args], capture_output=True,
                          text=True, env=cli_env(tmp_path), timeout=60)


def _pems(tmp_path: Path) -> dict[str, str]:
    from tests.serve.test_tls import _self_signed

    cert, key = _self_signed(tmp_path, "server")
    _, other_key = _self_signed(tmp_path, "other")
    return {"cert": str(cert), "key": str(key), "other_key": str(other_key)}


@needs_openssl
@pytest.mark.parametrize(("args", "want"), [
    pytest.param(["--tls-cert", "/nope.crt", "--tls-key", "/nope.key"],
                 "field 'tls_certfile': '/nope.crt' (--tls-cert): no such file", id="missing-files"),
    pytest.param(["--tls-cert", "{key}", "--tls-key", "{cert}"],
                 "field 'tls_certfile': '{key}' (--tls-cert): expected a certificate (PEM), but it holds PRIVATE KEY",
                 id="swapped"),
    pytest.param(["--tls-cert", "{cert}", "--tls-key", "{other_key}"],
                 "'{cert}' and tls_keyfile (--tls-key) '{other_key}' do not load as a certificate and its "
                 "private key", id="another-certificates-key"),
    pytest.param(["--tls-cert", "{cert}", "--tls-key", "{key}", "--tls-ca", "/nope-ca.pem"],
                 "field 'tls_ca_certs': '/nope-ca.pem' (--tls-ca): no such file", id="missing-ca"),
    pytest.param(["--tls-cert", "{cert}", "--tls-key", "{key}", "--tls-ca", "{key}"],
                 "field 'tls_ca_certs': '{key}' (--tls-ca): expected CA certificates", id="ca-is-a-key"),
    pytest.param(["--tls-ca", "{cert}"], "tls_ca_certs (--tls-ca) needs tls_certfile and tls_keyfile",
                 id="ca-without-certificate"),
])
def test_serve_refuses_tls_files_that_do_not_load(tmp_path: Path, args: list[str], want: str) -> None:
    pems = _pems(tmp_path)
    result = _serve(tmp_path, *(a.format(**pems) for a in args))
    assert result.returncode == 2, result.stderr
    assert "serving on" not in result.stderr
    assert "Traceback" not in result.stderr
    assert want.format(**pems) in result.stderr
    assert not (tmp_path / "serve.sqlite3").exists()


@pytest.mark.parametrize(("config_text", "want"), [
    pytest.param("nodes:\n  gpu-node-a: [h100-sxm, h100x]\n",
                 "field 'nodes.gpu-node-a[1]': unknown device 'h100x'; closest: h100-sxm", id="node-device"),
    # a wrong default policy failed every request that named none
    pytest.param("default_policy: nope\n", "field 'default_policy': no policy named 'nope'", id="default-policy"),
])
def test_serve_refuses_a_config_that_names_nothing_known(tmp_path: Path, config_text: str, want: str) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text("host: 127.0.0.1\nport: 0\n" + config_text)
    result = _serve(tmp_path, "--config", str(config))
    assert result.returncode == 2, result.stderr
    assert "serving on" not in result.stderr
    assert f"{config}: {want}" in result.stderr


def test_serve_refuses_a_node_device_option_that_is_neither_file_nor_catalog_name(tmp_path: Path) -> None:
    # a missing snapshot file stays a request-time unknown (docs/serve.md); nvml:0 is not a node's device
    by_option = _serve(tmp_path, "--node", f"gpu-node-b={tmp_path / 'later.yaml'},nvml:0", "--openapi")
    assert by_option.returncode == 2
    assert "field 'nodes.gpu-node-b[1]': 'nvml:0' is neither a snapshot file" in by_option.stderr


@pytest.mark.parametrize(("argv", "env", "want"), [
    pytest.param(["admit", "h100", PROFILE, "--server", "127.0.0.1:18765"], {},
                 "field '--server': '127.0.0.1:18765' has no scheme; expected http://HOST[:PORT]", id="no-scheme"),
    pytest.param(["fit", "h100", PROFILE, "--server", "localhost:8765"], {},
                 "field '--server': 'localhost:8765' has no scheme", id="host-read-as-scheme"),
    pytest.param(["fit", "h100", PROFILE], {"CANARY_SERVER": "ftp://127.0.0.1:18765"},
                 "field '$CANARY_SERVER': 'ftp://127.0.0.1:18765' has scheme 'ftp'", id="env-ftp"),
    pytest.param(["fit", "h100", PROFILE, "--server", "http://:8765"], {},
                 "field '--server': 'http://:8765' names no host", id="no-host"),
    pytest.param(["fit", "h100", PROFILE, "--server", "http://127.0.0.1:99999"], {},
                 "field '--server': 'http://127.0.0.1:99999' is not a URL", id="port-out-of-range"),
])
def test_a_malformed_server_url_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch, argv: list[str],
                                             env: dict[str, str], want: str) -> None:
    monkeypatch.delenv("CANARY_SERVER", raising=False)
    result = run_in_process(argv, capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path) | env)
    assert result.returncode == 2, result.stderr
    assert want in result.stderr
    assert "did not answer" not in result.stderr
    assert not (tmp_path / "evidence.sqlite3").exists()


def test_a_malformed_server_url_is_bad_input_in_the_installed_script(tmp_path: Path) -> None:
    result = subprocess.run([*canary_cmd(), "admit", "h100", PROFILE, "--server", "127.0.0.1:18765"],
                            capture_output=True, text=True, env=cli_env(tmp_path), timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("canary: field '--server': '127.0.0.1:18765' has no scheme")
    assert not (tmp_path / "evidence.sqlite3").exists()

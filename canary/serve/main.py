"""Entry point for uvicorn: ``canary.serve.main:app_from_env`` (a factory), so that every worker
process builds its own application from the configuration ``canary serve`` put in the environment."""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import FastAPI

from canary.errors import InputError
from canary.serve.app import create_app
from canary.serve.config import ServeConfig
from canary.serve.metrics import MULTIPROC_ENV

CONFIG_ENV = "CANARY_SERVE_CONFIG_JSON"


def app_from_env() -> FastAPI:
    raw = os.environ.get(CONFIG_ENV)
    if raw is None:
        raise RuntimeError(f"{CONFIG_ENV} is not set: start the service with canary serve")
    return create_app(ServeConfig.model_validate_json(raw))


def run(config: ServeConfig, *, log_level: str = "warning", access_log: bool = False) -> None:
    """Serve until interrupted (uvicorn, ``config.workers`` processes).

    With more than one worker, metrics run in prometheus-client's multiprocess mode (see
    ``canary.serve.metrics``): in ``$PROMETHEUS_MULTIPROC_DIR`` when the operator set it (an existing
    directory, emptied by the operator between runs), else in a private temporary directory removed
    when the server stops. The variable is set here, before uvicorn starts the workers."""
    import shutil
    import tempfile

    private: str | None = None
    if config.workers > 1:
        given = os.environ.get(MULTIPROC_ENV)
        if given is None:
            private = tempfile.mkdtemp(prefix="canary-metrics-")
            os.environ[MULTIPROC_ENV] = private
        elif not Path(given).is_dir():
            raise InputError(f"{MULTIPROC_ENV}={given!r} is not a directory: create it (empty) or unset it",
                             field=MULTIPROC_ENV)
    try:
        _run(config, log_level=log_level, access_log=access_log)
    finally:
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)


def _run(config: ServeConfig, *, log_level: str, access_log: bool) -> None:
    import ssl

    import uvicorn

    os.environ[CONFIG_ENV] = config.model_dump_json()
    kwargs: dict[str, object] = {}
    if config.tls_certfile is not None:
        kwargs.update(ssl_certfile=config.tls_certfile, ssl_keyfile=config.tls_keyfile)
        if config.tls_ca_certs is not None:
            kwargs.update(ssl_ca_certs=config.tls_ca_certs, ssl_cert_reqs=ssl.CERT_REQUIRED)
    uvicorn.run("canary.serve.main:app_from_env", factory=True, host=config.host, port=config.port,
                workers=config.workers, log_level=log_level, access_log=access_log, server_header=False,
                timeout_graceful_shutdown=10, timeout_keep_alive=65,
                timeout_worker_healthcheck=config.worker_healthcheck_s, **kwargs)  # type: ignore[arg-type]

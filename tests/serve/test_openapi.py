"""The OpenAPI document is the contract: the checked-in ``docs/openapi.json`` is what the server serves,
and a bounded, seeded schemathesis run against the live server finds no server error and no response
outside the document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings

from canary.serve.app import openapi_document
from tests.serve.conftest import Api

DOC = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def test_checked_in_document_is_current() -> None:
    assert json.loads(DOC.read_text()) == json.loads(openapi_document()), (
        "docs/openapi.json is out of date: run  canary serve --openapi > docs/openapi.json")


def test_server_serves_the_checked_in_document(api: Api) -> None:
    with api.client(None) as c:
        assert c.get("/openapi.json").json() == json.loads(DOC.read_text())


@pytest.mark.slow
def test_api_conforms_to_its_document(api: Api) -> None:
    """Every operation, a few seeded examples each: no 5xx, statuses/content types/bodies as documented."""
    from schemathesis.checks import CHECKS

    loaded = schemathesis.openapi.from_url(f"{api.server.base}/openapi.json")
    wanted = {"not_a_server_error", "status_code_conformance", "content_type_conformance",
              "response_schema_conformance", "response_headers_conformance"}
    checks = [c for c in CHECKS.get_all() if c.__name__ in wanted]
    assert len(checks) == len(wanted)
    headers = {"Authorization": f"Bearer {api.tokens['admin']}"}
    ran = 0
    for result in loaded.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(max_examples=6, derandomize=True, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
        def run(case: Any) -> None:
            case.call_and_validate(headers=headers, timeout=30, checks=checks)

        run()
        ran += 1
    assert ran == sum(len(methods) for methods in json.loads(DOC.read_text())["paths"].values())

"""A 422 names the field as a path in the request a caller sent (``body.regime``, ``body.candidate.memory``,
``query.wait``): never a CLI option (``--regime``) or a JSON character position, which a caller of the
HTTP API cannot map back to what it sent."""

from __future__ import annotations

from typing import Any

import pytest

from tests.serve.conftest import Api, profile_doc

PROFILE = profile_doc()
BAD_RESIDENT = {"name": "r"}


@pytest.mark.parametrize(("path", "body", "want"), [
    pytest.param("/v1/fit", {"device": "h100-sxm", "candidate": PROFILE, "regime": "bogus"},
                 "field 'body.regime': unknown regime 'bogus'", id="regime-from-the-core"),
    pytest.param("/v1/fit", {"device": "h100-sxm", "candidate": PROFILE, "regime": "mps:500"},
                 "field 'body.regime': ", id="regime-out-of-range"),
    pytest.param("/v1/fit", {"device": "h100-sxm", "candidate": PROFILE, "policy": "nope"},
                 "field 'body.policy': no policy named 'nope'", id="policy"),
    pytest.param("/v1/fit", {"device": "h100-sxm", "candidate": PROFILE, "regime": "A B"},
                 "field 'body.regime': ", id="regime-pattern"),
    pytest.param("/v1/admissions", {"device": "h100-sxm", "candidate": PROFILE, "seed": "x"},
                 "field 'body.seed': ", id="seed-type"),
    pytest.param("/v1/admissions", {"device": "h100-sxm", "candidate": PROFILE, "seed": "5"},
                 "field 'body.seed': Input should be a valid integer", id="seed-numeric-string"),
    pytest.param("/v1/admissions", {"device": "h100-sxm", "candidate": PROFILE, "probe": "yes"},
                 "field 'body.probe': Input should be a valid boolean", id="probe-string"),
    pytest.param("/v1/admissions", {"device": "h100-sxm", "candidate": PROFILE, "reserve": "false"},
                 "field 'body.reserve': Input should be a valid boolean", id="reserve-string"),
    pytest.param("/v1/admissions", {"device": "h100-sxm", "candidate": PROFILE, "probe": 0},
                 "field 'body.probe': Input should be a valid boolean", id="probe-integer"),
    pytest.param("/v1/fit", {"device": "h100-sxm", "candidate": PROFILE | {"memory": {"reserved_bytes": -1}}},
                 "field 'body.candidate.memory", id="candidate-document"),
    pytest.param("/v1/fit", {"device": "h100-sxm", "candidate": PROFILE, "residents": [PROFILE, BAD_RESIDENT]},
                 "field 'body.residents[1].version': required field is missing", id="resident-document"),
    pytest.param("/v1/fit", {"device": "no-such-gpu", "candidate": PROFILE},
                 "field 'body.device': ", id="device"),
])
def test_422_names_the_body_field(api: Api, path: str, body: dict[str, Any], want: str) -> None:
    with api.client("admit") as c:
        r = c.post(path, json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail.startswith(want), detail
    assert "'--" not in detail and "DEVICE" not in detail


def test_further_fields_of_a_document_are_paths_too(api: Api) -> None:
    with api.client("fit") as c:
        r = c.post("/v1/fit", json={"device": "h100-sxm", "candidate": {"name": 1}})
    detail = r.json()["detail"]
    assert r.status_code == 422 and detail.startswith("field 'body.candidate.name': "), detail
    assert "also field 'body.candidate.version': required field is missing" in detail


def test_invalid_json_names_the_body_not_a_character(api: Api) -> None:
    with api.client("fit") as c:
        r = c.post("/v1/fit", content=b"{bad", headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith("field 'body': not valid JSON"), r.text


def test_query_parameter_is_named_as_such(api: Api) -> None:
    with api.client("read") as c:
        r = c.get("/v1/probes/some-id", params={"wait": "abc"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith("field 'query.wait': not a duration"), r.text

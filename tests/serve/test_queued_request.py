"""``QueuedRequest``: the admission question as it crosses processes (a queued probe another server
process or a node agent runs; a history row revalidation and ``canary warm --from-history`` replay).
One writer (``stored``), one reader (``read``), rows written before the model still read."""

from __future__ import annotations

import ast
import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from canary.admission.request import QueuedRequest
from canary.errors import InputError
from canary.serve.resolve import resolve
from canary.serve.schemas import DecisionRequest
from tests.serve.conftest import profile_doc, snapshot_doc
from tests.support.paths import ROOT


def _resolved(**body: Any) -> Any:
    request = DecisionRequest.model_validate({"device": snapshot_doc(), "candidate": profile_doc()} | body)
    return resolve(request, lambda *_: None, default_policy="default", reserve=False, seed=7)


def _old_row(**changes: Any) -> dict[str, Any]:
    """A queued request exactly as the service wrote it before the model (``resolve``'s dict)."""
    return {"device": {"kind": "published", "ref": "inline:0123456789abcdef", "snapshot": snapshot_doc()},
            "candidate": profile_doc(), "residents": [], "regime": None, "policy": "default", **changes}


def test_what_is_stored_reads_back_as_the_same_question() -> None:
    r = _resolved(residents=[profile_doc("llm-decode.yaml")], regime="mps:50")
    back = QueuedRequest.read(r.request_json)
    assert back == r.queued and (back.reserve, back.seed, back.regime) == (False, 7, "mps:50")
    again = back.request()
    assert (again.device_id, str(again.regime), again.policy.name) == (
        r.request.device_id, str(r.request.regime), r.request.policy.name)
    assert [x.name for x in again.snapshot.residents] == [x.name for x in r.request.snapshot.residents]


@pytest.mark.parametrize(("changes", "reserve", "seed", "until"), [
    pytest.param({}, True, 0, None, id="a-fit-or-cli-history-row"),
    pytest.param({"reserve": False, "seed": 3}, False, 3, None, id="an-admission"),
    pytest.param({"reserve": False, "evidence_fresh_until": "2026-12-03T03:00:00+00:00"}, False, 0,
                 dt.datetime(2026, 12, 3, 3, tzinfo=dt.UTC), id="a-warm-job-row"),
])
def test_rows_written_before_the_model_still_read(changes: dict[str, Any], reserve: bool, seed: int,
                                                  until: dt.datetime | None) -> None:
    queued = QueuedRequest.read(_old_row(**changes))
    assert (queued.reserve, queued.seed, queued.evidence_fresh_until) == (reserve, seed, until)
    assert queued.request().device_id == snapshot_doc()["uuid"]


@pytest.mark.parametrize(("data", "message"), [
    pytest.param(_old_row(candidate={"name": "x"}), "queued request: field 'candidate.version'", id="bad-document"),
    pytest.param({k: v for k, v in _old_row().items() if k != "policy"}, "queued request: field 'policy'",
                 id="no-policy"),
    pytest.param(_old_row(command=["/bin/sh"]), "queued request: field 'command'", id="an-unknown-field"),
    pytest.param([1, 2], "queued request: expected a mapping", id="not-a-mapping"),
])
def test_a_row_that_cannot_be_read_is_named_not_asserted(data: Any, message: str) -> None:
    with pytest.raises(InputError) as err:
        QueuedRequest.read(data)
    assert str(err.value).startswith(message), str(err.value)


def test_the_stored_form_is_read_and_written_in_one_place() -> None:
    """Nothing but ``QueuedRequest`` takes a stored request apart (``request_json[…]``, ``.get``) or
    writes one as a dict literal of its fields."""
    offenders = []
    for path in sorted((ROOT / "canary").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript | ast.Attribute):
                target = node.value
                named = getattr(target, "attr", getattr(target, "id", None))
                if named == "request_json" and (isinstance(node, ast.Subscript) or node.attr == "get"):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} reads request_json")
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                # A table of field names to option names (every value a string constant, as the CLI's
                # 'body.regime' → '--regime') holds no request; a stored request holds documents.
                names_only = all(isinstance(v, ast.Constant) and isinstance(v.value, str) for v in node.values)
                if {"device", "candidate", "policy"} <= keys and not names_only:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} writes a request by hand")
    known = {"canary/admission/store.py"}  # history_entry: see the report of the change that added this test
    assert [o for o in offenders if Path(o.split(":")[0]).as_posix() not in known] == [], offenders

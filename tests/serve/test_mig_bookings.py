"""``POST /v1/fit`` on a MIG device shows the placement an admission would get now: the MIG instances
other admissions booked are taken, also on the kept-body path (the same bytes sent again).

``examples/snapshots/c-mig-95pct.yaml`` (H200, MIG on): a 3g.71gb instance holds memory slices [0,4).
The H200 table (``nvidia-smi mig -lgipp``, the 8-slice layout): 1g.18gb = 1 slice, starts 0‥6. So the
first free 1g.18gb start is 4; once an admission booked 1g.18gb@4, the next free one is 5.
``embedding-service`` (6 GiB peak + 512 MiB context) accepts 1g.18gb, its smallest profile here.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.serve.conftest import make_token, profile_doc, snapshot_doc

BODY = json.dumps({"device": snapshot_doc("c-mig-95pct.yaml"), "candidate": profile_doc("embedding-service.yaml")})
HEADERS = {"content-type": "application/json"}


def _placement(cert: dict[str, Any]) -> tuple[str, int]:
    finding = next(f for f in cert["findings"] if f["resource"] == "mig_placement")
    assert finding["verdict"] == "yes", finding
    return finding["placement"]["profile"], finding["placement"]["start"]


def _post(client: httpx.Client, path: str, body: str = BODY) -> dict[str, Any]:
    r = client.post(path, content=body, headers=HEADERS)
    assert r.status_code == 200, r.text
    cert: dict[str, Any] = r.json()
    return cert


def test_fit_sees_the_mig_instance_an_admission_booked(store_url: str, server_factory: Any) -> None:
    server = server_factory(store_url)
    with server.client(make_token(store_url, "admit")) as c:
        before = _post(c, "/v1/fit")
        assert (before["verdict"], before["regime"], _placement(before)) == ("admit", "mig:1g.18gb", ("1g.18gb", 4))

        booked = _post(c, "/v1/admissions")
        assert booked["verdict"] == "admit", booked["reason"]
        assert _placement(booked) == ("1g.18gb", 4)
        rows = c.get("/v1/reservations").json()
        assert [r["mig_instance"] for r in rows] == ["1g.18gb@4"], rows

        after = _post(c, "/v1/fit")  # the same bytes: the kept body, decided against the store as it is now
        assert (after["verdict"], _placement(after)) == ("admit", ("1g.18gb", 5))
        taken = next(f for f in after["findings"] if f["resource"] == "mig_placement")["detail"]
        assert "[4,5)" in taken, taken

        fresh = _post(c, "/v1/fit", json.dumps(json.loads(BODY), indent=1))  # other bytes: prepared anew
        assert _placement(fresh) == ("1g.18gb", 5)

        second = _post(c, "/v1/admissions")  # and the admission books that one
        assert _placement(second) == ("1g.18gb", 5)

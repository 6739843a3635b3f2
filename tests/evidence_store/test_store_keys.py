"""PairKey: canonical form, stable digest, validation; and the light-import promise of ``gpu-fit``.

The key lives in the models (``canary._model``); ``evidence_store`` names it ``PairKey``."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from canary._model import KEY_FIELDS, PairKey
from canary.errors import InputError

PARTS = {
    "resident_version": "llama-serve:1.4.2",
    "resident_shape_family": "bs<=32,seq<=4096",
    "candidate_version": "sha256:9f2c",
    "candidate_shape_family": "bs<=8",
    "device_type": "h100-sxm",
    "regime": "mps:50",
}


def test_digest_is_sha256_of_sorted_compact_json() -> None:
    key = PairKey(**PARTS)
    canonical = json.dumps(PARTS, sort_keys=True, separators=(",", ":"))
    assert key.digest() == hashlib.sha256(canonical.encode()).hexdigest()


def test_digest_is_pinned_across_versions() -> None:
    # A change here would orphan every stored record.
    key = PairKey(
        resident_version="a",
        resident_shape_family="b",
        candidate_version="c",
        candidate_shape_family="d",
        device_type="e",
        regime="f",
    )
    expected = hashlib.sha256(
        b'{"candidate_shape_family":"d","candidate_version":"c","device_type":"e",'
        b'"regime":"f","resident_shape_family":"b","resident_version":"a"}'
    ).hexdigest()
    assert key.digest() == expected


def test_round_trip_and_order_independence() -> None:
    key = PairKey.from_dict(dict(reversed(list(PARTS.items()))))
    assert key.as_dict() == PARTS
    assert PairKey.from_dict(key.as_dict()) == key
    assert hash(key) == hash(PairKey(**PARTS))


@pytest.mark.parametrize("part", KEY_FIELDS)
def test_every_part_changes_the_digest(part: str) -> None:
    other = PairKey(**{**PARTS, part: PARTS[part] + "x"})
    assert other.digest() != PairKey(**PARTS).digest()


@pytest.mark.parametrize(
    ("data", "field", "problem"),
    [
        ({k: v for k, v in PARTS.items() if k != "regime"}, "regime", "missing"),
        ({**PARTS, "driver": "550"}, "driver", "not a part"),
        ({**PARTS, "device_type": ""}, "device_type", "empty"),
        ({**PARTS, "device_type": " h100"}, "device_type", "whitespace"),
        ({**PARTS, "regime": 50}, "regime", "must be a string"),
    ],
)
def test_bad_keys_name_the_field(data: dict[str, object], field: str, problem: str) -> None:
    with pytest.raises(InputError) as info:
        PairKey.from_dict(data, file="plan.yaml")
    assert info.value.field == field
    assert problem in str(info.value)
    assert "plan.yaml" in str(info.value)


def test_the_store_names_the_models_key() -> None:
    import evidence_store

    assert evidence_store.PairKey is PairKey


def test_importing_keys_and_package_does_not_import_sqlalchemy() -> None:
    code = (
        "import sys, evidence_store, canary._model\n"
        "from evidence_store import PairKey\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'alembic', 'psycopg'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == ""


def test_lazy_names_resolve() -> None:
    import evidence_store

    assert evidence_store.__all__ == sorted(evidence_store.__all__)
    for name in evidence_store.__all__:
        assert getattr(evidence_store, name) is not None
    with pytest.raises(AttributeError):
        _ = evidence_store.no_such_name

"""``Stage1Memo``: stage 1 by its exact inputs. A hit must be the answer ``hard_fit`` gives for those
inputs; anything that changes an input — the memory others booked, its source, another document, another
regime — must be computed anew."""

from __future__ import annotations

import dataclasses

from canary.admission import hard_fit, load_request
from canary.admission.flow import Stage1Memo
from canary.regime import parse_regime
from tests.support.paths import EXAMPLES

SNAP = str(EXAMPLES / "snapshots" / "g-nccl-mps-room.yaml")
EMB = str(EXAMPLES / "profiles" / "embedding-service.yaml")
SOURCE = "evidence store: memory booked by other admissions on this device"
GiB = 1 << 30


def test_the_same_inputs_are_computed_once_and_answer_as_hard_fit() -> None:
    req = load_request(SNAP, EMB)
    memo = Stage1Memo()
    first = memo(req, reserved_bytes_by_others=0, reservations_source=SOURCE)
    again = memo(req, reserved_bytes_by_others=0, reservations_source=SOURCE)
    assert again is first and (memo.hits, memo.misses) == (1, 1)
    assert first == hard_fit(req, reserved_bytes_by_others=0, reservations_source=SOURCE)
    # A new Request around the same document objects (the service builds one per HTTP request) hits.
    rebuilt = dataclasses.replace(req)
    assert rebuilt is not req and memo(rebuilt, reserved_bytes_by_others=0, reservations_source=SOURCE) is first


def test_booked_memory_is_part_of_the_key() -> None:
    req = load_request(SNAP, EMB)
    memo = Stage1Memo()
    assert memo(req, reserved_bytes_by_others=0, reservations_source=SOURCE).verdict == "yes"
    full = req.spec.memory_bytes  # another admission booked the whole device: the candidate cannot fit
    booked = memo(req, reserved_bytes_by_others=full, reservations_source=SOURCE)
    assert booked.verdict == "no" and booked.limiting_resource == "hbm"
    assert booked == hard_fit(req, reserved_bytes_by_others=full, reservations_source=SOURCE)
    unknown = memo(req, reserved_bytes_by_others=None, reservations_source=None)
    assert unknown == hard_fit(req, reserved_bytes_by_others=None, reservations_source=None)
    assert memo.misses == 3 and memo.hits == 0


def test_other_documents_or_regime_are_other_inputs() -> None:
    req = load_request(SNAP, EMB)
    memo = Stage1Memo()
    base = memo(req, reserved_bytes_by_others=0, reservations_source=SOURCE)
    # An equal but separately loaded document is another object: computed anew (never a wrong hit).
    other = load_request(SNAP, EMB)
    assert memo(other, reserved_bytes_by_others=0, reservations_source=SOURCE) == base and memo.misses == 2
    regime = parse_regime("mps:90")
    moved = dataclasses.replace(req, regime=regime)
    assert memo(moved, reserved_bytes_by_others=0, reservations_source=SOURCE) == hard_fit(
        moved, reserved_bytes_by_others=0, reservations_source=SOURCE)
    assert memo.misses == 3


def test_a_full_memo_starts_over() -> None:
    req = load_request(SNAP, EMB)
    memo = Stage1Memo(size=2)
    for booked in (0, GiB, 2 * GiB):
        memo(req, reserved_bytes_by_others=booked, reservations_source=SOURCE)
    assert len(memo) == 1  # cleared when the third arrived, then kept it
    memo(req, reserved_bytes_by_others=2 * GiB, reservations_source=SOURCE)
    assert memo.hits == 1

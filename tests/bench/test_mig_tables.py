"""The independent transcription of NVIDIA's MIG tables (canary.bench.mig_tables) against the catalog,
and its placement rule on cases worked out by hand from the MIG user guide."""

from __future__ import annotations

import pytest

from canary.bench.mig_tables import TABLES, creation_blocker, table_for
from canary.catalog import lookup


@pytest.mark.parametrize("device", sorted(TABLES))
def test_catalog_agrees_with_the_independent_table(device: str) -> None:
    spec = lookup(device)
    assert spec.mig_memory_slices == 8
    table = table_for(device)
    catalog = {p.name: p for p in spec.mig_profiles}
    assert set(catalog) == set(table), f"{device}: profile names differ"
    for name, ours in table.items():
        theirs = catalog[name]
        assert theirs.memory_slices == ours.memory_slices, name
        assert theirs.max_instances == ours.instances_available, name
        assert {pl.start for pl in theirs.placements} == set(ours.starts), name
        assert {pl.size for pl in theirs.placements} == {ours.memory_slices}, name


@pytest.mark.parametrize(
    ("device", "profile", "existing", "expected"),
    [
        # Two 1g at slices 0 and 4: six slices free, but both 3g placements ({0,4}:4) are cut.
        pytest.param("a100-80gb", "3g.40gb", [("1g.10gb", 0), ("1g.10gb", 4)], "mig_placement", id="fragmented-3g"),
        # 1g at 1 and 5: the same, one slice further in.
        pytest.param("h100-sxm", "3g.40gb", [("1g.10gb", 1), ("1g.10gb", 5)], "mig_placement", id="fragmented-3g-odd"),
        # 4g at 0 + 2g at 4: slices 6-7 left, a 3g needs four.
        pytest.param("h100-sxm", "3g.40gb", [("4g.40gb", 0), ("2g.20gb", 4)], "mig_slices", id="two-slices-left"),
        # Two 3g.71gb exist: the H200 allows two.
        pytest.param("h200", "3g.71gb", [("3g.71gb", 0), ("3g.71gb", 4)], "mig_slices", id="h200-both-3g"),
        # One 4g at 0: a 3g fits at 4.
        pytest.param("h100-sxm", "3g.40gb", [("4g.40gb", 0)], None, id="3g-beside-4g"),
        # A second 4g: four slices free but only one 4g instance may exist (and its only start is 0).
        pytest.param("a100-40gb", "4g.20gb", [("4g.20gb", 0)], "mig_instances", id="one-4g-only"),
        # The single +me instance is taken; plain 1g still fits.
        pytest.param("h200", "1g.18gb+me", [("1g.18gb+me", 0)], "mig_instances", id="one-media-instance"),
        pytest.param("h200", "1g.18gb", [("1g.18gb+me", 0)], None, id="plain-1g-beside-me"),
        # 2g at 0, 2, 4 taken: slices 6-7 free but 6 is not a 2g start.
        pytest.param("a100-40gb", "2g.10gb", [("2g.10gb", 0), ("2g.10gb", 2), ("2g.10gb", 4)], "mig_instances",
                     id="three-2g"),
        pytest.param("a100-40gb", "2g.10gb", [("1g.5gb", 0), ("1g.5gb", 2), ("1g.5gb", 4)], "mig_placement",
                     id="2g-starts-cut"),
        pytest.param("a100-40gb", "1g.10gb", [("1g.5gb", 0), ("1g.5gb", 2), ("1g.5gb", 4)], None,
                     id="double-memory-1g-at-6"),
        pytest.param("h100-sxm", "7g.80gb", [], None, id="empty-device"),
    ],
)
def test_creation_blocker_on_hand_worked_cases(device: str, profile: str, existing: list[tuple[str, int]],
                                               expected: str | None) -> None:
    got = creation_blocker(device, profile, existing)
    assert (got[0] if got else None) == expected


def test_an_impossible_existing_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="not one of its placements"):
        creation_blocker("h100-sxm", "1g.10gb", [("3g.40gb", 2)])
    with pytest.raises(ValueError, match="overlap"):
        creation_blocker("h100-sxm", "1g.10gb", [("4g.40gb", 0), ("1g.10gb", 3)])
    with pytest.raises(KeyError, match="no transcribed MIG table"):
        table_for("t4")

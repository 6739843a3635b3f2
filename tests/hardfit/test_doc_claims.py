"""The docs' prose agrees with what the commands print and with the newest measurement."""

from __future__ import annotations

import re
from pathlib import Path

from canary.commands.occupancy import _pct

ROOT = Path(__file__).resolve().parents[2]


def test_the_percentage_rule_in_docs_occupancy_is_what_the_command_prints() -> None:
    text = (ROOT / "docs" / "occupancy.md").read_text()
    sentence = re.search(r"Percentages print.*?(?=Sizes accept)", text, re.S)
    assert sentence is not None
    examples = re.findall(r"`([0-9.]+)%`", sentence.group(0))
    # whole percentages keep one decimal: the command prints 100.0% and 50.0% (its own output above)
    assert "100.0" in examples and "50.0" in examples
    for shown in examples:
        assert _pct(float(shown)) == f"{shown}%", shown
    assert "(64 of 64 warps, 100.0% occupancy)" in text


def test_readme_states_the_newest_gpu_fit_floor_measurement() -> None:
    hardfit = (ROOT / "docs" / "hardfit.md").read_text()
    newest = re.search(r"\*\*([0-9.]+) M / ([0-9.]+) M = ([0-9.]+)× — met\*\*", hardfit)
    assert newest is not None, "docs/hardfit.md no longer states the newest floor measurement"
    row = next(line for line in (ROOT / "README.md").read_text().splitlines()
               if line.startswith("| `gpu-fit h100 PROFILE --no-store`"))
    instructions, floor, ratio = newest.groups()
    assert f"{ratio}×" in row and f"{instructions} M / {floor} M" in row
    assert re.search(rf"{re.escape(ratio)}× [^|]*met", row)
    assert "1.68× in instructions (1.60× and 1.43× wall, 1.65× and 1.61× CPU): **not met**" not in row

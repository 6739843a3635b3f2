"""README's synopsis ("Using it") matches the parsers behind ``--help``: every option a command
*requires* is shown on its line, and every option a line shows exists on the command it names. A line
may leave optional options out. ``gpu-fit`` is ``canary fit`` (the same arguments)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from canary.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def synopsis_segments() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## Using it", 1)[1].split("```", 2)[1]
    segments = []
    for line in block.splitlines():
        line = re.sub(r"\s+#\s.*$", "", line)  # a trailing comment
        segments += [s.strip() for s in re.split(r"(?=(?:^|\s{2,})(?:canary|gpu-fit)\s)", line) if s.strip()]
    return segments


def _children(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def leaf_parsers(segment: str, root: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers of the (sub)commands a segment names; ``a|b|c`` names each of them."""
    words = segment.split()
    current = [_children(root)["fit"]] if words[0] == "gpu-fit" else [root]
    for word in words[1:] if words[0] == "canary" else []:
        names = word.split("|")
        nxt = [_children(p)[n] for p in current for n in names if n in _children(p)]
        if not nxt:
            break
        current = nxt
    return current


SEGMENTS = synopsis_segments()


def test_the_synopsis_was_found() -> None:
    assert len(SEGMENTS) >= 15 and any(s.startswith("canary envelope from-binary") for s in SEGMENTS)


@pytest.mark.parametrize("segment", SEGMENTS)
def test_synopsis_line_matches_help(segment: str) -> None:
    root = build_parser()
    leaves = leaf_parsers(segment, root)
    if leaves == [root]:  # canary's own options (--version, the global ones): no word may be a command's name
        assert all(not w[0].islower() for w in segment.split()[1:]), f"{segment!r} names no canary command"
    for leaf in leaves:
        for action in leaf._actions:
            if action.required and action.option_strings:
                assert any(o in segment.split() or f"{o}=" in segment or f"({o}" in segment or f"[{o}" in segment
                           or re.search(rf"(^|[\s(|]){re.escape(o)}(\s|$)", segment)
                           for o in action.option_strings), f"{segment!r} omits {leaf.prog}'s required {action.option_strings}"
    known = {o for leaf in leaves for a in leaf._actions for o in a.option_strings}
    for option in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", segment):
        assert option in known, f"{segment!r} shows {option}, which {[leaf.prog for leaf in leaves]} do not take"

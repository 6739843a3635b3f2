"""The rules of the house (docs/architecture.md), enforced on the import graph.

A small AST check rather than import-linter: the rules are a dozen rows, the check needs no extra
dependency, and it sees every import — module level, inside functions (the lazy imports that keep
``gpu-fit`` fast) and under ``TYPE_CHECKING`` (a type is knowledge too). Each rule is one row; the
imports that break a rule today are listed with it as **known exceptions**, each with the deferred
work that removes it, so the test fails on any *new* upward arrow — and also when an exception has
been fixed but is still listed (the list only shrinks).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.paths import ROOT

PACKAGES = ("canary", "evidence_store")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module ``name`` refers to (a ``from m import x`` may name a submodule ``m.x``)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    line: int

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported} (line {self.line})"


def _edges() -> Iterator[Edge]:
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            seen: set[str] = set()
            for name in names:
                target = _resolve(name)
                # A module importing its own package (or itself) is not an arrow between rooms.
                if target is None or target in seen or module == target or module.startswith(target + "."):
                    continue
                seen.add(target)
                yield Edge(module, target, node.lineno)


@functools.cache
def all_edges() -> tuple[Edge, ...]:
    """Every project import edge; parsed on first use, not when the module is collected (every
    ``pytest`` run collects this file, and an xdist worker that never runs these tests need not parse)."""
    return tuple(_edges())

# Rooms, by module name prefix. A module belongs to the first room whose prefix matches.
ROOMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("models", ("canary.errors", "canary.units", "canary._values", "canary._model", "canary.profile", "canary.snapshot",
                "canary.policy", "canary.certificate", "canary.catalog", "canary.quantiles", "canary.tables",
                "canary.regime")),
    ("occupancy", ("canary.occupancy",)),
    ("hardfit", ("canary.hardfit",)),
    # The sim executor and monitor are the simulator's adapters into stage 2, as the process executor
    # and the http monitor are the real ones': they may import canary.sim, the rest of probe may not.
    ("sim-adapters", ("canary.probe.executors.sim", "canary.probe.monitors.sim", "canary.probe.simlink")),
    ("probe", ("canary.probe",)),
    ("sim", ("canary.sim",)),
    ("backends", ("canary.backends",)),
    ("envelope", ("canary.envelope",)),
    # Slowdown estimators (canary.estimate): admission consults them; the simulator's is one of them.
    ("estimate", ("canary.estimate",)),
    ("admission", ("canary.admission",)),
    ("jobs", ("canary.jobs",)),
    ("store", ("evidence_store",)),
    # What the service and the node agent both run against the store (the probe runner, published devices):
    # below both, so that neither imports the other.
    ("fleetwork", ("canary.fleetwork",)),
    ("serve", ("canary.serve",)),
    ("agent", ("canary.agent",)),
    ("top", ("canary.cli", "canary.commands", "canary.bench", "canary.demo", "canary.render")),
    ("face", ("canary",)),  # canary/__init__.py: the public API re-exports from every room, lazily
)


def room(module: str) -> str:
    for name, prefixes in ROOMS:
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return name
    raise AssertionError(f"{module} is in no room: add it to ROOMS in {__file__}")


@dataclass(frozen=True)
class Rule:
    importers: tuple[str, ...]
    forbidden: tuple[str, ...]
    # (importer module, imported module) pairs that break the rule today, each with why it is deferred.
    known: dict[tuple[str, str], str] = field(default_factory=dict)


SERVICE = ("fleetwork", "serve", "agent")
ABOVE_MODELS = ("occupancy", "hardfit", "sim-adapters", "probe", "sim", "backends", "envelope", "estimate",
                "admission", "jobs", "store", *SERVICE, "top", "face")


def only(*allowed: str) -> tuple[str, ...]:
    """Every room above the models but ``allowed``: what a room that may import only those may not."""
    return tuple(r for r in ABOVE_MODELS if r not in allowed)


RULES = [
    pytest.param(
        Rule(("models",), ABOVE_MODELS),
        id="models-import-only-models",
    ),
    pytest.param(
        Rule(("occupancy",), only("occupancy")),
        id="occupancy-imports-only-models",
    ),
    pytest.param(
        Rule(("hardfit",), only("occupancy", "hardfit")),
        id="hardfit-is-pure-stage-1",
    ),
    pytest.param(
        Rule(("probe",), ("hardfit", "sim", "estimate", "admission", "jobs", "store", *SERVICE, "top", "face")),
        id="probe-knows-neither-admission-nor-store-nor-sim",
    ),
    pytest.param(
        Rule(("sim-adapters",), ("hardfit", "admission", "jobs", "store", *SERVICE, "top", "face")),
        id="sim-adapters-import-sim-and-probe-only",
    ),
    pytest.param(
        Rule(("sim",), only("occupancy", "sim")),
        id="the-simulator-is-models-and-occupancy-only",
    ),
    pytest.param(
        Rule(("backends",), only("backends")),
        id="backends-read-devices-into-models-only",
    ),
    pytest.param(
        Rule(("envelope",), only("backends", "envelope")),
        id="envelope-reads-binaries-with-models-and-backends-only",
    ),
    pytest.param(
        Rule(("models", "occupancy", "hardfit", "probe", "admission"), ("sim",)),
        id="the-core-never-imports-the-simulator",
    ),
    pytest.param(
        Rule(("models", "occupancy", "hardfit", "probe", "sim-adapters", "sim", "backends", "envelope"), ("store",)),
        id="only-admission-jobs-the-service-and-the-top-import-the-store",
    ),
    pytest.param(
        Rule(("store",), only("store")),
        id="the-store-knows-only-models",
    ),
    pytest.param(
        Rule(("estimate",), ("hardfit", "sim-adapters", "backends", "envelope", "admission", "jobs", *SERVICE, "top",
                             "face")),
        id="estimators-are-below-admission",
    ),
    pytest.param(
        Rule(("admission",), ("jobs", *SERVICE, "top", "face")),
        id="admission-is-below-jobs-service-and-cli",
    ),
    pytest.param(
        Rule(("jobs",), (*SERVICE, "top", "face")),
        id="jobs-are-below-service-and-cli",
    ),
    pytest.param(
        Rule(("fleetwork",), ("hardfit", "probe", "sim-adapters", "sim", "envelope", "jobs", "serve", "agent", "top",
                              "face")),
        id="fleetwork-runs-admission-over-the-store-for-serve-and-agent-alike",
    ),
    pytest.param(
        Rule(("serve",), ("agent",)),
        id="serve-never-imports-the-agent",
    ),
    pytest.param(
        Rule(("agent",), ("serve",)),
        id="the-agent-never-imports-serve",
    ),
    pytest.param(
        Rule(tuple(name for name, _ in ROOMS if name not in ("serve", "agent", "top", "face")), ("serve", "agent")),
        id="nothing-below-the-top-imports-serve-or-agent",
    ),
]


def _violations(rule: Rule) -> list[Edge]:
    return [e for e in all_edges() if room(e.importer) in rule.importers and room(e.imported) in rule.forbidden]


@pytest.mark.parametrize("rule", RULES)
def test_no_new_upward_imports(rule: Rule) -> None:
    new = [e for e in _violations(rule) if (e.importer, e.imported) not in rule.known]
    assert not new, "imports against the rules of the house (docs/architecture.md):\n" + "\n".join(map(str, new))


@pytest.mark.parametrize("rule", RULES)
def test_known_exceptions_still_exist(rule: Rule) -> None:
    """A fixed exception must leave the list, so it cannot come back unnoticed."""
    present = {(e.importer, e.imported) for e in _violations(rule)}
    stale = sorted(set(rule.known) - present)
    assert not stale, f"fixed, remove from the known exceptions: {stale}"


# Import cycles that exist today (none: the list only shrinks, and a new cycle fails). Modules, and
# packages: two packages that import each other are one package in two folders, whatever their modules do.
KNOWN_CYCLES: list[set[str]] = []
KNOWN_PACKAGE_CYCLES: list[set[str]] = []


def package(module: str) -> str:
    """The unit a package-level cycle is counted between: a top-level subpackage or module of ``canary``
    (``canary.serve``, ``canary.agent``, ``canary.errors``), or the store (``evidence_store``)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "canary" and len(parts) > 1 else parts[0]


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for node in graph:
        if node not in index:
            visit(node)
    return found


def _cycles() -> list[set[str]]:
    """Module-level cycles, lazy and ``TYPE_CHECKING`` imports included."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for e in all_edges():
        graph[e.importer].add(e.imported)
    return strongly_connected(graph)


def package_cycles(edges: tuple[Edge, ...]) -> list[set[str]]:
    """Packages that import each other, directly or round a longer loop."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        a, b = package(e.importer), package(e.imported)
        graph.setdefault(a, set())
        if a != b:
            graph[a].add(b)
    return strongly_connected(graph)


def _check(found: list[set[str]], known: list[set[str]], what: str) -> None:
    new = [sorted(c) for c in found if c not in known]
    assert not new, f"{what}: {new}"
    stale = [sorted(c) for c in known if c not in found]
    assert not stale, f"fixed, remove from the known {what}: {stale}"


def test_no_new_import_cycles() -> None:
    _check(_cycles(), KNOWN_CYCLES, "import cycles")


def test_no_two_packages_import_each_other() -> None:
    _check(package_cycles(all_edges()), KNOWN_PACKAGE_CYCLES, "package cycles")


@pytest.mark.parametrize(("edges", "cycles"), [
    pytest.param([("canary.serve.fleet", "canary.agent.published"), ("canary.agent.agent", "canary.serve.probes")],
                 [{"canary.serve", "canary.agent"}], id="two-packages-whose-modules-form-no-cycle"),
    pytest.param([("canary.serve.app", "canary.fleetwork.runner"), ("canary.agent.agent", "canary.fleetwork.runner")],
                 [], id="two-packages-over-a-third"),
    pytest.param([("canary.jobs.a", "canary.serve.b"), ("canary.serve.c", "canary.agent.d"),
                  ("canary.agent.e", "canary.jobs.f")],
                 [{"canary.jobs", "canary.serve", "canary.agent"}], id="round-three-packages"),
    pytest.param([("canary.cli", "canary.errors"), ("canary.errors", "canary.cli")],
                 [{"canary.cli", "canary.errors"}], id="top-level-modules-count-as-packages"),
])
def test_package_cycles_are_seen_where_module_cycles_are_not(edges: list[tuple[str, str]],
                                                             cycles: list[set[str]]) -> None:
    found = package_cycles(tuple(Edge(a, b, 1) for a, b in edges))
    assert sorted(map(sorted, found)) == sorted(map(sorted, cycles))


def test_no_rule_lists_known_exceptions() -> None:
    """The house is one-way today: an exception added to a rule is a new upward arrow, not a plan."""
    assert all(isinstance(param.values[0], Rule) and not param.values[0].known for param in RULES)
    assert not KNOWN_CYCLES and not KNOWN_PACKAGE_CYCLES


def test_every_module_is_in_a_room() -> None:
    for module in MODULES:
        room(module)  # raises, naming the module, when a new package is not placed

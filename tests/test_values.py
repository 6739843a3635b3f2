"""``canary._values.value_methods``: shared ``__eq__``/``__hash__``/``__repr__`` that behave exactly as
the ones ``@dataclass`` generates, checked against dataclass's own on every class that uses them."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from canary._values import value_methods
from canary.admission.decisions import Decision, PairEvidence, ProbeRun, ReservationPlan
from canary.admission.request import Request
from canary.backends import ResolvedDevice
from canary.catalog import CdnaSpec, DeviceSpec, MigPlacement, MigProfile
from canary.hardfit._context import Demand, FitContext
from canary.hardfit.balance import HbmBalance
from canary.hardfit.compute import _Kernel, _SmLoad
from canary.occupancy import BlockFootprint, CdnaOccupancyResult, OccupancyResult, _ArchRules
from canary.regime import Regime

CLASSES: tuple[type, ...] = (Decision, PairEvidence, ProbeRun, ReservationPlan, Request, ResolvedDevice, CdnaSpec,
                             DeviceSpec, MigPlacement, MigProfile, Demand, FitContext, HbmBalance, _Kernel, _SmLoad,
                             BlockFootprint, CdnaOccupancyResult, OccupancyResult, _ArchRules, Regime)


def _reference(cls: type) -> type:
    """The class dataclass itself builds from the same fields, with its generated methods."""
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    return dataclasses.make_dataclass(cls.__name__, [(f.name, Any) for f in dataclasses.fields(cls)],
                                      frozen=params.frozen)


def _instance(cls: type, values: dict[str, Any]) -> Any:
    obj = object.__new__(cls)
    for name, value in values.items():  # every field set, as __init__ would (no checks run: values are markers)
        object.__setattr__(obj, name, value)
    return obj


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__qualname__)
def test_value_methods_behave_as_generated(cls: type) -> None:
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    assert not params.eq and not params.repr, "declared eq=False, repr=False: the methods are value_methods'"
    ref_cls = _reference(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    values = {name: (i, name) for i, name in enumerate(names)}
    obj, same, ref = _instance(cls, values), _instance(cls, dict(values)), ref_cls(**values)
    assert repr(obj) == repr(ref)
    assert obj == same and obj is not same
    assert obj.__eq__(ref) is NotImplemented and obj != ref
    for name in names:
        changed = _instance(cls, {**values, name: "changed"})
        assert obj != changed and (obj == changed) == (ref == ref_cls(**{**values, name: "changed"}))
    if params.frozen:
        assert hash(obj) == hash(ref) == hash(same)
    else:
        assert cls.__hash__ is None and ref_cls.__hash__ is None  # type: ignore[comparison-overlap]


def test_value_methods_one_field_and_recursion() -> None:
    @value_methods
    @dataclasses.dataclass(frozen=True, eq=False, repr=False)
    class One:
        x: Any

    @dataclasses.dataclass(frozen=True)
    class Ref:
        x: Any

    assert repr(One(1)) == repr(Ref(1)).replace("Ref", "One") and hash(One(1)) == hash(Ref(1))
    assert One(1) == One(1) and One(1) != One(2)

    @value_methods
    @dataclasses.dataclass(eq=False, repr=False)
    class Box:
        items: list[Any]

    box = Box([])
    box.items.append(box)
    assert repr(box).endswith("Box(items=[...])")


def test_value_methods_refuses_generated_or_own_methods() -> None:
    with pytest.raises(TypeError):
        value_methods(dataclasses.dataclass(frozen=True)(type("Gen", (), {"__annotations__": {"x": int}})))

    class Own:
        x: int

        def __repr__(self) -> str:
            return "own"

    with pytest.raises(TypeError):
        value_methods(dataclasses.dataclass(eq=False, repr=False)(Own))

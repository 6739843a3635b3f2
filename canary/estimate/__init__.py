"""Interference estimators: a predicted resident slowdown before (or instead of) a probe.

- :mod:`canary.estimate.base`: the ``Estimator`` protocol, ``EstimateQuery``, ``Estimate`` / ``NoEstimate``;
- built-ins: ``transfer`` (evidence on neighbouring pair keys), ``analytical`` (the profiles' phase/time
  structure), ``simulator`` (``canary.sim``);
- third-party estimators: the entry point group ``canary.estimators`` (``load_estimator``);
- :mod:`canary.estimate.calibration`: split-conformal calibration per estimator and device type;
- ``assess``: each pair's best estimate with its calibration, for the admission flow and warm plans.

docs/estimators.md says what a prediction guarantees and how to add an estimator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from canary.errors import InputError
from canary.estimate.base import Estimate, EstimateQuery, Estimator, EvidenceReader, NoEstimate, NoEvidence
from canary.estimate.calibration import Calibration, Outcome, calibrate

if TYPE_CHECKING:
    from canary.probe.judge import SlowdownPrior

ENTRY_POINT_GROUP = "canary.estimators"
BUILTIN = ("transfer", "analytical", "simulator")


def _builtin(name: str) -> Estimator:
    if name == "transfer":
        from canary.estimate.transfer import TransferEstimator

        return TransferEstimator()
    if name == "analytical":
        from canary.estimate.analytical import AnalyticalEstimator

        return AnalyticalEstimator()
    from canary.estimate.simulator import SimulatorEstimator

    return SimulatorEstimator()


def _entry_points() -> dict[str, object]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available_estimators() -> list[str]:
    """The built-ins and every estimator installed under the ``canary.estimators`` entry point group."""
    return sorted(set(BUILTIN) | set(_entry_points()))


def load_estimator(name: str) -> Estimator:
    """The estimator called ``name``: a built-in, or an entry point of group ``canary.estimators`` whose
    object is an estimator class or factory (called without arguments). ``InputError`` (field
    ``estimators``) for a name nothing provides, an entry point that fails to load, or an object that
    is not an estimator named ``name``."""
    if name in BUILTIN:
        return _builtin(name)
    eps = _entry_points()
    ep = eps.get(name)
    if ep is None:
        raise InputError(f"no estimator named {name!r} (available: {', '.join(available_estimators())})",
                         field="estimators")
    try:
        obj = ep.load()  # type: ignore[attr-defined]
        est = obj() if isinstance(obj, type) or (callable(obj) and not isinstance(obj, Estimator)) else obj
    except Exception as exc:
        raise InputError(f"estimator {name!r} (entry point {ep.value}) failed to load: "  # type: ignore[attr-defined]
                         f"{type(exc).__name__}: {exc}", field="estimators") from exc
    if not isinstance(est, Estimator):
        raise InputError(f"estimator {name!r} (entry point {ep.value}) is not an estimator: it needs a 'name' and "  # type: ignore[attr-defined]
                         "an 'estimate(query)' method", field="estimators")
    if est.name != name:
        raise InputError(f"estimator {name!r} calls itself {est.name!r}; the entry point's name and the "
                         "estimator's must agree", field="estimators")
    return est


def load_estimators(names: Sequence[str]) -> list[Estimator]:
    return [load_estimator(n) for n in names]


@dataclass(frozen=True)
class Assessment:
    """The estimate chosen for one pair, and its estimator's calibration on the device type."""

    resident: str
    key_digest: str | None
    estimate: Estimate
    calibration: Calibration
    considered: tuple[str, ...] = ()
    #: the consulted estimators that could not predict this pair, each with its reason
    missed: tuple[NoEstimate, ...] = ()

    @property
    def calibrated_interval(self) -> tuple[float, float] | None:
        """The calibrated interval when the estimator is calibrated (``None``: uncalibrated)."""
        if not self.calibration.calibrated:
            return None
        return self.calibration.interval(self.estimate.lo_pct, self.estimate.hi_pct)

    def interval(self) -> tuple[float, float]:
        """The calibrated interval, or the raw one (for ordering only)."""
        return self.calibrated_interval or (self.estimate.lo_pct, self.estimate.hi_pct)


def prior_from_interval(lo_pct: float, hi_pct: float, level: float) -> SlowdownPrior:
    """The judge prior of a calibrated interval at ``level``: the mean at its middle (at least −99%),
    the standard deviation its half-width over the normal quantile of ``(1 + level) / 2`` (at least
    0.1 points)."""
    from canary.probe.judge import SlowdownPrior

    z = _normal_quantile((1 + level) / 2)
    return SlowdownPrior(max((lo_pct + hi_pct) / 2, -99.0), max((hi_pct - lo_pct) / (2 * z), 0.1))


def _normal_quantile(p: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)


def value_of_information(interval: tuple[float, float] | None, bound_pct: float) -> float:
    """How much a probe of a pair would tell, from its predicted interval and the bound: 1 for no
    estimate (nothing is known); for an interval that straddles the bound, 0.5 + the smaller side's
    share of its width (up to 1 with the bound in the middle); for one clear of the bound, less than
    0.5 the further it lies from it (distance over width)."""
    if interval is None:
        return 1.0
    lo, hi = interval
    width = max(hi - lo, 1e-9)
    if lo <= bound_pct <= hi:
        return 0.5 + min(bound_pct - lo, hi - bound_pct) / width
    gap = lo - bound_pct if lo > bound_pct else bound_pct - hi
    return 0.5 / (1.0 + gap / width)


def assess(query: EstimateQuery, estimators: Sequence[Estimator], outcomes: Sequence[Outcome], *,
           confidence: float, min_outcomes: int, key_digest: str | None = None) -> Assessment | NoEstimate:
    """The best estimate of ``query``'s pair: of the calibrated estimators the narrowest calibrated
    interval, else (uncalibrated: for ordering) the narrowest raw one; ``NoEstimate`` listing each
    estimator's reason when none can predict. An estimator that raises is recorded as no estimate."""
    found: list[tuple[Estimate, Calibration]] = []
    why: list[str] = []
    missed: list[NoEstimate] = []
    for est in estimators:
        try:
            answer = est.estimate(query)
        except Exception as exc:  # one estimator's failure is its own unknown, not the admission's
            answer = NoEstimate(est.name, f"raised {type(exc).__name__}: {exc}")
        if isinstance(answer, NoEstimate):
            why.append(f"{answer.estimator}: {answer.reason}")
            missed.append(answer)
            continue
        cal = calibrate(answer.estimator, query.device_type, outcomes, alpha=1 - confidence,
                        min_outcomes=min_outcomes, group=answer.group)
        found.append((answer, cal))
    if not found:
        return NoEstimate("+".join(e.name for e in estimators) or "none",
                          "; ".join(why) or "the policy names no estimator")

    def width(item: tuple[Estimate, Calibration]) -> tuple[int, float]:
        e, c = item
        iv = c.interval(e.lo_pct, e.hi_pct) if c.calibrated else None
        return (0, iv[1] - iv[0]) if iv is not None else (1, e.hi_pct - e.lo_pct)

    best = min(found, key=width)
    considered = tuple(f"{e.estimator}: {e.lo_pct:.1f}..{e.hi_pct:.1f}% ({'calibrated' if c.calibrated else 'uncalibrated'})"
                       for e, c in found) + tuple(why)
    return Assessment(query.resident.name, key_digest, best[0], best[1], considered, tuple(missed))


__all__ = [
    "BUILTIN",
    "ENTRY_POINT_GROUP",
    "Assessment",
    "Calibration",
    "Estimate",
    "EstimateQuery",
    "Estimator",
    "EvidenceReader",
    "NoEstimate",
    "NoEvidence",
    "Outcome",
    "assess",
    "available_estimators",
    "calibrate",
    "load_estimator",
    "load_estimators",
    "prior_from_interval",
    "value_of_information",
]


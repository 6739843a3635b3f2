"""The sequential judge against a Kayenta-style fixed-horizon Mann-Whitney judge, on the simulator.

    python benchmarks/judge.py [--trials 1000] [--workers 2] [--seed 0]

Every trial runs one probe's windows on a fresh, seeded ``canary.sim.SimDevice`` (H100 SXM): the
resident alone for the baseline window, then canary-off / canary-on windows in ABBA order, the
candidate placed for each on-window and removed after it (exactly what the ``sim`` executor and
monitor do). The budget is the default policy's ``online-inference`` budget: 60 s, 1 s windows,
2 s baseline, slowdown bound 10%, confidence 0.95, at least 3 pairs — a horizon of 29 window pairs.

Judges, fed the same windows:

- **sequential** (``canary.probe.judge``): looks after every pair and stops at the first
  safe/unsafe verdict; *inconclusive* when the horizon ends first. (The orchestrator's per-window
  slowdown guard and SLO check are off here: this measures the judge alone.)
- **Kayenta MW**: after the full horizon, a two-sided Mann-Whitney test at confidence 0.98 on the
  per-window mean latencies (off vs on), with the Hodges-Lehmann estimate and its distribution-free
  interval; *High* (reject) when the interval's lower bound exceeds 0.25 × |HL| **and** the effect
  size (ratio of means) exceeds the allowed increase 1 + bound; else *Pass* (admit). Kayenta has no
  inconclusive outcome.

Scenario families, resident embedding-service (true slowdown from ``canary.sim.true_pair_slowdown``,
3 seeds × 200 s). Each family takes the first pair of its list (``FAMILY_SPECS``) whose screened true
slowdown lies in the family's range under the simulator's current calibration, and prints it:

- *safe*: true slowdown ≤ 3% against the 10% bound;
- *borderline*: true slowdown 6–25%, judged against a bound set 1 percentage point *below* its
  measured true slowdown, so the pair is just unsafe and a *safe* verdict is a false admit;
- *clearly unsafe*: true slowdown ≥ 30% against the 10% bound;
- *drifting baseline*: the borderline pair while the resident's baseline latency drifts down by
  0.5% per simulated second (a load that falls during the probe: the drift that would hide a
  slowdown), same bound.

A **false admit** is an admit (sequential: *safe*; Kayenta: *Pass*) of a pair whose true slowdown
exceeds the bound. Exposure is the candidate's requests served in the on-windows the judge consumed.
Every number printed here comes from the simulator.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from canary.policy import load_policy  # noqa: E402
from canary.probe.judge import JudgeSettings, WindowPair, judge  # noqa: E402

DEVICE = "h100-sxm"
CANDIDATE_RATE_RPS = 10.0
CANDIDATE_PRIORITY = 1  # below the resident's 0, as the sim executor places canaries
KAYENTA_TOLERANCE = 0.25
KAYENTA_CONFIDENCE = 0.98


@dataclass(frozen=True)
class Family:
    name: str
    resident: str
    candidate: str
    regime: str
    drift_per_s: float = 0.0
    # Borderline families are defined by their distance to the bound, not by a fixed bound: the bound
    # is set this many percentage points *below* the pair's measured true slowdown, so a *safe*
    # verdict is a false admit whatever the simulator's current calibration makes of the pair.
    bound_below_truth_pct: float | None = None


RESIDENT = "embedding-service.yaml"
# Serving candidates only: exposure counts requests (a batch candidate's are steps).
BORDERLINE_RANGE_PCT = (6.0, 25.0)
BORDERLINE_CANDIDATES = (
    ("llm-decode.yaml", "mps:50"),
    ("llm-decode.yaml", "streams"),
    ("llm-prefill.yaml", "streams"),
    ("sd-unet-serving.yaml", "streams"),
    ("llm-decode.yaml", "timeslice"),
)

# (family, drift per simulated second, bound set this far below the truth or None, truth range in %
# that qualifies a pair, candidates in order of preference as (candidate profile, regime)). The pair is
# chosen by the simulator's current calibration: the first candidate whose screened true slowdown
# falls in the range (the simulator is a model that gets recalibrated; the families must stay what
# their names say).
FAMILY_SPECS: tuple[
    tuple[str, float, float | None, tuple[float, float], tuple[tuple[str, str], ...]], ...
] = (
    (
        "safe",
        0.0,
        None,
        (-100.0, 3.0),
        (
            ("embedding-service.yaml", "mps:50"),
            ("embedding-service.yaml", "streams"),
            ("recommender-small-kernels.yaml", "mps:50"),
            ("sd-unet-serving.yaml", "mps:50"),
        ),
    ),
    (
        "borderline",
        0.0,
        1.0,
        BORDERLINE_RANGE_PCT,
        BORDERLINE_CANDIDATES,
    ),
    (
        "clearly unsafe",
        0.0,
        None,
        (30.0, 1000.0),
        (
            ("embedding-service.yaml", "timeslice"),
            ("llm-prefill.yaml", "timeslice"),
            ("sd-unet-serving.yaml", "timeslice"),
            ("llm-decode.yaml", "timeslice"),
        ),
    ),
    (
        "drifting baseline",
        -0.005,
        1.0,
        BORDERLINE_RANGE_PCT,
        BORDERLINE_CANDIDATES,
    ),
)


def choose_families() -> list[Family]:
    """One pair per family spec, screened on the simulator (seed 100, 60 s)."""
    chosen = []
    for name, drift, below, (low, high), candidates in FAMILY_SPECS:
        for candidate, regime in candidates:
            family = Family(name, RESIDENT, candidate, regime, drift_per_s=drift, bound_below_truth_pct=below)
            screened = true_slowdown_pct(family, seeds=(100,), duration_s=60.0)
            if low <= screened <= high:
                chosen.append(family)
                break
        else:
            raise SystemExit(f"no candidate pair for family {name!r} has a true slowdown in [{low}, {high}]%")
    return chosen


@dataclass(frozen=True)
class FamilyRow:
    family: str
    truth: float
    bound: float
    seq_false_admit: float
    seq_false_reject: float
    seq_inconclusive: float
    seq_exposure: float
    seq_pairs: float
    mw_false_admit: float
    mw_false_reject: float
    mw_exposure: float
    seq_all: list[int]
    mw_all: list[int]


@dataclass(frozen=True)
class TrialResult:
    seq_label: str
    seq_pairs: int
    seq_exposure: int
    mw_admit: bool
    mw_exposure: int


def _profiles(family: Family):  # type: ignore[no-untyped-def]
    from canary.profile import load_profile

    base = ROOT / "examples" / "profiles"
    return load_profile(base / family.resident), load_profile(base / family.candidate)


def true_slowdown_pct(
    family: Family, seeds: Sequence[int] = (101, 102, 103), duration_s: float = 200.0
) -> float:
    from canary.catalog import lookup
    from canary.sim import true_pair_slowdown

    resident, candidate = _profiles(family)
    values = []
    for seed in seeds:
        truth = true_pair_slowdown(
            lookup(DEVICE),
            resident,
            candidate,
            regime=family.regime,
            seed=seed,
            duration_s=duration_s,
            candidate_rate_rps=CANDIDATE_RATE_RPS,
            candidate_priority=CANDIDATE_PRIORITY,
        )
        assert truth.resident_slowdown_pct is not None
        values.append(truth.resident_slowdown_pct)
    return statistics.fmean(values)


def simulate_windows(family: Family, seed: int, pairs: int, window_s: float, baseline_s: float):  # type: ignore[no-untyped-def]
    """The full horizon of one probe: ``[(off_ms, on_ms, on_served), …]`` in ABBA order."""
    from canary.catalog import lookup
    from canary.sim import SimDevice

    resident, candidate = _profiles(family)
    dev = SimDevice(lookup(DEVICE), seed=seed, regime=family.regime)
    r = dev.place(resident, role="resident")
    dev.run_window(baseline_s)
    out = []
    for k in range(pairs):
        got: dict[str, tuple[list[float], int]] = {}
        for kind in ("off", "on") if k % 2 == 0 else ("on", "off"):
            h = (
                dev.place(
                    candidate,
                    role="candidate",
                    priority=CANDIDATE_PRIORITY,
                    request_rate_rps=CANDIDATE_RATE_RPS,
                )
                if kind == "on"
                else None
            )
            start_s = dev.now_s
            w = dev.run_window(window_s)
            served = int(w.requests_served.get(h, 0)) if h is not None else 0
            if h is not None:
                dev.remove(h)
            drift = 1.0 + family.drift_per_s * (start_s + window_s / 2)
            got[kind] = ([v * drift for v in w.latencies_ms[r]], served)
        out.append((got["off"][0], got["on"][0], got["on"][1]))
    return out


def kayenta_mw_admits(off_means: Sequence[float], on_means: Sequence[float], bound_pct: float) -> bool:
    """Kayenta's MannWhitneyClassifier on one metric with an allowed-increase threshold: admit unless High."""
    from scipy.stats import norm

    diffs = sorted(y - x for y in on_means for x in off_means)
    m, n = len(on_means), len(off_means)
    hl = statistics.median(diffs)
    z = norm.ppf(1 - (1 - KAYENTA_CONFIDENCE) / 2)
    k = max(math.floor(m * n / 2 - z * math.sqrt(m * n * (m + n + 1) / 12)), 0)
    lower, _upper = diffs[k], diffs[len(diffs) - 1 - k]
    effect = statistics.fmean(on_means) / statistics.fmean(off_means)
    high = lower > KAYENTA_TOLERANCE * abs(hl) and effect > 1 + bound_pct / 100
    return not high


def run_trial(args: tuple[Family, int, int, float, float, JudgeSettings]) -> TrialResult:
    family, seed, horizon, window_s, baseline_s, settings = args
    windows = simulate_windows(family, seed, horizon, window_s, baseline_s)
    pairs: list[WindowPair] = []
    exposure = 0
    label = "inconclusive"
    used = horizon
    for i, (off, on, served) in enumerate(windows):
        pairs.append(WindowPair(off, on))
        exposure += served
        j = judge(pairs, settings, budget_exhausted=i == horizon - 1, max_pairs=horizon)
        if j.label is not None:
            label, used = j.label, i + 1
            break
    off_means = [statistics.fmean(o) for o, _, _ in windows if o]
    on_means = [statistics.fmean(o) for _, o, _ in windows if o]
    mw_admit = kayenta_mw_admits(off_means, on_means, settings.max_resident_slowdown_pct)
    return TrialResult(label, used, exposure, mw_admit, sum(s for _, _, s in windows))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000, help="seeded trials per scenario family")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    budget = load_policy("default").budget_for("online-inference")
    settings = JudgeSettings.from_budget(budget)
    horizon = int((budget.max_probe_time_s - budget.baseline_window_s) // (2 * budget.sampling_window_s))
    alpha = 1 - budget.required_confidence
    print(f"# judge benchmark on the simulator ({DEVICE}); budget: online-inference of the default policy")
    print(
        f"# bound {budget.max_resident_slowdown_pct:g}% (borderline families: 1 point below their truth), confidence {budget.required_confidence}, windows "
        f"{budget.sampling_window_s:g} s, horizon {horizon} pairs, {args.trials} trials per family, "
        f"candidate {CANDIDATE_RATE_RPS:g} rps"
    )
    rows = []
    began = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for family in choose_families():
            truth = true_slowdown_pct(family)
            print(
                f"# {family.name}: {family.resident} + {family.candidate} under {family.regime}: true {truth:.2f}%"
            )
            bound = (
                truth - family.bound_below_truth_pct
                if family.bound_below_truth_pct is not None
                else budget.max_resident_slowdown_pct
            )
            family_settings = dataclasses.replace(settings, max_resident_slowdown_pct=bound)
            unsafe_truth = truth > bound
            jobs = [
                (
                    family,
                    args.seed * 1_000_003 + i,
                    horizon,
                    budget.sampling_window_s,
                    budget.baseline_window_s,
                    family_settings,
                )
                for i in range(args.trials)
            ]
            results = list(pool.map(run_trial, jobs, chunksize=20))
            n = len(results)
            seq_admit = sum(r.seq_label == "safe" for r in results)
            seq_reject = sum(r.seq_label == "unsafe" for r in results)
            seq_inconclusive = n - seq_admit - seq_reject
            mw_admit = sum(r.mw_admit for r in results)
            rows.append(
                FamilyRow(
                    family=family.name,
                    truth=truth,
                    bound=bound,
                    seq_false_admit=seq_admit / n if unsafe_truth else 0.0,
                    seq_false_reject=seq_reject / n if not unsafe_truth else 0.0,
                    seq_inconclusive=seq_inconclusive / n,
                    seq_exposure=statistics.median(r.seq_exposure for r in results),
                    seq_pairs=statistics.median(r.seq_pairs for r in results),
                    mw_false_admit=mw_admit / n if unsafe_truth else 0.0,
                    mw_false_reject=(n - mw_admit) / n if not unsafe_truth else 0.0,
                    mw_exposure=statistics.median(r.mw_exposure for r in results),
                    seq_all=[r.seq_exposure for r in results],
                    mw_all=[r.mw_exposure for r in results],
                )
            )
    header = (
        f"{'family':<18} {'true %':>7} {'bound %':>7} | {'seq FA':>7} {'seq FR':>7} {'seq inc':>7} {'seq med exp':>11} "
        f"{'seq pairs':>9} | {'MW FA':>7} {'MW FR':>7} {'MW med exp':>10} | {'exp ratio':>9}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        ratio = r.seq_exposure / r.mw_exposure if r.mw_exposure else math.nan
        print(
            f"{r.family:<18} {r.truth:>7.2f} {r.bound:>7.2f} | {r.seq_false_admit:>7.3f} {r.seq_false_reject:>7.3f} "
            f"{r.seq_inconclusive:>7.3f} {r.seq_exposure:>11.0f} {r.seq_pairs:>9.0f} | "
            f"{r.mw_false_admit:>7.3f} {r.mw_false_reject:>7.3f} {r.mw_exposure:>10.0f} | {ratio:>9.2f}"
        )
    seq_all = [v for r in rows for v in r.seq_all]
    mw_all = [v for r in rows for v in r.mw_all]
    overall = statistics.median(seq_all) / statistics.median(mw_all)
    worst_fa = max(r.seq_false_admit for r in rows)
    print("-" * len(header))
    print(f"false-admit rate, sequential: worst family {worst_fa:.3f} (guarantee: <= {alpha:.3f})")
    print(
        f"median exposure over all trials: sequential {statistics.median(seq_all):.0f}, Kayenta MW "
        f"{statistics.median(mw_all):.0f} requests → ratio {overall:.2f} ({100 * (1 - overall):.0f}% fewer)"
    )
    decisive = [r for r in rows if r.family in ("safe", "clearly unsafe")]
    seq_dec = [v for r in decisive for v in r.seq_all]
    mw_dec = [v for r in decisive for v in r.mw_all]
    ratio_dec = statistics.median(seq_dec) / statistics.median(mw_dec)
    print(
        f"median exposure, safe + clearly unsafe families: sequential {statistics.median(seq_dec):.0f}, "
        f"Kayenta MW {statistics.median(mw_dec):.0f} → ratio {ratio_dec:.2f} ({100 * (1 - ratio_dec):.0f}% fewer); "
        "borderline pairs end inconclusive (early, for futility) where Kayenta admits many unsafe ones"
    )
    print(f"# {len(seq_all)} trials in {time.perf_counter() - began:.0f} s; all numbers from the simulator")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

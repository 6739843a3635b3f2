"""Policy: memory headroom, risk budgets per workload class, evidence TTL, what to do on unknown.

Policies live in ``policies/*.yaml`` (``default`` and one per workload class); ``--policy`` takes
a name from there or a path. A policy is validated when it is loaded, so a bad one fails before
any admission, naming the file and field.
"""

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from canary._model import Model, load_document
from canary.errors import InputError
from canary.profile import WorkloadClass
from canary.units import Bytes

#: Evidence older than ten years is never fresh; a larger TTL is a typo (and overflows a date).
MAX_EVIDENCE_TTL_S = 10 * 365 * 24 * 3600.0
MAX_RESERVATION_LEASE_S = 30 * 24 * 3600.0
DEFAULT_PROBE_HOSTS: tuple[str, ...] = ("127.0.0.1", "::1", "localhost")

POLICY_DIR = Path(__file__).resolve().parent.parent / "policies"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
WORKLOAD_CLASSES: tuple[WorkloadClass, ...] = ("online-inference", "batch", "training")


class RiskBudget(Model):
    """Bounds for one probe.

    ``max_resident_slowdown_pct``: the largest slowdown that still counts as safe, in percent
    (10 = 10% slower), of the ratio of the resident's mean latency with the candidate to its mean
    latency without (for a throughput resident: mean time per step, i.e. the inverse throughput
    ratio), over the probe. ``required_confidence``: the probability
    that a *safe* verdict is right (1 − false-admit rate the judge guarantees)."""

    max_probe_time_s: float = Field(gt=0, le=3600, description="the longest a probe may run, in seconds")
    max_requests_exposed: int = Field(ge=1, description="the most requests (or launches) the canary may serve")
    max_resident_slowdown_pct: float = Field(
        gt=0, le=1000, description="the largest resident slowdown that still counts as safe, in percent (10 = 10% "
        "slower)"
    )
    required_confidence: float = Field(
        gt=0.5, lt=1, description="the probability a safe verdict is right (1 - the false-admit rate)"
    )
    rollback_on_slo_violation: bool = Field(
        default=True, description="roll back at once when an on-window breaches the resident's SLO"
    )
    baseline_window_s: float = Field(
        default=2.0, gt=0, description="length of the resident-alone window before the canary starts, in seconds"
    )
    sampling_window_s: float = Field(default=1.0, gt=0, description="length of each on- or off-window, in seconds")
    min_windows: int = Field(default=2, ge=1, description="the judge never decides on fewer on/off window pairs than this")
    # Judge and guard knobs (policy, not code): see docs/canary.md "Judge".
    window_statistic: Literal["mean", "median"] = Field(
        default="mean", description="the statistic of a window's latencies the judge compares"
    )
    min_samples_per_window: int = Field(
        default=3, ge=1, description="a window with fewer of the resident's samples is not used"
    )
    outlier_factor: float | None = Field(
        default=None,
        gt=1,
        description="drop samples above this multiple of their window's median; None keeps all",
    )
    judge_burst_rate: float = Field(
        default=0.05,
        gt=0,
        lt=1,
        description="the rarest fraction of slowed windows a safe verdict must have had the chance to see: "
        "it needs ceil(log(1 - confidence) / log(1 - rate)) effective pairs, i.e. usable pairs over their "
        "estimated autocorrelation time (0.2 at 0.95: 14 pairs; 0.05: 59)",
    )
    judge_range_pct: float | None = Field(
        default=None,
        gt=0,
        description="the judge's range: a pair whose on-window is more than this slower than the scale is out of "
        "range, and no safe verdict follows it. Wider ranges cover larger bursts but need more pairs. "
        "None: 4 × max_resident_slowdown_pct",
    )
    slowdown_guard_min_samples: int = Field(
        default=10,
        ge=1,
        description="the per-window guard compares two windows only when each has this many samples "
        "(fewer is noise, not evidence)",
    )
    slowdown_guard_pct: float | None = Field(
        default=None,
        gt=0,
        description="one on-window slower than its off-window by more than this rolls back at once; "
        "None: 3 × max_resident_slowdown_pct. It is also the judge's range (see docs/canary.md)",
    )

    @model_validator(mode="after")
    def _windows_fit(self) -> "RiskBudget":
        if self.sampling_window_s > self.max_probe_time_s:
            raise ValueError("sampling_window_s is longer than max_probe_time_s; no window could complete")
        return self

    @model_validator(mode="after")
    def _guard_above_bound(self) -> "RiskBudget":
        if self.slowdown_guard_pct is not None and self.slowdown_guard_pct <= self.max_resident_slowdown_pct:
            raise ValueError("slowdown_guard_pct must exceed max_resident_slowdown_pct")
        return self

    @model_validator(mode="after")
    def _range_above_bound(self) -> "RiskBudget":
        if self.judge_range_pct is not None and self.judge_range_pct <= self.max_resident_slowdown_pct:
            raise ValueError("judge_range_pct must exceed max_resident_slowdown_pct")
        return self

    @property
    def effective_slowdown_guard_pct(self) -> float:
        """The per-window guard: the configured one, else three times the slowdown bound."""
        return (
            self.slowdown_guard_pct
            if self.slowdown_guard_pct is not None
            else 3 * self.max_resident_slowdown_pct
        )

    def override(self, **changes: Any) -> "RiskBudget":
        """A copy with some bounds changed (per-call overrides), validated again."""
        merged = {**self.model_dump(), **{k: v for k, v in changes.items() if v is not None}}
        return RiskBudget.model_validate(merged)


class Policy(Model):
    """Memory headroom, risk budgets per workload class, evidence TTL, what to do on unknown."""

    name: str = Field(min_length=1, description="the policy's name (default, batch …)")
    description: str = Field(default="", description="free text for people")
    memory_headroom_pct: float = Field(
        default=5.0, ge=0, le=50,
        description="HBM kept free, in percent of the device (the larger of this and memory_headroom_bytes): "
        "fragmentation and context growth; operators keep 5-10% free and alert at 85%",
    )
    memory_headroom_bytes: Bytes = Field(default=0, description="HBM kept free in bytes, at least")
    assumed_driver_reserve_bytes: Bytes | None = Field(
        default=None,
        description="context/driver reserve per device when neither the snapshot nor the catalog knows it; "
        "None keeps it unknown",
    )
    per_context_overhead_bytes: Bytes = Field(
        default=0, description="memory a new CUDA context costs the candidate on top of its own peak"
    )
    evidence_ttl_s: float = Field(
        default=7 * 24 * 3600.0, gt=0, le=MAX_EVIDENCE_TTL_S,
        description="how long evidence is trusted (at most ten years); also the longest life an imported "
        "record may claim",
    )
    min_evidence_confidence: float = Field(
        default=0.9, gt=0, le=1, description="cached safe evidence below this confidence is not enough to admit"
    )
    allow_cross_driver_evidence: bool = Field(
        default=False, description="use evidence recorded under another driver (at reduced confidence)"
    )
    cross_driver_confidence_factor: float = Field(
        default=0.5, gt=0, le=1, description="confidence multiplier for evidence from another driver"
    )
    on_unprofiled_resident: Literal["unknown", "reject"] = Field(
        default="unknown", description="reject: refuse to place anything where stage 1 cannot see a resident's kernels"
    )
    on_probe_inconclusive: Literal["unknown", "reject"] = Field(
        default="unknown", description="reject: treat a probe that ran out of budget as a no"
    )
    estimators: tuple[str, ...] = Field(
        default=(),
        description="interference estimators consulted before a probe (transfer, analytical, simulator, or one "
        "installed under the canary.estimators entry point group): their calibrated intervals become the "
        "probe's prior and order warm plans; they decide nothing unless also in decide_on_prediction. "
        "Empty by default: no estimate is made (docs/estimators.md)",
    )
    decide_on_prediction: tuple[str, ...] = Field(
        default=(),
        description="estimators (of those in estimators) trusted to decide without a probe, where their "
        "calibrated interval clears the resident's bound at the budget's required confidence. Empty by "
        "default: every unseen pair is probed",
    )
    min_calibration_outcomes: int = Field(
        default=30, ge=2, le=100000,
        description="recorded probe outcomes an estimator needs on a device type before its intervals count "
        "as calibrated; with fewer it may order work, never decide",
    )
    reservation_lease_s: float = Field(
        default=3600.0, gt=0, le=MAX_RESERVATION_LEASE_S,
        description="an admission's memory booking lapses after this unless renewed (at most 30 days)",
    )
    mps_default_active_thread_pct: int = Field(
        default=50, ge=1, le=100, description="the candidate's MPS share when its profile does not say"
    )
    snapshot_max_age_s: float = Field(
        default=60.0, gt=0, description="a published (node agent) snapshot older than this makes stage 1 answer "
        "unknown, never a stale yes")
    revalidation_budget_pairs: int = Field(
        default=8, ge=0, le=1000, description="after a driver change, an agent queues revalidation probes for at most "
        "this many of the device type's most requested pairs")
    risk_budgets: dict[WorkloadClass, RiskBudget] = Field(
        description="the bounds of a probe, per workload class of the resident (every class is required)"
    )
    # --- what workload files may make canary do (operator's choice; see docs/security.md) ----------
    probe_hosts: tuple[str, ...] = Field(
        default=DEFAULT_PROBE_HOSTS,
        description="hosts a profile's or snapshot's monitor URL (metrics_url) and candidate endpoint may "
        "name; anything else is refused before a request is sent. Loopback by default",
    )
    candidate_commands: tuple[str, ...] = Field(
        default=(),
        description="executables (argv[0], exactly as written in the profile) the process executor may "
        "start; '*' allows any. Empty by default: a profile cannot make canary run a command",
    )
    candidate_cubin_dirs: tuple[str, ...] = Field(
        default=(),
        description="directories whose cubins the cuda executor may load (a profile's canary.cubin must lie "
        "inside one, after links are resolved); '*' allows any. Empty by default: a profile cannot make "
        "canary load GPU code",
    )
    candidate_environment: tuple[str, ...] = Field(
        default=(),
        description="names of variables of canary's own environment passed on to the candidate, beyond "
        "PATH, the locale and the CUDA/MPS variables canary sets; canary's own CANARY_* variables never pass",
    )

    @model_validator(mode="after")
    def _every_class_has_a_budget(self) -> "Policy":
        missing = [c for c in WORKLOAD_CLASSES if c not in self.risk_budgets]
        if missing:
            raise ValueError(f"risk_budgets lacks the workload class(es): {', '.join(missing)}")
        return self

    @field_validator("estimators", "decide_on_prediction")
    @classmethod
    def _estimator_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
                raise ValueError(f"{name!r} is not an estimator name")
        if len(set(names)) != len(names):
            raise ValueError("an estimator is named twice")
        return names

    @model_validator(mode="after")
    def _deciders_are_consulted(self) -> "Policy":
        extra = [n for n in self.decide_on_prediction if n not in self.estimators]
        if extra:
            raise ValueError(f"decide_on_prediction names {', '.join(extra)}, which estimators does not consult")
        return self

    @field_validator("candidate_environment")
    @classmethod
    def _no_canary_secrets(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name")
            if name.upper().startswith("CANARY_"):
                raise ValueError(f"{name} is canary's own configuration and never passes to a candidate")
        return names

    @field_validator("probe_hosts")
    @classmethod
    def _hosts(cls, hosts: tuple[str, ...]) -> tuple[str, ...]:
        for host in hosts:
            if not host or any(c in host for c in "/@?#") or host != host.strip():
                raise ValueError(f"{host!r} is not a host name or address (no scheme, path or port)")
        return hosts

    def budget_for(self, workload_class: WorkloadClass) -> RiskBudget:
        return self.risk_budgets[workload_class]

    def headroom_bytes(self, total_bytes: int) -> int:
        """The larger of the absolute and the relative headroom."""
        return max(self.memory_headroom_bytes, int(total_bytes * self.memory_headroom_pct / 100))


def available_policies() -> list[str]:
    return sorted(p.stem for p in POLICY_DIR.glob("*.yaml"))


def load_policy(name_or_path: str | Path | None = None) -> Policy:
    """Load ``policies/<name>.yaml`` or a file path; ``None`` loads ``default``."""
    ref = str(name_or_path) if name_or_path is not None else "default"
    path = Path(ref)
    if not path.suffix:
        path = POLICY_DIR / f"{ref}.yaml"
        if not path.is_file():
            known = ", ".join(available_policies()) or "none found"
            raise InputError(f"no policy named '{ref}' (known: {known})", field="--policy")
    return load_document(Policy, path)


def _shown(value: object, field: str) -> str:
    from canary.units import format_bytes

    if value is None:
        return "unknown (`null`)"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if field.endswith("_bytes") and isinstance(value, int):
        return "0" if value == 0 else format_bytes(value)
    if isinstance(value, tuple):
        return ", ".join(f"`{v}`" for v in value) or "none"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if field.endswith("_s") and isinstance(value, int) and value >= 86400 and value % 86400 == 0:
        return f"{value // 86400} d"
    if field.endswith("_s") and isinstance(value, int) and value >= 3600 and value % 3600 == 0:
        return f"{value // 3600} h"
    return f"`{value}`" if isinstance(value, str) else f"{value}"


def reference_tables() -> str:
    """The policy reference of ``docs/policies.md``, generated from the model and the shipped policy
    files so the documentation cannot disagree with the code (a test compares them)."""
    from pydantic_core import PydanticUndefined

    shipped = [load_policy(name) for name in available_policies()]
    names = [p.name for p in shipped]
    lines = [
        "| field | if a policy omits it | " + " | ".join(f"`{n}`" for n in names) + " | what it does |",
        "|---|---|" + "---|" * len(names) + "---|",
    ]
    for field, info in Policy.model_fields.items():
        if field in ("name", "description", "risk_budgets"):
            continue
        default = "required" if info.default is PydanticUndefined else _shown(info.default, field)
        values = " | ".join(_shown(getattr(p, field), field) for p in shipped)
        lines.append(f"| `{field}` | {default} | {values} | {info.description or ''} |")
    lines += [
        "",
        "| policy | class | max probe time | max requests exposed | max resident slowdown | "
        "required confidence | windows (baseline / sampling, minimum) |",
        "|---|---|---|---|---|---|---|",
    ]
    for policy in shipped:
        for cls in WORKLOAD_CLASSES:
            b = policy.budget_for(cls)
            lines.append(
                f"| `{policy.name}` | {cls} | {b.max_probe_time_s:g} s | {b.max_requests_exposed:,} | "
                f"{b.max_resident_slowdown_pct:g}% | {b.required_confidence:g} | "
                f"{b.baseline_window_s:g} s / {b.sampling_window_s:g} s, ≥ {b.min_windows} |"
            )
    return "\n".join(lines) + "\n"

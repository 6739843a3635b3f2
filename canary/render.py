"""Terminal forms: short tables that put each measured value next to its threshold."""

from __future__ import annotations

import re
from collections.abc import Sequence

from canary.certificate import Certificate, Finding, PredictionRef, Quantity
from canary.tables import table
from canary.units import format_bytes

_MARK = {"yes": "ok", "no": "NO", "unknown": "??"}
_SHORTFALL = {"now": "not with what the device holds now", "never": "never on this device in this regime"}
_VERDICT_WORD = {"admit": "ADMIT", "reject": "REJECT", "unknown": "UNKNOWN"}


def quantity(value: Quantity | None, unit: str) -> str:
    if value is None:
        return "unknown"
    if unit == "bytes" and isinstance(value, int | float) and not isinstance(value, bool):
        return format_bytes(int(value))
    if isinstance(value, float):
        return f"{value:.3g} {unit}"
    if isinstance(value, int):
        return f"{value:,} {unit}"
    return str(value)


_PARENS = re.compile(r"\s*\((?:[^()]|\([^()]*\))*\)")


def short_source(source: str) -> str:
    """The source without its citations (they stay in the JSON form)."""
    return _PARENS.sub("", source)


def fit_mark(f: Finding) -> str:
    """``ok``, ``??``, or for a *no* ``NO (now)`` / ``NO (never)`` (``NO`` where it was not recorded)."""
    mark = _MARK[f.verdict]
    return f"{mark} ({f.shortfall})" if f.verdict == "no" and f.shortfall is not None else mark


def findings_table(findings: Sequence[Finding], limiting: str | None) -> str:
    rows = []
    marked = False
    for f in findings:
        is_limiting = not marked and f.resource == limiting and f.verdict != "yes"
        marked = marked or is_limiting
        name = f.resource + (f" [{f.subject}]" if f.subject else "")
        demand, available = quantity(f.demand, f.unit), quantity(f.available, f.unit)
        if (demand == available and f.unit == "bytes" and isinstance(f.demand, int | float)
                and isinstance(f.available, int | float) and f.demand != f.available):
            # Rounded alike (a one-byte shortfall reads "8.8 GiB | 8.8 GiB" beside NO): the bytes show it.
            demand, available = f"{demand} ({int(f.demand):,} B)", f"{available} ({int(f.available):,} B)"
        rows.append([
            ("> " if is_limiting else "  ") + name,
            demand,
            available,
            fit_mark(f),
            short_source(f.source),
        ])
    return table(["  resource", "demand", "available", "fit", "source"], rows)


_USE = {"decision": "decided without a probe", "prior": "the probe's prior", "order-only": "shown only, decides nothing"}


def prediction_line(p: PredictionRef) -> str:
    """One prediction: the estimator's interval, its calibration (interval, level, measured coverage
    over the outcomes checked and in all) or why it is uncalibrated, and what it was used for."""
    by = f"{p.estimator} ({p.group})" if p.group else p.estimator
    head = (f"predicted for {p.resident} by {by}: {p.lo_pct:.1f}% to {p.hi_pct:.1f}% "
            f"(point {p.point_pct:.1f}%)")
    if p.calibrated and p.calibrated_interval_pct is not None:
        lo, hi = p.calibrated_interval_pct
        if p.calibration:  # "measured coverage … over M checked of N outcomes; conformal widening …"
            cal = f"calibrated {lo:.1f}% to {hi:.1f}% at {p.confidence_level:g}, {p.calibration}"
        else:
            cov = "unknown" if p.coverage is None else f"{p.coverage:.3f}"
            cal = (f"calibrated {lo:.1f}% to {hi:.1f}% at {p.confidence_level:g}, measured coverage {cov} over "
                   f"{p.outcomes} outcomes (checked ones not recorded)")
    else:
        cal = f"uncalibrated ({p.calibration})" if p.calibration else "uncalibrated"
    return f"{head}; {cal}; {_USE[p.used_as]}"


def certificate_text(cert: Certificate, *, verbose: bool = False) -> str:
    head = (f"{_VERDICT_WORD[cert.verdict]}  {cert.workload_name} ({cert.workload_version}, {cert.shape_family}) "
            f"on {cert.device.type}{' ' + cert.device.uuid if cert.device.uuid else ''}")
    lines = [head, f"  regime {cert.regime} ({cert.regime_chosen_by}); hard fit: {cert.hard_fit}; "
                   f"decided by {cert.decided_by}; policy {cert.policy}"]
    if cert.residents:
        lines.append("  residents: " + ", ".join(
            f"{r.name}" + (f" ({r.workload_version})" if r.workload_version else " (no profile)") for r in cert.residents))
    lines += ["", findings_table(cert.findings, cert.limiting_resource), ""]
    if cert.limiting_resource:
        limiting = next((f for f in cert.findings if f.resource == cert.limiting_resource and f.verdict == "no"), None)
        why = f" ({_SHORTFALL[limiting.shortfall]})" if limiting is not None and limiting.shortfall else ""
        lines.append(f"limiting resource: {cert.limiting_resource}{why}")
    lines.append(f"why: {cert.reason}")
    if cert.probe is not None:
        p = cert.probe
        est = f"{p.slowdown_estimate_pct:.1f}%" if p.slowdown_estimate_pct is not None else "unknown"
        interval = (f" [{p.slowdown_interval_pct[0]:.1f}%, {p.slowdown_interval_pct[1]:.1f}%]"
                    if p.slowdown_interval_pct else "")
        lines.append(f"probe {p.probe_id}: {p.outcome}; resident slowdown {est}{interval} vs bound "
                     f"{p.budget.get('max_resident_slowdown_pct', '?')}%; {p.time_used_s:.1f}s of "
                     f"{p.budget.get('max_probe_time_s', '?')}s, {p.exposure_used} of "
                     f"{p.budget.get('max_requests_exposed', '?')} requests, {p.windows} windows"
                     + (f"; rolled back: {p.rollback_reason}" if p.rollback_reason else "")
                     + (" (simulated)" if p.simulated else ""))
    for pr in cert.predictions:
        lines.append(prediction_line(pr))
        if pr.prior is not None:
            lines.append(f"  probe prior: mean {pr.prior.mean_pct:.1f}%, sd {pr.prior.sd_pct:.1f} points, {pr.prior.note}"
                         + ("" if pr.prior.applied else " (not applied)"))
    if cert.evidence is not None and cert.evidence.ids:
        lines.append(f"evidence: {len(cert.evidence.ids)} record(s), newest {cert.evidence.evidence_timestamp}"
                     + (" (other driver, lower confidence)" if cert.evidence.cross_driver else ""))
    if cert.predicted_slowdown_range is not None:
        lo, hi = cert.predicted_slowdown_range
        lines.append(f"predicted resident slowdown: {lo:.1f}% to {hi:.1f}%")
    if cert.confidence is not None:
        lines.append(f"confidence: {cert.confidence:.3f}")
    for r in cert.resource_reservations:
        lines.append(f"reserved: {format_bytes(r.memory_bytes)} until {r.lease_expires_at:%Y-%m-%d %H:%M:%S}Z (id {r.id})")
    if cert.expiry_or_revalidation_trigger.expires_at is not None:
        lines.append(f"valid until {cert.expiry_or_revalidation_trigger.expires_at:%Y-%m-%d %H:%M:%S}Z, or until the "
                     "driver, either workload version, the shape family or the sharing state changes")
    for c in cert.caveats:
        lines.append(f"note: {c}")
    if cert.simulated:
        lines.append("note: the device is simulated; numbers come from the catalog and the simulator")
    if verbose:
        lines.append("")
        for f in cert.findings:
            if f.detail:
                lines.append(f"- {f.resource}{' [' + f.subject + ']' if f.subject else ''}: {f.detail}")
    return "\n".join(lines)

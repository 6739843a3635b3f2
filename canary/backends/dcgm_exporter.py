"""Telemetry from a dcgm-exporter scrape (Prometheus text format) → ``Telemetry`` + memory used.

dcgm-exporter reports one series per GPU, labelled ``gpu`` (index), ``UUID`` and ``modelName``.
Units as dcgm-exporter publishes them: ``DCGM_FI_DEV_FB_*`` in MiB, ``DCGM_FI_DEV_GPU_UTIL`` in %,
``DCGM_FI_PROF_*`` as ratios 0–1 (converted to % here), ``DCGM_FI_DEV_POWER_USAGE`` in W,
``DCGM_FI_DEV_GPU_TEMP`` in °C. A metric the scrape lacks (profiling fields need DCGM's profiling
module and a datacenter GPU) stays unknown, with the reason.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from canary.errors import DeviceUnavailable, InputError
from canary.snapshot import DeviceSnapshot, Measured, Telemetry

MIB = 1024 * 1024
SOURCE = "dcgm-exporter"

# metric → (Telemetry field, factor to percent or unit)
_TELEMETRY_METRICS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("utilization_gpu_pct", 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active_pct", 100.0),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("sm_occupancy_pct", 100.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active_pct", 100.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
}


@dataclass(frozen=True)
class DcgmScrape:
    """One GPU's values from a scrape; ``None`` = the scrape did not carry that metric."""

    gpu: int
    uuid: str | None
    model_name: str | None
    telemetry: Telemetry
    memory_used_bytes: int | None
    memory_free_bytes: int | None
    memory_reserved_bytes: int | None
    unknown_reasons: dict[str, str] = field(default_factory=dict)


def _fetch(url: str, timeout_s: float) -> str:
    import httpx

    try:
        response = httpx.get(url, timeout=timeout_s)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        raise DeviceUnavailable(f"cannot scrape dcgm-exporter at {url}: {exc}") from None
    return response.text


def read_scrape(
    source: str,
    *,
    gpu: int,
    uuid: str | None = None,
    timeout_s: float = 5.0,
    observed_at: dt.datetime | None = None,
) -> DcgmScrape:
    """Parse a scrape from an ``http(s)://`` URL, a file path, or the text itself (contains a newline).

    ``gpu`` selects the series by the ``gpu`` label; ``uuid``, when given, must match the ``UUID``
    label (a mismatch is ``InputError``: the scrape describes another device)."""
    from prometheus_client.parser import text_string_to_metric_families

    where = source
    if source.startswith(("http://", "https://")):
        text = _fetch(source, timeout_s)
    elif "\n" in source:
        text, where = source, "(scrape text)"
    else:
        from canary._model import read_text_limited

        # A regular UTF-8 file of bounded size; a binary file or a device is bad input, not a traceback.
        text = read_text_limited(source, what="a dcgm-exporter metrics file")
    when = observed_at or dt.datetime.now(dt.UTC)

    values: dict[str, float] = {}
    labels_seen: dict[str, str] = {}
    gpus_seen: set[str] = set()
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                label = sample.labels.get("gpu")
                if label is None:
                    continue
                gpus_seen.add(label)
                if label != str(gpu):
                    continue
                values[sample.name] = float(sample.value)
                for key in ("UUID", "modelName"):
                    if key in sample.labels:
                        labels_seen[key] = sample.labels[key]
    except ValueError as exc:
        raise InputError(f"not Prometheus text format: {exc}", file=where) from None
    if not values:
        have = ", ".join(sorted(gpus_seen, key=lambda g: (len(g), g))) or "none"
        raise InputError(f"no dcgm-exporter series for gpu {gpu} (gpus in the scrape: {have})", file=where)
    scraped_uuid = labels_seen.get("UUID")
    if uuid is not None and scraped_uuid is not None and scraped_uuid != uuid:
        raise InputError(
            f"gpu {gpu} in the scrape is {scraped_uuid}, but the device is {uuid}", file=where, field="UUID"
        )

    unknown: dict[str, str] = {}
    telemetry: dict[str, Measured] = {}
    for metric, (name, factor) in _TELEMETRY_METRICS.items():
        if metric in values:
            telemetry[name] = Measured(value=values[metric] * factor, observed_at=when, source=SOURCE)
        else:
            unknown[f"telemetry.{name}"] = f"the scrape has no {metric}"

    def mib(metric: str, field_name: str) -> int | None:
        if metric in values:
            return int(values[metric]) * MIB
        unknown[field_name] = f"the scrape has no {metric}"
        return None

    return DcgmScrape(
        gpu=gpu,
        uuid=scraped_uuid,
        model_name=labels_seen.get("modelName"),
        telemetry=Telemetry.model_validate(telemetry),
        memory_used_bytes=mib("DCGM_FI_DEV_FB_USED", "memory_used_bytes"),
        memory_free_bytes=mib("DCGM_FI_DEV_FB_FREE", "memory_free_bytes"),
        memory_reserved_bytes=mib("DCGM_FI_DEV_FB_RESERVED", "memory_reserved_bytes"),
        unknown_reasons=unknown,
    )


def merge_telemetry(snapshot: DeviceSnapshot, scrape: DcgmScrape) -> DeviceSnapshot:
    """Fill the snapshot's unknown telemetry and memory-used from the scrape.

    Values the snapshot already holds are kept (they were read in the same batch as the rest); the
    reasons for fields the scrape filled are dropped, and fields neither knows keep their reason."""
    if snapshot.uuid is not None and scrape.uuid is not None and snapshot.uuid != scrape.uuid:
        raise InputError(f"the scrape describes {scrape.uuid}, not {snapshot.uuid}", field="UUID")
    reasons = dict(snapshot.unknown_reasons)
    merged: dict[str, object] = {}
    for name in Telemetry.model_fields:
        mine = getattr(snapshot.telemetry, name)
        theirs = getattr(scrape.telemetry, name)
        merged[name] = mine if mine is not None else theirs
        if mine is None and theirs is not None:
            reasons.pop(f"telemetry.{name}", None)
    update: dict[str, object] = {"telemetry": Telemetry.model_validate(merged), "unknown_reasons": reasons}
    if snapshot.memory_used_bytes is None and scrape.memory_used_bytes is not None:
        update["memory_used_bytes"] = scrape.memory_used_bytes
        reasons.pop("memory_used_bytes", None)
    if snapshot.memory_reserved_bytes is None and scrape.memory_reserved_bytes is not None:
        update["memory_reserved_bytes"] = scrape.memory_reserved_bytes
        reasons.pop("memory_reserved_bytes", None)
    merged_snapshot = snapshot.model_copy(update=update)
    # model_copy skips validation; re-validate so used ≤ total still holds
    return DeviceSnapshot.model_validate(merged_snapshot.model_dump())

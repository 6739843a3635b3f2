"""Operator configuration of ``canary agent`` (a file, or the same fields as command-line flags)."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from canary._model import load_document

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class AgentConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str = Field(min_length=1, max_length=200, description="this node's name (the Kubernetes node name)")
    devices: dict[str, str] = Field(
        min_length=1, description="local device name → its source: nvml:N, rocm:N, cuda:N, or a snapshot file "
        "(a simulated device; read again on every heartbeat)")
    db_url: str | None = None
    heartbeat_s: float = Field(default=5.0, gt=0, le=600, description="how often snapshots are published")
    lease_s: float = Field(default=15.0, ge=1.0, le=3600, description="a running probe's lease; renewed every third")
    policy: str = Field(default="default", description="staleness limit and revalidation budget come from it")
    history_days: float = Field(default=7.0, gt=0, le=365, description="admission history that ranks hot pairs")
    sim_time_scale: float = Field(default=0.0, ge=0.0, le=1.0,
                                  description="wall seconds a simulated probe holds its device per simulated second")
    claim_s: float | None = Field(
        default=None, gt=0, le=3600, description="how long a heartbeat holds this node's devices against a second "
        "agent (default: three heartbeats, at least 15 s); a dead agent's claim lapses after it")
    admission_log_retention_days: float = Field(
        default=30.0, gt=0, le=3650, description="admission history older than this is deleted by the agent's "
        "loop (hourly); must cover history_days")

    @model_validator(mode="after")
    def _windows(self) -> AgentConfig:
        if self.claim_s is not None and self.claim_s < 2 * self.heartbeat_s:
            raise ValueError(f"claim_s ({self.claim_s:g}) must be at least two heartbeats "
                             f"({2 * self.heartbeat_s:g} s), or a busy agent loses its own devices")
        if self.history_days > self.admission_log_retention_days:
            raise ValueError(f"history_days ({self.history_days:g}) ranks hot pairs from history that "
                             f"admission_log_retention_days ({self.admission_log_retention_days:g}) has deleted")
        return self

    @property
    def claim_duration_s(self) -> float:
        return self.claim_s if self.claim_s is not None else max(3 * self.heartbeat_s, 15.0)

    @field_validator("node")
    @classmethod
    def _node(cls, value: str) -> str:
        if "/" in value or any(c.isspace() for c in value):
            raise ValueError("a node name has no '/' or spaces")
        return value

    @field_validator("devices")
    @classmethod
    def _devices(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _NAME.match(name):
                raise ValueError(f"device name {name!r}: letters, digits, '.', '_' and '-' only")
        return value


def load_agent_config(path: str | Path) -> AgentConfig:
    return load_document(AgentConfig, path)


def resolve_sources(config: AgentConfig, base: Path) -> AgentConfig:
    """Snapshot file sources relative to the configuration file's folder."""
    devices = {}
    for name, source in config.devices.items():
        live = re.match(r"^(nvml|cuda|rocm):\d+$", source)
        devices[name] = source if live or Path(source).is_absolute() else str((base / source).resolve())
    return config.model_copy(update={"devices": devices})

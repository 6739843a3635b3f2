"""The adversarial inputs: files a careless or hostile user can hand canary, and the command lines that
use them. Shared by the table test (``test_adversarial.py``) and the fuzz benchmark.

Every case is ``Case(id, argv, exit_code, fragment)``: ``argv`` may hold ``{name}`` placeholders,
filled with paths of the files ``write_files`` creates (``{store}`` is the SQLite store URL, ``{dir}``
the folder). Expectations come from the CLI contract (ARCHITECTURE.md): bad input is exit 2 with one
message naming the problem; an unreachable store is exit 4; nothing reaches the store.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import sqlite3
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PROFILE = EXAMPLES / "profiles" / "llm-decode.yaml"
RESIDENT = EXAMPLES / "profiles" / "embedding-service.yaml"
SNAPSHOT = EXAMPLES / "snapshots" / "g-nccl-mps-room.yaml"
POLICY = ROOT / "policies" / "default.yaml"


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    exit_code: int
    fragment: str  # a piece of the one-line message (case-insensitive)


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def _with(base: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(base)
    *parents, last = dotted.split(".")
    node: Any = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    elif value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return data


_DELETE = object()

BOMB = "\n".join(
    [ 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)]
) + "\n"


def _numbers(text: str, field: str, value: str) -> str:
    """``text`` with the first line ``field: …`` set to the literal ``value`` (YAML spelling kept)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"{field}:"):
            lines[i] = f"{field}: {value}"
            return "\n".join(lines) + "\n"
    return text + f"{field}: {value}\n"


def _record(now: datetime, **changes: Any) -> dict[str, Any]:
    key = {
        "resident_version": "llama-serve:1.4.2",
        "resident_shape_family": "bs<=32",
        "candidate_version": "sha256:9f2c",
        "candidate_shape_family": "bs<=8",
        "device_type": "h100-sxm",
        "regime": "mps:50",
    }
    canonical = json.dumps(key, sort_keys=True, separators=(",", ":"))
    rec: dict[str, Any] = {
        "id": str(uuid.UUID(int=7)),
        "probe_id": "probe-import-1",
        "key": key,
        "key_digest": hashlib.sha256(canonical.encode()).hexdigest(),
        "driver_version": "580.95.05",
        "cuda_version": "13.0",
        "device_uuid": "GPU-1",
        "source": "canary",
        "outcome": "safe",
        "resident_slowdown_pct": 4.0,
        "resident_slowdown_low_pct": 2.0,
        "resident_slowdown_high_pct": 6.0,
        "candidate_slowdown_pct": None,
        "samples": 200,
        "exposure_used": 100,
        "time_used_s": 30.0,
        "confidence": 0.95,
        "created_at": (now - timedelta(hours=1)).isoformat(),
        "expires_at": (now + timedelta(days=5)).isoformat(),
        "status": "current",
        "superseded_by": None,
        "revoked_reason": None,
        "stale_reason": None,
    }
    rec.update(changes)
    return rec


HEADER = '{"format":"canary-evidence","version":2}'


def write_files(folder: Path, now: datetime) -> dict[str, str]:
    """Create every adversarial file under ``folder``; returns placeholder name → path."""
    files: dict[str, str | bytes] = {}
    profile = _load(PROFILE)
    profile_text = PROFILE.read_text()
    policy_text = POLICY.read_text()
    snapshot = _load(SNAPSHOT)
    snapshot["residents"][0]["profile"] = str(SNAPSHOT.parent / snapshot["residents"][0]["profile"])

    def y(data: Any) -> str:
        return yaml.safe_dump(data, sort_keys=False)

    # --- documents in general (used as profiles, snapshots, policies and plans) ----------------------
    files["bomb"] = BOMB
    files["deep"] = "a: " + "[" * 5000 + "]" * 5000 + "\n"
    files["deep_json"] = '{"a": ' + "[" * 200 + "]" * 200 + "}"
    files["deep_block"] = "".join("  " * i + f"k{i}:\n" for i in range(60)) + "  " * 60 + "v: 1\n"
    files["huge"] = "name: " + "x" * (5 * 1024 * 1024) + "\n"
    files["binary"] = bytes(range(256)) * 8
    files["latin1"] = "name: caf\xe9\n".encode("latin-1")
    files["empty"] = ""
    files["only_comment"] = "# nothing here\n"
    files["list_top"] = "- a\n- b\n"
    files["scalar_top"] = "42\n"
    files["python_tag"] = "!!python/object/apply:os.system ['touch {dir}/pwned']\n"
    files["python_tag_inline"] = "name: !!python/object/apply:os.system ['touch {dir}/pwned']\n"
    files["unclosed"] = "name: [a, b\n"
    files["tab_indent"] = "name: x\n\tversion: 1\n"
    files["null_bytes"] = "name: a\x00b\n"
    files["many_aliases"] = "a: &x 1\n" + "".join(f"k{i}: *x\n" for i in range(100))
    files["wide"] = "{" + ",".join(f'"k{i}": [{",".join(["0"] * 100)}]' for i in range(3000)) + "}"
    files["big_int"] = "n: " + "9" * 5000 + "\n"
    files["json_nan"] = '{"name": "x", "version": .nan}'
    files["dup_keys"] = "name: a\nname: b\n"
    files["empty_float_tag"] = "name: !!float \n"  # PyYAML's constructor raised IndexError (found by fuzzing)
    files["bad_timestamp_tag"] = "name: !!timestamp 2026-13-45\n"
    files["merge_scalar"] = "<<: 5\nname: x\n"

    # --- profiles ------------------------------------------------------------------------------------
    def prof(dotted: str, value: Any) -> str:
        return y(_with(profile, dotted, value))

    files["p_peak_neg"] = prof("memory.peak_bytes", -1)
    files["p_peak_str"] = prof("memory.peak_bytes", "lots")
    files["p_peak_huge"] = prof("memory.peak_bytes", 10**30)
    files["p_peak_float_inf"] = _numbers(profile_text, "latency_critical", "true").replace(
        "peak_bytes: 42Gi", "peak_bytes: .inf")
    files["p_peak_nan"] = profile_text.replace("peak_bytes: 42Gi", "peak_bytes: .nan")
    files["p_peak_1e300"] = profile_text.replace("peak_bytes: 42Gi", "peak_bytes: 1.0e+300")
    files["p_peak_bool"] = prof("memory.peak_bytes", True)
    files["p_regs_neg"] = prof("kernels.0.registers_per_thread", -5)
    files["p_regs_huge"] = prof("kernels.0.registers_per_thread", 2**40)
    files["p_threads_zero"] = prof("kernels.0.threads_per_block", 0)
    files["p_threads_float"] = prof("kernels.0.threads_per_block", 128.5)
    files["p_share_nan"] = profile_text.replace("gpu_time_share: 0.35", "gpu_time_share: .nan")
    files["p_share_big"] = prof("kernels.0.gpu_time_share", 7.0)
    files["p_duty_neg"] = prof("phases.0.duty_cycle", -0.5)
    files["p_unknown_field"] = prof("colour", "blue")
    files["p_no_name"] = prof("name", _DELETE)
    files["p_no_memory"] = prof("memory", _DELETE)
    files["p_name_empty"] = prof("name", "")
    files["p_name_list"] = prof("name", ["a"])
    files["p_class_bogus"] = prof("workload_class", "crypto-mining")
    files["p_sharing_bogus"] = prof("sharing.mig_profiles", "all of them")
    files["p_slo_neg"] = prof("slo.latency_p99_ms", -60)
    files["p_slo_inf"] = profile_text.replace("latency_p99_ms: 60", "latency_p99_ms: .inf")
    files["p_kernels_str"] = prof("kernels", "many")
    files["p_reclaim_gt_peak"] = prof("memory.reclaimable_bytes", "100Gi")
    files["p_key_int"] = profile_text + "1: one\n"
    # Where the probe would connect or what it would run: the operator decides, not the profile.
    files["p_cmd_not_allowed"] = y({**profile, "canary": {
        "executor": "process", "command": ["/bin/sh", "-c", "touch {dir}/pwned"],
        "endpoint": "http://127.0.0.1:9"}})
    files["p_endpoint_remote"] = y({**profile, "canary": {
        "executor": "process", "command": ["/bin/true"], "endpoint": "http://169.254.169.254/latest"}})
    resident = _load(RESIDENT)
    files["r_monitor_remote"] = y({**resident, "canary": {"monitor": "http", "endpoint": "http://10.1.2.3:80"}})
    files["r_monitor_metadata"] = y({**resident, "canary": {
        "monitor": "prometheus", "metrics_url": "http://169.254.169.254/metrics", "latency_metric": "x_seconds"}})
    files["r_monitor_userinfo"] = y({**resident, "canary": {"monitor": "http", "endpoint": "http://u:p@127.0.0.1:9"}})
    files["r_monitor_file"] = y({**resident, "canary": {"monitor": "http", "endpoint": "file:///etc/passwd"}})
    files["r_monitor_gopher"] = y({**resident, "canary": {"monitor": "http", "endpoint": "gopher://127.0.0.1:6379/_x"}})
    files["r_monitor_path_userinfo"] = y({**resident, "canary": {
        "monitor": "http", "endpoint": "http://127.0.0.1:8000", "request_path": "@169.254.169.254/latest"}})
    files["p_ready_path_userinfo"] = y({**profile, "canary": {
        "executor": "process", "command": ["/bin/true"], "endpoint": "http://127.0.0.1:8000",
        "ready_path": "@10.0.0.1/ready"}})
    files["r_monitor_evil_dns"] = y({**resident, "canary": {"monitor": "http", "endpoint": "http://127.0.0.1.nip.io:80"}})

    # --- snapshots -----------------------------------------------------------------------------------
    def snap(dotted: str, value: Any) -> str:
        return y(_with(snapshot, dotted, value))

    files["s_total_neg"] = snap("memory_total_bytes", -1)
    files["s_used_gt_total"] = snap("memory_used_bytes", "900Gi")
    files["s_device_bogus"] = snap("device_type", "h9000")
    files["s_mode_bogus"] = snap("compute_mode", "SHARED_ALL")
    files["s_mps_clients_neg"] = snap("mps.clients", -3)
    files["s_profile_missing"] = snap("residents.0.profile", "no/such/profile.yaml")
    files["s_profile_dir"] = snap("residents.0.profile", str(folder))
    files["s_profile_dev"] = snap("residents.0.profile", "/dev/zero")
    files["s_pid_str"] = snap("residents.0.pid", "one")
    files["s_residents_map"] = snap("residents", {"a": 1})
    files["s_unknown"] = snap("gpu_temperature_c", 90)
    files["s_util_inf"] = y(snapshot).replace("value: 35", "value: .inf", 1) if "value: 35" in y(snapshot) else (
        snap("telemetry", {"utilization_gpu_pct": {"value": float("inf"), "window_s": 1, "source": "nvml"}}))
    inline = _with(snapshot, "residents.0.profile", {**resident, "canary": {"monitor": "http",
                                                                            "endpoint": "http://10.9.9.9:8080"}})
    files["s_inline_ssrf"] = y(inline)
    inline_prom = _with(snapshot, "residents.0.profile", {**resident, "canary": {
        "monitor": "prometheus", "metrics_url": "http://example.com/metrics", "latency_metric": "l_seconds"}})
    files["s_inline_ssrf_prom"] = y(inline_prom)

    # --- policies ------------------------------------------------------------------------------------
    files["pol_ttl_inf"] = _numbers(policy_text, "evidence_ttl_s", ".inf")
    files["pol_ttl_1e300"] = _numbers(policy_text, "evidence_ttl_s", "1.0e+300")
    files["pol_ttl_huge_int"] = _numbers(policy_text, "evidence_ttl_s", str(10**18))
    files["pol_ttl_20y"] = _numbers(policy_text, "evidence_ttl_s", str(20 * 365 * 86400))
    files["pol_ttl_zero"] = _numbers(policy_text, "evidence_ttl_s", "0")
    files["pol_ttl_nan"] = _numbers(policy_text, "evidence_ttl_s", ".nan")
    files["pol_lease_inf"] = _numbers(policy_text, "reservation_lease_s", ".inf")
    files["pol_lease_year"] = _numbers(policy_text, "reservation_lease_s", str(365 * 86400))
    files["pol_headroom_big"] = _numbers(policy_text, "memory_headroom_pct", "99")
    files["pol_headroom_bytes_huge"] = _numbers(policy_text, "memory_headroom_bytes", "1.0e+300")
    files["pol_conf_2"] = _numbers(policy_text, "min_evidence_confidence", "2")
    files["pol_mps_0"] = _numbers(policy_text, "mps_default_active_thread_pct", "0")
    files["pol_on_unknown"] = _numbers(policy_text, "on_probe_inconclusive", "admit")
    files["pol_env_canary"] = policy_text + "candidate_environment: [CANARY_DB_URL]\n"
    files["pol_env_bad_name"] = policy_text + "candidate_environment: ['A=B']\n"
    files["pol_hosts_url"] = policy_text + "probe_hosts: ['http://10.0.0.1/']\n"
    files["pol_hosts_empty"] = policy_text + "probe_hosts: ['']\n"
    files["pol_budget_inf"] = re.sub(r"max_probe_time_s: \d+", "max_probe_time_s: .inf", policy_text, count=1)
    assert files["pol_budget_inf"] != policy_text, "the shipped policy has no max_probe_time_s to make infinite"
    # "2000" is also the start of "20000": the batch budget reads 1.0e+3000, which YAML makes infinite.
    files["pol_budget_1e300"] = policy_text.replace("max_requests_exposed: 2000", "max_requests_exposed: 1.0e+300")
    files["pol_budget_missing"] = y(_with(yaml.safe_load(policy_text), "risk_budgets.batch", _DELETE))
    files["pol_budget_conf"] = policy_text.replace("required_confidence: 0.95", "required_confidence: 1.5")
    files["pol_budget_neg_window"] = policy_text.replace("sampling_window_s: 1", "sampling_window_s: -1")

    # --- warm plans ----------------------------------------------------------------------------------
    def plan(pairs: Any, **extra: Any) -> str:
        return y({"name": "adv", "budget_s": 60, "concurrency": 1, "pairs": pairs, **extra})

    good_pair = {"device": "h100", "candidate": str(PROFILE)}
    files["plan_missing_candidate"] = plan([good_pair, {"device": "h100", "candidate": "no/such.yaml"}])
    files["plan_missing_device_file"] = plan([{"device": "no/such-snapshot.yaml", "candidate": str(PROFILE)}])
    files["plan_unknown_device"] = plan([{"device": "h9000", "candidate": str(PROFILE)}])
    files["plan_bomb_candidate"] = plan([{"device": "h100", "candidate": "bomb.yaml"}])
    files["plan_bad_policy"] = plan([{**good_pair, "policy": "pol_ttl_inf.yaml"}])
    # A policy decides what a probe may contact and run: a plan may not bring its own.
    files["plan_own_policy"] = plan([{**good_pair, "policy": str(folder / "pol_env_canary.yaml")}])
    files["plan_unknown_policy"] = plan([{**good_pair, "policy": "no-such-policy"}])
    files["plan_bad_regime"] = plan([{**good_pair, "regime": "mps:500"}])
    files["plan_ssrf_resident"] = plan([{**good_pair, "residents": ["r_monitor_remote.yaml"]}])
    files["plan_cmd_candidate"] = plan([{"device": "h100", "candidate": "p_cmd_not_allowed.yaml"}])
    files["plan_budget_inf"] = plan([good_pair], budget_s=float("inf"))
    files["plan_budget_neg"] = plan([good_pair], budget_s=-1)
    files["plan_concurrency_huge"] = plan([good_pair], concurrency=10**6)
    files["plan_no_pairs"] = plan([])
    files["plan_pairs_str"] = plan("all")
    files["plan_dev_candidate"] = plan([{"device": "h100", "candidate": "/dev/zero"}])

    # --- evidence import files -----------------------------------------------------------------------
    def export(*records: dict[str, Any], header: str = HEADER) -> str:
        return header + "\n" + "".join(json.dumps(r) + "\n" for r in records)

    def rec(**changes: Any) -> dict[str, Any]:
        return _record(now, **changes)

    files["imp_good"] = export(rec())
    files["imp_safe_over_bound"] = export(rec(resident_slowdown_pct=30.0, resident_slowdown_low_pct=28.0,
                                              resident_slowdown_high_pct=32.0, confidence=0.99))
    files["imp_expiry_9999"] = export(rec(expires_at="9999-12-31T00:00:00+00:00"))
    files["imp_ttl_too_long"] = export(rec(expires_at=(now + timedelta(days=30)).isoformat()))
    files["imp_future"] = export(rec(created_at=(now + timedelta(days=1)).isoformat(),
                                     expires_at=(now + timedelta(days=2)).isoformat()))
    files["imp_samples_huge"] = export(rec(samples=10**20))
    files["imp_samples_1e9"] = export(rec(samples=10**9 + 1))
    files["imp_exposure_neg"] = export(rec(exposure_used=-1))
    files["imp_time_huge"] = export(rec(time_used_s=1e12))
    files["imp_nan_slowdown"] = HEADER + "\n" + json.dumps(rec()).replace('"resident_slowdown_pct": 4.0',
                                                                          '"resident_slowdown_pct": NaN') + "\n"
    files["imp_inf_time"] = HEADER + "\n" + json.dumps(rec()).replace('"time_used_s": 30.0',
                                                                      '"time_used_s": Infinity') + "\n"
    files["imp_slowdown_huge"] = export(rec(outcome="unsafe", resident_slowdown_pct=1e6, resident_slowdown_low_pct=None,
                                            resident_slowdown_high_pct=None))
    files["imp_safe_no_slowdown"] = export(rec(resident_slowdown_pct=None, resident_slowdown_low_pct=None,
                                               resident_slowdown_high_pct=None))
    files["imp_safe_wide_interval"] = export(rec(resident_slowdown_pct=5.0, resident_slowdown_high_pct=90.0))
    files["imp_conf_2"] = export(rec(confidence=2.0))
    files["imp_bad_id"] = export(rec(id="../../etc/passwd"))
    files["imp_long_id"] = export(rec(id="x" * 500))
    files["imp_bad_probe_id"] = export(rec(probe_id="probe id with spaces; DROP TABLE evidence"))
    files["imp_digest_mismatch"] = export(rec(key_digest="0" * 64))
    files["imp_key_edit"] = export(rec(key={**rec()["key"], "device_type": "a100-80gb"}))
    files["imp_source_bogus"] = export(rec(source="trusted"))
    files["imp_status_bogus"] = export(rec(status="golden"))
    files["imp_extra_field"] = export(rec(admit_always=True))
    files["imp_naive_time"] = export(rec(created_at="2026-11-30T06:00:00"))
    files["imp_expires_before"] = export(rec(expires_at=(now - timedelta(days=2)).isoformat()))
    files["imp_header_only_bad"] = '{"format":"canary-evidence","version":99}\n'
    files["imp_no_header"] = export(rec()).split("\n", 1)[1]
    files["imp_long_line"] = HEADER + "\n" + json.dumps(rec(stale_reason="x" * 100_000)) + "\n"
    files["imp_deep_json"] = HEADER + "\n" + "[" * 5000 + "]" * 5000 + "\n"
    files["imp_huge_number"] = HEADER + "\n" + json.dumps(rec()).replace('"samples": 200', '"samples": ' + "9" * 5000) + "\n"
    files["imp_dup_probe"] = export(rec(), rec(id=str(uuid.UUID(int=8))))
    files["imp_second_bad"] = export(rec(), rec(id=str(uuid.UUID(int=9)), probe_id="p2", outcome="maybe"))
    files["imp_array_line"] = HEADER + "\n[1,2,3]\n"
    files["imp_blank_line"] = HEADER + "\n\n" + json.dumps(rec()) + "\n"
    files["imp_crlf_binary"] = (HEADER + "\r\n").encode() + b"\xff\xfe\x00garbage\n"

    # Signed with the fleet key, then edited; and unsigned, where the fleet requires a signature.
    from evidence_store.export_file import _export_lines
    from evidence_store.schemas import EvidenceOut

    fleet_key = b"adversarial-fleet-key-0123456789"
    signed = "".join(_export_lines([EvidenceOut.model_validate(rec())], fleet_key))
    files["imp_signed_tampered"] = signed.replace('"outcome":"safe"', '"outcome":"unsafe"')
    files["imp_signed_truncated"] = "".join(signed.splitlines(keepends=True)[:-1])
    files["fleet_key"] = fleet_key.decode()
    files["short_key"] = "short"

    out: dict[str, str] = {}
    for name, content in files.items():
        path = folder / (f"{name}.jsonl" if name.startswith("imp_") else f"{name}.yaml")
        if isinstance(content, str):
            content = content.replace("{dir}", str(folder))
            path.write_text(content, encoding="utf-8")
        else:
            path.write_bytes(content)
        out[name] = str(path)
    fifo = folder / "fifo.yaml"
    os.mkfifo(fifo)
    out["fifo"] = str(fifo)
    sub = folder / "a-directory"
    sub.mkdir()
    out["a_directory"] = str(sub)
    out["dir"] = str(folder)
    out["profile"] = str(PROFILE)
    out["resident"] = str(RESIDENT)
    out["snapshot"] = str(SNAPSHOT)
    return out


def _c(case_id: str, argv: str, exit_code: int, fragment: str) -> Case:
    return Case(case_id, tuple(argv.split()), exit_code, fragment)


def _document_cases() -> list[Case]:
    """Every general document as a profile, a snapshot, a policy and a plan."""
    general = {
        "bomb": "aliases", "deep": "nest", "deep_json": "nested deeper", "deep_block": "nested deeper",
        "huge": "larger than", "binary": "not a UTF-8 text", "latin1": "not a UTF-8 text", "empty": "empty",
        "only_comment": "empty", "list_top": "mapping", "scalar_top": "mapping", "python_tag": "malformed",
        "python_tag_inline": "malformed", "unclosed": "malformed", "tab_indent": "malformed",
        "null_bytes": "malformed", "many_aliases": "aliases", "wide": "more than", "big_int": "out of range",
        "json_nan": "not a finite", "fifo": "not a regular file", "a_directory": "directory",
        "empty_float_tag": "malformed", "bad_timestamp_tag": "malformed", "merge_scalar": "malformed",
    }
    cases = []
    for name, fragment in general.items():
        cases.append(_c(f"profile-{name}", f"--db {{store}} fit h100 {{{name}}}", 2, fragment))
        cases.append(_c(f"snapshot-{name}", f"--db {{store}} admit {{{name}}} {{profile}} --no-probe", 2, fragment))
    for name in ("bomb", "deep", "huge", "binary", "fifo", "a_directory", "json_nan", "big_int", "python_tag"):
        fragment = general[name]
        cases.append(_c(f"policy-{name}", f"--db {{store}} fit h100 {{profile}} --policy {{{name}}}", 2, fragment))
        cases.append(_c(f"plan-{name}", f"--db {{store}} warm {{{name}}}", 2, fragment))
        cases.append(_c(f"resident-{name}", f"--db {{store}} admit h100 {{profile}} --resident {{{name}}}", 2, fragment))
        import_fragment = {"fifo": fragment, "a_directory": fragment, "binary": "utf-8"}.get(name, "line 1")
        cases.append(_c(f"import-{name}", f"--db {{store}} evidence import {{{name}}}", 2, import_fragment))
    cases.append(_c("profile-missing", "--db {store} fit h100 {dir}/nope.yaml", 2, "not found"))
    cases.append(_c("profile-dev-zero", "--db {store} fit h100 /dev/zero", 2, "not a regular file"))
    # PyYAML would keep the last of duplicate keys; the loader refuses the document instead.
    cases.append(_c("profile-dup-keys", "--db {store} fit h100 {dup_keys}", 2, "appears twice"))
    return cases


PROFILE_CASES = [
    ("p_peak_neg", "negative"), ("p_peak_str", "size"), ("p_peak_huge", "out of range"),
    ("p_peak_float_inf", "finite"), ("p_peak_nan", "finite"), ("p_peak_1e300", "out of range"),
    ("p_peak_bool", "boolean"), ("p_regs_neg", "registers_per_thread"), ("p_regs_huge", "registers_per_thread"),
    ("p_threads_zero", "threads_per_block"), ("p_threads_float", "threads_per_block"),
    ("p_share_nan", "finite"), ("p_share_big", "gpu_time_share"), ("p_duty_neg", "duty_cycle"),
    ("p_unknown_field", "unknown field"), ("p_no_name", "required"), ("p_no_memory", "required"),
    ("p_name_empty", "name"), ("p_name_list", "name"), ("p_class_bogus", "workload_class"),
    ("p_sharing_bogus", "mig_profiles"), ("p_slo_neg", "latency_p99_ms"), ("p_slo_inf", "finite"),
    ("p_kernels_str", "kernels"), ("p_key_int", "unknown field"),
]

SNAPSHOT_CASES = [
    ("s_total_neg", "memory_total_bytes"), ("s_used_gt_total", "memory"), ("s_device_bogus", "h9000"),
    ("s_mode_bogus", "compute_mode"), ("s_mps_clients_neg", "clients"), ("s_profile_missing", "not found"),
    ("s_profile_dir", "residents[0].profile"), ("s_profile_dev", "residents[0].profile"), ("s_pid_str", "pid"),
    ("s_residents_map", "residents"), ("s_unknown", "unknown field"), ("s_util_inf", "finite"),
]

POLICY_CASES = [
    ("pol_ttl_inf", "finite"), ("pol_ttl_1e300", "out of range"), ("pol_ttl_huge_int", "out of range"),
    ("pol_ttl_20y", "evidence_ttl_s"), ("pol_ttl_zero", "evidence_ttl_s"), ("pol_ttl_nan", "finite"),
    ("pol_lease_inf", "finite"), ("pol_lease_year", "reservation_lease_s"), ("pol_headroom_big", "memory_headroom_pct"),
    ("pol_headroom_bytes_huge", "out of range"), ("pol_conf_2", "min_evidence_confidence"),
    ("pol_mps_0", "mps_default_active_thread_pct"), ("pol_on_unknown", "on_probe_inconclusive"),
    ("pol_env_canary", "never passes"), ("pol_env_bad_name", "not an environment variable"),
    ("pol_hosts_url", "not a host"), ("pol_hosts_empty", "not a host"), ("pol_budget_inf", "finite"),
    ("pol_budget_1e300", "finite"), ("pol_budget_missing", "batch"), ("pol_budget_conf", "required_confidence"),
    ("pol_budget_neg_window", "sampling_window_s"),
]

PLAN_CASES = [
    ("plan_missing_candidate", "pair 2"), ("plan_missing_device_file", "pair 1"), ("plan_unknown_device", "h9000"),
    ("plan_bomb_candidate", "aliases"), ("plan_bad_policy", "not a file"), ("plan_own_policy", "not a file"), ("plan_unknown_policy", "no policy named"),
    ("plan_bad_regime", "regime"), ("plan_ssrf_resident", "probe_hosts"), ("plan_cmd_candidate", "candidate_commands"),
    ("plan_budget_inf", "finite"), ("plan_budget_neg", "budget_s"), ("plan_concurrency_huge", "concurrency"),
    ("plan_no_pairs", "pairs"), ("plan_pairs_str", "pairs"), ("plan_dev_candidate", "not a regular file"),
]

IMPORT_CASES = [
    ("imp_safe_over_bound", "above the policy"), ("imp_expiry_9999", "evidence_ttl_s"),
    ("imp_ttl_too_long", "evidence_ttl_s"), ("imp_future", "future"), ("imp_samples_huge", "out of range"),
    ("imp_samples_1e9", "beyond any real probe"), ("imp_exposure_neg", "exposure_used"),
    ("imp_time_huge", "beyond any real probe"), ("imp_nan_slowdown", "finite"), ("imp_inf_time", "finite"),
    ("imp_slowdown_huge", "outside"), ("imp_safe_no_slowdown", "without a measured"),
    ("imp_safe_wide_interval", "interval reaches"), ("imp_conf_2", "confidence"), ("imp_bad_id", "uuid"),
    ("imp_long_id", "uuid"), ("imp_bad_probe_id", "probe id"), ("imp_digest_mismatch", "digest"),
    ("imp_key_edit", "digest"), ("imp_source_bogus", "source"), ("imp_status_bogus", "status"),
    ("imp_extra_field", "extra"), ("imp_naive_time", "created_at"), ("imp_expires_before", "expires_at"),
    ("imp_header_only_bad", "version"), ("imp_no_header", "line 1"), ("imp_long_line", "longer than"),
    ("imp_deep_json", "line 2"), ("imp_huge_number", "line 2"), ("imp_dup_probe", "is also at line 2"),
    ("imp_second_bad", "line 3"), ("imp_array_line", "line 2"), ("imp_blank_line", "blank line"),
    ("imp_crlf_binary", "utf-8"),
]

PROBE_TRUST_CASES = [
    _c("admit-cmd-not-allowed", "--db {store} admit h100 {p_cmd_not_allowed}", 2, "candidate_commands"),
    _c("admit-endpoint-metadata", "--db {store} admit h100 {p_endpoint_remote}", 2, "probe_hosts"),
    _c("admit-resident-remote", "--db {store} admit h100 {profile} --resident {r_monitor_remote}", 2, "probe_hosts"),
    _c("admit-resident-metadata", "--db {store} admit h100 {profile} --resident {r_monitor_metadata}", 2,
       "probe_hosts"),
    _c("admit-resident-userinfo", "--db {store} admit h100 {profile} --resident {r_monitor_userinfo}", 2,
       "credentials"),
    _c("admit-resident-file-url", "--db {store} admit h100 {profile} --resident {r_monitor_file}", 2, "http"),
    _c("admit-resident-gopher", "--db {store} admit h100 {profile} --resident {r_monitor_gopher}", 2, "http"),
    _c("admit-resident-path-userinfo", "--db {store} admit h100 {profile} --resident {r_monitor_path_userinfo}", 2,
       "request_path"),
    _c("admit-ready-path-userinfo", "--db {store} admit h100 {p_ready_path_userinfo}", 2, "ready_path"),
    _c("admit-resident-dns", "--db {store} admit h100 {profile} --resident {r_monitor_evil_dns}", 2, "probe_hosts"),
    _c("admit-snapshot-ssrf", "--db {store} admit {s_inline_ssrf} {profile}", 2, "probe_hosts"),
    _c("admit-snapshot-ssrf-prom", "--db {store} admit {s_inline_ssrf_prom} {profile}", 2, "probe_hosts"),
]

STORE_CASES = [
    _c("db-empty", "--db= evidence list", 2, "empty"),
    _c("db-missing-dir", "--db sqlite:////nonexistent/dir/x.sqlite3 admit h100 {profile} --no-probe", 2,
       "does not exist"),
    _c("db-missing-dir-list", "--db sqlite:////nonexistent/dir/x.sqlite3 evidence list", 2, "does not exist"),
    _c("db-missing-dir-fit", "--db sqlite:////nonexistent/dir/x.sqlite3 fit h100 {profile}", 2, "does not exist"),
    _c("db-bad-port", "--db postgresql://u:hunter2@localhost:abc/db evidence list", 2, "cannot parse"),
    _c("db-port-range", "--db postgresql://u:hunter2@localhost:99999/db evidence list", 2, "cannot parse"),
    _c("db-sqlite-userinfo", "--db sqlite://user:hunter2@host/x.db evidence list", 2, "names a file"),
    _c("db-dsn", "--db host=localhost§password=hunter2§dbname=x evidence list", 2, "not a url"),
    _c("db-mysql", "--db mysql://u:hunter2@h/x evidence list", 2, "unsupported"),
    _c("db-no-host", "--db postgresql:///x evidence list", 2, "no host"),
    _c("db-query-password", "--db postgresql://nobody@127.0.0.1:5432/x?password=hunter2 evidence list", 4,
       "password=***"),
    _c("db-is-directory", "--db sqlite:///{a_directory} evidence list", 2, "not a regular file"),
    _c("db-control-char", "--db sqlite:///x\x01.db evidence list", 2, "control"),
    _c("db-psycopg2", "--db postgresql+psycopg2://u:hunter2@h/x evidence list", 2, "not supported"),
    _c("db-garbage", "--db :::: evidence list", 2, "not a url"),
]

COMMAND_CASES = [
    _c("expire-naive-time", "--db {store} evidence expire --before 2030-01-01 --yes", 2, "time zone"),
    _c("expire-bad-time", "--db {store} evidence expire --before yesterday --yes", 2, "iso-8601"),
    _c("revoke-unknown", "--db {store} evidence revoke deadbeef --why test", 2, "no evidence"),
    _c("revoke-no-why", "--db {store} evidence revoke deadbeef", 2, "--why"),
    _c("show-unknown", "--db {store} evidence show zzzz", 2, "no evidence"),
    _c("list-limit-neg", "--db {store} evidence list --limit -1", 2, "--limit"),
    _c("list-limit-huge", "--db {store} evidence list --limit 99999999999999999999", 2, "--limit"),
    _c("upgrade-unknown-rev", "--db {store} db upgrade nonsense", 2, "unknown revision"),
    _c("upgrade-path-rev", "--db {store} db upgrade ../../x", 2, "unknown revision"),
    _c("downgrade-unknown-rev", "--db {store} db downgrade nonsense --yes", 2, "unknown revision"),
    _c("downgrade-too-far", "--db {store} db downgrade -999 --yes", 2, "nothing was changed"),
    _c("upgrade-too-far", "--db {store} db upgrade +5", 2, "nothing was changed"),
    Case("control-chars-in-path", ("--db", "{store}", "fit", "h100", "{dir}/x\r\x1b[2Kfake ok"), 2, "\\r\\x1b"),
    Case("import-nul-name", ("--db", "{store}", "evidence", "import", "a\x00b"), 2, "nul"),
    Case("export-nul-name", ("--db", "{store}", "evidence", "export", "a\x00b"), 2, "nul"),
    Case("fit-nul-profile", ("--db", "{store}", "fit", "h100", "a\x00b.yaml"), 2, "nul"),
    Case("fit-nul-device", ("--db", "{store}", "fit", "a\x00b.yaml", "{profile}"), 2, "nul"),
    Case("import-nul-key", ("--db", "{store}", "evidence", "import", "{imp_good}", "--key", "k\x00"), 2, "nul"),
    _c("double-dash-twice", "--db {store} fit {profile} -- --", 2, "expected one value"),
    _c("list-limit-str", "--db {store} evidence list --limit many", 2, "invalid int"),
    _c("release-unknown", "--db {store} reservations release nope", 2, "no reservation"),
    _c("export-dev-null", "--db {store} evidence export /dev/null", 2, "not a regular file"),
    _c("export-fifo", "--db {store} evidence export {fifo}", 2, "not a regular file"),
    _c("export-directory", "--db {store} evidence export {a_directory}", 2, "directory"),
    _c("export-missing-dir", "--db {store} evidence export {dir}/no/such/out.jsonl", 2, "does not exist"),
    _c("import-dev-zero", "--db {store} evidence import /dev/zero", 2, "not a regular file"),
    _c("import-missing", "--db {store} evidence import {dir}/nope.jsonl", 2, "not found"),
    _c("import-signed-tampered", "--db {store} evidence import {imp_signed_tampered} --key {fleet_key}", 2,
       "changed after it was signed"),
    _c("import-signed-truncated", "--db {store} evidence import {imp_signed_truncated} --key {fleet_key}", 2,
       "signature line"),
    _c("import-unsigned-with-key", "--db {store} evidence import {imp_good} --key {fleet_key}", 2, "not signed"),
    _c("import-short-key", "--db {store} evidence import {imp_good} --key {short_key}", 2, "16 to"),
    _c("import-missing-key", "--db {store} evidence import {imp_good} --key {dir}/none.key", 2, "not found"),
    _c("export-key-is-dir", "--db {store} evidence export {dir}/out.jsonl --key {a_directory}", 2, "regular file"),
    _c("import-bad-policy", "--db {store} evidence import {imp_good} --policy {pol_ttl_inf}", 2, "finite"),
    _c("feedback-nan", "--db {store} feedback h100 {profile} --resident {resident} --resident-name x "
       "--slowdown-pct nan", 2, "--slowdown-pct"),
    _c("feedback-inf", "--db {store} feedback h100 {profile} --resident {resident} --resident-name x "
       "--slowdown-pct inf", 2, "--slowdown-pct"),
    _c("feedback-huge", "--db {store} feedback h100 {profile} --resident {resident} --resident-name x "
       "--slowdown-pct 1e300", 2, "--slowdown-pct"),
    _c("feedback-unknown-resident", "--db {store} feedback h100 {profile} --resident {resident} "
       "--resident-name nobody", 2, "no resident named"),
    _c("revalidate-missing-plan", "--db {store} revalidate --driver 999.1 --plan {dir}/missing.yaml", 2,
       "not found"),
    _c("revalidate-bad-plan", "--db {store} revalidate --driver 999.1 --plan {plan_missing_candidate}", 2,
       "pair 2"),
    _c("revalidate-bomb-plan", "--db {store} revalidate --driver 999.1 --plan {bomb}", 2, "aliases"),
    _c("revalidate-unknown-device", "--db {store} revalidate --driver 999.1 --device-type h9000", 2, "h9000"),
    _c("revalidate-empty-driver", "--db {store} revalidate --driver= ", 2, "--driver"),
    _c("warm-empty-run-id", "--db {store} warm {plan_no_pairs} --fleet --run-id=", 2, "pairs"),
    _c("warm-budget-nan", "--db {store} warm {plan_missing_candidate} --budget-s nan", 2, "budget_s"),
    _c("warm-concurrency-0", "--db {store} warm {plan_missing_candidate} --concurrency 0", 2, "concurrency"),
    _c("fit-unknown-device", "--db {store} fit h9000 {profile}", 2, "unknown device"),
    _c("fit-bad-regime", "--db {store} fit h100 {profile} --regime mps:abc", 2, "regime"),
    _c("fit-unknown-policy", "--db {store} fit h100 {profile} --policy nosuchpolicy", 2, "no policy named"),
    _c("admit-unknown-device", "--db {store} admit h9000 {profile}", 2, "unknown device"),
    _c("admit-seed-str", "--db {store} admit h100 {profile} --seed x", 2, "invalid int"),
    _c("snapshot-dcgm-binary", "--db {store} snapshot h100 --dcgm {binary}", 2, "not a UTF-8"),
    _c("snapshot-dcgm-dev-zero", "--db {store} snapshot h100 --dcgm /dev/zero", 2, "not a regular file"),
    _c("snapshot-dcgm-fifo", "--db {store} snapshot h100 --dcgm {fifo}", 2, "not a regular file"),
    _c("occupancy-unknown-device", "--db {store} occupancy --device h9000 --regs 32 --threads 128", 2, "h9000"),
    _c("unknown-command", "--db {store} frobnicate", 2, "invalid choice"),
]


def all_cases() -> list[Case]:
    cases = _document_cases()
    cases += [_c(f"profile-{n}", f"--db {{store}} fit h100 {{{n}}}", 2, f) for n, f in PROFILE_CASES]
    cases += [_c(f"snapshot-{n}", f"--db {{store}} admit {{{n}}} {{profile}} --no-probe", 2, f)
              for n, f in SNAPSHOT_CASES]
    cases += [_c(f"policy-{n}", f"--db {{store}} fit h100 {{profile}} --policy {{{n}}}", 2, f) for n, f in POLICY_CASES]
    cases += [_c(f"warm-{n}", f"--db {{store}} warm {{{n}}}", 2, f) for n, f in PLAN_CASES]
    cases += [_c(f"import-{n}", f"--db {{store}} evidence import {{{n}}}", 2, f) for n, f in IMPORT_CASES]
    cases += PROBE_TRUST_CASES + STORE_CASES + COMMAND_CASES
    return cases


def expand(case: Case, paths: dict[str, str], store: str) -> list[str]:
    values = {**paths, "store": store}
    return [part.format(**values).replace("§", " ") for part in case.argv]


def store_digest(url: str) -> str:
    """sha256 over every row of every table of a SQLite store (not the file bytes: WAL checkpoints
    and page reuse change those without changing the content)."""
    path = url.removeprefix("sqlite:///")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        digest = hashlib.sha256()
        tables = [r[0] for r in conn.execute("select name from sqlite_master where type='table' order by name")]
        for table in tables:
            digest.update(table.encode())
            for row in sorted(conn.execute(f'select * from "{table}"').fetchall(), key=repr):
                digest.update(repr(row).encode())
        return digest.hexdigest()
    finally:
        conn.close()


def listing(folder: Path) -> list[str]:
    """Files under ``folder`` (the store's -wal/-shm companions excluded: SQLite manages those)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if not p.name.endswith(("-wal", "-shm", "-journal")))


def now_utc() -> datetime:
    return datetime.now(UTC)


RunCli = Callable[[list[str]], tuple[int, str, str]]

"""scripts/fetch-alibaba-trace: a download is installed only when its SHA-256 matches, and a failed or
mismatching one leaves nothing behind. The source is served from a file:// folder (no network here)."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fetch-alibaba-trace"
NAME = "pod_gpu_duty_cycle_anon.tar.gz"


def _load() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("fetch_alibaba_trace", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _serve(tmp_path: Path, payload: bytes, monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, Path, str]:
    mod = _load()
    source = tmp_path / "source"
    source.mkdir()
    (source / NAME).write_bytes(payload)
    monkeypatch.setattr(mod, "BASE", source.as_uri() + "/")
    return mod, tmp_path / "dest", hashlib.sha256(payload).hexdigest()


def test_a_matching_download_is_installed_and_then_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    mod, dest, digest = _serve(tmp_path, b"trace bytes", monkeypatch)
    monkeypatch.setattr(mod, "FILES", {NAME: digest})
    assert mod.main(["--dest", str(dest)]) == 0
    assert (dest / NAME).read_bytes() == b"trace bytes"
    assert mod.main(["--dest", str(dest)]) == 0
    assert "already there, digest matches" in capsys.readouterr().out
    assert sorted(p.name for p in dest.iterdir()) == [NAME]  # no temporary file left


def test_a_mismatching_download_is_refused_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    mod, dest, _ = _serve(tmp_path, b"someone else's bytes", monkeypatch)
    assert mod.FILES[NAME] == "c4070218189b2811995c30dd9fefb8a793a83a54dccebe7b41cab2d123916855"
    assert mod.main(["--dest", str(dest)]) == 1
    assert "expected c4070218" in capsys.readouterr().err
    assert list(dest.iterdir()) == []


def test_a_missing_source_file_fails_cleanly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _load()
    monkeypatch.setattr(mod, "BASE", (tmp_path / "nowhere").as_uri() + "/")
    dest = tmp_path / "dest"
    assert mod.main(["--dest", str(dest)]) == 1
    assert list(dest.iterdir()) == []

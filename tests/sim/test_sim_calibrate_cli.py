"""``canary sim calibrate`` on a small Gavel-format fixture, through the real command line.

The constant baselines are recomputed here from the fixture's raw throughputs (slowdown =
isolated/colocated − 1, "no measurable slowdown" clamped to 0), independently of canary's code.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

FIXTURE = Path(__file__).parent / "fixtures" / "gavel_small.json"
TIMEOUT_S = 120


def _canary(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "canary.cli", *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )


def _measured(gpu: str) -> list[float]:
    """Every measured slowdown (%) of ``gpu`` in the fixture, from the raw JSON."""
    table = json.loads(FIXTURE.read_text())[gpu]
    single = sorted(k for k in table if k.endswith(", 1)"))
    out = []
    for i, a in enumerate(single):
        for b in single[i:]:
            pair = table[a].get(b)
            if pair is None or pair[0] <= 0 or table[a]["null"] <= 0 or table[b]["null"] <= 0:
                continue
            out += [max(0.0, (table[a]["null"] / pair[0] - 1) * 100), max(0.0, (table[b]["null"] / pair[1] - 1) * 100)]
    return out


def _json(*args: str) -> dict[str, Any]:
    done = _canary("sim", "calibrate", "--data", str(FIXTURE), *args, "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_no_fit_scores_with_the_shipped_parameters_and_the_baselines_are_right() -> None:
    from canary.sim.params import GAVEL_PAIR_PARAMS, GAVEL_TRAINING_MEDIAN_PCT

    result = _json("--gpu", "v100", "--no-fit")
    measured = _measured("v100")
    assert result["points"] == len(measured) == 18
    assert result["parameters"] == GAVEL_PAIR_PARAMS.as_dict()
    assert "shipped" in result["parameters_source"]
    zero, median, double = result["baselines"]
    assert zero["median_abs_error_pct"] == pytest.approx(statistics.median(measured), abs=1e-3)
    assert median["median_abs_error_pct"] == pytest.approx(
        statistics.median(abs(m - GAVEL_TRAINING_MEDIAN_PCT) for m in measured), abs=1e-3
    )
    assert double["median_abs_error_pct"] == pytest.approx(statistics.median(abs(m - 100) for m in measured), abs=1e-3)
    assert zero["spearman"] is None  # a constant has no ranking
    assert -1.0 <= result["model"]["spearman"] <= 1.0
    assert any("Mystery" in note and "no profile" in note for note in result["assumptions"])
    # Scoring Gavel's own 'v100' with parameters fitted on it is flagged as possibly in-sample.
    assert any("in-sample" in note for note in result["assumptions"])


def test_text_output_has_the_metrics_table() -> None:
    done = _canary("sim", "calibrate", "--data", str(FIXTURE), "--gpu", "v100", "--no-fit")
    assert done.returncode == 0, done.stderr
    for word in ("median |err| pp", "Spearman", "constant 0 (no slowdown)", "constant 2x (100%)", "regime timeslice"):
        assert word in done.stdout


@pytest.mark.slow
def test_default_fits_on_the_other_gpus_never_on_the_scored_one() -> None:
    result = _json("--gpu", "z100")
    # z100_unconsolidated is a variant of z100: fitting on it would be fitting on the held-out GPU.
    assert result["fitted_on"] == ["v100"]
    assert "'z100' held out" in result["parameters_source"]
    assert result["catalog_device"] is None
    assert any("no catalog entry for 'z100'" in note for note in result["assumptions"])
    assert any("isolated throughput 0" in note for note in result["assumptions"])
    assert result["points"] == len(_measured("z100")) == 12
    assert result["training_median_pct"] == pytest.approx(statistics.median(_measured("v100")), abs=1e-3)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(("--gpu", "k99"), "no 'k99' section (the file has: v100, z100, z100_unconsolidated)", id="gpu"),
        pytest.param(("--gpu", "v100", "--data", "/nonexistent/gavel.json"), "not found", id="file"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: tuple[str, ...], message: str) -> None:
    argv = ["sim", "calibrate", "--data", str(FIXTURE), *args]
    done = _canary(*argv)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_file_with_no_measured_pair_is_bad_input(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"v100": {"('A3C', 1)": {"null": 7.5, "('A3C', 1)": [0, 0]}}}))
    done = _canary("sim", "calibrate", "--data", str(empty), "--gpu", "v100")
    assert done.returncode == 2
    assert "no measured pair" in done.stderr

"""Smoke test of bench/vs_trl.py: both sides run on a tiny configuration and report comparable work.

Needs the bench's optional extra (``pip install trl``); skipped without it. Slow: two subprocesses that
each import transformers (and TRL), about a minute on 2 cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

pytestmark = pytest.mark.model

BENCH = Path(__file__).resolve().parents[2] / "bench" / "vs_trl.py"


@pytest.mark.slow
@pytest.mark.timeout(660)  # past the subprocess's own 600 s limit, which fails with its stderr
def test_vs_trl_runs_both_sides(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--configs", "2x4x4", "--threads", "1", "--steps", "2", "--warmup", "1",
         "--json", str(out)],
        check=False, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "hacrl/TRL =" in proc.stdout
    results = {r["side"]: r for r in json.loads(out.read_text())}
    assert set(results) == {"hacrl", "trl"}
    for r in results.values():
        assert r["s_per_step"] > 0 and r["threads"] == 1
        assert 1 <= r["tokens"] <= 4  # completions obey max_new_tokens on both sides
        assert r["updates"] == 1
    # one update right after generation: the policy has not moved, so nothing is clipped on either side
    assert results["hacrl"]["clip_frac"] == 0.0 and results["trl"]["clip_ratio"] == 0.0
    assert results["hacrl"]["ratio_mean"] == pytest.approx(1.0, abs=1e-4)

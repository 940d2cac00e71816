"""examples/minimal_hacpo.py is documentation that must keep running."""

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "minimal_hacpo.py"


def test_minimal_example_runs():
    res = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "2", "--prompts", "4", "--group", "4"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert lines[0].startswith("step   1") and lines[1].startswith("step   2")
    assert "greedy accuracy" in lines[-1] and "greedy accuracy" in lines[-2]

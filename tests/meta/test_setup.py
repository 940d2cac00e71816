"""`make setup` / scripts/setup.sh says in one line what it is about to install before its quiet pip runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def setup(venv: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """setup.sh with a Python that fails at once (``false``): only what it says before installing is seen."""
    return subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PY": "false", "VENV": str(venv), **env}, check=False)


def test_setup_says_what_it_installs_before_the_quiet_minute(tmp_path):
    res = setup(tmp_path / "venv")
    assert res.returncode != 0  # `false -m venv`: nothing was installed
    said = f"setup: creating {tmp_path / 'venv'} with torch 2.13.0 (CPU) and hacrl[dev] (pip, quiet; a few minutes"
    assert res.stdout.splitlines() == [f"{said} the first time)"]
    res = setup(tmp_path, EXTRAS="")  # an existing folder without hacrl, no extras (the demo's)
    assert res.stdout.startswith(f"setup: updating {tmp_path} with torch 2.13.0 (CPU) and hacrl (pip")

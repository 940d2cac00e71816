"""The README's first screen stays true: its demo output has the line format `hacrl train` prints, its results
table is what scripts/readme_figure.py makes from the committed comparison, and its links point at files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _fenced_blocks(text: str) -> list[list[str]]:
    blocks, current = [], None
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def _shape(line: str) -> str:
    """A printed line with every number replaced: what the line format is, whatever the CPU computed."""
    return re.sub(r"\d+(?:\.\d+)?", "N", line)


def test_shape_keeps_the_format_and_drops_the_numbers():
    assert _shape("  qwen-char            before 0.627  after 0.749") == "  qwen-char            before N  after N"
    assert _shape("finished 30 steps on 1000 add2") == _shape("finished 2 steps on 50 add2")
    assert _shape("  qwen-char before 0.627") != _shape("  qwen-char   before 0.627")  # alignment counts


@pytest.mark.model
def test_readme_demo_block_has_the_line_format_the_cli_prints(tmp_path):
    demo = [b for b in _fenced_blocks(README.read_text(encoding="utf-8")) if b and b[0].startswith("hacrl: ")]
    assert len(demo) == 1, "README.md: expected one fenced block of `make demo` output (its first line 'hacrl: ...')"
    # the tiny-test preset has the default's agents and task: the same lines, other numbers (and seconds, not minutes)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    res = subprocess.run([sys.executable, "-m", "hacrl.cli", "train", "--preset", "tiny-test", "--set",
                          "trainer.steps=2", "--set", "trainer.eval_size=20", "--output", "runs/demo", "--quiet"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr
    printed = [_shape(line) for line in res.stdout.splitlines()]
    shown = [_shape(line) for line in demo[0]]
    assert shown == printed, ("README.md's demo block does not have the format `hacrl train` prints now:\n"
                              + "\n".join(res.stdout.splitlines()))


def test_readme_table_is_the_scripts_output(load_script):
    """Edit scripts/readme_figure.py, not the table: `python scripts/readme_figure.py` rewrites it."""
    assert load_script("scripts/readme_figure.py", "readme_figure").main(["--check"]) == 0


def test_readme_links_and_figure_exist():
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    assert any(t.endswith(".png") for t in targets), "the README shows a figure"
    missing = [t for t in targets if "://" not in t and not (ROOT / t.split("#", 1)[0]).exists()]
    assert not missing, f"README.md links to files that are not there: {missing}"

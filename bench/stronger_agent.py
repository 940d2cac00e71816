"""Why the stronger agent does not gain: what its partner's answers offer it, and what reaches its update.

Reads finished ``hacrl compare`` directories (no training) and prints, per preset, algorithm and agent, the
means over seeds and steps of:

- ``rescue``: share of the step's prompts on which the agent wrote no correct answer and its partner wrote at
  least one (``agent/<a>/rescue/<b>``): the most a partner's answers can teach it that it cannot find itself;
- ``window``: share of its cross answers inside the cross window; ``adv>0``: share with a positive advantage;
  ``adv>0 in``: share of those inside the window; ``above``: share above the window (ratio > 1);
- ``scale``: a cross answer's gradient scale next to an own answer's, c^(1+α)·ω (0 outside the window);
- ``ω``: the weight ω^(partner, agent) = P̂_partner / P̂_agent its update gives the partner's answers;
- ``Δ gspo``: the final held-out accuracy minus gspo's (same seeds), from the comparison's summary.json.

    python bench/stronger_agent.py runs/c14-tiny-state runs/c14-tiny-model ...
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from hacrl.run.sinks import read_jsonl

COLUMNS = [("rescue", "rescue/{partner}"), ("window", "cross/in_window_frac"), ("adv>0", "cross/adv_pos_frac"),
           ("adv>0 in", "cross/pos_in_window_frac"), ("above", "cross/clip_high_frac"), ("scale", "cross/grad_scale"),
           ("ω", None)]


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def run_means(run_dir: Path, agent: str, partners: list[str]) -> dict[str, float | None]:
    """Means over the run's training steps (and partners) of each column, for one agent."""
    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if f"agent/{agent}/reward" in r]
    out: dict[str, float | None] = {}
    for name, key in COLUMNS:
        # the trainer logs agent/<i>/omega/<j> = P̂_i / P̂_j; the agent's update weighs partner j by P̂_j / P̂_agent
        keys = ([f"agent/{p}/omega/{agent}" for p in partners] if key is None else
                [f"agent/{agent}/{key.format(partner=p)}" for p in partners])
        out[name] = _mean([r[k] for r in rows for k in keys if r.get(k) is not None])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dirs", nargs="+", type=Path, help="hacrl compare output directories")
    a = p.parse_args()
    header = ["preset", "agent", "algorithm", "start", "Δ gspo", *[c for c, _ in COLUMNS]]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for out in a.dirs:
        summary = json.loads((out / "summary.json").read_text())
        agents = list(summary["agents"])
        for agent in agents:
            partners = [b for b in agents if b != agent]
            for algo in summary["algorithms"]:
                res = summary["results"][agent][algo]
                runs = sorted((out / "runs" / algo).glob("seed-*"))
                means = [run_means(r, agent, partners) for r in runs]
                cells = []
                for name, _ in COLUMNS:
                    vals = [m[name] for m in means if m[name] is not None]
                    cells.append(f"{_mean(vals):.3f}" if vals else "—")
                delta = res["vs"].get("gspo", {}).get("mean")
                print(f"| {summary['preset']} | {agent} | {algo} | {res['start']:.3f} | "
                      f"{'—' if delta is None else f'{delta:+.3f}'} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

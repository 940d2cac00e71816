"""The plots of ``hacrl compare``: learning curves per agent (held-out accuracy against steps and against
answers generated), ω per agent pair, cross answers inside the window.

matplotlib is optional and imported inside :func:`write_plots`; without it no plot is written.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from hacrl.report.reading import held_out_measure, partner_starts
from hacrl.run.files import write_atomic

# a curve plot's legend with more entries (arms + partners' starts) than this goes beside the right panel, the
# figure LEGEND_WIDTH inches wider, instead of over the left panel's curves
LEGEND_INSIDE_MAX = 7
LEGEND_WIDTH = 3.2


def finished_seeds(by_seed: dict[Any, float | None]) -> int:
    """How many of an algorithm's runs reached the final evaluation (``results.<agent>.<algo>.final.by_seed``
    of summary.json: a seed still training is absent or None)."""
    return sum(v is not None for v in by_seed.values())


def write_plots(summary: dict[str, Any], plots_dir: Path) -> list[Path]:
    """curve-<agent>.png, omega.png, cross-window.png; [] when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    plots_dir.mkdir(parents=True, exist_ok=True)
    written = []
    algos = summary["algorithms"]
    # ten colours, then the same ten dashed: no two arms of one comparison look alike
    colors = {a: f"C{i % 10}" for i, a in enumerate(algos)}
    styles = {a: "-" if i < 10 else "--" for i, a in enumerate(algos)}

    from matplotlib.ticker import FixedLocator, MaxNLocator, NullLocator, ScalarFormatter

    def small_panel(ax: Any, title: str) -> None:  # one panel of the omega / cross-window rows
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)

    n_seeds = len(summary["seeds"])
    for agent, per_algo in summary["results"].items():
        refs = {f"{other}'s start": start for other, start in partner_starts(summary, agent).items()}
        outside = len(algos) + len(refs) > LEGEND_INSIDE_MAX
        fig, axes = plt.subplots(1, 2, figsize=(10 + LEGEND_WIDTH * outside, 4), sharey=True)
        labels = {}  # an algorithm with fewer finished seeds than the comparison's says how many
        for algo in algos:
            n = finished_seeds(per_algo[algo]["final"]["by_seed"])
            labels[algo] = algo if n == n_seeds else f"{algo} ({n} seed{'s' if n != 1 else ''})"
        draw_curves(axes[0], per_algo, algos, colors, labels=labels, references=refs, styles=styles)
        draw_curves(axes[1], per_algo, algos, colors, x="answers", xlabel=f"answers {agent} generated in training",
                    labels=labels, references=refs, styles=styles)
        axes[0].set_ylabel(f"held-out {held_out_measure(summary, 'greedy accuracy')}")
        if outside:  # a long legend inside would cover the curves: beside the right panel, the figure wider
            axes[1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8)
        else:
            axes[0].legend()
        fig.suptitle(f"{agent}: mean over {n_seeds} seed{'s' if n_seeds != 1 else ''}"
                     + (" (band ± sd)" if n_seeds > 1 else ""), fontsize=10)
        written.append(save_figure(fig, plots_dir / f"curve-{agent}.png"))

    diag = summary["diagnostics"]
    if diag:
        pairs = [(a, o) for a in summary["agents"] for o in summary["agents"] if a != o]
        fig, axes = plt.subplots(1, len(pairs), figsize=(4.5 * len(pairs), 3.6), squeeze=False)
        for ax, (a, o) in zip(axes[0], pairs, strict=True):
            for algo, d in diag.items():
                _band(ax, d[a]["omega"][o]["curve"], algo, colors[algo], 0.1, 10.0, ls=styles[algo])
            ax.axhline(1.0, color="grey", lw=0.8, ls="--")
            ax.set_yscale("log")
            ax.set_ylim(0.09, 11)
            ax.yaxis.set_major_locator(FixedLocator([0.1, 0.2, 0.5, 1, 2, 5, 10]))
            ax.yaxis.set_major_formatter(ScalarFormatter())
            ax.yaxis.set_minor_locator(NullLocator())
            small_panel(ax, f"ω({a}→{o})")
        axes[0][0].set_ylabel("ω = capability ratio")
        if axes[0][0].get_legend_handles_labels()[0]:  # runs that logged no ω draw no line
            axes[0][0].legend(fontsize=8)
        written.append(save_figure(fig, plots_dir / "omega.png"))

        logged = [(algo, d) for algo, d in diag.items()
                  if any(x["in_window_curve"]["steps"] for x in d.values())]
        if logged:
            agents = list(summary["agents"])
            fig, axes = plt.subplots(1, len(agents), figsize=(4.5 * len(agents), 3.6), squeeze=False)
            for ax, agent in zip(axes[0], agents, strict=True):
                for algo, d in logged:
                    _band(ax, d[agent]["in_window_curve"], algo, colors[algo], 0.0, 1.0, ls=styles[algo])
                ax.set_ylim(-0.02, 1.02)
                small_panel(ax, f"{agent} learning from the others")
            axes[0][0].set_ylabel("cross answers inside the clip window")
            axes[0][0].legend(fontsize=8)
            written.append(save_figure(fig, plots_dir / "cross-window.png"))
    return written


def draw_curves(ax: Any, per_algo: dict[str, Any], algos: list[str], colors: dict[str, str], *,
                x: str = "steps", xlabel: str = "training step", labels: dict[str, str] | None = None,
                references: dict[str, float] | None = None, styles: dict[str, str] | None = None) -> None:
    """One agent's held-out accuracy curves on ``ax``: for each of ``algos``, the mean over seeds of
    ``per_algo[algo]["curve"]`` (summary.json's ``results.<agent>.<algo>.curve``) against ``x`` ("steps" or
    "answers", the answers the agent generated), with a band of ± one sd over seeds, in ``colors[algo]``,
    named ``labels[algo]`` (default: the algorithm); ``references``: a dashed grey line per label (the partners'
    starting accuracy), so a curve that ends below a partner's start shows it; ``styles[algo]``: its line style
    (default solid)."""
    from matplotlib.ticker import MaxNLocator

    for i, (label, value) in enumerate((references or {}).items()):
        ax.axhline(value, color="0.45", linestyle=("--", ":", "-.")[i % 3], linewidth=1, label=label)

    for algo in algos:
        if x in per_algo[algo]["curve"]:  # a summary from before the cost axis has steps only
            _band(ax, per_algo[algo]["curve"], (labels or {}).get(algo, algo), colors[algo], 0.0, 1.0, x=x,
                  ls=(styles or {}).get(algo, "-"))
    values = [v for algo in algos for v in per_algo[algo]["curve"]["mean"] if v is not None]
    if values and max(values) - min(values) < 1e-9:  # flat curves: show the whole [0, 1] range
        ax.set_ylim(-0.02, 1.02)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)


def _band(ax: Any, curve: dict[str, list], label: str, color: str, lo: float | None = None,
          hi: float | None = None, x: str = "steps", ls: str = "-") -> None:
    """The mean over seeds against ``curve[x]``, with a band of ± one sd over seeds (clipped to [lo, hi])."""
    if not curve["steps"]:
        return
    ax.plot(curve[x], curve["mean"], marker="o", ms=3, label=label, color=color, linestyle=ls)
    if any(sd is not None for sd in curve["sd"]):
        low = [m - (sd or 0.0) for m, sd in zip(curve["mean"], curve["sd"], strict=True)]
        high = [m + (sd or 0.0) for m, sd in zip(curve["mean"], curve["sd"], strict=True)]
        if lo is not None:
            low = [max(lo, v) for v in low]
        if hi is not None:
            high = [min(hi, v) for v in high]
        ax.fill_between(curve[x], low, high, alpha=0.2, color=color, linewidth=0)


def palette_png(png: bytes) -> bytes:
    """An opaque PNG as a 256-colour palette PNG: a line plot loses nothing visible and the file shrinks to about
    a third of its size (the committed plots were a fifth of results/). Pillow comes with matplotlib. Applied to
    its own output it changes nothing, so a committed plot re-encoded by it equals one written again."""
    from PIL import Image

    image = Image.open(io.BytesIO(png))
    if image.mode == "P":
        return png
    out = io.BytesIO()
    image.convert("RGB").quantize(colors=256).save(out, format="PNG", optimize=True)
    return out.getvalue()


def save_figure(fig: Any, path: Path) -> Path:
    """Lay out, write (100 dpi, a palette PNG: :func:`palette_png`) and close ``fig``; returns ``path``."""
    fig.tight_layout()
    return write_png(fig, path, dpi=100, facecolor="white")


def write_png(fig: Any, path: Path, **savefig: Any) -> Path:
    """Write ``fig`` to ``path`` as a palette PNG (:func:`palette_png`), with ``savefig``'s settings (dpi,
    bbox_inches, ...), whole or not at all, and close it; returns ``path``. The bench scripts' figures go through
    it too, so docs/img is as light as the reports' plots."""
    import matplotlib.pyplot as plt

    png = io.BytesIO()
    fig.savefig(png, **{**savefig, "format": "png"})
    plt.close(fig)
    write_atomic(Path(path), palette_png(png.getvalue()))
    return Path(path)

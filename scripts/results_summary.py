"""docs/results-summary.md, generated from every committed comparison's summary.json.

Every directory under results/ that holds a summary.json (``hacrl compare`` wrote it; the command is in it and on
the page) has its tables here, grouped by study as docs/results/ is: the tiny pair's, the SmolLM2 pairs' and the
ten ways of sharing one table per agent, the cells of the mechanism study and of the trust study one table per
cell. A directory this script does not know still gets its table, under "Other comparisons", so a new comparison
cannot be left off unseen. The words say what each study
and cell asks and where its full reading is (docs/results/), never a number.

Per comparison, agent and algorithm: the final held-out greedy accuracy (mean ± sd over seeds) and the study's
own method's paired difference to it (``hacpo``; ``trust`` in the trust study) with both intervals the report
gives: the two-level bootstrap over seeds × problems and the seed-level t-interval over per-seed differences.
The per-agent tables add in how many seeds the agent ended below its partner's start. Every number is read from
summary.json, never from the run records (those may be compacted into ``records.parquet``; summary.json holds
what this page needs either way), with two derivations:

- where summary.json holds the pair only the other way round (``it − hacpo``), the page gives its negation: the
  bootstrap resamples the same seeds and problems for both orders (every pair committed both ways agrees to
  1e-9);
- where it has no seed-level interval (``results/smollm2-state``, made before per-problem records), the page
  computes it the way ``hacrl compare`` does (:func:`hacrl.report.stats.seed_t_interval` over the per-seed
  finals summary.json lists).

Run (a few seconds, no extras):

    python scripts/results_summary.py            # write docs/results-summary.md
    python scripts/results_summary.py --check    # exit 1 if the page is not this script's output

tests/meta/test_results_summary.py runs ``--check``, so a number edited by hand or a comparison regenerated
without the page fails the tests.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hacrl.report.stats import seed_t_interval

ROOT = Path(__file__).resolve().parent.parent
PAGE = "docs/results-summary.md"
MECH = "results/mechanism.md"  # relative to docs/
M_ANCHORS = {
    "12": "", "12.1": "#121-e1-the-papers-naive-is-plausibly-a-pool-without-importance-sampling",
    "12.2": ("#122-e3-complementary-skills-no-cell-lets-both-agents-gain-where-the-stronger-agent-could-learn-"
             "hacpo-lets-in-less-than-imitation"),
    "12.3": "#123-e3s-last-two-cells-near-equal-capability-eq-model-and-two-weak-agents-low",
    "12.4": ("#124-e2-right-answer-wrong-reasoning-copying-a-partners-garbage-working-destroys-the-copier-and-"
             "hacpos-window-keeps-it-out"),
    "12.5": "#125-p1-at-ρ-1-again-on-the-other-build-which-ways-of-sharing-keep-a-partners-garbage-working-out",
    "12.8": "#128-e4-the-unchecked-working-regime-on-a-real-pair-smollm2",
    "12.9": "#129-e2-stage-b-half-corrupted-partners-ρ-05-and-imitation-with-λ-03",
    "12.10": "#1210-the-44-methods-in-asym-on-the-avx2-build",
}

# The studies' comparisons with one table per agent: (directory, title, what it asks, where it is read in full).
# Words only: every number on the page is read from the directory's summary.json.
HEADLINE: list[tuple[str, str, str, tuple[str, str]]] = [
    ("results/tiny-model-evidence", ("Tiny models (`tiny-model`): two embedded models of different architecture "
     "and tokenizer on 2-digit addition"),
     ("Does HACPO beat training alone, at the same and at twice the rollouts, and does it beat imitating the "
     "partner's verified answers or pooling them with no correction?"),
     ("§9", ("results/tiny-pairs.md#9-the-skeptics-baselines-on-tiny-model-imitating-the-partner-beats-hacpo-"
             "for-the-weaker-agent"))),
    ("results/smollm2-clean", ("A real pretrained pair (`smollm2-state`): SmolLM2-135M-Instruct as shipped and "
     "its copy fine-tuned on the answer format"),
     ("Does the shipped model learn from a partner that knows the answer format, and is it HACPO's corrections "
     "or the partner's answers that carry the gain? The partner is a demonstrator: the numbers speak for this "
     "pair and task only."),
     ("§5", "results/smollm2.md")),
    ("results/smollm2-gemma", ("A pair of different architectures and tokenizers (`smollm2-gemma`): SmolLM2-135M "
     "and Gemma 3 270M, both warm-started on the answer format"),
     "Does the weaker model gain across two tokenizers, and does the stronger one gain anything?",
     ("§10", "results/smollm2-gemma.md")),
    ("results/sharing-methods-tiny", "Ten ways of sharing on `tiny-model` (issue #44)",
     ("Which of ten ways of learning from a partner's answers ([methods.md](methods.md)) does best for each agent "
     "of the tiny pair, against training alone?"),
     ("§13", "results/sharing-methods.md")),
    ("results/smollm2-state", "The first SmolLM2 comparison (superseded by `results/smollm2-clean`)",
     ("The same question as the clean redo above, asked first: some of its held-out problems were among the "
     "fine-tuned copy's training questions, its seeds share almost all their held-out problems, and its runs "
     "wrote no per-problem records, so it has no bootstrap interval."),
     ("§5", ("results/smollm2.md#the-first-comparison-superseded-hacpo-lifted-the-shipped-model-from-021-to-"
             "045-gspo-and-gspo2-left-it-near-024"))),
]

# The mechanism study's cells (issue #45), in the study's order: directory under results/mechanism/ -> (what the
# cell is, the section of docs/results/mechanism.md that reads it). A cell not listed comes after these.
MECHANISM: dict[str, tuple[str, str]] = {
    "preflight-e2-lr/lr3.0e-4": ("E2's learning-rate pre-flight: P1 at ρ 1, one seed, lr 3e-4", "12"),
    "preflight-e2-lr/lr1.0e-4": ("E2's learning-rate pre-flight: P1 at ρ 1, one seed, lr 1e-4", "12"),
    "e1-tiny-model": (("E1, is the paper's naive an uncorrected pool? On `tiny-model` as it is (§13's runs of these "
                       "arms made again: identical records, a reproduction, not a second result)"), "12.1"),
    "e1-tiny-state": ("E1 on `tiny-state` as it is", "12.1"),
    "sym-0.5": ("E3, SYM-0.5: two generalists on `mixed` (the control)", "12.2"),
    "sym-1.0": ("E3, SYM-1.0: a '+' and a '−' specialist on `mixed`", "12.2"),
    "asym": ("E3, ASYM: the stronger agent lacks the weaker one's skill", "12.2"),
    "high": ("E3, HIGH: a strong agent beside a weak one on add2", "12.2"),
    "eq-model": ("E3, EQ-MODEL: near-equal capability, different architecture and tokenizer", "12.3"),
    "low": ("E3, LOW: two weak agents", "12.3"),
    "p1-rho0": ("E2, P1 at ρ 0: a weak faithful learner beside a strong partner with faithful working", "12.4"),
    "p1-rho1": ("E2, P1 at ρ 1: a weak faithful learner beside a strong partner whose working is garbage", "12.4"),
    "p2-rho0": ("E2, P2 at ρ 0: a strong faithful learner beside a weak partner with faithful working", "12.4"),
    "p2-rho1": ("E2, P2 at ρ 1: a strong faithful learner beside a weak partner whose working is garbage", "12.4"),
    "p1-avx2-rho1": ("P1 at ρ 1 on the AVX2 build, with the #44 methods", "12.5"),
    "high-avx2": ("HIGH on the AVX2 build, with the #44 methods", "12.5"),
    "p1-avx2-rho0": ("P1 at ρ 0 on the AVX2 build", "12.9"),
    "p1-avx2-rho0.5": ("E2 stage B, P1 at ρ 0.5 on the AVX2 build: half the partner's working redrawn", "12.9"),
    "p2-rho0.5": ("E2 stage B, P2 at ρ 0.5: half the weak partner's working redrawn", "12.9"),
    "asym-avx2": ("ASYM on the AVX2 build, with the #44 methods", "12.10"),
    "e4-unfaithful": ("E4: SmolLM2-135M-Instruct beside a copy fine-tuned on answers with a wrong working", "12.8"),
    "e4-faithful": ("E4's faithful control: the same pair with the copy fine-tuned on right workings", "12.8"),
}

# The trust study's cells (issue #56): each is a mechanism-study cell or the tiny pair, rerun with `trust` beside
# the fixed ways of sharing; read against its pre-registered rules in docs/results-trust.md.
TRUST: dict[str, str] = {
    "tiny-model": "`tiny-model` (E1's cell)", "p1-rho1": "P1 at ρ 1", "sym-1.0": "SYM-1.0", "p1-rho0": "P1 at ρ 0",
    "high": "HIGH",
}

NOT_HERE = ("Sections 1–4 and 6–8 of the results (the paper's δ against a wider window on the three tiny pairs, "
            "cost, the adaptive window, the stronger agent, three agents: [the tiny pairs](results/tiny-pairs.md)) "
            "cite run directories that are not in the repository: their numbers cannot be recomputed from it and "
            "are not repeated here. results/async-pace (asynchronous mode against lock-step, "
            "[§11](results/async.md)) is `bench/async_pace.py`'s output, not a comparison: it has no summary.json.")


def _signed(x: float) -> str:
    return f"{x:+.3f}".replace("-", "−")


def _bracket(lo: float, hi: float) -> str:
    return f"[{_signed(lo)}, {_signed(hi)}]"


def paired(results: dict[str, Any], ref: str, algo: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """``ref − algo`` for one agent: (the bootstrap interval, the seed-level interval), each None where there is
    none. From ``results[ref].vs[algo]``, else the negation of ``results[algo].vs[ref]`` (module docstring)."""
    vs = (results.get(ref, {}).get("vs") or {}).get(algo)
    sign = 1.0
    if vs is None:
        vs, sign = (results.get(algo, {}).get("vs") or {}).get(ref), -1.0
    if vs is None:
        return None, None

    def oriented(iv: dict[str, Any] | None) -> dict[str, Any] | None:
        if not isinstance(iv, dict) or iv.get("lo") is None:
            return None
        lo, hi = (iv["lo"], iv["hi"]) if sign > 0 else (-iv["hi"], -iv["lo"])
        return {"mean": sign * iv["mean"], "lo": lo, "hi": hi}

    seed = vs.get("seed_interval")
    if seed is None and "seed_interval" not in vs:  # made before summary.json had one: from the per-seed finals
        a, b = (ref, algo) if sign > 0 else (algo, ref)
        fa, fb = (results[x]["final"].get("by_seed", {}) for x in (a, b))
        common = [s for s in fa if s in fb and fa[s] is not None and fb[s] is not None]
        seed = seed_t_interval([fa[s] for s in common], [fb[s] for s in common])
    return oriented(vs.get("interval")), oriented(seed)


def _final(summary: dict[str, Any], r: dict[str, Any]) -> str:
    final = r.get("final", {})
    if final.get("mean") is None:
        return "no finished seed"
    k, n_all = len(final.get("by_seed", {})), len(summary["seeds"])
    if n_all == 1:
        return f"{final['mean']:.3f} (one seed)"
    seeds = f" ({k} of {n_all} seeds)" if k and k < n_all else ""
    return f"{final['mean']:.3f} ± {final['sd'] or 0:.3f}{seeds}"


def _diff_cells(results: dict[str, Any], ref: str, algo: str, records: bool) -> list[str]:
    """The bootstrap cell and the seed-level cell of ``ref − algo``; with no bootstrap (no per-problem records)
    the seed-level cell carries the mean difference."""
    if algo == ref:
        return ["—", "—"]
    boot, seed = paired(results, ref, algo)
    if boot is None and seed is None:
        return ["not paired", "—"]
    if boot is None:  # so seed is not None
        return ["no per-problem records" if not records else "—",
                f"{_signed(seed['mean'])} {_bracket(seed['lo'], seed['hi'])}"]
    b = f"{_signed(boot['mean'])} {_bracket(boot['lo'], boot['hi'])}"
    if seed is None:
        return [b, "— (one seed)" if len(results[algo]["final"].get("by_seed", {})) < 2 else "—"]
    return [b, _bracket(seed["lo"], seed["hi"])]


def _below(final: dict[str, Any], partner_start: float | None) -> str:
    if partner_start is None:
        return "—"
    seeds = final.get("by_seed", {})
    return f"{sum(v < partner_start for v in seeds.values() if v is not None)} of {len(seeds)}"


def _ref(summary: dict[str, Any]) -> str:
    return "trust" if "trust" in summary["algorithms"] else "hacpo"


def _start(summary: dict[str, Any], agent: str) -> float:
    r = summary["results"][agent]
    return r[_ref(summary)]["start"] if _ref(summary) in r else next(iter(r.values()))["start"]


def _records(summary: dict[str, Any]) -> bool:
    """Whether the comparison's runs wrote per-problem records (``results/smollm2-state``'s did not)."""
    return bool(summary.get("runs_with_problem_records"))


def agent_table(summary: dict[str, Any], agent: str) -> list[str]:
    """One agent's Markdown table: every algorithm's final accuracy and the reference method's paired difference
    to it."""
    results, ref = summary["results"], _ref(summary)
    others = [a for a in summary["agents"] if a != agent]
    partner_start = _start(summary, others[0]) if len(others) == 1 else None
    head = ["algorithm", "final (mean ± sd)", "seeds below the partner's start",
            f"{ref} − it: bootstrap [95%]", "seed-level [95%]"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for algo in summary["algorithms"]:
        r = results[agent][algo]
        cells = [f"`{algo}`", _final(summary, r), _below(r.get("final", {}), partner_start),
                 *_diff_cells(results[agent], ref, algo, _records(summary))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def cell_table(summary: dict[str, Any]) -> list[str]:
    """A cell's one Markdown table: per algorithm, each agent's final accuracy and the reference method's
    paired difference to it (bootstrap, seed-level), the agents side by side, weaker first."""
    results, ref = summary["results"], _ref(summary)
    agents = sorted(summary["agents"], key=lambda a: _start(summary, a))
    head = ["algorithm"]
    for a in agents:
        head += [f"`{a}` final", f"{ref} − it", "seed-level"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for algo in summary["algorithms"]:
        cells = [f"`{algo}`"]
        for a in agents:
            cells += [_final(summary, results[a][algo]), *_diff_cells(results[a], ref, algo, _records(summary))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _facts(summary: dict[str, Any], source: str) -> str:
    starts = ", ".join(f"{a} {_start(summary, a):.3f}" for a in summary["agents"])
    n = len(summary["seeds"])
    return (f"{n} seed{'s' if n > 1 else ''} × {summary['eval_size']:,} held-out problems, {summary['steps']} steps; "
            f"greedy accuracy at the start: {starts}. The report: [{source}/report.md](../{source}/report.md).")


def load(source: str) -> dict[str, Any]:
    return json.loads((ROOT / source / "summary.json").read_text(encoding="utf-8"))


def headline(source: str, title: str, question: str, where: tuple[str, str]) -> list[str]:
    summary = load(source)
    out = [f"### {title}", "", question, "", f"`{summary['command']}`", "",
           f"{_facts(summary, source)} Full reading: [{where[0]}]({where[1]}).", ""]
    for agent in sorted(summary["agents"], key=lambda a: _start(summary, a)):
        out += [f"**{agent}** (start {_start(summary, agent):.3f})", "", *agent_table(summary, agent), ""]
    return out


def cell(source: str, title: str, reading: str) -> list[str]:
    summary = load(source)
    return [f"### {title}", "", f"`{summary['command']}`", "", f"{_facts(summary, source)} {reading}", "",
            *cell_table(summary), ""]


def comparisons() -> list[str]:
    """Every directory under results/ with a summary.json (run directories aside), as a path from the root."""
    found = (p.parent.relative_to(ROOT).as_posix() for p in (ROOT / "results").rglob("summary.json"))
    return sorted(d for d in found if "/runs/" not in f"{d}/")


def _slug(text: str) -> str:
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def _mechanism(dirs: list[str]) -> list[str]:
    cells = [d.removeprefix("results/mechanism/") for d in dirs if d.startswith("results/mechanism/")]
    out = []
    for name in [*[c for c in MECHANISM if c in cells], *sorted(c for c in cells if c not in MECHANISM)]:
        what, sec = MECHANISM.get(name, (f"cell {name}", "12"))
        reading = f"Read in [§{sec}]({MECH}{M_ANCHORS.get(sec, '')})."
        out += cell(f"results/mechanism/{name}", f"`mechanism/{name}`: {what}", reading)
    return out


def _trust(dirs: list[str]) -> list[str]:
    cells = [d.removeprefix("results/trust/") for d in dirs if d.startswith("results/trust/")]
    out = []
    for name in [*[c for c in TRUST if c in cells], *sorted(c for c in cells if c not in TRUST)]:
        reading = "Read against the study's rules in [results-trust.md](results-trust.md)."
        out += cell(f"results/trust/{name}", f"`trust/{name}`: {TRUST.get(name, f'cell {name}')}", reading)
    return out


# The page's groups, one per study: (title, what it asks, its comparisons: HEADLINE directories, or "mechanism",
# "trust" or "other" for the cells).
GROUPS: list[tuple[str, str, list[str] | str]] = [
    ("The tiny pair", "[The three tiny pairs](results/tiny-pairs.md): the one committed comparison, on `tiny-model`.",
     ["results/tiny-model-evidence"]),
    ("SmolLM2 and its fine-tuned copy", "[SmolLM2](results/smollm2.md): the clean redo and the first comparison.",
     ["results/smollm2-clean", "results/smollm2-state"]),
    ("SmolLM2 and Gemma", "[SmolLM2 and Gemma](results/smollm2-gemma.md).", ["results/smollm2-gemma"]),
    ("Ten ways of sharing", "[Ten ways of sharing](results/sharing-methods.md).", ["results/sharing-methods-tiny"]),
    ("The mechanism study", ("Issue #45: when do HACPO's corrections matter, and when does the stronger agent "
     "gain? One table per cell, with `hacpo`'s paired differences; the study's decision rules are applied by "
     "`python bench/mechanism.py --rules results/mechanism/*/` and read in [the mechanism study](" + MECH + ")."),
     "mechanism"),
    ("The trust study", ("Issue #56: `trust` against the best fixed way of sharing in each regime. One table per "
     "cell, with `trust`'s paired differences; its pre-registered rules, their readings and "
     "`bench/trust_study.py` are in [results-trust.md](results-trust.md)."), "trust"),
    ("Other comparisons", "Directories under results/ that no study above lists yet.", "other"),
]


def _group(which: list[str] | str, dirs: list[str]) -> list[str]:
    if which == "mechanism":
        return _mechanism(dirs)
    if which == "trust":
        return _trust(dirs)
    if which == "other":
        known = {d for d, *_ in HEADLINE}
        return [line for d in dirs if d not in known and not d.startswith(("results/mechanism/", "results/trust/"))
                for line in cell(d, f"`{d}`", "")]
    return [line for h in HEADLINE if h[0] in which and h[0] in dirs for line in headline(*h)]


def page() -> str:
    dirs = comparisons()
    lines = ["# The results in brief", "",
             ("Generated by `python scripts/results_summary.py` from the summary.json of every comparison committed "
             "under results/: do not edit by hand (`tests/meta/test_results_summary.py` fails if this page and "
             "results/ disagree). What each study shows, in words and with its caveats: [the results pages]"
             "(results/index.md). Final accuracy is held-out greedy accuracy at the last step (mean ± sd over "
             "seeds); \"hacpo − it\" (\"trust − it\" in the trust study) is that method's paired difference to the "
             "algorithm over the same seeds and problems (positive: it is ahead); the bootstrap interval resamples "
             "seeds and problems, the seed-level one only seeds ([compare.md](compare.md))."), ""]
    groups = [(title, about, body) for title, about, which in GROUPS if (body := _group(which, dirs))]
    for title, _, body in groups:
        n = len(comparisons_in(body))
        lines.append(f"- [{title}](#{_slug(title)}): {n} comparison{'s' if n > 1 else ''}")
    lines.append("")
    for title, about, body in groups:
        lines += [f"## {title}", "", about, "", *body]
    lines += ["## Not summarised here", "", NOT_HERE, ""]
    return "\n".join(lines)


def comparisons_in(body: list[str]) -> list[str]:
    return [line for line in body if line.startswith("### ")]


def write_or_check(argv: list[str] | None, description: str, make: Callable[[], str], page_path: str,
                   script: str) -> int:
    """A generated page's command line (this script's and scripts/results_tallies.py's): write ``make()`` to
    ``page_path`` (relative to the repository root), or with ``--check`` exit 1 if the file is missing or differs."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="only compare the page; write nothing")
    args = parser.parse_args(argv)
    new, path = make(), ROOT / page_path
    if args.check:
        if not path.is_file() or path.read_text(encoding="utf-8") != new:
            print(f"{page_path} differs from `python {script}`'s output: run it", file=sys.stderr)
            return 1
        return 0
    path.write_text(new, encoding="utf-8")
    print(page_path)
    return 0


def main(argv: list[str] | None = None) -> int:
    return write_or_check(argv, __doc__.splitlines()[0], page, PAGE, "scripts/results_summary.py")


if __name__ == "__main__":
    sys.exit(main())

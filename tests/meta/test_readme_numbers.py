"""Every result number the README quotes is on a generated page, in the part of it that the README names beside
the number: docs/results-summary.md (one table per committed comparison, ``scripts/results_summary.py``) or
docs/results-tallies.md (the tallies across comparisons, ``scripts/results_tallies.py``). Each page has a test
that it is its script's output, so a number typed into the README by hand, or left there after its comparison
changed, fails here with its line.

**Which numbers are result numbers.** In the README's prose (fenced code blocks, inline code spans, link targets
and the generated table between its ``readme-table`` markers, which tests/meta/test_readme.py checks, left out):
every decimal with 2 or 3 places and a magnitude of at most 1 (accuracies, differences, interval ends, shares:
``0.066``, ``+0.295``, ``−0.013``, both ends of ``[−0.039, +0.018]`` and of a range ``0.41–0.43``), and every
count written ``N of M`` (``3 of 38``). One decimal place (``δ 0.6``), integers, percentages, versions and
numbers above 1 (``3.10``, ``2603.02604``) are not checked. ``ALLOWED`` lists the few non-result numbers, each
with its reason.

**Where a number may come from.** The README names a number's source beside it, in its sentence or, failing
that, in its paragraph (or list item). A source is
- a bench command over results directories (``python bench/mechanism.py --rules results/mechanism/asym``,
  ``python bench/trust_study.py results/trust/{a,b}``; ``{a,b}`` and ``*/`` expanded): the rows of those cells
  in the tallies section that command makes, the command's own summary lines (a tally's counts, the shortfall
  tables) and the cells' sections of the results in brief; ``--tally a b`` names its counts only, and a code span
  ``--method ...`` continues the paragraph's trust_study command as stage 3's variant;
- a results directory outside a command (``[report](results/trust/p1-rho1/report.md)``): its section of the
  results in brief;
- a link to a section of the tallies page (``docs/results-tallies.md#each-arms-shortfall-to-the-best-fixed-arm``):
  that section;
- only where none of those is named, a study's page (``docs/results/smollm2.md``, ``STUDY_PAGES``): its
  comparisons' sections of the results in brief.
A number whose sentence and paragraph name no source fails.

**When a number is found.** A count must appear as the same ``N of M``. A decimal q with k places matches a number
g with d places on one of the source's lines when d = k and g = q, or when d > k and g rounds to q
(|g − q| ≤ ½·10^-k + ½·10^-d, which allows the double rounding of a 3-place table to 2 places). A signed q
(``+0.295``, ``−0.013``) needs g of the same sign; an unsigned one matches either sign, as the words carry the
direction ("0.027 below imitation"). A difference quoted with its interval, ``−0.013 [−0.063, +0.033]``, must have
all three numbers on one generated line. A quote from a large source (every trust cell's rows) can still land on
another number of it by chance; the narrower the source the README names, the sharper the check.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SUMMARY, TALLIES = "docs/results-summary.md", "docs/results-tallies.md"
TABLE = re.compile(r"<!-- readme-table: begin.*?<!-- readme-table: end -->", re.S)

# Numbers the README may quote that no generated table holds, each with why it is not a result number.
ALLOWED: dict[str, str] = {
    "0.02": "the mechanism study's margin, the smallest difference its rules call a gain (bench/mechanism.py MARGIN)",
    "0.01": ("the trust study's margin, within 0.01 of the best fixed method (bench/trust_study.py MARGIN); also "
             "'a start only about 0.01 higher', the start gaps 0.009–0.011 of three cells, rounded"),
    "0.749": "`make demo`'s output on another 2-core EPYC, a single demo run, not a comparison",
    "0.625": "`make demo`'s output on another 2-core EPYC, a single demo run, not a comparison",
}
# A study's page stands for the comparisons it reads (results directories, or prefixes ending in "/").
STUDY_PAGES: dict[str, tuple[str, ...]] = {
    "docs/results/tiny-pairs.md": ("results/tiny-model-evidence",),
    "docs/results/smollm2.md": ("results/smollm2-clean", "results/smollm2-state"),
    "docs/results/smollm2-gemma.md": ("results/smollm2-gemma",),
    "docs/results/sharing-methods.md": ("results/sharing-methods-tiny",),
    "docs/results/mechanism.md": ("results/mechanism/",),
    "docs/results-trust.md": ("results/trust/",),
}

_SIGNED = r"[+\-−]?\d+\.\d+"
_NUMBER = re.compile(r"(?<![\w.])([+\-−]?)(\d+\.\d+)(?![\w.])")
_COUNT = re.compile(r"(?<![\w.])(\d+) of (\d+)(?![\w.])")
_INTERVAL = re.compile(rf"(?<![\w.])({_SIGNED})\s*\[\s*({_SIGNED}),\s*({_SIGNED})\]")
_DIR = re.compile(r"results/[\w.\-{},*/@=]+")
_SPAN = re.compile(r"`[^`]*`")
_LINK = re.compile(r"\]\(([^)]*)\)")


def _blank(m: re.Match[str]) -> str:
    return "\n" * m.group(0).count("\n")


def prose(text: str) -> str:
    """Text without inline code spans and link targets (``[a](b)`` keeps ``[a]``); line numbers kept."""
    return _LINK.sub(lambda m: "]" + _blank(m), _SPAN.sub(_blank, text))


def _is_result(digits: str) -> bool:
    return len(digits.split(".")[1]) in (2, 3) and Decimal(digits) <= 1


def quotes(text: str) -> list[tuple[int, tuple[str, ...]]]:
    """(line, numbers as written) of every result number in ``text``'s prose (module docstring): a difference with
    its interval is one quote of three numbers, any other number or count a quote of one.

    >>> [q for _, q in quotes("at 0.20 (0.41–0.43 below; −0.013 [−0.039, +0.018]) in 3 of 38, δ 0.6, Python 3.10")]
    [('0.20',), ('0.41',), ('0.43',), ('−0.013', '−0.039', '+0.018'), ('3 of 38',)]
    >>> quotes("`python x.py --set a=0.123` and [a](docs/x-0.25.md), −0.1 [−0.2, 0.3]")
    []
    """
    text, hits = prose(text), []
    taken: set[int] = set()
    for m in _INTERVAL.finditer(text):
        if all(_is_result(g.lstrip("+-−")) for g in m.groups()):
            hits.append((m.start(), m.groups()))
            taken |= {m.start(i) for i in (1, 2, 3)}
    hits += [(m.start(), (m.group(1) + m.group(2),)) for m in _NUMBER.finditer(text)
             if m.start() not in taken and _is_result(m.group(2))]
    hits += [(m.start(), (f"{m.group(1)} of {m.group(2)}",)) for m in _COUNT.finditer(text)]
    return [(text.count("\n", 0, pos) + 1, q) for pos, q in sorted(hits)]


def _value(written: str) -> tuple[Decimal, int, str]:
    """(magnitude, decimal places, sign: "+", "-" or "" when none is written) of a number, "−" read as "-"."""
    sign, digits = (written[0], written[1:]) if written[0] in "+-−" else ("", written)
    return Decimal(digits), len(digits.split(".")[1]), "-" if sign in ("-", "−") else sign


def found(written: str, line: str) -> bool:
    """Whether a quoted number or count is on one generated line, by the module docstring's rule.

    >>> line = "| −0.066 [−0.107, −0.028] | 0.686 | 0.4249 | 3 of 38 |"
    >>> [found(q, line) for q in ("−0.066", "0.066", "+0.066", "−0.067", "0.69", "0.42", "0.43", "3 of 38", "3 of 3")]
    [True, True, False, False, True, True, False, True, False]
    """
    if " of " in written:
        return any(f"{a} of {b}" == written for a, b in _COUNT.findall(line))
    mag, places, sign = _value(written)
    for m in _NUMBER.finditer(line):
        g, d, _ = _value(m.group(2))
        if sign and ("-" if m.group(1) in ("-", "−") else "+") != sign:
            continue
        half = Decimal(5).scaleb(-places - 1) + Decimal(5).scaleb(-d - 1)
        if (d == places and g == mag) or (d > places and abs(g - mag) <= half):
            return True
    return False


def slug(heading: str) -> str:
    """A heading's anchor as GitHub and MyST write it.

    >>> slug("### Each arm's shortfall to the best fixed arm")
    'each-arms-shortfall-to-the-best-fixed-arm'
    """
    return re.sub(r"[^\w\- ]", "", heading.lstrip("#").strip().lower()).replace(" ", "-")


def _kind(command: str) -> str:
    """The tallies section a bench command makes: ``tally:<a>-<b>``, ``rules``, ``trust`` or ``trust-variant``."""
    tally = re.search(r"--tally (\S+) (\S+)", command)
    if tally:
        return f"tally:{tally.group(1)}-{tally.group(2)}"
    if "trust_study" in command or command.lstrip().startswith("--method"):
        return "trust-variant" if "--method" in command else "trust"
    return "rules"


def generated_lines() -> list[tuple[frozenset[str], str]]:
    """Every line of the two generated pages with the sources it belongs to: ``summary:<dir>`` for a comparison's
    section of the results in brief; on the tallies page ``rows:<kind>:<dir>`` for a row of a cell, ``agg:<kind>``
    for the section's other lines, and ``page:<slug>`` for its heading and the one above it."""
    out: list[tuple[frozenset[str], str]] = []
    section: list[str] = []

    def close() -> None:
        report = re.search(r"\[(results/[^\]]+)/report\.md\]", "\n".join(section))
        out.extend((frozenset({f"summary:{report.group(1)}"} if report else ()), line) for line in section)
        section.clear()

    for line in (ROOT / SUMMARY).read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            close()
        section.append(line)
    close()
    headings: dict[int, str] = {}
    kind = study = ""
    for line in (ROOT / TALLIES).read_text(encoding="utf-8").splitlines():
        if line.startswith("##"):
            level = len(line) - len(line.lstrip("#"))
            headings = {k: v for k, v in headings.items() if k < level} | {level: slug(line)}
        if line.startswith("`python bench/"):
            kind, study = _kind(line), "trust" if "trust_study" in line else "mechanism"
        first = [c.strip().strip("`") for c in line.strip("|").split("|")[:2]] if line.startswith("|") else []
        cell = next((c for c in first if study and c and (ROOT / "results" / study / c / "summary.json").is_file()),
                    None)
        keys = {f"rows:{kind}:results/{study}/{cell}"} if cell else {f"agg:{kind}"}
        out.append((frozenset(keys | {f"page:{s}" for s in headings.values()}), line))
    return out


def _expand(path: str) -> list[str]:
    """``results/trust/{a,b}`` → both paths; a trailing ``*/``, ``*`` or ``/`` leaves a prefix ending in ``/``; a
    comparison's report.md or summary.json stands for its directory.

    >>> _expand("results/trust/{a,b}/report.md"), _expand("results/trust/*/")
    (['results/trust/a', 'results/trust/b'], ['results/trust/'])
    """
    m = re.search(r"\{([^}]*)\}", path)
    if m:
        return [p for part in m.group(1).split(",") for p in _expand(path[: m.start()] + part + path[m.end():])]
    return [re.sub(r"/(report\.md|summary\.json)$", "", re.sub(r"\*/?$", "", path.rstrip(".,;:)")))]


def _dirs(prefixes: list[str], known: set[str]) -> set[str]:
    return {d for d in known for p in prefixes if d == p.rstrip("/") or (p.endswith("/") and d.startswith(p))}


def sources(text: str, paragraph: str, known: set[str]) -> tuple[set[str], set[str]]:
    """(the sources ``text`` names, its study pages' sources), as ``generated_lines``' keys (module docstring);
    ``paragraph`` gives the trust_study command a ``--method`` span continues.

    >>> known = {"results/trust/a", "results/trust/b", "results/trust/c", "results/smollm2-clean"}
    >>> text = "`python bench/trust_study.py results/trust/{a,b}`; [§5](docs/results/smollm2.md)"
    >>> keys, study = sources(text, text, known)
    >>> sorted(keys), sorted(study)  # doctest: +NORMALIZE_WHITESPACE
    (['agg:trust', 'rows:trust:results/trust/a', 'rows:trust:results/trust/b', 'summary:results/trust/a',
      'summary:results/trust/b'], ['summary:results/smollm2-clean'])
    """
    keys: set[str] = set()
    for span in _SPAN.findall(text):
        if "bench/" not in span and not span.startswith("`--method"):
            continue
        command = span if "bench/" in span else next(
            (s for s in _SPAN.findall(paragraph) if "bench/trust_study.py" in s), "") + span
        kind, dirs = _kind(span.strip("`")), _dirs([p for raw in _DIR.findall(command) for p in _expand(raw)], known)
        keys.add(f"agg:{kind}")
        if not kind.startswith("tally:"):
            keys |= {f"rows:{kind}:{d}" for d in dirs} | {f"summary:{d}" for d in dirs}
    outside = _SPAN.sub("", text)
    keys |= {f"summary:{d}" for d in _dirs([p for raw in _DIR.findall(outside) for p in _expand(raw)], known)}
    keys |= {f"page:{anchor}" for anchor in re.findall(rf"\]\({re.escape(TALLIES)}#([\w\-]+)\)", outside)}
    study = {f"summary:{d}" for page, dirs in STUDY_PAGES.items() if f"]({page}" in outside
             for d in _dirs(list(dirs), known)}
    return keys, study


def units(readme: str) -> list[tuple[int, str, str]]:
    """(first line, sentence, its paragraph) of every sentence of the README's prose paragraphs and list items,
    fenced code and the generated table left out (inline code and links stay: they name the sources)."""
    text = re.sub(r"^```.*?^```[^\n]*$", _blank, TABLE.sub(_blank, readme), flags=re.S | re.M)
    paragraphs: list[tuple[int, list[str]]] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if line.startswith(("- ", "#")) or not paragraphs or n > paragraphs[-1][0] + len(paragraphs[-1][1]):
            paragraphs.append((n, []))  # a list item, a heading, or a line after a blank one starts a paragraph
        paragraphs[-1][1].append(line)
    out = []
    for first, lines in paragraphs:
        para = "\n".join(lines)
        masked = _SPAN.sub(lambda m: "x" * len(m.group(0)), para)  # no sentence ends inside code or a link
        masked = _LINK.sub(lambda m: "](" + "x" * len(m.group(1)) + ")", masked)
        cuts = [0, *(m.end() for m in re.finditer(r"(?<=[.!?])\s+(?=[A-Z*(\[])", masked)), len(para)]
        out += [(first + para.count("\n", 0, a), para[a:b], para) for a, b in zip(cuts, cuts[1:]) if para[a:b].strip()]
    return out


def unsourced(readme: str) -> list[str]:
    """One line per quoted result number that the generated pages do not hold where the README says it is from."""
    lines = generated_lines()
    known = {k.split(":", 1)[1] for keys, _ in lines for k in keys if k.startswith("summary:")}
    problems = []
    for first, sentence, paragraph in units(readme):
        own, own_study = sources(sentence, paragraph, known)
        para, para_study = sources(paragraph, paragraph, known)
        keys = own or own_study or para or para_study
        haystack = [line for line_keys, line in lines if line_keys & keys]
        for n, quote in quotes(sentence):
            if all(q in ALLOWED for q in quote):
                continue
            shown = quote[0] + (f" [{quote[1]}, {quote[2]}]" if len(quote) == 3 else "")
            where = f"README.md line {first + n - 1}: {shown}"
            if not keys:
                problems.append(f"{where}: its sentence and paragraph name no source (a bench command, a results "
                                "directory, a tallies section or a study's page)")
            elif not any(all(found(q, line) for q in quote) for line in haystack):
                problems.append(f"{where} is not in the generated tables its sentence or paragraph names "
                                f"({SUMMARY}, {TALLIES})")
    return problems


def test_every_number_the_readme_quotes_is_on_a_generated_page():
    missing = unsourced(README.read_text(encoding="utf-8"))
    assert not missing, ("\n".join(missing) + "\nquote the generated value (python scripts/results_summary.py; "
                         "python scripts/results_tallies.py), name its source beside it, or say in ALLOWED why it "
                         "is not a result number")


def test_a_number_changed_by_0_001_is_named_with_its_line():
    """The check's point: the README's quote of trust's mean shortfall, moved by 0.001, fails on its line. A move
    that lands on another number of the source its paragraph names passes, as the module says a chance match
    does (GSPO×2's mean shortfall sits 0.001 below trust's); the next step then fails."""
    readme = README.read_text(encoding="utf-8")
    quotes = re.findall(r"fixed arm is (0\.\d{3})", readme)
    assert len(quotes) == 1, "the README quotes trust's mean shortfall once, as 'fixed arm is 0.0xx'"
    quoted = Decimal(quotes[0])
    for step in (Decimal("0.001"), Decimal("-0.001")):
        caught = []
        for k in (1, 2):
            new = str(quoted + k * step)
            broken = readme.replace(f"fixed arm is {quoted}", f"fixed arm is {new}")
            line = broken[: broken.index(f"is {new}")].count("\n") + 1
            problems = unsourced(broken)
            if problems:
                assert problems == [(f"README.md line {line}: {new} is not in the generated tables its sentence "
                                     f"or paragraph names ({SUMMARY}, {TALLIES})")]
                caught.append(k)
        assert caught, f"moving {quoted} by {step}, once or twice, was never caught"


def test_a_number_without_a_source_is_named_as_such():
    readme = README.read_text(encoding="utf-8") + "\nA new claim: 0.123 better.\n"
    assert unsourced(readme)[-1].endswith(": 0.123: its sentence and paragraph name no source (a bench command, a "
                                          "results directory, a tallies section or a study's page)")


def test_the_allowed_thresholds_are_the_scripts_margins(load_script):
    assert load_script("bench/mechanism.py", "bench_mechanism").MARGIN == float("0.02")
    assert load_script("bench/trust_study.py", "bench_trust_study").MARGIN == float("0.01")


def test_every_allowed_number_is_still_quoted():
    """An entry the README no longer needs goes, so the list stays the README's exceptions and nothing more."""
    written = {q for _, quote in quotes(README.read_text(encoding="utf-8")) for q in quote}
    assert set(ALLOWED) <= written, f"not in the README any more: {sorted(set(ALLOWED) - written)}"

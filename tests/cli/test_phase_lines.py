"""``hacrl train``'s line for a long phase, without a model: printed from PHASE_LINE_S seconds on, above the rich
bar on a terminal (through its console) or as a plain line on stderr elsewhere; nothing with ``-q``."""

from __future__ import annotations

from types import SimpleNamespace

from hacrl.cli.train import PHASE_LINE_S, _Progress


class Console:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def print(self, line: str, **_style: bool) -> None:
        self.lines.append(line)


def progress(enabled: bool, bar: bool) -> _Progress:
    p = _Progress(SimpleNamespace(agent_ids=["a"]), enabled=enabled)
    if bar:
        p._bar = SimpleNamespace(console=Console())
    return p


def test_a_phase_line_from_the_threshold_on(capsys):
    plain = progress(enabled=True, bar=False)
    plain.phase(12, "rollout", PHASE_LINE_S - 0.1)
    plain.phase(12, "rollout", 41.25)
    plain.phase(0, "eval", PHASE_LINE_S)
    assert capsys.readouterr().err.splitlines() == ["  step 12: rollout 41.2 s", "  step 0: eval 30.0 s"]


def test_above_the_bar_on_a_terminal_and_none_when_quiet(capsys):
    on_terminal = progress(enabled=True, bar=True)
    on_terminal.phase(3, "update", 90.0)
    assert on_terminal._bar.console.lines == ["  step 3: update 90.0 s"]
    progress(enabled=False, bar=False).phase(3, "update", 90.0)
    assert capsys.readouterr().err == ""

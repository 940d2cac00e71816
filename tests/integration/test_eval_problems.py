"""Per-problem evaluation records (eval_problems.jsonl): scored by hand on constructed answers, written by
the trainer on the tiny agents in agreement with eval.jsonl and with the engine's own answers, and kept
exact across a resume."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from hacrl.config import load_config, resume_conflict
from hacrl.rollout import SamplingParams, get_engine
from hacrl.run.rundir import foreign_entries
from hacrl.run.sinks import read_evals, read_jsonl, read_problem_evals
from hacrl.trainer.evaluation import score_answers
from hacrl.trainer.trainer import Trainer
from hacrl.types import Problem, Trajectory

HERE = Path(__file__).resolve().parent
GSM8K = HERE.parent / "data" / "fixtures" / "benchmarks" / "gsm8k.jsonl"
RAISES_ON_ONES = f"task.reward={HERE / 'faulty_rewards.py'}:raises_on_ones"  # an answer "1..." is unscorable
PROBLEMS = [Problem("t/0", "1+1=", "2"), Problem("t/1", "2+2=", "4"), Problem("t/2", "3+3=", "6")]


def table_scorer(texts, problems):
    """1.0 for the right answer, None for '?' (unscorable), 0.0 otherwise."""
    return SimpleNamespace(rewards=[None if t == "?" else float(t == p.answer) for t, p in zip(texts, problems)])


def answer(index, text, finished, tokens):
    return Trajectory(index, 0, text, finished, -1.0, tokens)


def test_records_of_constructed_answers_by_hand():
    # greedy answers arrive out of problem order: each lands at its prompt_index
    greedy = [answer(2, "6", True, 2), answer(0, "2", True, 2), answer(1, "?", False, 4)]
    res, rec = score_answers("a", PROBLEMS, greedy, table_scorer, texts=2)
    assert rec.ids == ["t/0", "t/1", "t/2"]
    assert rec.reward == [1.0, 0.0, 1.0]  # '?' is unscorable: counts 0.0 ...
    assert rec.unscorable == [1]  # ... and is listed by index
    assert rec.finished == [True, False, True] and rec.tokens == [2, 4, 2]
    assert rec.texts == ["2", "?"]  # the first texts=2 problems only
    assert list(rec.as_dict()) == ["ids", "reward", "unscorable", "finished", "tokens", "texts"]
    assert (res.n, res.greedy_acc, res.unscorable, res.sampled_avg) == (3, 2 / 3, 1, None)  # totals as before

    # k = 2 sampled answers per problem, prompt-major
    sampled = [answer(0, "2", True, 2), answer(0, "3", True, 2), answer(1, "?", True, 2), answer(1, "4", False, 4),
               answer(2, "5", True, 2), answer(2, "5", True, 2)]
    res, rec = score_answers("a", PROBLEMS, greedy, table_scorer, sampled=sampled, k=2, texts=0)
    assert rec.sampled == [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]
    assert rec.sampled_finished == [[True, True], [True, False], [True, True]]
    assert rec.texts == []
    assert list(rec.as_dict()) == ["ids", "reward", "unscorable", "finished", "tokens", "sampled",
                                   "sampled_finished", "texts"]
    # avg@2 = (1/2 + 1/2 + 0) / 3; pass@2 = 2/3; unscorable = 1 greedy + 1 sampled
    assert (res.sampled_avg, res.sampled_pass, res.k, res.unscorable) == (1 / 3, 2 / 3, 2, 2)


def test_a_problem_without_its_answer_is_refused():
    with pytest.raises(ValueError, match="expected 1 answer"):
        score_answers("a", PROBLEMS, [answer(0, "2", True, 2), answer(0, "2", True, 2), answer(2, "6", True, 2)],
                      table_scorer)


def test_reader_skips_a_torn_line_and_an_old_run_has_none(tmp_path):
    assert read_problem_evals(tmp_path) == []
    whole = {"step": 0, "agent": "a", "task": "t", "ids": ["t/0"], "reward": [1.0], "unscorable": [],
             "finished": [True], "tokens": [2], "texts": ["2"]}
    (tmp_path / "eval_problems.jsonl").write_text(json.dumps(whole) + "\n" + json.dumps(whole)[:30])
    assert read_problem_evals(tmp_path) == [whole]


def evaluate_once(tmp_path, *overrides):
    cfg = load_config("tiny-test", overrides=["trainer.eval_size=20", *overrides])
    run = tmp_path / "run"
    run.mkdir()
    trainer = Trainer(cfg, run)
    trainer.generate_calls = []  # the generation requests the evaluation sent to every agent: their params
    generate = trainer.backend.generate_answers
    trainer.backend.generate_answers = lambda prompts, params: (  # type: ignore[method-assign]
        trainer.generate_calls.append(params) or generate(prompts, params))
    try:
        metrics = trainer.evaluate()
        # the engine's greedy answers to the same prompts, in one batch as the worker sends them
        agent = trainer.agents[0]
        direct = get_engine("hf").generate(agent, [agent.render_prompt(p.prompt) for p in trainer.eval_problems],
                                           SamplingParams(n=1, max_new_tokens=cfg.rollout.max_new_tokens, greedy=True))
        rescored = trainer.score(agent.decode_answers([list(s.token_ids) for s in direct]), trainer.eval_problems)
    finally:
        trainer.close()
    return trainer, direct, rescored.rewards, metrics


@pytest.mark.model
def test_trainer_writes_a_record_per_agent_and_suite_that_matches_eval_jsonl(tmp_path):
    trainer, direct, rewards, metrics = evaluate_once(tmp_path, "trainer.eval_k=3", "trainer.eval_texts=5", RAISES_ON_ONES,
                                                      f"trainer.eval_benchmarks.gsm8k={GSM8K}",
                                                      "rollout.temperature=0.8", "rollout.top_p=0.95")
    # greedy: the task's split, then the benchmark; sampled (the task's split only) at the training settings
    greedy, sampled = (SamplingParams(n=1, max_new_tokens=4, greedy=True),
                       SamplingParams(n=3, temperature=0.8, top_p=0.95, max_new_tokens=4))
    assert trainer.generate_calls == [greedy, greedy, sampled]
    totals, records = read_jsonl(trainer.run_dir / "eval.jsonl"), read_problem_evals(trainer.run_dir)
    assert [(r["step"], r["agent"], r.get("task"), r.get("benchmark")) for r in records] == [
        (0, "qwen-char", "add2", None), (0, "qwen-char", None, "gsm8k"),
        (0, "llama-bpe", "add2", None), (0, "llama-bpe", None, "gsm8k")]
    bench_ids = [p.id for p in trainer.benchmarks["gsm8k"][0]]
    for total, rec in zip(totals, records, strict=True):
        n = total["n"]
        assert rec["ids"] == ([p.id for p in trainer.eval_problems] if "task" in rec else bench_ids)
        assert len(rec["reward"]) == len(rec["finished"]) == len(rec["tokens"]) == n and len(rec["texts"]) == min(5, n)
        assert sum(rec["reward"]) / n == total["greedy_acc"]
        # a greedy answer stopped by the budget has max_new_tokens tokens; one that finished, at most that
        assert all(t == 4 for t, f in zip(rec["tokens"], rec["finished"]) if not f)
        assert all(1 <= t <= 4 for t in rec["tokens"])
        if "task" in rec:
            assert [len(s) for s in rec["sampled"]] == [3] * n == [len(s) for s in rec["sampled_finished"]]
            assert sum(sum(s) for s in rec["sampled"]) / (3 * n) == pytest.approx(total["sampled_avg"], abs=1e-12)
            assert 0 < len(rec["unscorable"]) < total["unscorable"]  # eval.jsonl counts sampled ones too
        else:  # sampled answers: the task's split only
            assert "sampled" not in rec and len(rec["unscorable"]) == total["unscorable"]
        assert all(rec["reward"][i] == 0.0 for i in rec["unscorable"])
    # the logged metrics, under the names every reader (report, compare, plots) looks up
    by = {(r["agent"], r.get("benchmark")): r for r in totals}
    assert metrics == {
        **{f"eval/{a}/{m}": by[a, None][v] for a in ("qwen-char", "llama-bpe")
           for m, v in (("greedy_acc", "greedy_acc"), ("sampled_avg@3", "sampled_avg"), ("sampled_pass@3", "sampled_pass"))},
        **{f"eval/{a}/gsm8k/greedy_acc": by[a, "gsm8k"]["greedy_acc"] for a in ("qwen-char", "llama-bpe")}}
    # the first agent's record is the engine's greedy answers, scored: EOS flag, token count, reward, text
    first = records[0]
    assert first["finished"] == [s.finished for s in direct]
    assert first["tokens"] == [len(s.token_ids) for s in direct]
    assert first["reward"] == [float(r or 0.0) for r in rewards]
    assert first["unscorable"] == [i for i, r in enumerate(rewards) if r is None]
    # qwen-char reads one character per token: "100" + EOS is 4 tokens; the first five problems by hand
    assert first["texts"] == ["100", "74", "123", "122", "67"]
    assert first["tokens"][:5] == [4, 3, 4, 4, 3] and first["finished"][:5] == [True] * 5
    assert first["unscorable"][:3] == [0, 2, 3]  # the answers starting with 1
    assert first["reward"][:5] == [0.0, 0.0, 0.0, 0.0, 1.0]  # 33+31=64 is not 74; 06+61=67


@pytest.mark.model
@pytest.mark.parametrize("k", [0, 1])
def test_an_answer_cut_by_the_budget_is_unfinished(tmp_path, k):
    # three tokens: a two-digit answer ends with EOS, a three-digit one is cut before its EOS (yet may be right)
    trainer, _, _, metrics = evaluate_once(tmp_path, "rollout.max_new_tokens=3", "trainer.eval_texts=5",
                                           f"trainer.eval_k={k}", "trainer.eval_budget=5")
    # one greedy answer per problem and agent, k sampled ones with trainer.eval_k (none at 0, not even a
    # request); trainer.eval_budget's longer answers only when asked for (at the start and the end)
    greedy, sampled = SamplingParams(n=1, max_new_tokens=3, greedy=True), SamplingParams(n=1, max_new_tokens=3)
    assert trainer.generate_calls == [greedy, sampled][:k + 1]
    assert sorted(metrics) == sorted(f"eval/{a}/{m}" for a in ("qwen-char", "llama-bpe")
                                     for m in ["greedy_acc", "sampled_avg@1", "sampled_pass@1"][:2 * k + 1])
    first = read_problem_evals(trainer.run_dir)[0]
    assert first["texts"] == ["100", "74", "123", "122", "67"]
    assert first["finished"][:5] == [False, True, False, False, True]
    assert first["tokens"][:5] == [3, 3, 3, 3, 3]
    assert first["reward"][:5] == [0.0, 0.0, 1.0, 1.0, 1.0]
    assert ("sampled" in first) == (k > 0)


def test_eval_texts_is_resume_neutral():
    old = load_config("tiny-test").model_dump(mode="json")
    del old["trainer"]["eval_texts"]  # a run made before the setting existed
    assert resume_conflict(old, load_config("tiny-test", overrides=["trainer.eval_texts=0"]).model_dump(mode="json")) \
        is None


def train(tmp_path, name, *overrides, resume_from=None):
    cfg = load_config("tiny-test", overrides=["trainer.eval_size=10", "trainer.eval_every=1", *overrides])
    run = tmp_path / name
    run.mkdir(exist_ok=True)
    Trainer(cfg, run, resume_from=resume_from).train()
    return run


@pytest.mark.model
def test_a_resumed_run_has_the_uninterrupted_runs_records(tmp_path):
    straight = train(tmp_path, "straight", "trainer.steps=4")
    # the interrupted run went on to step 3 (and a torn line) past its step-2 checkpoint
    resumed = train(tmp_path, "resumed", "trainer.steps=3", "trainer.checkpoint_every=2")
    with open(resumed / "eval_problems.jsonl", "a") as f:
        f.write('{"step": 4, "agent": "qwen-char", "ids": ["add2/')
    assert [r["step"] for r in read_problem_evals(resumed)] == [0, 0, 1, 1, 2, 2, 3, 3]
    train(tmp_path, "resumed", "trainer.steps=4", resume_from=resumed / "checkpoints" / "step-000002")
    expected = read_problem_evals(straight)
    assert [(r["step"], r["agent"]) for r in expected] == [(s, a) for s in range(5) for a in ("qwen-char", "llama-bpe")]
    assert (resumed / "eval_problems.jsonl").read_text() == (straight / "eval_problems.jsonl").read_text()
    assert foreign_entries(resumed) == []  # a run directory: --overwrite may replace it


@pytest.mark.model
def test_a_longer_budget_is_evaluated_before_and_after_training_only(tmp_path):
    # answers cut at 3 tokens during training; trainer.eval_budget=5 evaluates the same problems again with room
    # for a three-digit answer and its EOS, at step 0 and at the end, never in between
    run = train(tmp_path, "run", "trainer.steps=2", "rollout.max_new_tokens=3", "trainer.eval_budget=5",
                "trainer.eval_texts=5")
    records = read_problem_evals(run)
    assert [(r["step"], r["agent"], r.get("budget")) for r in records] == [
        (0, "qwen-char", None), (0, "qwen-char", 5), (0, "llama-bpe", None), (0, "llama-bpe", 5),
        (1, "qwen-char", None), (1, "llama-bpe", None),
        (2, "qwen-char", None), (2, "qwen-char", 5), (2, "llama-bpe", None), (2, "llama-bpe", 5)]
    short, long = records[0], records[1]
    assert long["task"] == short["task"] == "add2" and long["ids"] == short["ids"]
    # the same greedy answers, no longer cut: "100" + EOS fits in 5 tokens
    assert short["texts"][:5] == long["texts"][:5] == ["100", "74", "123", "122", "67"]
    assert short["finished"][:5] == [False, True, False, False, True] and long["finished"][:5] == [True] * 5
    assert long["tokens"][:5] == [4, 3, 4, 4, 3]
    totals = read_jsonl(run / "eval.jsonl")
    assert [t.get("budget") for t in totals if t["step"] == 0] == [None, 5, None, 5]
    # the training-budget readers never see the longer budget's records
    assert {k: v for k, v in read_evals(run).items() if k[0] == 0} == {
        (0, r["agent"]): sum(r["reward"]) / len(r["reward"]) for r in records[:4] if "budget" not in r}
    last = read_jsonl(run / "metrics.jsonl")[-1]
    assert last["eval/qwen-char/greedy_acc@5tok"] == sum(records[7]["reward"]) / len(records[7]["reward"])
    assert resume_conflict(load_config("tiny-test").model_dump(mode="json"),
                           load_config("tiny-test", overrides=["trainer.eval_budget=64"]).model_dump(mode="json")) \
        is None


@pytest.mark.model
def test_a_cached_start_evaluation_equals_a_computed_one_and_changes_nothing_else(tmp_path, monkeypatch, caplog):
    cache = tmp_path / "cache"
    overrides = ("trainer.steps=2", "trainer.eval_budget=6", "trainer.eval_texts=3")
    evaluated_at: list[int] = []  # the steps at which the agents were evaluated (not copied)
    evaluation = Trainer.evaluation
    monkeypatch.setattr(Trainer, "evaluation", lambda self, **kw: evaluated_at.append(self.step_idx)
                        or evaluation(self, **kw))
    plain = train(tmp_path, "plain", *overrides)
    first = train(tmp_path, "first", *overrides, f"trainer.start_eval_cache={cache}")  # a miss: computes, stores
    assert [json.loads(p.read_text())["source"] for p in cache.glob("*.json")] == [str(first)]
    assert evaluated_at == [0, 1, 2] * 2
    caplog.set_level("INFO", logger="hacrl.trainer.trainer")
    second = train(tmp_path, "second", *overrides, f"trainer.start_eval_cache={cache}", "run.seed=1")
    assert evaluated_at[6:] == [1, 2]  # a hit: step 0 copied, said so, not evaluated
    stored = next(cache.glob("*.json"))
    assert f"step-0 evaluation copied from {stored}" in [r.getMessage() for r in caplog.records]
    other = train(tmp_path, "other", *overrides, f"trainer.start_eval_cache={cache}", "trainer.eval_size=9")
    assert len(list(cache.glob("*.json"))) == 2  # another evaluation is another key
    for name in ("eval.jsonl", "eval_problems.jsonl"):
        assert (first / name).read_text() == (plain / name).read_text()
        step0 = [line for line in (plain / name).read_text().splitlines() if json.loads(line)["step"] == 0]
        assert [line for line in (second / name).read_text().splitlines() if json.loads(line)["step"] == 0] == step0
    # the copy draws no random numbers: the run's metrics are those of a run that evaluated itself
    strip = [{k: v for k, v in m.items() if not k.startswith("timing/")} for m in read_jsonl(plain / "metrics.jsonl")]
    assert [{k: v for k, v in m.items() if not k.startswith("timing/")}
            for m in read_jsonl(first / "metrics.jsonl")] == strip
    # the cached copy is what the second run logged at step 0
    assert read_jsonl(second / "metrics.jsonl")[0] == read_jsonl(plain / "metrics.jsonl")[0]
    assert len(read_problem_evals(other)[0]["ids"]) == 9

"""`hacrl export RUN`: each agent of a run's checkpoint as a plain Hugging Face folder that ``from_pretrained``
loads, with the checkpoint's logits, a model card, and no optimizer, RNG or other hacrl-private file; and
`hacrl eval --reward SPEC` scoring an exported model with a reward of the user's. Tiny models, 2 steps, CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hacrl.cli import main
from hacrl.run.rundir import is_run_directory

pytestmark = [pytest.mark.model, pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")]

QUICK = ["--set", "trainer.eval_size=10", "--set", "trainer.log_samples=0", "-q"]
PRIVATE = ("optimizer.pt", "rng", "trainer_state.pt", "manifest.json", "reference", "sharded", "adapter_", "merged")


def train(out: Path, *extra: str) -> Path:
    assert main(["train", "--preset", "tiny-test", *QUICK, "--set", "trainer.checkpoint_every=1",
                 "--set", "trainer.keep_last=2", *extra, "--output", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished 2-step hacpo run of the two tiny agents, checkpoints at steps 1 and 2."""
    return train(tmp_path_factory.mktemp("export") / "run")


def logits(model, tokenizer, text: str = "07+85=") -> torch.Tensor:
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return model(input_ids=ids).logits


def exported(capsys, argv: list[str]) -> list[Path]:
    assert main(["export", *argv]) == 0, capsys.readouterr().err
    return [Path(line) for line in capsys.readouterr().out.splitlines()]


def test_export_loads_with_from_pretrained_gives_the_checkpoints_logits_and_holds_nothing_private(run, capsys,
                                                                                                  tmp_path):
    from hacrl.agents.agent import load_agent

    folders = exported(capsys, [str(run), "--output", str(tmp_path / "ship")])
    assert [p.name for p in folders] == ["qwen-char", "llama-bpe"]
    for folder in folders:
        names = sorted(p.name for p in folder.iterdir())
        assert {"config.json", "generation_config.json", "model.safetensors", "README.md"} <= set(names), names
        assert any(n.startswith("tokenizer") for n in names), names
        assert not [n for n in names if n.startswith(PRIVATE) or n.endswith(".pt")], names
        model = AutoModelForCausalLM.from_pretrained(folder).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        trained = load_agent(folder.name, 0, run / "checkpoints" / "step-000002" / "agents" / folder.name)
        assert trained.tokenizer("07+85=")["input_ids"] == tokenizer("07+85=")["input_ids"]
        assert torch.equal(logits(model, tokenizer), logits(trained.model.eval(), trained.tokenizer))


def test_the_model_card_names_the_run_algorithm_partner_and_held_out_accuracy(run, capsys, tmp_path):
    qwen = exported(capsys, [str(run), "--agent", "qwen-char", "--output", str(tmp_path)])
    assert [p.name for p in qwen] == ["qwen-char"] and not (tmp_path / "llama-bpe").exists()
    card = (qwen[0] / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers\n")  # the Hub's metadata block
    evals = [json.loads(x) for x in (run / "eval.jsonl").read_text().splitlines()]
    end = next(r for r in evals if r["agent"] == "qwen-char" and r["step"] == 2)
    assert "**hacpo**" in card and "`llama-bpe` (builtin:llama-bpe)" in card and f"run `{run.name}`" in card
    assert f"{end['greedy_acc']:.3f} at step 2" in card and "step 2 of 2" in card


def test_an_earlier_step_and_the_default_folder_inside_the_run(run, capsys):
    folders = exported(capsys, [str(run), "--step", "1"])
    assert folders == [run / "export" / "step-000001" / a for a in ("qwen-char", "llama-bpe")]
    assert "at step 1" in (folders[0] / "README.md").read_text()
    assert is_run_directory(run)  # the export folder is the run's: --overwrite and --resume still take it


@pytest.mark.parametrize("argv, needle", [
    (["--step", "7"], "--step 7: "),
    (["--agent", "nobody"], "--agent nobody: "),
])
def test_bad_input_is_one_line(run, capsys, tmp_path, argv, needle):
    assert main(["export", str(run), "--output", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hacrl: error: {needle}"), err


def test_an_existing_folder_is_never_overwritten(run, capsys, tmp_path):
    (tmp_path / "llama-bpe").mkdir()
    assert main(["export", str(run), "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "llama-bpe exists; delete it or give another --output" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llama-bpe"]  # nothing half-exported


def test_a_lora_agent_is_exported_merged(tmp_path, capsys):
    pytest.importorskip("peft")
    from hacrl.agents.agent import load_agent
    from hacrl.backends.resolve import resolve_model_path

    lora = train(tmp_path / "lora", "--set", "agents.qwen-char.lora={r: 4, alpha: 8.0}")
    capsys.readouterr()  # training's own lines
    folder = exported(capsys, [str(lora), "--agent", "qwen-char"])[0]
    assert not (folder / "adapter_config.json").exists()
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert "merge_and_unload" in (folder / "README.md").read_text()
    adapter = lora / "checkpoints" / "step-000002" / "agents" / "qwen-char"
    trained = load_agent("qwen-char", 0, resolve_model_path("builtin:qwen2-char"), adapter_path=adapter)
    assert torch.allclose(logits(model, trained.tokenizer), logits(trained.model.eval(), trained.tokenizer),
                          atol=1e-5)
    base = AutoModelForCausalLM.from_pretrained(resolve_model_path("builtin:qwen2-char")).eval()
    assert not torch.allclose(logits(model, trained.tokenizer), logits(base, trained.tokenizer))  # trained, merged


def test_eval_scores_an_exported_model_with_a_reward_spec(run, capsys, tmp_path):
    folder = exported(capsys, [str(run), "--agent", "llama-bpe", "--output", str(tmp_path / "ship")])[0]
    rewards = tmp_path / "my_rewards.py"
    rewards.write_text("def half(completion, sample):\n    return 0.5\n")
    assert main(["eval", "--model", str(folder), "--reward", f"{rewards}:half", "--n", "5", "--max-new-tokens", "4",
                 "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [(r["agent"], r["greedy_acc"]) for r in records] == [("llama-bpe", 0.5)]  # scored by the given reward


@pytest.mark.parametrize("argv, needle", [
    (["--reward", "no_such_reward"], "--reward: unknown reward 'no_such_reward'"),
    (["--reward", "exact", "--reward-weights", "1,2"], "--reward: reward_weights has 2 weights for 1 rewards"),
    (["--reward-weights", "1"], "--reward-weights and --reward-contract go with --reward"),
])
def test_eval_reward_errors_are_one_line(run, capsys, argv, needle):
    assert main(["eval", "--run", str(run), "--n", "5", *argv]) == 2
    err = [x for x in capsys.readouterr().err.strip().splitlines() if x.startswith("hacrl")]
    assert len(err) == 1 and needle in err[0], err

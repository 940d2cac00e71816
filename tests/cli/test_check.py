"""``hacrl train --check``: a broken GPU config's every problem in one run, before anything loads."""

from __future__ import annotations

import importlib.util
import textwrap

from hacrl.cli import main

BROKEN = textwrap.dedent("""\
    task: {kind: dataset, train_path: data/gsm8k/train.jsonl, reward: mypkg.rewards:acc}
    agents:
      - {id: qwen3-1.7b, model: /models/qwen3-1.7b, device: "cuda:0", lr: 1.0e-6, data_parallel: 2, num_gpus: 1}
      - {id: llama, model: /models/llama-3b, device: cuda, lr: 1.0e-6}
    rollout: {engine: vllm}
    backend: {name: ray, num_gpus_per_agent: 1, num_cpus_per_agent: 64}
    """)


def test_a_broken_gpu_config_lists_every_problem_in_one_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpu.yaml").write_text(BROKEN)
    assert main(["train", "--config", "gpu.yaml", "--check"]) == 2
    err = capsys.readouterr().err
    lines = [line.strip() for line in err.splitlines()[1:]]
    kinds = [line.split("]", 1)[0] + "]" for line in lines]
    # no CUDA on this CPU machine (or fewer devices than asked), two missing models, the GPUs and CPUs Ray would
    # wait for, a reward that does not import, a data file that is not there: each named, none hiding another
    assert kinds.count("[devices]") == 2 and kinds.count("[models]") == 2 and kinds.count("[ray]") == 2
    assert "[reward]" in kinds and "[data and reward]" in kinds
    if importlib.util.find_spec("vllm") is None:
        assert "[extras] rollout.engine=vllm needs vllm: pip install 'hacrl[vllm]'" in lines
    assert "asks for 3 GPU(s)" in err or "ask for 3 GPU(s)" in err
    assert "Traceback" not in err and not (tmp_path / "runs").exists()  # nothing loaded, nothing written
    assert err.splitlines()[0].startswith(f"hacrl train --check: {len(lines)} problems")


def test_every_config_error_at_once_and_a_clean_config_passes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--preset", "tiny-test", "--set", "trainer.stepz=3", "--set", "agents.llama-bpe.lrr=2",
                 "--check"]) == 2
    err = capsys.readouterr().err
    assert "'trainer.stepz'; did you mean 'trainer.steps'?" in err and "'agents.llama-bpe.lrr'" in err
    assert main(["train", "--preset", "tiny-test", "--check"]) == 0
    assert capsys.readouterr().out.startswith("hacrl train --check: no problem found")
    assert not (tmp_path / "runs").exists()

"""Hugging Face Hub names for models and data sets, from a local Hub cache built here (nothing is
downloaded): ``models--org--name/{blobs,refs/main,snapshots/<commit>}`` made from the shipped tiny agents,
and ``datasets--org--name`` with parquet and jsonl files in the Hub's naming conventions."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hacrl.agents.tiny import tiny_agent_path
from hacrl.backends.resolve import resolve_model_path
from hacrl.data.hub import hub_dataset_rows, is_hub_name, resolve_hub_model
from hacrl.errors import InputError

COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO_ROOT = Path(__file__).resolve().parents[2]


def _add_repo(cache: Path, kind: str, repo: str, files: dict[str, bytes], commit: str = COMMIT,
              ref: str = "main") -> Path:
    """One repo in the Hub cache layout: content-addressed blobs, a snapshot of symlinks, refs/<ref>."""
    root = cache / f"{kind}s--{repo.replace('/', '--')}"
    snap = root / "snapshots" / commit
    for rel, data in files.items():
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snap / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / ref).write_text(commit)
    return snap


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)  # a relative "org/name" directory must not exist by accident
    for name, org in (("llama-bpe", "tinyorg/llama-bpe"), ("qwen2-char", "tinyorg/qwen2-char")):
        src = tiny_agent_path(name)
        _add_repo(cache, "model", org, {f.name: f.read_bytes() for f in src.iterdir() if f.is_file()})
    return cache


def test_hub_names_are_recognised_by_spelling() -> None:
    assert is_hub_name("Qwen/Qwen3-0.6B") and is_hub_name("meta-llama/Llama-3.2-1B@main")
    for local in ("models/a/b", "./org/name", "/abs/path", "~/x/y", "name", "builtin:llama-bpe"):
        assert not is_hub_name(local), local


@pytest.mark.model
def test_model_from_the_hub_cache_loads_offline(hub_cache: Path) -> None:
    from hacrl.agents.agent import load_agent

    path = resolve_model_path("tinyorg/llama-bpe")
    assert path == hub_cache / "models--tinyorg--llama-bpe" / "snapshots" / COMMIT
    assert resolve_model_path(f"tinyorg/llama-bpe@{COMMIT}") == path
    other = "f" * 40  # a second revision, named by a branch (refs/v1)
    src = tiny_agent_path("qwen2-char")
    files = {f.name: f.read_bytes() for f in src.iterdir() if f.is_file()}
    _add_repo(hub_cache, "model", "tinyorg/llama-bpe", files, commit=other, ref="v1")
    assert resolve_model_path("tinyorg/llama-bpe@v1") == path.parent / other
    assert resolve_model_path("tinyorg/llama-bpe") == path  # refs/main still names the first
    agent = load_agent("a", 0, path)
    assert type(agent.model).__name__ == "LlamaForCausalLM"
    assert agent.tokenizer.decode(agent.tokenizer("07+85=")["input_ids"]).replace(" ", "") == "07+85="


def test_missing_model_is_one_line_naming_hf_download(hub_cache: Path) -> None:
    with pytest.raises(InputError) as err:
        resolve_model_path("Qwen/Qwen3-0.6B", "agents.qwen.model")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("agents.qwen.model: Qwen/Qwen3-0.6B")
    assert "`hf download Qwen/Qwen3-0.6B`" in msg
    with pytest.raises(InputError, match="hf download tinyorg/llama-bpe --revision v2"):
        resolve_hub_model("tinyorg/llama-bpe@v2")


def test_a_local_directory_wins_over_the_hub_name(hub_cache: Path, tmp_path: Path) -> None:
    local = tmp_path / "tinyorg" / "llama-bpe"
    local.mkdir(parents=True)
    assert resolve_model_path("tinyorg/llama-bpe") == Path("tinyorg/llama-bpe")
    assert resolve_model_path("tinyorg/llama-bpe").resolve() == local.resolve()


def _parquet_bytes(rows: list[dict]) -> bytes:
    import io

    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    return buf.getvalue()


def _dataset_repo(cache: Path) -> None:
    train = [{"question": f"{a:02d}+{b:02d}=", "answer": str(a + b)}
             for a, b in [(1, 2), (3, 4), (5, 6), (7, 8)]]
    test = [{"question": "10+11=", "answer": "21"}, {"question": "12+13=", "answer": "25"}]
    _add_repo(cache, "dataset", "tinyorg/add2", {
        "README.md": b"---\nconfigs: []\n---\n",
        "data/train-00000-of-00001.parquet": _parquet_bytes(train),
        "data/test-00000-of-00001.parquet": _parquet_bytes(test),
    })
    math500 = [{"problem": "What is $1+1$?", "answer": "2", "unique_id": "test/a/1.json", "level": 1}]
    _add_repo(cache, "dataset", "tinyorg/MATH-500",
              {"test.jsonl": "".join(json.dumps(r) + "\n" for r in math500).encode()})


def test_dataset_from_the_hub_cache(hub_cache: Path) -> None:
    from hacrl.data.benchmarks import load_benchmark
    from hacrl.data.datasets import load_problems, make_dataset_task

    _dataset_repo(hub_cache)
    rows = list(hub_dataset_rows("tinyorg/add2:train"))
    assert [r["answer"] for r in rows] == ["3", "7", "11", "15"]
    assert [p.answer for p in load_problems("tinyorg/add2:test").problems] == ["21", "25"]
    task = make_dataset_task(train_path="tinyorg/add2:train", test_path="tinyorg/add2:test", reward="exact")
    assert task.num_train == 4 and len(task.test_problems()) == 2
    assert load_benchmark("math500", "tinyorg/MATH-500")[0].answer == "2"  # one split: no name needed
    with pytest.raises(InputError, match=r"splits test, train; pick one: fix: write tinyorg/add2:<split>"):
        load_problems("tinyorg/add2")
    with pytest.raises(InputError, match="hf download tinyorg/gsm8k --repo-type dataset"):
        load_problems("tinyorg/gsm8k:test")


@pytest.mark.model
def test_train_with_hub_names_offline(hub_cache: Path, tmp_path: Path) -> None:
    """`hacrl train` with both agents and the data set given by Hub name, in a subprocess whose
    environment points only at the built cache, with HF_HUB_OFFLINE=1."""
    _dataset_repo(hub_cache)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT / "src")}
    sets = ["agents.qwen-char.model=tinyorg/qwen2-char", "agents.llama-bpe.model=tinyorg/llama-bpe",
            "task.kind=dataset", "task.train_path=tinyorg/add2:train", "task.test_path=tinyorg/add2:test",
            "task.reward=exact", "task.prompt_template='{question}'", "trainer.steps=1",
            "trainer.batch_size=2",
            "trainer.eval_size=2", "run.loggers=[jsonl]"]
    out = subprocess.run([sys.executable, "-m", "hacrl.cli", "train", "--preset", "tiny-test", "--output",
                          str(tmp_path / "run"), "-q", *[a for s in sets for a in ("--set", s)]],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("\n") >= 2


def test_dataset_from_the_datasets_cache(hub_cache: Path, tmp_path: Path) -> None:
    """A data set `datasets.load_dataset("tinyorg/sums")` prepared earlier (its cache layout
    ``tinyorg___sums/default/0.0.0/<commit>/sums-<split>.arrow``, made here from a parquet file) and
    no Hub snapshot: read through datasets in offline mode."""
    datasets = pytest.importorskip("datasets")
    src = tmp_path / "train.parquet"
    src.write_bytes(_parquet_bytes([{"question": "1+1=", "answer": "2"},
                                    {"question": "2+2=", "answer": "4"}]))
    built = datasets.load_dataset("parquet", data_files={"train": str(src)},
                                  cache_dir=str(tmp_path / "build"))
    prepared = Path(built["train"].cache_files[0]["filename"]).parent
    dest = tmp_path / "hf" / "datasets" / "tinyorg___sums" / "default" / "0.0.0" / COMMIT
    dest.mkdir(parents=True)
    (dest / "dataset_info.json").write_bytes((prepared / "dataset_info.json").read_bytes())
    (dest / "sums-train.arrow").write_bytes((prepared / "parquet-train.arrow").read_bytes())
    rows = list(hub_dataset_rows("tinyorg/sums:train"))
    assert [r["answer"] for r in rows] == ["2", "4"]

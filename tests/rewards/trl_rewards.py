"""Reward functions written as TRL's and verl's documentation write them, and broken ones, for the contract
tests (loaded as ``file.py:function`` specs, so the scorer's workers import them too)."""

import re


# ---- TRL, standard format (completions are strings) -----------------------------------------------------
def accuracy_reward(completions, solution, **kwargs):
    return [1.0 if c.strip() == s else 0.0 for c, s in zip(completions, solution)]


def reward_func(completions, ground_truth, **kwargs):
    """TRL's docs: the content of the last \\boxed{} against a ground_truth column."""
    matches = [re.search(r"\\boxed\{(.*?)\}", completion) for completion in completions]
    contents = [match.group(1) if match else "" for match in matches]
    return [1.0 if c == gt else 0.0 for c, gt in zip(contents, ground_truth)]


def length_reward(completions, **kwargs):
    return [min(len(c), 10) / 10 for c in completions]


def hard_only(completions, difficulty, **kwargs):
    """An extra column (difficulty) reaching the reward; None marks rows it does not score, as TRL's do."""
    return [float(len(c) > 0) if d == "hard" else None for c, d in zip(completions, difficulty)]


def no_kwargs(prompts, completions, solution):
    """Without **kwargs: gets only the keywords it names."""
    return [float(s in c) for c, s in zip(completions, solution)]


# ---- TRL, conversational format (completions are lists of messages) ----------------------------------
def format_reward_func(completions, **kwargs):
    pattern = r"^<think>.*?</think><answer>.*?</answer>$"
    completion_contents = [completion[0]["content"] for completion in completions]
    matches = [re.match(pattern, content) for content in completion_contents]
    return [1.0 if match else 0.0 for match in matches]


def sees_chat_prompts(prompts, completions, **kwargs):
    return [float(p[-1]["role"] == "user" and c[0]["role"] == "assistant") for p, c in zip(prompts, completions)]


# ---- verl ---------------------------------------------------------------------------------------------
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    bonus = 0.5 if (extra_info or {}).get("difficulty") == "hard" else 0.0
    return (1.0 if solution_str.strip() == ground_truth else 0.0) + bonus


def compute_score_dict(data_source, solution_str, ground_truth, extra_info=None):
    return {"score": float(solution_str.strip() == ground_truth), "acc": True}


# ---- broken ----------------------------------------------------------------------------------------------
def returns_float(completions, **kwargs):
    return 1.0


def wrong_length(completions, **kwargs):
    return [1.0]


def needs_difficulty(completions, difficulty):
    return [1.0 for _ in completions]


def per_answer_returns_list(completion, sample):
    return [1.0]


def three_args(completion, sample, extra):
    return 1.0


def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos, **kwargs):
    """verl's batch reward manager's form."""
    return [{"score": float(s.strip() == g)} for s, g in zip(solution_strs, ground_truths)]


async def async_accuracy(completions, solution, **kwargs):
    return [1.0 if c.strip() == s else 0.0 for c, s in zip(completions, solution)]


def reads_ground_truth(completions, **kwargs):
    """A column read from **kwargs, as TRL's docs do: missing from the rows, a KeyError in the reward."""
    return [float(c == g) for c, g in zip(completions, kwargs["ground_truth"])]

"""Build the task a config's ``task`` section describes (builtin, local dataset files, or reasoning-gym) and
the scorer of its answers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hacrl.errors import InputError

if TYPE_CHECKING:
    from hacrl.config import Config, TaskConfig
    from hacrl.data.tasks import Task
    from hacrl.rewards import RewardScorer


def build_task(task_cfg: Any, *, seed: int, max_new_tokens: int) -> Any:
    """A Task (see ``hacrl.data.tasks.Task``) for ``task_cfg`` (a ``hacrl.config.TaskConfig``), with
    ``task_cfg.fewshot`` worked examples before every prompt (:mod:`hacrl.data.fewshot`).

    ``seed`` (``run.seed``) seeds the train stream only: held-out problems come from ``task_cfg.test_seed``
    (see :mod:`hacrl.data.splits`)."""
    from hacrl.data.fewshot import with_fewshot

    return with_fewshot(_build(task_cfg, seed=seed, max_new_tokens=max_new_tokens), task_cfg.fewshot)


def with_task_epochs(cfg: Config, task: Any = None) -> Config:
    """``cfg`` with ``trainer.steps`` counted from ``trainer.num_train_epochs`` over its task's training problems
    (:func:`hacrl.config.with_epoch_steps`), as the trainer counts them; ``cfg`` itself without epochs. ``task``:
    the built task (default: built here, reading its data). Raises ConfigError (a task without epochs, steps
    that disagree, a warm-up longer than the counted run)."""
    from hacrl.config import with_epoch_steps

    if cfg.trainer.num_train_epochs is None:
        return cfg
    if task is None:
        task = build_task(cfg.task, seed=cfg.run.seed, max_new_tokens=cfg.rollout.max_new_tokens)
    return with_epoch_steps(cfg, getattr(task, "num_train", None), task.name)


def _build(task_cfg: Any, *, seed: int, max_new_tokens: int) -> Any:
    kind = task_cfg.kind
    if kind == "builtin":
        from hacrl.data.tasks import get_task

        try:
            return get_task(task_cfg.name)
        except KeyError as exc:
            raise InputError(f"task.name: {exc.args[0]}") from None
    if kind == "dataset":
        from hacrl.data.datasets import make_dataset_task

        if not task_cfg.train_path:
            raise InputError("task.train_path is required with task.kind=dataset; give a jsonl/json/parquet file")
        return make_dataset_task(
            train_path=task_cfg.train_path, test_path=task_cfg.test_path, test_benchmark=task_cfg.test_benchmark,
            # task.name's default (add2) names a builtin: a dataset left at it is named after its file
            name=None if task_cfg.name == type(task_cfg).model_fields["name"].default else task_cfg.name,
            question_field=task_cfg.question_field, answer_field=task_cfg.answer_field,
            prompt_template=task_cfg.prompt_template, reward=task_cfg.reward or "math",
            reward_contract=task_cfg.reward_contract,
            max_new_tokens=max_new_tokens, test_fraction=task_cfg.test_fraction, split_seed=task_cfg.test_seed,
            max_prompt_chars=task_cfg.max_prompt_chars)
    from hacrl.data.gym import reasoning_gym_task

    kwargs: dict[str, Any] = {"seed": seed, "size": task_cfg.size, "test_size": task_cfg.test_size,
                              "test_seed": task_cfg.test_seed,
                              # a list of rewards is scored by task_scorer; the task keeps its own verifier
                              "reward": task_cfg.reward if isinstance(task_cfg.reward, str) else None,
                              "max_new_tokens": max_new_tokens,
                              "config": task_cfg.options or None}
    if task_cfg.prompt_template is not None:
        kwargs["prompt_template"] = task_cfg.prompt_template
    return reasoning_gym_task(task_cfg.name, **kwargs)


def task_scorer(task: Task, task_cfg: TaskConfig) -> RewardScorer:
    """The ``RewardScorer`` of ``task``'s answers (score them with ``score_problems``): the reward spec(s)
    (``task.reward``, else the task's ``reward_spec``) under ``task.reward_contract`` with
    ``task.reward_weights``, in worker processes under ``task.reward_timeout_s``, or the task's own trusted
    verifier inline. Training and ``hacrl eval`` both score through it.

    A reward of the user's (not a registered name) is called once here, before any model loads, on the first
    training problem (:meth:`~hacrl.rewards.RewardScorer.check`): a broken contract stops the run with one line."""
    from hacrl.config import ConfigError
    from hacrl.rewards import REWARDS, RewardScorer

    spec = task_cfg.reward or task.reward_spec
    if spec is None:
        return RewardScorer(task.reward, timeout_s=None)
    try:
        scorer = RewardScorer(spec, weights=task_cfg.reward_weights, contract=task_cfg.reward_contract,
                              timeout_s=task_cfg.reward_timeout_s)
    except ValueError as exc:
        raise ConfigError(f"task.reward: {exc}") from None
    specs = spec if isinstance(spec, list) else [spec]
    if task_cfg.reward_contract != "auto" or any(s not in REWARDS for s in specs):
        try:
            scorer.check(next(iter(task.train_problems(0))).as_sample())
        except ValueError as exc:
            scorer.close()
            raise ConfigError(f"task.reward: {exc}") from None
        except BaseException:
            scorer.close()
            raise
    return scorer

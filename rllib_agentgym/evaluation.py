"""Evaluating an LLM agent: Avg@k and Pass@k, overall and per task category.

The paper reports, per env family, the success of k samples per task of the
test split, split by category (TextCraft crafting depth, BabyAI level group,
SciWorld task type, Deep Search dataset, WebArena site):

    Avg@k  = (1/N) sum_i (1/k) sum_j s_ij      mean success over all samples
    Pass@k = (1/N) sum_i max_j s_ij            tasks solved by at least one sample

with s_ij in {0, 1} the success of sample j on task i. `rllib evaluate` plays
them with one `LLMEnvRunner` (no Ray needed) on a checkpoint or a model;
`GRPO.evaluate` (RLlib's `evaluation_interval`) uses the same scoring with
greedy decoding and k = 1 during training.
"""

from __future__ import annotations

import json
import os
import pickle
import re
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

# ---- the two metrics (pure) -------------------------------------------------------


def avg_at_k(successes: Sequence[Sequence[float]]) -> float:
    """Avg@k: mean over tasks of the task's mean success over its samples.

    With k samples for every task this is the mean over all samples. Tasks
    without samples are skipped; no task at all gives NaN.
    """
    per_task = [float(np.mean(s)) for s in successes if len(s)]
    return float(np.mean(per_task)) if per_task else float("nan")


def pass_at_k(successes: Sequence[Sequence[float]]) -> float:
    """Pass@k: fraction of tasks where at least one sample succeeded."""
    per_task = [float(max(s) > 0) for s in successes if len(s)]
    return float(np.mean(per_task)) if per_task else float("nan")


# ---- outcomes and scores ----------------------------------------------------------


@dataclass
class TaskOutcome:
    """All samples played on one task."""

    data_idx: int
    category: str
    successes: list[bool] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)


def outcomes_from_trajectories(trajectories: Iterable[Any]) -> list[TaskOutcome]:
    """Group trajectories (anything with data_idx, category, success, reward, num_turns) by task."""
    by_task: "OrderedDict[int, TaskOutcome]" = OrderedDict()
    for t in trajectories:
        outcome = by_task.setdefault(int(t.data_idx), TaskOutcome(int(t.data_idx), str(t.category)))
        outcome.successes.append(bool(t.success))
        outcome.rewards.append(float(t.reward))
        outcome.turns.append(int(t.num_turns))
    return list(by_task.values())


def _scores(outcomes: Sequence[TaskOutcome]) -> dict[str, float]:
    played = [o for o in outcomes if o.successes]
    rewards = [r for o in played for r in o.rewards]
    turns = [n for o in played for n in o.turns]
    return {
        "avg_at_k": avg_at_k([o.successes for o in played]),
        "pass_at_k": pass_at_k([o.successes for o in played]),
        "reward_mean": float(np.mean(rewards)) if rewards else float("nan"),
        "turns_mean": float(np.mean(turns)) if turns else float("nan"),
        "num_tasks": len(played),
        "num_episodes": sum(len(o.successes) for o in played),
    }


def category_sort_key(name: str) -> list:
    """Natural order: "depth 2" before "depth 10"."""
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", name)]


def ordered_categories(names: Iterable[str], declared: Sequence[str] = ()) -> list[str]:
    """The distinct `names` in the env's declared order (`EnvSpec.category_order()`, e.g. Deep
    Search's datasets as the paper's table lists them), then the undeclared ones in natural order."""
    rank = {name: i for i, name in enumerate(declared)}
    return sorted(set(names), key=lambda name: (rank.get(name, len(rank)), category_sort_key(name)))


def score(outcomes: Sequence[TaskOutcome], category_order: Sequence[str] = ()) -> dict[str, Any]:
    """{"overall": scores, "categories": {category: scores}}, categories in `category_order`
    (the env's declared order) and the rest in natural order."""
    categories = ordered_categories((o.category for o in outcomes), category_order)
    return {
        "overall": _scores(outcomes),
        "categories": {c: _scores([o for o in outcomes if o.category == c]) for c in categories},
    }


def select_tasks(task_ids: Sequence[int], num_tasks: int | None) -> list[int]:
    """The whole split, or `num_tasks` ids spread evenly over it (splits are often sorted by
    category, so an even spread keeps every category; the same subset every time)."""
    ids = list(task_ids)
    if num_tasks is None or num_tasks >= len(ids):
        return ids
    if num_tasks < 1:
        raise ValueError("num_tasks must be >= 1")
    picks = np.linspace(0, len(ids) - 1, num=int(num_tasks)).round().astype(int)
    return [ids[i] for i in picks]


def chunks(items: Sequence[int], size: int) -> list[list[int]]:
    size = max(1, int(size))
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


# ---- the report ---------------------------------------------------------------------


@dataclass
class EvalReport:
    model: str
    env: str
    split: str
    k: int
    temperature: float
    max_turns: int
    scores: dict[str, Any]
    tasks: list[TaskOutcome]
    num_dropped_episodes: int = 0
    wall_s: float = 0.0
    model_dtype: str = "float32"  # the engine's weights: greedy outcomes can differ between dtypes
    # `Trajectory.summary()` of every episode played (the dialogues), for `--episodes`.
    episodes: list[dict[str, Any]] = field(default_factory=list, repr=False)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready (NaN, e.g. a category without finished episodes, becomes null); no episodes."""
        data = asdict(self)
        data.pop("episodes")
        data.update(data.pop("scores"))
        return _nan_to_none(data)

    def markdown(self) -> str:
        """The paper's table shape: one row per metric, a column per category, then Overall."""
        cats = self.scores["categories"]
        overall = self.scores["overall"]
        header = ["Model", "Metric"] + [f"{c} (n={cats[c]['num_tasks']})" for c in cats]
        header.append(f"Overall (n={overall['num_tasks']})")
        rows = []
        for key, label in (("avg_at_k", f"Avg@{self.k}"), ("pass_at_k", f"Pass@{self.k}")):
            cells = [_pct(cats[c][key]) for c in cats] + [_pct(overall[key])]
            rows.append([self.model, label] + cells)
        lines = [
            f"**{self.env}** ({self.split} split, k={self.k}, temperature={self.temperature:g}, "
            f"max turns={self.max_turns}; success rate in %)",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "|".join([" --- "] * 2 + [" ---: "] * (len(header) - 2)) + "|",
        ]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines) + "\n"


def _nan_to_none(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _nan_to_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_to_none(v) for v in value]
    return value


def _pct(x: float) -> str:
    return "-" if x != x else f"{100.0 * x:.2f}"


# ---- loading a policy: checkpoint or model ------------------------------------------


@dataclass
class PolicySource:
    """What to evaluate: a model path / hub id, plus checkpoint weights and settings if any."""

    name: str
    model_path: str
    model_dtype: str = "float32"
    lora: dict | None = None
    weights: dict | None = None  # HF-named arrays from a checkpoint's RLModule
    algo_config: dict = field(default_factory=dict)  # the training config of a checkpoint


def is_algorithm_checkpoint(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "rllib_checkpoint.json"))


def load_policy(source: str, module_id: str = "default_policy") -> PolicySource:
    """A checkpoint dir (its RLModule `module_id`'s state, read straight from the checkpoint's
    files without rebuilding the Algorithm), a Tune trial dir (its latest checkpoint), or a
    model path / hub id / "embedded"."""
    if source.startswith(("/", ".", "~")) and not os.path.exists(os.path.expanduser(source)):
        raise FileNotFoundError(f"{source}: no such checkpoint or model dir")
    source = os.path.expanduser(source)
    trial_checkpoints = sorted(Path(source).glob("checkpoint_*")) if os.path.isdir(source) else []
    if trial_checkpoints and not is_algorithm_checkpoint(source):
        source = str(trial_checkpoints[-1])
    if not (os.path.isdir(source) and is_algorithm_checkpoint(source)):
        return PolicySource(name=source, model_path=source)
    from rllib_agentgym.export import POLICY_SUBDIR, policy_module_dir

    module_dir = policy_module_dir(source, module_id)
    if module_dir is None:
        raise FileNotFoundError(f"{source}: no RLModule state at {POLICY_SUBDIR.parent / module_id}/module_state.pkl")
    state_file = module_dir / "module_state.pkl"
    import rllib_agentgym  # noqa: F401  (the pickles name our classes)

    with open(module_dir / "class_and_ctor_args.pkl", "rb") as fh:
        module_ctor = pickle.load(fh)
    model_config = dict(module_ctor["ctor_args_and_kwargs"][1].get("model_config") or {})
    with open(state_file, "rb") as fh:
        state = pickle.load(fh)
    algo_config: dict = {}
    algo_ctor = Path(source) / "class_and_ctor_args.pkl"
    if algo_ctor.is_file():
        with open(algo_ctor, "rb") as fh:
            args = pickle.load(fh)["ctor_args_and_kwargs"][0]
        if args and isinstance(args[0], dict):
            algo_config = args[0]
    from rllib_agentgym.core.rl_module import VALUE_HEAD_PREFIX

    weights = {k: v for k, v in state.items() if not k.startswith(VALUE_HEAD_PREFIX)}
    return PolicySource(
        name=os.path.basename(os.path.normpath(source)),
        model_path=str(model_config.get("model", "embedded")),
        model_dtype=str(model_config.get("dtype", "float32")),
        lora=model_config.get("lora"),
        weights=weights,
        algo_config=algo_config,
    )


# Training settings a checkpoint passes on to its evaluation unless the command line says otherwise.
_INHERITED = ("env_config", "max_model_len", "max_new_tokens", "max_turns", "inference_engine",
              "engine_options", "top_p", "env_step_threads")


_TRAINING_ONLY = ("task_ids", "start_states", "start_state_fraction")  # env_config keys that shape training draws only


def evaluation_env_config(trained: Mapping[str, Any] | None, given: Mapping[str, Any] | None,
                          split: str) -> dict[str, Any]:
    """A checkpoint's training env_config, overridden by the command line's, on `split`.

    A pinned training pool (`task_ids`) and replayed start states (`start_states`) name tasks
    of the training split: they do not follow the policy into its evaluation (as they do not
    follow the in-training evaluation runners). A `task_ids` given on the command line does
    restrict the evaluation."""
    trained = {k: v for k, v in dict(trained or {}).items() if k not in _TRAINING_ONLY}
    return {**trained, **dict(given or {}), "split": split}


def build_runner(policy: PolicySource, *, env: str | None, split: str, temperature: float,
                 max_turns: int | None, engine: str | None, env_config: Mapping[str, Any] | None,
                 seed: int, max_new_tokens: int | None = None, max_model_len: int | None = None,
                 concurrent_episodes: int | None = None):
    """One `LLMEnvRunner` (in this process, no Ray) with the policy's weights; `concurrent_episodes`
    (the episodes of one `sample` call) sizes the engine's KV cache."""
    from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
    from rllib_agentgym.env_runners.llm_env_runner import LLMEnvRunner

    config = GRPOConfig()
    inherited = {k: policy.algo_config[k] for k in _INHERITED if policy.algo_config.get(k) is not None}
    env = env or policy.algo_config.get("env")
    if not env:
        raise ValueError("give --env (e.g. agentgym/textcraft)")
    merged_env_config = evaluation_env_config(inherited.pop("env_config", None), env_config, split)
    overrides = dict(temperature=temperature, max_turns=max_turns, inference_engine=engine,
                     max_new_tokens=max_new_tokens, max_model_len=max_model_len)
    llm = {**inherited, **{k: v for k, v in overrides.items() if v is not None}}
    llm.update(model_path=policy.model_path, model_dtype=policy.model_dtype, lora=policy.lora)
    if concurrent_episodes:
        llm["engine_options"] = {**dict(llm.get("engine_options") or {}), "concurrent_sequences": concurrent_episodes}
    config.environment(env, env_config=merged_env_config).llm(**llm).debugging(seed=seed)
    runner = LLMEnvRunner(config=config, worker_index=0)
    if policy.weights is not None:
        runner.set_weights(policy.weights)
    return runner


def run_on_runner(runner, task_ids: Sequence[int], *, k: int, explore: bool, batch_episodes: int = 32,
                  on_chunk: Callable[[list[int], Any], None] | None = None):
    """Play k samples of every task in chunks of about `batch_episodes` episodes;
    `on_chunk(task_ids, rollout_result)` after each. Returns (trajectories, dropped episodes)."""
    trajectories, dropped = [], 0
    for chunk in chunks(task_ids, max(1, batch_episodes // k)):
        result = runner.sample(task_ids=chunk, group_size=k, explore=explore)
        trajectories += result.trajectories
        dropped += result.num_dropped
        if on_chunk is not None:
            on_chunk(chunk, result)
    return trajectories, dropped


def evaluate(source: str, *, env: str | None = None, split: str = "test", k: int = 1, temperature: float = 0.0,
             max_turns: int | None = None, num_tasks: int | None = None, engine: str | None = None,
             env_config: Mapping[str, Any] | None = None, seed: int = 0, batch_episodes: int = 32,
             max_new_tokens: int | None = None, max_model_len: int | None = None,
             model_dtype: str | None = None, progress: bool = True) -> EvalReport:
    """Avg@k / Pass@k of a checkpoint or model on an env split (see module doc).

    temperature 0 decodes greedily (then all k samples of a task are alike). `model_dtype`
    overrides the policy's (a model dir: float32), e.g. "bfloat16" to score it as a bf16
    training run's evaluation does."""
    import time

    from tqdm.auto import tqdm

    if k < 1:
        raise ValueError("k must be >= 1")
    start = time.perf_counter()
    policy = load_policy(source)
    if model_dtype is not None:
        policy.model_dtype = model_dtype
    runner = build_runner(policy, env=env, split=split, temperature=temperature, max_turns=max_turns,
                          engine=engine, env_config=env_config, seed=seed, max_new_tokens=max_new_tokens,
                          max_model_len=max_model_len, concurrent_episodes=batch_episodes)
    try:
        task_ids = select_tasks(runner.task_ids, num_tasks)
        bar = tqdm(total=len(task_ids), unit="task", desc=f"{runner.spec.name}/{split}", disable=not progress)
        seen: list = []

        def on_chunk(chunk: list[int], result) -> None:
            seen.extend(result.trajectories)
            bar.update(len(chunk))
            s = score(outcomes_from_trajectories(seen))["overall"]
            bar.set_postfix_str(f"Avg@{k}={_pct(s['avg_at_k'])} Pass@{k}={_pct(s['pass_at_k'])}")

        trajectories, dropped = run_on_runner(runner, task_ids, k=k, explore=temperature > 0,
                                              batch_episodes=batch_episodes, on_chunk=on_chunk)
        bar.close()
        outcomes = outcomes_from_trajectories(trajectories)
        from rllib_agentgym.core.precision import engine_dtype

        return EvalReport(
            model=policy.name, env=runner.spec.name, split=split, k=k, temperature=float(temperature),
            max_turns=runner.get_max_turns(), scores=score(outcomes, runner.spec.category_order()), tasks=outcomes,
            num_dropped_episodes=dropped, wall_s=time.perf_counter() - start, model_dtype=engine_dtype(runner.config.model_dtype),
            episodes=[t.summary() for t in trajectories],
        )
    finally:
        runner.stop()


# ---- periodic evaluation during training (RLlib's `evaluation_interval`) --------------


def _evaluation_env_overrides(algo_config) -> Mapping[str, Any]:
    overrides = algo_config.evaluation_config or {}
    if isinstance(overrides, Mapping):
        env_config = overrides.get("env_config")
    else:  # an AlgorithmConfig object
        env_config = getattr(overrides, "env_config", None)
    return env_config or {}


def evaluation_split(algo_config) -> str:
    """The split named by `evaluation_config: {env_config: {split: ...}}`, else "test"."""
    return str(_evaluation_env_overrides(algo_config).get("split") or "test")


def evaluation_task_ids(algo_config) -> list[int]:
    """Task ids of the evaluation split, restricted to env_config `categories` (the
    evaluation config's, else the training config's) when set."""
    from rllib_agentgym.envs.registry import get_spec

    overrides = _evaluation_env_overrides(algo_config)
    categories = overrides.get("categories", (algo_config.env_config or {}).get("categories"))
    env_options = overrides.get("env_options", (algo_config.env_config or {}).get("env_options"))
    return get_spec(algo_config.env).task_ids(evaluation_split(algo_config), categories, env_options=env_options)


def play_at_horizon(runner, task_ids: Sequence[int], horizon: int, *, group_size: int = 1, explore: bool = False,
                    call_index: int | None = None, **sample_kwargs):
    """`group_size` episodes per task at `horizon` (default: one greedy episode); the runner's
    training horizon is kept. `call_index` fixes the draw, as in the runner's `sample`, which
    also gets `sample_kwargs` (the multi-agent runner's `policy_mapping_fn`)."""
    previous = runner.get_max_turns()
    runner.set_max_turns(horizon)
    try:
        return runner.sample(task_ids=list(task_ids), group_size=group_size, explore=explore, call_index=call_index,
                             **sample_kwargs)
    finally:
        runner.set_max_turns(previous)


def play_on_evaluation_runners(algo, task_ids: Sequence[int], play: Callable) -> list:
    """The rollouts of `play(runner, task_ids)` during training, on the evaluation EnvRunners when
    the Algorithm has them (weights synced first), else on the training runners (their engines
    hold the latest weights already): tasks split across the healthy remote runners, or played by
    the local runner when there are none."""
    from functools import partial

    group = algo.eval_env_runner_group
    if group is not None:
        group.sync_weights(from_worker_or_learner_group=algo.learner_group, inference_only=True, timeout_seconds=600.0)
    else:
        group = algo.env_runner_group
    remote = group.healthy_env_runner_ids() if group.num_remote_env_runners() else []
    if not remote:
        return [play(group.local_env_runner, list(task_ids))]
    shares = [(wid, list(task_ids[i :: len(remote)])) for i, wid in enumerate(remote)]
    shares = [(wid, ids) for wid, ids in shares if ids]
    return group.foreach_env_runner(
        [partial(play, task_ids=ids) for _, ids in shares],
        local_env_runner=False,
        remote_worker_ids=[wid for wid, _ in shares],
    )


def evaluate_during_training(algo) -> dict[str, Any]:
    """Greedy Avg@1 (success rate) of the current policy on the evaluation split, overall and
    per category, as `{"env_runners": {...}}` for the Tune result's "evaluation" key.

    Runs on the evaluation EnvRunners when the Algorithm has them (evaluation_num_env_runners
    > 0, weights synced first), else on the training runners (their engines hold the latest
    weights already): tasks are split across the healthy remote runners, or played by the
    local runner when there are none. `evaluation_num_tasks` tasks spread over the split
    (None: all of it); the horizon is the evaluation config's `max_turns`."""
    from functools import partial

    from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS

    cfg = algo.config
    task_ids = select_tasks(evaluation_task_ids(cfg), cfg.evaluation_num_tasks)
    horizon = int(algo.evaluation_config.max_turns)
    rollouts = play_on_evaluation_runners(algo, task_ids, partial(play_at_horizon, horizon=horizon))
    from rllib_agentgym.algorithms.rewards import progress_stats, refusal_rates
    from rllib_agentgym.envs.registry import get_spec

    trajectories = [t for r in rollouts for t in r.trajectories]
    scores = score(outcomes_from_trajectories(trajectories), get_spec(cfg.env).category_order())
    overall = scores["overall"]
    results = {
        "episode_return_mean": overall["reward_mean"],
        "success_rate": overall["avg_at_k"],  # Avg@1 with greedy decoding
        "num_turns_mean": overall["turns_mean"],
        "num_episodes": overall["num_episodes"],
        "num_tasks": overall["num_tasks"],
        "num_dropped_episodes": sum(r.num_dropped for r in rollouts),
        "num_skipped_episodes": sum(r.num_skipped for r in rollouts),
        "horizon": horizon,
        "success_rate_by_category": {c: s["avg_at_k"] for c, s in scores["categories"].items()},
        # Turns the env refused, and those that resend the action refused just before.
        **refusal_rates(trajectories),
        **progress_stats(trajectories),  # the mean of each episode's most progress, where the env reports it
    }
    from rllib_agentgym.metrics import record_evaluation, run_tags

    record_evaluation(results["success_rate"], run_tags(cfg.env, algo.trial_id))
    return {ENV_RUNNER_RESULTS: results}


def print_and_write_report(report, args) -> None:
    """`rllib evaluate`'s output: the report's table on stdout, and to `--markdown` / `--json` when given."""
    table = report.markdown()
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table, encoding="utf-8")
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_json(), indent=2), encoding="utf-8")


def evaluate_main(args) -> int:
    """`rllib evaluate` (see cli.py for the flags)."""
    from rllib_agentgym.evaluation_multiagent import checkpoint_env, evaluate_multiagent_main, is_multiagent_env
    from rllib_agentgym.experiments import parse_json_arg

    if is_multiagent_env(args.env or checkpoint_env(args.source)):
        if args.episodes:
            raise ValueError("--episodes is for single-agent envs; multi-agent reports have win / draw / loss only")
        if args.dtype or args.max_model_len:
            raise ValueError("--dtype and --max-model-len are for single-agent envs")
        return evaluate_multiagent_main(args)  # win / draw / loss against fixed opponents

    report = evaluate(
        args.source, env=args.env, split=args.split, k=args.k, temperature=args.temperature,
        max_turns=args.max_turns, num_tasks=args.num_tasks, engine=args.engine,
        env_config=parse_json_arg("--env-config", args.env_config), seed=args.seed,
        batch_episodes=args.batch_episodes, max_new_tokens=args.max_new_tokens, max_model_len=args.max_model_len,
        model_dtype=args.dtype, progress=not args.no_progress,
    )
    print_and_write_report(report, args)
    if args.episodes:
        from rllib_agentgym.run_logs import write_jsonl

        write_jsonl(args.episodes, report.episodes)
    return 0

"""Evaluating LLM policies in the multi-agent envs: win / draw / loss against fixed opponents.

Board games (Tic-Tac-Toe, Connect Four): the LLM policy plays every task of
the split once from each seat (k times with sampling), the other seat taken
by a fixed opponent of `envs.multiagent.opponents` ("random": a uniformly
random legal move; "heuristic": win, block, avoid handing over a win, prefer
the center). Reported, overall, per role (X moves first on an empty board,
O second) and per task category (the number of opening moves):

    win_rate + draw_rate + loss_rate = 1

where a game the LLM could not finish (its context full, or the horizon
reached) counts as a loss, as a forfeit would; `unfinished_rate` says how
many of the losses were such. Games are played to their end by default
(horizon `DEFAULT_MAX_TURNS`; an env bounds its own episodes).

CoopCraft: `success_rate` of the LLM in self-play ("self": it plays both
agents) or partnered with the scripted player ("scripted", from each seat).

`rllib evaluate CKPT --env agentgym/tictactoe --opponent heuristic` comes
here (see `rllib_agentgym.evaluation.evaluate_main`); `MultiAgentGRPO.evaluate`
(RLlib's `evaluation_interval`) uses the same scoring, greedy, k = 1.
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from envs.multiagent.registry import MULTIAGENT_ENVS, split_ids
from rllib_agentgym.env_runners.multi_agent_llm_env_runner import (
    FIXED_POLICIES,
    GAME_OUTCOMES,
    EpisodeRecord,
)
from rllib_agentgym.envs.registry import ENV_PREFIX, family_name
from rllib_agentgym.evaluation import (
    _INHERITED,
    _nan_to_none,
    _pct,
    category_sort_key,
    chunks,
    evaluation_env_config,
    evaluation_split,
    is_algorithm_checkpoint,
    load_policy,
    play_at_horizon,
    play_on_evaluation_runners,
    print_and_write_report,
    select_tasks,
)

DEFAULT_MAX_TURNS = 100
BOARD_GAMES = ("tictactoe", "connect_four")


def is_multiagent_env(env: str | None) -> bool:
    return env is not None and family_name(str(env)) in MULTIAGENT_ENVS


def default_opponent(env: str, opponent: str | None) -> str:
    """"auto"/None -> "random" for the board games, "self" (self-play) for CoopCraft."""
    if opponent in (None, "auto"):
        return "random" if family_name(env) in BOARD_GAMES else "self"
    if opponent != "self" and opponent not in FIXED_POLICIES:
        raise ValueError(f"unknown opponent {opponent!r}; use self, {', '.join(FIXED_POLICIES)} or auto")
    return opponent


class SeatMapping:
    """policy_mapping_fn for evaluation: the LLM on one seat per episode, a fixed player on the others.

    Episode k (its index in the sample call) seats the LLM on
    ``possible_agents[k % n]``, so `group_size = n` plays every task from every
    seat. The LLM seat's policy is `llm` (a policy id, or a mapping such as the
    training one). `opponent` None: the LLM plays every agent (self-play).
    """

    def __init__(self, llm: str | Callable[..., str], opponent: str | None):
        self.llm, self.opponent = llm, opponent

    def _llm(self, agent_id: str, episode) -> str:
        return self.llm(agent_id, episode) if callable(self.llm) else str(self.llm)

    def __call__(self, agent_id: str, episode, **kwargs) -> str:
        if self.opponent is None:
            return self._llm(agent_id, episode)
        seat = episode.possible_agents[episode.index % len(episode.possible_agents)]
        return self._llm(agent_id, episode) if agent_id == seat else self.opponent


# ---- scoring (pure) -------------------------------------------------------------------


@dataclass
class SeatResult:
    """One LLM-played agent of one episode."""

    data_idx: int
    category: str
    agent: str
    role: str
    policy_id: str
    outcome: str  # win / draw / loss / unfinished; success / failure
    reward: float
    turns: int


def llm_seats(records: Sequence[EpisodeRecord]) -> list[SeatResult]:
    return [
        SeatResult(ep.data_idx, ep.category, agent, ep.roles[agent], policy_id, ep.outcomes[agent],
                   float(ep.returns[agent]), int(ep.turns[agent]))
        for ep in records
        for agent, policy_id in ep.policies.items()
        if policy_id not in FIXED_POLICIES
    ]


def rates(seats: Sequence[SeatResult]) -> dict[str, float]:
    """win/draw/loss rates (games; unfinished counts as a loss) or success_rate, and means."""
    n = len(seats)
    out: dict[str, float] = {
        "num_games": n,
        "reward_mean": float(np.mean([s.reward for s in seats])) if n else float("nan"),
        "turns_mean": float(np.mean([s.turns for s in seats])) if n else float("nan"),
    }
    if any(s.outcome in ("success", "failure") for s in seats):
        out["success_rate"] = float(np.mean([s.outcome == "success" for s in seats]))
        return out
    for name in GAME_OUTCOMES:
        out[f"{name}_rate"] = float(np.mean([s.outcome == name for s in seats])) if n else float("nan")
    out["unfinished_rate"] = float(np.mean([s.outcome == "unfinished" for s in seats])) if n else float("nan")
    out["loss_rate"] += out["unfinished_rate"]
    return out


def score_seats(seats: Sequence[SeatResult]) -> dict[str, Any]:
    """{"overall": rates, "roles": {role: rates}, "categories": {category: rates}}."""
    roles = sorted({s.role for s in seats}, key=lambda r: min(s.agent for s in seats if s.role == r))  # seat order
    categories = sorted({s.category for s in seats}, key=category_sort_key)
    return {
        "overall": rates(seats),
        "roles": {r: rates([s for s in seats if s.role == r]) for r in roles},
        "categories": {c: rates([s for s in seats if s.category == c]) for c in categories},
    }


# ---- the report ---------------------------------------------------------------------------


@dataclass
class MultiAgentEvalReport:
    model: str
    policy: str
    env: str
    opponent: str
    split: str
    k: int
    temperature: float
    max_turns: int
    scores: dict[str, Any]
    seats: list[SeatResult] = field(default_factory=list)
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(data.pop("scores"))
        return _nan_to_none(data)

    def markdown(self) -> str:
        """One row per rate, a column per role, then Overall (rates in %)."""
        roles, overall = self.scores["roles"], self.scores["overall"]
        metrics = ["success_rate"] if "success_rate" in overall else [f"{o}_rate" for o in GAME_OUTCOMES]
        header = ["Model", "Metric"] + [f"{r} (n={roles[r]['num_games']})" for r in roles]
        header.append(f"Overall (n={overall['num_games']})")
        against = "self-play" if self.opponent == "self" else f"vs {self.opponent}"
        lines = [
            (f"**{self.env}** {against} ({self.split} split, policy {self.policy}, k={self.k}, "
             f"temperature={self.temperature:g}, max turns={self.max_turns}; rates in %)"),
            "",
            "| " + " | ".join(header) + " |",
            "|" + "|".join([" --- "] * 2 + [" ---: "] * (len(header) - 2)) + "|",
        ]
        for metric in metrics:
            label = metric[: -len("_rate")].capitalize()
            cells = [_pct(roles[r][metric]) for r in roles] + [_pct(overall[metric])]
            lines.append("| " + " | ".join([self.model, label] + cells) + " |")
        return "\n".join(lines) + "\n"


# ---- loading and running ------------------------------------------------------------------


def _resolve_checkpoint(source: str) -> str:
    """A trial dir -> its latest checkpoint; anything else as is."""
    source = os.path.expanduser(source)
    if os.path.isdir(source) and not is_algorithm_checkpoint(source):
        checkpoints = sorted(Path(source).glob("checkpoint_*"))
        if checkpoints:
            return str(checkpoints[-1])
    return source


def checkpoint_policy_ids(checkpoint: str) -> list[str]:
    """The module ids (policies) stored in an algorithm checkpoint."""
    root = Path(checkpoint) / "learner_group" / "learner" / "rl_module"
    return sorted(p.name for p in root.iterdir() if (p / "module_state.pkl").exists()) if root.is_dir() else []


def checkpoint_env(source: str) -> str | None:
    """The env a checkpoint (or trial dir) was trained on, None for a model."""
    path = Path(_resolve_checkpoint(source)) / "class_and_ctor_args.pkl"
    if not path.is_file():
        return None
    import rllib_agentgym  # noqa: F401  (the pickle names our classes)

    with open(path, "rb") as fh:
        args = pickle.load(fh)["ctor_args_and_kwargs"][0]
    return args[0].get("env") if args and isinstance(args[0], dict) else None


def _pick_policy(checkpoint: str, policy: str | None) -> str:
    ids = checkpoint_policy_ids(checkpoint)
    if policy is not None:
        if ids and policy not in ids:
            raise ValueError(f"{checkpoint}: no policy {policy!r}; it has {ids}")
        return policy
    if len(ids) == 1:
        return ids[0]
    if "shared" in ids:
        return "shared"
    raise ValueError(f"{checkpoint}: several policies {ids}; choose one with --policy")


def build_multiagent_runner(source: str, *, env: str | None, policy: str | None, opponent: str, split: str,
                            temperature: float, max_turns: int | None, engine: str | None,
                            env_config: Mapping[str, Any] | None, seed: int, max_new_tokens: int | None = None,
                            max_model_len: int | None = None):
    """(runner, policy id, policy name): a `MultiAgentLLMEnvRunner` in this process (no Ray)
    whose one LLM policy holds the checkpoint's weights (or a model's)."""
    from rllib_agentgym.algorithms.grpo.multi_agent import MultiAgentGRPOConfig
    from rllib_agentgym.env_runners.multi_agent_llm_env_runner import (
        MultiAgentLLMEnvRunner,
    )

    resolved = _resolve_checkpoint(source)
    is_checkpoint = os.path.isdir(resolved) and is_algorithm_checkpoint(resolved)
    policy_id = _pick_policy(resolved, policy) if is_checkpoint else (policy or "shared")
    loaded = load_policy(resolved, module_id=policy_id) if is_checkpoint else load_policy(source)
    env = env or loaded.algo_config.get("env")
    if not is_multiagent_env(env):
        raise ValueError(f"give --env, one of {', '.join(ENV_PREFIX + e for e in MULTIAGENT_ENVS)}")
    inherited = {k: loaded.algo_config[k] for k in _INHERITED if loaded.algo_config.get(k) is not None}
    inherited.pop("max_turns", None)  # games are played to their end unless --max-turns says otherwise
    merged_env_config = evaluation_env_config(inherited.pop("env_config", None), env_config, split)
    merged_env_config.pop("task_ids", None)
    overrides = dict(temperature=temperature, max_turns=max_turns or DEFAULT_MAX_TURNS, inference_engine=engine,
                     max_new_tokens=max_new_tokens, max_model_len=max_model_len)
    llm = {**inherited, **{k: v for k, v in overrides.items() if v is not None}}
    llm.update(model_path=loaded.model_path, model_dtype=loaded.model_dtype, lora=loaded.lora)
    policies = {policy_id} | ({opponent} if opponent != "self" else set())
    config = (
        MultiAgentGRPOConfig()
        .environment(env, env_config=merged_env_config)
        .llm(**llm)
        .multi_agent(policies=policies, policy_mapping_fn=SeatMapping(policy_id, None if opponent == "self" else opponent))
        .debugging(seed=seed)
    )
    runner = MultiAgentLLMEnvRunner(config=config, worker_index=0)
    if loaded.weights is not None:
        runner.set_weights({policy_id: loaded.weights})
    return runner, policy_id, loaded.name


def num_agents(env: str, env_options: Mapping[str, Any] | None = None) -> int:
    from rllib_agentgym.envs.multiagent_env import make_text_env

    game = make_text_env(env, env_options)
    try:
        return len(game.possible_agents)
    finally:
        game.close()


def evaluate_multiagent(source: str, *, env: str | None = None, opponent: str | None = "auto", policy: str | None = None,
                        split: str = "test", k: int = 1, temperature: float = 0.0, max_turns: int | None = None,
                        num_tasks: int | None = None, engine: str | None = None,
                        env_config: Mapping[str, Any] | None = None, seed: int = 0, batch_episodes: int = 32,
                        max_new_tokens: int | None = None, max_model_len: int | None = None,
                        progress: bool = True) -> MultiAgentEvalReport:
    """Win / draw / loss (or success) rates of a checkpoint's (or model's) LLM policy (see module doc)."""
    from tqdm.auto import tqdm

    if k < 1:
        raise ValueError("k must be >= 1")
    start = time.perf_counter()
    env = env or checkpoint_env(source)
    if not is_multiagent_env(env):
        raise ValueError(f"give --env, one of {', '.join(ENV_PREFIX + e for e in MULTIAGENT_ENVS)}")
    opponent = default_opponent(env, opponent)
    runner, policy_id, name = build_multiagent_runner(
        source, env=env, policy=policy, opponent=opponent, split=split, temperature=temperature, max_turns=max_turns,
        engine=engine, env_config=env_config, seed=seed, max_new_tokens=max_new_tokens, max_model_len=max_model_len,
    )
    per_task = k * (1 if opponent == "self" else len(runner._ensure_envs(1)[0].possible_agents))
    try:
        task_ids = select_tasks(split_ids(family_name(env), split), num_tasks)
        bar = tqdm(total=len(task_ids), unit="task", desc=f"{family_name(env)}/{split}", disable=not progress)
        records: list[EpisodeRecord] = []
        for chunk in chunks(task_ids, max(1, batch_episodes // per_task)):
            records += runner.sample(task_ids=chunk, group_size=per_task, explore=temperature > 0).episodes
            bar.update(len(chunk))
        bar.close()
        seats = llm_seats(records)
        return MultiAgentEvalReport(
            model=name, policy=policy_id, env=family_name(env), opponent=opponent, split=split, k=k,
            temperature=float(temperature), max_turns=runner.get_max_turns(), scores=score_seats(seats), seats=seats,
            wall_s=time.perf_counter() - start,
        )
    finally:
        runner.stop()


def evaluate_multiagent_main(args) -> int:
    """`rllib evaluate` for agentgym/tictactoe, connect_four, coop_craft."""
    from rllib_agentgym.experiments import parse_json_arg

    report = evaluate_multiagent(
        args.source, env=args.env, opponent=args.opponent, policy=args.policy, split=args.split, k=args.k,
        temperature=args.temperature, max_turns=args.max_turns, num_tasks=args.num_tasks, engine=args.engine,
        env_config=parse_json_arg("--env-config", args.env_config), seed=args.seed,
        batch_episodes=args.batch_episodes, max_new_tokens=args.max_new_tokens, progress=not args.no_progress,
    )
    print_and_write_report(report, args)
    return 0


# ---- periodic evaluation during training ------------------------------------------------------


def evaluate_multiagent_during_training(algo) -> dict[str, Any]:
    """Greedy rates on the evaluation split, as `{"env_runners": {...}}` for the Tune result.

    Each LLM seat keeps the policy the training mapping gives it; the other seat is
    `evaluation_opponent` ("auto": "random" for games, self-play for CoopCraft). Runs
    on the evaluation runners when there are some (weights synced first), else on the
    training runners; tasks split across healthy remote runners, else the local one."""
    from functools import partial

    from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS

    cfg = algo.config
    env = family_name(str(cfg.env))
    opponent = default_opponent(env, cfg.evaluation_opponent)
    task_ids = select_tasks(split_ids(env, evaluation_split(cfg)), cfg.evaluation_num_tasks)
    horizon = int(algo.evaluation_config.max_turns)
    group_size = 1 if opponent == "self" else num_agents(env, (cfg.env_config or {}).get("env_options"))
    mapping = SeatMapping(cfg.policy_mapping_fn, None if opponent == "self" else opponent)
    play = partial(play_at_horizon, horizon=horizon, group_size=group_size, policy_mapping_fn=mapping)
    rollouts = play_on_evaluation_runners(algo, task_ids, play)
    scores = score_seats(llm_seats([ep for r in rollouts for ep in r.episodes]))
    overall = scores["overall"]
    results: dict[str, Any] = {
        "opponent": opponent,
        "episode_return_mean": overall["reward_mean"],
        "num_turns_mean": overall["turns_mean"],
        "num_games": overall["num_games"],
        "horizon": horizon,
    }
    for key in ("success_rate", *(f"{o}_rate" for o in GAME_OUTCOMES), "unfinished_rate"):
        if key in overall:
            results[key] = overall[key]
    if "win_rate" in overall:
        results["success_rate"] = overall["win_rate"]
        results["win_rate_by_role"] = {role: s["win_rate"] for role, s in scores["roles"].items()}
    return {ENV_RUNNER_RESULTS: results}

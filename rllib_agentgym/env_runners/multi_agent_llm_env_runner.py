"""MultiAgentLLMEnvRunner: batched rollouts of several LLM agents in one text env.

The multi-agent sibling of `LLMEnvRunner`. One `sample()` call draws tasks
from the env's split and plays `group_size` episodes per task of a
multi-agent text env (`envs.multiagent`: Tic-Tac-Toe, Connect Four,
CoopCraft), in this process. Which policy plays which agent is RLlib's
multi-agent config: `config.policies` and `config.policy_mapping_fn(agent_id,
episode)`, evaluated once per episode (`episode` is an `EpisodeInfo`: its
`roles`, `data_idx`, `index` in the call, ...). A policy is either

* an LLM policy: one inference engine per policy id, built on first use from
  the policy's config (`config.get_config_for_module(policy_id)`: model_path,
  inference_engine, ...), and fed that RLModule's weights by `set_state`; or
* a fixed player named by its policy id (`FIXED_POLICIES`): "random" and
  "heuristic" are the board-game opponents of `envs.multiagent.opponents`
  ("random" also plays any wrapped PettingZoo env: a random legal move),
  "scripted" is CoopCraft's `ScriptedCoopAgent`. They act from the game
  state; nothing of theirs is trained.

Per env step, every acting agent of every unfinished episode that an LLM
plays goes into ONE generate call on its policy's engine (so a shared policy
makes one call per step for all seats of all episodes). Fixed players answer
at once; then every episode steps.

Each LLM-played agent gets its own token trajectory (`AgentTrajectory`): its
own chat only, the env instruction as system message, its observations as
user turns (an observation holds what the other agents did since its last
turn, as the env words it) and its sampled responses as assistant turns;
`loss_mask` is 1 exactly on its sampled ids. Its `reward` is the agent's
episode return (the sum of its rewards over all env steps, including steps
where others moved: a game lost on the opponent's move counts), its
`group_id` is shared by the `group_size` episodes of one (task, agent), so
GRPO compares an agent's samples on a task with each other only, and
`policy_id` says which module learns from it. Agents that never acted (an
opponent forfeited first) have no trajectory; `EpisodeRecord`s keep every
agent's return and outcome, fixed players included, for metrics.

An episode ends when the env says done, when an agent that must act has
already taken `max_turns` turns (the horizon `ScalingInterCallback` sets), or
when an LLM agent's next turn would not fit the model's context.

Why this runner drives the contract env itself instead of stepping RLlib's
`TextMultiAgentEnv`: training needs token-level trajectories (the engine's
exact sampled ids and log-probs, chat-template ids for each observation, a
loss mask over generated ids) and one batched generate call per policy
across every episode's acting agents, neither of which RLlib's text-in /
text-out multi-agent episodes carry. Both paths play the same env: it is
built by the same `make_text_env(env, env_options)` and gets the same system
instruction (`instruction_for`), so any env the wrapper serves (the named
games, CoopCraft, any PettingZoo env through `agentgym/pettingzoo`) trains
here unchanged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ray.rllib.env import INPUT_ENV_SPACES
from ray.rllib.env.env_runner import EnvRunner
from ray.rllib.utils.checkpoints import Checkpointable

from envs.multiagent.registry import category, split_ids
from rllib_agentgym.core import lora as lora_lib
from rllib_agentgym.core.chat import ChatFormat
from rllib_agentgym.core.embedded import load_model_weights, resolve_model_path
from rllib_agentgym.core.trajectory import Trajectory, Turn
from rllib_agentgym.env_runners.engines import (
    InferenceEngine,
    SamplingConfig,
    load_policy_weights,
    make_engine,
)
from rllib_agentgym.env_runners.llm_env_runner import RolloutResult
from rllib_agentgym.env_runners.runner_state import RunnerStateMixin
from rllib_agentgym.envs.gym_env import text_space
from rllib_agentgym.envs.multiagent_env import instruction_for, make_text_env
from rllib_agentgym.envs.registry import family_name
from rllib_agentgym.envs.spec import check_task_pool, parse_react_action

logger = logging.getLogger(__name__)

FIXED_POLICIES = ("random", "heuristic", "scripted")
DEFAULT_MAX_NEW_TOKENS = 64
GAME_OUTCOMES = ("win", "draw", "loss")


def llm_policy_ids(policies) -> list[str]:
    """The policy ids of `config.policies` that an LLM plays (all but the fixed players)."""
    return [str(p) for p in policies if p not in FIXED_POLICIES]


def read_response(text: str, finished: bool) -> tuple[str, str | None]:
    """(action for the env, format error or None) of one response, as `LLMEnvRunner` does:
    a bad response sends the env an empty action, which it answers as an invalid move."""
    if not text.strip():
        return "", "empty"
    if not finished:
        return "", "truncated"
    action = parse_react_action(text)
    if action is None:
        return "", "no_action"
    return action, None


@dataclass
class EpisodeInfo:
    """What `policy_mapping_fn(agent_id, episode)` gets for `episode` (RLlib passes its
    episode object there; this runner builds no RLlib episodes)."""

    id_: str
    env: str
    data_idx: int
    index: int  # position of the episode in its sample() call (group_size per task, in task order)
    possible_agents: list[str]
    roles: dict[str, str]


@dataclass
class AgentTrajectory(Trajectory):
    """One agent's token trajectory in a multi-agent episode."""

    agent: str = ""
    role: str = ""
    policy_id: str = ""
    outcome: str = ""  # games: win / draw / loss / unfinished; CoopCraft: success / failure

    def summary(self) -> dict[str, Any]:
        return {**super().summary(), "agent": self.agent, "role": self.role, "policy_id": self.policy_id,
                "outcome": self.outcome}


@dataclass
class EpisodeRecord:
    """Every agent's side of one finished episode (LLM and fixed players alike)."""

    env: str
    data_idx: int
    category: str
    policies: dict[str, str]  # agent -> policy id
    roles: dict[str, str]
    returns: dict[str, float]
    outcomes: dict[str, str]
    turns: dict[str, int]  # actions taken per agent
    invalid_actions: dict[str, int]  # actions the env refused, per agent
    num_steps: int = 0
    done: bool = False  # the env ended it (vs. the horizon or the context cap)


@dataclass
class MultiAgentRolloutResult(RolloutResult):
    episodes: list[EpisodeRecord] = field(default_factory=list)


def outcome_of(info: Mapping[str, Any], agent: str, done: bool) -> str:
    """win / draw / loss (games), success / failure (cooperative envs), unfinished (a game cut short)."""
    if "success" in info:
        return "success" if info["success"] else "failure"
    if done and "outcome" in info:
        return str(info["outcome"][agent])
    return "unfinished"


class _Seat:
    """One agent of one episode: who plays it, and (for an LLM) its trajectory so far."""

    def __init__(self, agent: str, role: str, policy_id: str, player=None):
        self.agent, self.role, self.policy_id = agent, role, policy_id
        self.player = player  # a fixed player with act(observation) -> (thought, action), or None for an LLM
        self.trajectory: AgentTrajectory | None = None
        self.closed = True  # the last response ended with eos
        self.pending: list[int] = []  # ids to append before the next generation
        self.turns = 0
        self.invalid = 0


class _Episode:
    def __init__(self, env, info: EpisodeInfo, seats: dict[str, _Seat], observations: dict[str, str]):
        self.env, self.info, self.seats = env, info, seats
        self.observations = observations  # the latest text of every agent that must act next
        self.returns = dict.fromkeys(seats, 0.0)
        self.last_info: dict[str, Any] = {}
        self.steps = 0
        self.finished = self.done = False


def pinned_task_ids(env_name: str, split: str, task_ids: list[int] | None) -> list[int]:
    """The split's task ids, or exactly `task_ids` (env_config `task_ids`: a fixed pool),
    which must all belong to the split: a clear error, not a run on another split's tasks."""
    ids = split_ids(env_name, split)
    if task_ids is None:
        return ids
    check_task_pool(env_name, split, ids, task_ids)
    return [int(i) for i in task_ids]


class MultiAgentLLMEnvRunner(RunnerStateMixin, EnvRunner, Checkpointable):
    def __init__(self, *, config, **kwargs):
        super().__init__(config=config, **kwargs)
        self.env_name = family_name(str(self.config.env))
        self._env_config = dict(self.config.env_config or {})
        self._split = self._env_config.get("split", "train")
        self._task_ids = pinned_task_ids(self.env_name, self._split, self._env_config.get("task_ids"))
        self._env_options = dict(self._env_config.get("env_options") or {})
        self._envs: list = []
        self.instruction = instruction_for(self.env_name, self._ensure_envs(1)[0])
        self._seed = (self.config.seed if self.config.seed is not None else 0) + 1000 * (self.worker_index or 0)
        self._num_sample_calls = 0
        self._max_turns = int(self.config.max_turns)
        self.policy_ids = {str(p) for p in self.config.policies}
        self.llm_policies = llm_policy_ids(self.config.policies)
        self._engines: dict[str, InferenceEngine] = {}
        self._tokenizers: dict[str, Any] = {}
        self._chats: dict[str, ChatFormat] = {}
        self._pending_weights: dict[str, dict] = {}
        self._base_weight_cache: dict[str, dict] = {}
        self._weights_seq_no = 0
        self._env_steps_lifetime = 0

    # ---- lazily built parts --------------------------------------------------------

    def _policy_config(self, policy_id: str):
        return self.config.get_config_for_module(policy_id)

    def _ensure_engine(self, policy_id: str) -> InferenceEngine:
        if policy_id in self._engines:
            return self._engines[policy_id]
        from transformers import AutoTokenizer

        cfg = self._policy_config(policy_id)
        model_path = resolve_model_path(cfg.model_path)
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        self._tokenizers[policy_id] = tokenizer
        self._chats[policy_id] = ChatFormat.from_tokenizer(tokenizer)
        options = {"dtype": cfg.model_dtype, "seed": self._seed, "max_model_len": cfg.max_model_len,
                   "concurrent_sequences": self.config.group_size * self.config.tasks_per_iteration,
                   **dict(cfg.engine_options or {})}
        engine = make_engine(cfg.inference_engine, model_path, **options)
        self._engines[policy_id] = engine
        if policy_id in self._pending_weights:
            self._load_into_engine(policy_id, engine, self._pending_weights.pop(policy_id))
        return engine

    def _ensure_envs(self, n: int) -> list:
        while len(self._envs) < n:
            self._envs.append(make_text_env(self.env_name, self._env_options))
        return self._envs[:n]

    def _fixed_player(self, kind: str, env, agent: str, seed: int):
        from envs.multiagent.pettingzoo_text import PettingZooTextEnv, RandomLegalPlayer

        if kind == "random" and isinstance(env, PettingZooTextEnv):
            return RandomLegalPlayer(env, agent, seed=seed)
        if kind in ("random", "heuristic"):
            from envs.multiagent.board_game import BoardGameEnv
            from envs.multiagent.opponents import OpponentAgent

            if not isinstance(env, BoardGameEnv):
                raise ValueError(f"the {kind!r} opponent plays the board games, not {self.env_name!r}")
            return OpponentAgent(env, agent, kind, seed=seed)
        if kind == "scripted":
            from envs.multiagent.coop_craft import CoopCraftEnv, ScriptedCoopAgent

            if not isinstance(env, CoopCraftEnv):
                raise ValueError(f"the 'scripted' player plays coop_craft, not {self.env_name!r}")
            return ScriptedCoopAgent(env, agent)
        raise ValueError(f"unknown fixed policy {kind!r}; known: {', '.join(FIXED_POLICIES)}")

    # ---- EnvRunner API -------------------------------------------------------------

    def assert_healthy(self):
        assert self._task_ids, f"no tasks in split {self._split!r}"

    def get_spaces(self):
        space = text_space()
        return {INPUT_ENV_SPACES: (space, space), **{p: (space, space) for p in self.llm_policies}}

    def set_max_turns(self, max_turns: int) -> None:
        self._max_turns = int(max_turns)

    def get_max_turns(self) -> int:
        return self._max_turns

    def sample(self, *, num_tasks: int | None = None, group_size: int | None = None, explore: bool = True,
               task_ids: list[int] | None = None, call_index: int | None = None,
               policy_mapping_fn: Callable[[str, EpisodeInfo], str] | None = None,
               **kwargs) -> MultiAgentRolloutResult:
        """Play `group_size` episodes for each of `num_tasks` tasks (or of `task_ids`).

        `call_index` fixes the draw (tasks, seeds, group ids); by default this
        runner's count of sample calls. `policy_mapping_fn` replaces the
        config's for this call (evaluation seats an LLM against a fixed player).
        """
        start = time.perf_counter()
        group_size = int(group_size or self.config.group_size)
        call = self._num_sample_calls if call_index is None else int(call_index)
        self._num_sample_calls = call + 1
        if task_ids is None:
            num_tasks = int(num_tasks or self.config.tasks_per_iteration)
            rng = np.random.default_rng([self._seed % 2**32, call])
            task_ids = [int(x) for x in rng.choice(self._task_ids, size=num_tasks, replace=num_tasks > len(self._task_ids))]
        result = MultiAgentRolloutResult(trajectories=[], horizon=self._max_turns)
        sampling = SamplingConfig(
            max_new_tokens=int(self.config.max_new_tokens or DEFAULT_MAX_NEW_TOKENS),
            temperature=float(self.config.temperature if explore else 0.0),
            top_p=float(self.config.top_p),
        )
        mapping = policy_mapping_fn or self.config.policy_mapping_fn
        group_base = (call * 1000 + (self.worker_index or 0)) * 10_000  # unique per (call, runner)
        envs = self._ensure_envs(len(task_ids) * group_size)
        t0 = time.perf_counter()
        episodes = [
            self._start_episode(envs[i], data_idx, i, call, mapping, group_base + (i // group_size) * len(envs[i].possible_agents))
            for i, data_idx in enumerate(t for t in task_ids for _ in range(group_size))
        ]
        result.env_s += time.perf_counter() - t0

        turn = 0
        while True:
            active = [e for e in episodes if not e.finished]
            if not active:
                break
            requests: dict[str, list[tuple[_Episode, _Seat]]] = {}
            for e in active:
                seats = [e.seats[a] for a in e.env.agents_to_act()]
                if any(s.turns >= self._max_turns for s in seats):
                    self._finish(e, done=False)  # the horizon
                    continue
                llm_seats = [s for s in seats if s.player is None]
                if any(not self._prepare(e, s, sampling.max_new_tokens) for s in llm_seats):
                    self._finish(e, done=False, truncated=True)  # the model's context is full
                    continue
                for s in llm_seats:
                    requests.setdefault(s.policy_id, []).append((e, s))
            actions: dict[int, dict[str, str]] = {id(e): {} for e in active}
            responses: dict[tuple[int, str], tuple[str, str | None]] = {}
            for policy_id, batch in requests.items():
                self._generate(policy_id, batch, sampling, call, turn, result, actions, responses)
            t0 = time.perf_counter()
            for e in active:
                if e.finished:
                    continue
                for agent in e.env.agents_to_act():
                    seat = e.seats[agent]
                    if seat.player is not None:
                        actions[id(e)][agent] = seat.player.act(e.observations[agent])[1]
                step_t0 = time.perf_counter()
                step = e.env.step(actions[id(e)])
                result.env_step_latencies_s.append(time.perf_counter() - step_t0)
                self._record_step(e, step, responses, result)
            result.env_s += time.perf_counter() - t0
            turn += 1

        for e in episodes:
            result.episodes.append(self._record(e))
            for seat in e.seats.values():
                if seat.trajectory is not None and seat.trajectory.turns:
                    result.trajectories.append(seat.trajectory)
        self._env_steps_lifetime += sum(e.steps for e in episodes)
        result.wall_s = time.perf_counter() - start
        return result

    # ---- one episode -----------------------------------------------------------------

    def _start_episode(self, env, data_idx: int, index: int, call: int, mapping, group_base: int) -> _Episode:
        observations = env.reset(data_idx)
        info = EpisodeInfo(
            id_=f"{self.worker_index or 0}-{call}-{index}", env=self.env_name, data_idx=int(data_idx), index=index,
            possible_agents=list(env.possible_agents), roles=dict(env.roles),
        )
        seats = {}
        for k, agent in enumerate(env.possible_agents):
            policy_id = str(mapping(agent, info))
            if policy_id not in self.policy_ids and policy_id not in FIXED_POLICIES:
                raise ValueError(f"policy_mapping_fn mapped {agent!r} to {policy_id!r}, which is neither in "
                                 f"config.policies {sorted(self.policy_ids)} nor a fixed player {FIXED_POLICIES}")
            player = None
            if policy_id in FIXED_POLICIES:
                player = self._fixed_player(policy_id, env, agent, seed=hash((self._seed, call, index, k)) & 0x7FFFFFFF)
            seat = _Seat(agent, env.roles[agent], policy_id, player)
            if player is None:
                seat.trajectory = AgentTrajectory(
                    env=self.env_name, data_idx=int(data_idx), group_id=group_base + k,
                    category=category(self.env_name, data_idx), agent=agent, role=seat.role, policy_id=policy_id,
                )
            seats[agent] = seat
        return _Episode(env, info, seats, dict(observations))

    def _prepare(self, e: _Episode, seat: _Seat, max_new_tokens: int) -> bool:
        """Queue the ids that bring `seat`'s chat to its next generation; False when they
        would not leave room for a full response in the model's context."""
        self._ensure_engine(seat.policy_id)
        tokenizer, chat = self._tokenizers[seat.policy_id], self._chats[seat.policy_id]
        observation = e.observations[seat.agent]
        traj = seat.trajectory
        if not traj.token_ids:
            seat.pending = chat.prompt_ids(tokenizer, self.instruction, observation)
        else:
            seat.pending = chat.observation_ids(tokenizer, observation, seat.closed)
        max_len = int(self._policy_config(seat.policy_id).max_model_len)
        return len(traj.token_ids) + len(seat.pending) + max_new_tokens <= max_len

    def _generate(self, policy_id: str, batch, sampling: SamplingConfig, call: int, turn: int,
                  result: MultiAgentRolloutResult, actions, responses) -> None:
        """One generate call for every queued seat of `policy_id`."""
        for e, seat in batch:
            traj = seat.trajectory
            first = not traj.token_ids
            traj.append(seat.pending, generated=False)
            if first:
                traj.prompt_len = len(seat.pending)
            seat.pending = []
        seeds = None
        if self.config.seed is not None:
            p = self.llm_policies.index(policy_id)  # ints only: str hashes differ between processes
            seeds = [hash((self._seed, call, turn, p, k)) & 0x7FFFFFFF for k in range(len(batch))]
        t0 = time.perf_counter()
        generations = self._engines[policy_id].generate([s.trajectory.token_ids for _, s in batch], sampling, seeds)
        result.generation_s += time.perf_counter() - t0
        tokenizer = self._tokenizers[policy_id]
        for (e, seat), gen in zip(batch, generations):
            seat.trajectory.append(gen.token_ids, generated=True, logprobs=gen.logprobs)
            seat.closed = gen.finished
            result.num_generated_tokens += len(gen.token_ids)
            text = tokenizer.decode(gen.token_ids, skip_special_tokens=True)
            action, error = read_response(text, gen.finished)
            actions[id(e)][seat.agent] = action
            responses[(id(e), seat.agent)] = (text, action, error)

    def _record_step(self, e: _Episode, step, responses, result: MultiAgentRolloutResult) -> None:
        invalid = step.info.get("invalid_action", {})
        for agent, seat in e.seats.items():
            if agent not in invalid:
                continue  # did not act this step
            seat.turns += 1
            seat.invalid += int(bool(invalid[agent]))
            if seat.player is None:
                text, action, error = responses[(id(e), agent)]
                result.num_actions += 1
                if error is not None:
                    result.num_format_errors += 1
                    result.format_errors[error] = result.format_errors.get(error, 0) + 1
                seat.trajectory.turns.append(Turn(e.observations[agent], text, action,
                                                  float(step.rewards.get(agent, 0.0)), error is None,
                                                  error is not None or bool(invalid[agent])))
        for agent, reward in step.rewards.items():
            e.returns[agent] += float(reward)
        e.steps += 1
        e.last_info = dict(step.info)
        e.observations = dict(step.observations)
        if step.done:
            self._finish(e, done=True)

    def _finish(self, e: _Episode, done: bool, truncated: bool = False) -> None:
        e.finished, e.done = True, done
        for agent, seat in e.seats.items():
            traj = seat.trajectory
            if traj is None:
                continue
            traj.reward = e.returns[agent]
            traj.outcome = outcome_of(e.last_info, agent, done)
            traj.success = traj.outcome in ("win", "success")
            traj.done = done
            traj.truncated = truncated or (bool(traj.turns) and not seat.closed)
            traj.final_observation = e.observations.get(agent, "") if done else ""

    def _record(self, e: _Episode) -> EpisodeRecord:
        agents = list(e.seats)
        return EpisodeRecord(
            env=self.env_name, data_idx=e.info.data_idx, category=category(self.env_name, e.info.data_idx),
            policies={a: e.seats[a].policy_id for a in agents}, roles=dict(e.info.roles),
            returns=dict(e.returns), outcomes={a: outcome_of(e.last_info, a, e.done) for a in agents},
            turns={a: e.seats[a].turns for a in agents}, invalid_actions={a: e.seats[a].invalid for a in agents},
            num_steps=e.steps, done=e.done,
        )

    def get_metrics(self):
        return self.metrics.reduce()

    # ---- weights and state -------------------------------------------------------------

    def set_weights(self, weights: Mapping[str, Mapping[str, Any]]) -> None:
        """{policy_id: HF-named tensors (or arrays)} from the learner -> each policy's engine.

        A LoRA module sends only its adapter; its merged weights go to the engine."""
        import torch

        for policy_id, module_weights in weights.items():
            if policy_id not in self.llm_policies:
                continue
            tensors = {k: torch.as_tensor(v) for k, v in module_weights.items()}
            if lora_lib.is_adapter_state(tensors):
                cfg = self._policy_config(policy_id)
                tensors = lora_lib.merge_adapter_into(self._base_weights(policy_id), tensors,
                                                      lora_lib.lora_scaling(cfg.lora or {}))
            if policy_id in self._engines:
                self._load_into_engine(policy_id, self._engines[policy_id], tensors)
            else:
                self._pending_weights[policy_id] = tensors

    def _load_into_engine(self, policy_id: str, engine, tensors: dict) -> None:
        load_policy_weights(engine, tensors, bool(self._policy_config(policy_id).lora),
                            lambda: self._base_weights(policy_id))

    def _base_weights(self, policy_id: str) -> dict:
        """A policy's frozen base weights (read once from its safetensors files), for LoRA merges."""
        if policy_id not in self._base_weight_cache:
            model_path = resolve_model_path(self._policy_config(policy_id).model_path)
            self._base_weight_cache[policy_id] = load_model_weights(model_path)
        return self._base_weight_cache[policy_id]

    def stop(self) -> None:
        for env in self._envs:
            env.close()
        self._envs = []
        for engine in self._engines.values():
            engine.shutdown()
        self._engines = {}

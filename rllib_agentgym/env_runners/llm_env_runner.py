"""LLMEnvRunner: batched multi-turn rollouts of an LLM policy on text envs.

One `sample()` call draws tasks from the env's split, plays `group_size`
episodes per task, and returns their token-level trajectories. Per turn, every
unfinished episode goes into ONE generation call on the inference engine;
the env steps of that turn then run concurrently (threads; HTTP or
in-process). An episode ends when the env says done, at the current
max-turn horizon (set by `ScalingInterCallback`), or when the next turn
would not fit the model's context.

RLlib's default `SingleAgentEnvRunner` is not used: its connectors truncate
`gymnasium.spaces.Text` observations, and it steps one env per action
instead of batching generations across episodes.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Collection, Optional

import numpy as np
from ray.rllib.core import COMPONENT_RL_MODULE, DEFAULT_MODULE_ID
from ray.rllib.env import INPUT_ENV_SPACES
from ray.rllib.env.env_runner import EnvRunner
from ray.rllib.utils.checkpoints import Checkpointable
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME, WEIGHTS_SEQ_NO

from rllib_agentgym.core.chat import ChatFormat
from rllib_agentgym.core.embedded import resolve_model_path
from rllib_agentgym.core.trajectory import Trajectory, Turn
from rllib_agentgym.env_runners.engines import InferenceEngine, SamplingConfig, make_engine
from rllib_agentgym.envs.client import EnvFailure
from rllib_agentgym.envs.gym_env import text_space
from rllib_agentgym.envs.registry import SessionFactory, get_spec

logger = logging.getLogger(__name__)


@dataclass
class RolloutResult:
    """What one runner's `sample()` returns to the algorithm."""

    trajectories: list[Trajectory]
    num_dropped: int = 0
    generation_s: float = 0.0
    env_s: float = 0.0
    wall_s: float = 0.0
    num_generated_tokens: int = 0
    num_format_errors: int = 0
    num_actions: int = 0
    horizon: int = 0
    env_step_latencies_s: list[float] = field(default_factory=list)


class _Episode:
    def __init__(self, trajectory: Trajectory, session, observation: str):
        self.trajectory = trajectory
        self.session = session
        self.observation = observation
        self.finished = False


class LLMEnvRunner(EnvRunner, Checkpointable):
    def __init__(self, *, config, **kwargs):
        super().__init__(config=config, **kwargs)
        self.spec = get_spec(self.config.env)
        self._env_config = dict(self.config.env_config or {})
        self._split = self._env_config.get("split", "train")
        self._task_ids = self.spec.split_ids(self._split)
        seed = (self.config.seed if self.config.seed is not None else 0) + 1000 * (self.worker_index or 0)
        self._seed = seed
        self._rng = np.random.default_rng(seed)
        self._num_sample_calls = 0
        self._max_turns = int(self.config.max_turns)
        self._engine: InferenceEngine | None = None
        self._tokenizer = None
        self._chat: ChatFormat | None = None
        self._sessions: list = []
        self._factory: SessionFactory | None = None
        self._pending_weights: dict | None = None
        self._weights_seq_no = 0
        self._env_steps_lifetime = 0
        self._pool = ThreadPoolExecutor(max_workers=max(1, int(self.config.env_step_threads)))

    # ---- lazily built parts (an idle local runner costs nothing) ----------------

    def _ensure_engine(self) -> None:
        if self._engine is not None:
            return
        from transformers import AutoTokenizer

        model_path = resolve_model_path(self.config.model_path)
        self._tokenizer = AutoTokenizer.from_pretrained(model_path)
        self._chat = ChatFormat.from_tokenizer(self._tokenizer)
        options = {
            "dtype": self.config.model_dtype,
            "seed": self._seed,
            "max_model_len": self.config.max_model_len,
            **dict(self.config.engine_options or {}),
        }
        self._engine = make_engine(self.config.inference_engine, model_path, **options)
        if self._pending_weights is not None:
            self._engine.load_weights(self._pending_weights.items())
            self._pending_weights = None

    def _ensure_sessions(self, n: int) -> list:
        if self._factory is None:
            self._factory = SessionFactory(self.spec, self._env_config)
        while len(self._sessions) < n:
            self._sessions.append(self._factory.make())
        return self._sessions[:n]

    # ---- EnvRunner API ----------------------------------------------------------

    def assert_healthy(self):
        assert self.spec is not None and self._task_ids, f"no tasks in split {self._split!r}"

    def get_spaces(self):
        space = text_space()
        return {INPUT_ENV_SPACES: (space, space), DEFAULT_MODULE_ID: (space, space)}

    def set_max_turns(self, max_turns: int) -> None:
        self._max_turns = int(max_turns)

    def get_max_turns(self) -> int:
        return self._max_turns

    def sample(self, *, num_tasks: int | None = None, group_size: int | None = None, explore: bool = True,
               task_ids: Optional[list[int]] = None, **kwargs) -> RolloutResult:
        """Play `group_size` episodes for each of `num_tasks` tasks (or `task_ids`)."""
        start = time.perf_counter()
        self._ensure_engine()
        group_size = int(group_size or self.config.group_size)
        if task_ids is None:
            num_tasks = int(num_tasks or self.config.tasks_per_iteration)
            task_ids = [int(x) for x in self._rng.choice(self._task_ids, size=num_tasks, replace=num_tasks > len(self._task_ids))]
        call = self._num_sample_calls
        self._num_sample_calls += 1
        result = RolloutResult(trajectories=[], horizon=self._max_turns)
        sessions = self._ensure_sessions(len(task_ids) * group_size)
        sampling = SamplingConfig(
            max_new_tokens=int(self.config.max_new_tokens or self.spec.default_max_new_tokens),
            temperature=float(self.config.temperature if explore else 0.0),
            top_p=float(self.config.top_p),
        )

        # Reset every session to its task, concurrently.
        specs = [(t, g) for t in task_ids for g in range(group_size)]
        group_base = (self.worker_index or 0) * 10_000_000 + call * 10_000
        t0 = time.perf_counter()
        resets = list(self._pool.map(lambda i: self._safe(sessions[i].reset, specs[i][0]), range(len(specs))))
        result.env_s += time.perf_counter() - t0
        episodes: list[_Episode] = []
        for i, ((data_idx, _), obs) in enumerate(zip(specs, resets)):
            if isinstance(obs, EnvFailure):
                result.num_dropped += 1
                continue
            traj = Trajectory(
                env=self.spec.name,
                data_idx=data_idx,
                group_id=group_base + i // group_size,
                category=self.spec.category(data_idx),
            )
            prompt = self._chat.prompt_ids(self._tokenizer, self.spec.instruction, obs)
            traj.append(prompt, generated=False)
            traj.prompt_len = len(prompt)
            episodes.append(_Episode(traj, sessions[i], obs))

        max_len = int(self.config.max_model_len)
        for turn in range(self._max_turns):
            active = [e for e in episodes if not e.finished]
            for e in active:
                if len(e.trajectory.token_ids) + sampling.max_new_tokens > max_len:
                    e.finished, e.trajectory.truncated = True, True
            active = [e for e in active if not e.finished]
            if not active:
                break
            seeds = None
            if self.config.seed is not None:
                seeds = [hash((self._seed, call, turn, k)) & 0x7FFFFFFF for k in range(len(active))]
            t0 = time.perf_counter()
            generations = self._engine.generate([e.trajectory.token_ids for e in active], sampling, seeds)
            result.generation_s += time.perf_counter() - t0
            texts = []
            for e, gen in zip(active, generations):
                e.trajectory.append(gen.token_ids, generated=True, logprobs=gen.logprobs)
                result.num_generated_tokens += len(gen.token_ids)
                texts.append((self._tokenizer.decode(gen.token_ids, skip_special_tokens=True), gen.finished))

            t0 = time.perf_counter()
            outcomes = list(self._pool.map(lambda ek: self._step(*ek), zip(active, [t for t, _ in texts])))
            result.env_s += time.perf_counter() - t0
            last_turn = turn == self._max_turns - 1
            for e, (text, closed), outcome in zip(active, texts, outcomes):
                if isinstance(outcome, EnvFailure):
                    e.finished, e.trajectory.done = True, False
                    e.trajectory.reward = float("nan")  # marked dropped below
                    continue
                action, well_formed, step, latency = outcome
                result.env_step_latencies_s.append(latency)
                result.num_actions += 1
                result.num_format_errors += int(not well_formed)
                traj = e.trajectory
                traj.turns.append(Turn(e.observation, text, action, float(step.reward), well_formed))
                traj.reward += float(step.reward)
                traj.success = traj.success or bool(step.info.get("success", False))
                e.observation = step.observation
                if step.done or last_turn:
                    e.finished = True
                    traj.done = bool(step.done)
                    traj.final_observation = step.observation
                    if not closed:
                        traj.truncated = True
                    continue
                traj.append(self._chat.observation_ids(self._tokenizer, step.observation, closed), generated=False)

        for e in episodes:
            if np.isnan(e.trajectory.reward):
                result.num_dropped += 1
            else:
                result.trajectories.append(e.trajectory)
        steps = sum(t.num_turns for t in result.trajectories)
        self._env_steps_lifetime += steps
        result.wall_s = time.perf_counter() - start
        return result

    @staticmethod
    def _safe(fn, *args):
        try:
            return fn(*args)
        except EnvFailure as exc:
            logger.warning("env session failed: %s", exc)
            return exc

    def _step(self, episode: _Episode, text: str):
        action, well_formed = self.spec.action_for_server(text)
        t0 = time.perf_counter()
        step = self._safe(episode.session.step, action)
        if isinstance(step, EnvFailure):
            return step
        return action, well_formed, step, time.perf_counter() - t0

    def get_metrics(self):
        return self.metrics.reduce()

    # ---- weights and state ------------------------------------------------------

    def set_weights(self, weights: dict) -> None:
        """HF-named tensors (or arrays) from the learner -> the inference engine."""
        import torch

        tensors = {k: torch.as_tensor(v) for k, v in weights.items()}
        if self._engine is None:
            self._pending_weights = tensors
        else:
            self._engine.load_weights(tensors.items())

    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict[str, Any]:
        return {
            "max_turns": self._max_turns,
            "rng": self._rng.bit_generator.state,
            "num_sample_calls": self._num_sample_calls,
            NUM_ENV_STEPS_SAMPLED_LIFETIME: self._env_steps_lifetime,
            WEIGHTS_SEQ_NO: self._weights_seq_no,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        if COMPONENT_RL_MODULE in state:
            module_state = state[COMPONENT_RL_MODULE]
            module_state = module_state.get(DEFAULT_MODULE_ID, module_state)
            seq_no = state.get(WEIGHTS_SEQ_NO, 0)
            if seq_no == 0 or seq_no > self._weights_seq_no:
                self.set_weights(module_state)
                self._weights_seq_no = seq_no
        if "max_turns" in state:
            self._max_turns = int(state["max_turns"])
        if "rng" in state:
            self._rng.bit_generator.state = state["rng"]
        if "num_sample_calls" in state:
            self._num_sample_calls = int(state["num_sample_calls"])
        if NUM_ENV_STEPS_SAMPLED_LIFETIME in state and state[NUM_ENV_STEPS_SAMPLED_LIFETIME] is not None:
            self._env_steps_lifetime = int(state[NUM_ENV_STEPS_SAMPLED_LIFETIME])

    def get_ctor_args_and_kwargs(self):
        return ((), {"config": self.config})

    def get_checkpointable_components(self):
        return []

    def stop(self) -> None:
        for session in self._sessions:
            try:
                session.close()
            except Exception as exc:  # a dead server must not block shutdown
                logger.warning("closing env session failed: %s", exc)
        self._sessions = []
        if self._factory is not None:
            self._factory.close()
            self._factory = None
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None
        self._pool.shutdown(wait=False)

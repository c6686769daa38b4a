"""LLMEnvRunner: batched multi-turn rollouts of an LLM policy on text envs.

One `sample()` call draws tasks from the env's split, plays `group_size`
episodes per task, and returns their token-level trajectories. Per turn, every
unfinished episode goes into ONE generation call on the inference engine;
the env steps of that turn then run concurrently (threads; HTTP or
in-process). An episode ends when the env says done, at the current
max-turn horizon (set by `ScalingInterCallback`), or when the next turn
would not fit the model's context. For a family whose spec says
`graded_at_horizon` (WebArena), an episode cut that way is then graded by
the env (`session.evaluate()`), and that reward counts as its last turn's.
An episode the env could not grade (info["skipped"]: e.g. WebArena's judge
is missing or failed) is not scored either: counted in `num_skipped`.

Faults never stop a rollout: a session whose env server fails beyond the
client's retries (see `rllib_agentgym.envs.client`) drops its trajectory,
counted in `RolloutResult.num_dropped` and never scored. A response the env
cannot act on (empty, cut by the token cap, no action, several actions) is
sent as an empty action, so the env answers with its invalid-action
observation; `RolloutResult.format_errors` counts each kind.

What a `sample()` call draws (tasks, generation seeds, group ids) is a pure
function of (seed, worker index, call index), so a restarted runner or a
restored run replays exactly the same draw.

RLlib's default `SingleAgentEnvRunner` is not used: its connectors truncate
`gymnasium.spaces.Text` observations, and it steps one env per action
instead of batching generations across episodes.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.env import INPUT_ENV_SPACES
from ray.rllib.env.env_runner import EnvRunner
from ray.rllib.utils.checkpoints import Checkpointable

from rllib_agentgym.core import lora as lora_lib
from rllib_agentgym.core.chat import ChatFormat
from rllib_agentgym.core.embedded import load_model_weights, resolve_model_path
from rllib_agentgym.core.trajectory import Trajectory, Turn
from rllib_agentgym.data.start_states import StartState, load_start_states
from rllib_agentgym.env_runners.engines import InferenceEngine, SamplingConfig, load_policy_weights, make_engine
from rllib_agentgym.env_runners.runner_state import RunnerStateMixin
from rllib_agentgym.envs.client import EnvFailure
from rllib_agentgym.envs.gym_env import text_space
from rllib_agentgym.envs.registry import SessionFactory, get_spec
from rllib_agentgym.envs.spec import EnvSpec, parse_react_action

logger = logging.getLogger(__name__)


def concurrent_episodes(config, evaluates: bool | None = None) -> int:
    """The most episodes a training runner plays at once, which its engine's KV cache is
    sized for (engines.cpu_kv_cache_bytes): a training batch, group_size x tasks_per_iteration,
    or, when the Algorithm evaluates on its training runners (`evaluation_interval` set and
    no evaluation runners; `evaluates` says so for a caller that evaluates them itself), its
    share of the evaluation tasks, all played at once (a greedy episode each): TextCraft's 95
    depth-1 and depth-2 test tasks against a batch of 32."""
    training = int(config.group_size * config.tasks_per_iteration)
    if evaluates is None:
        evaluates = bool(config.evaluation_interval)
    if not evaluates or config.evaluation_num_env_runners or config.in_evaluation:
        return training
    from rllib_agentgym.evaluation import evaluation_task_ids, select_tasks

    tasks = len(select_tasks(evaluation_task_ids(config), config.evaluation_num_tasks))
    return max(training, -(-tasks // max(1, int(config.num_env_runners))))


@dataclass
class RolloutResult:
    """What one runner's `sample()` returns to the algorithm."""

    trajectories: list[Trajectory]
    num_dropped: int = 0
    num_skipped: int = 0  # episodes the env ended without a grade (info["skipped"]); not scored
    generation_s: float = 0.0
    env_s: float = 0.0
    wall_s: float = 0.0
    num_generated_tokens: int = 0
    num_format_errors: int = 0
    format_errors: dict[str, int] = field(default_factory=dict)  # kind (FORMAT_ERROR_KINDS) -> count
    num_actions: int = 0
    horizon: int = 0
    env_step_latencies_s: list[float] = field(default_factory=list)


FORMAT_ERROR_KINDS = ("empty", "truncated", "no_action", "multiple_actions")


def check_response(spec: EnvSpec, text: str, finished: bool) -> tuple[str, str | None]:
    """The action to send the env for one model response, and its format error (None: well-formed).

    A bad response takes the env's invalid-action path: the env gets an empty
    action, which every family answers with its invalid-action observation
    (and a spent step), rather than a guess at what the model meant.

      empty:            no visible text;
      truncated:        hit max_new_tokens before ending its turn (its action may be cut off);
      no_action:        the family's parser finds no action in it;
      multiple_actions: a ReAct response with several `Action:` markers, or several lines after one.
    """
    if not text.strip():
        return "", "empty"
    if not finished and not spec.accept_truncated:
        return "", "truncated"
    if spec.send_raw_text:
        return text, None  # the server parses the text itself (and answers malformed ones)
    action = spec.parse_action(text)
    if action is None:
        return "", "no_action"
    if spec.parse_action is parse_react_action and _several_react_actions(text):
        return "", "multiple_actions"
    return action, None


def _several_react_actions(text: str) -> bool:
    if text.count("Action:") > 1:
        return True
    after = text[text.rfind("Action:") + len("Action:") :]
    return sum(1 for line in after.splitlines() if line.strip()) > 1


class _Episode:
    def __init__(self, trajectory: Trajectory, session, observation: str):
        self.trajectory = trajectory
        self.session = session
        self.observation = observation
        self.finished = False
        self.dropped = False  # its env session failed: the trajectory is discarded, not scored
        self.skipped = False  # the env could not grade it (info["skipped"]): discarded, counted apart


@dataclass
class _Replayed:
    """A turn of a start state's prefix, replayed at reset: its record and the env's answer."""

    record: Turn
    answer: str


def start_state_fraction(env_config: dict) -> float:
    """env_config `start_state_fraction`: the share of a training call's groups that start
    from `start_states` (1.0 by default); the rest play fresh tasks of the runner's split."""
    value = env_config.get("start_state_fraction", 1.0)
    if "start_state_fraction" in env_config and not env_config.get("start_states"):
        raise ValueError("env_config start_state_fraction needs start_states (a file of `rllib start-states`)")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise ValueError(f"env_config start_state_fraction must be a number in (0, 1], got {value!r}")
    return float(value)


class LLMEnvRunner(RunnerStateMixin, EnvRunner, Checkpointable):
    def __init__(self, *, config, **kwargs):
        super().__init__(config=config, **kwargs)
        self.spec = get_spec(self.config.env)
        self._env_config = dict(self.config.env_config or {})
        self._split = self._env_config.get("split", "train")
        # A pinned training pool (`task_ids`) does not follow the runner into evaluation,
        # which plays its own split (evaluation.evaluation_task_ids).
        evaluates = getattr(self.config, "in_evaluation", False)
        self.set_task_ids(None if evaluates else self._env_config.get("task_ids"))
        # Training episodes that start from replayed states of the agent (data/start_states.py);
        # like `task_ids`, they do not follow the runner into evaluation.
        starts_path = None if evaluates else self._env_config.get("start_states")
        self._start_states = self._drawable_start_states(starts_path) if starts_path else None
        self._start_state_fraction = start_state_fraction(self._env_config)
        self._seed = (self.config.seed if self.config.seed is not None else 0) + 1000 * (self.worker_index or 0)
        self._num_sample_calls = 0
        self._max_turns = int(self.config.max_turns)
        self._engine: InferenceEngine | None = None
        self._tokenizer = None
        self._chat: ChatFormat | None = None
        self._sessions: list = []
        self._factory: SessionFactory | None = None
        self._pending_weights: dict | None = None
        self._base_weight_cache: dict | None = None
        self._weights_seq_no = 0
        self._env_steps_lifetime = 0
        self._pool = ThreadPoolExecutor(max_workers=max(1, int(self.config.env_step_threads)))

    def __repr__(self) -> str:
        # Ray's dashboard shows this beside the class name (the actor's "repr name").
        # Safe before __init__ has finished (Ray may log it then).
        role = "evaluation" if getattr(getattr(self, "config", None), "in_evaluation", False) else "training"
        env = getattr(getattr(self, "spec", None), "name", "?")
        return f"LLMEnvRunner(agentgym/{env}, {role} runner {getattr(self, 'worker_index', 0) or 0})"

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
            "concurrent_sequences": concurrent_episodes(self.config),
            **dict(self.config.engine_options or {}),
        }
        self._engine = make_engine(self.config.inference_engine, model_path, **options)
        if self._pending_weights is not None:
            self._load_into_engine(self._pending_weights)
            self._pending_weights = None

    def _ensure_sessions(self, n: int) -> list:
        if self._factory is None:
            self._factory = SessionFactory(self.spec, self._env_config, runner_index=self.worker_index)
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

    def set_task_ids(self, task_ids: list[int] | None) -> None:
        """Draw training tasks from exactly `task_ids` (of this runner's split) from now on,
        as env_config `task_ids` does at build time: a curriculum or a fixed pool. None:
        the whole split (within env_config `categories`)."""
        self._task_ids = self.spec.task_ids(self._split, self._env_config.get("categories"), task_ids,
                                            self._env_config.get("env_options"))

    def _drawable_start_states(self, path: str) -> list[StartState]:
        states = load_start_states(path)
        drawable = set(self._task_ids)
        outside = sorted({s.data_idx for s in states} - drawable)
        if outside:
            raise ValueError(f"start_states {path}: tasks {outside[:10]} are not in this runner's tasks "
                             f"(split {self._split!r}, env_config categories / task_ids)")
        return states

    @property
    def task_ids(self) -> list[int]:
        """The tasks this runner draws from: its split, limited to env_config `categories`
        and `task_ids`."""
        return list(self._task_ids)

    def get_max_turns(self) -> int:
        return self._max_turns

    def sample(self, *, num_tasks: int | None = None, group_size: int | None = None, explore: bool = True,
               task_ids: Optional[list[int]] = None, call_index: int | None = None, greedy_members: int = 0,
               **kwargs) -> RolloutResult:
        """Play `group_size` episodes for each of `num_tasks` tasks (or `task_ids`).

        `call_index` fixes the draw (tasks, seeds, group ids); by default this
        runner's count of sample calls. A training runner with env_config
        `start_states` draws those instead of tasks, when `task_ids` is not given:
        each group replays one and plays on from its last answer, for up to the
        horizon's turns. With `start_state_fraction` below 1, only that share of
        the groups (rounded) does; the others play fresh tasks. With `explore`, the first
        `greedy_members` of each group play at temperature 0 (GRPO's training draws pass
        `greedy_group_members`; evaluations sample every member).
        """
        start = time.perf_counter()
        self._ensure_engine()
        group_size = int(group_size or self.config.group_size)
        call = self._num_sample_calls if call_index is None else int(call_index)
        self._num_sample_calls += 1
        starts: list[StartState] | None = None
        if task_ids is None:
            num_tasks = int(num_tasks or self.config.tasks_per_iteration)
            rng = np.random.default_rng([self._seed % 2**32, call])
            num_starts = round(self._start_state_fraction * num_tasks) if self._start_states else 0
            starts = []
            if num_starts:
                picks = rng.choice(len(self._start_states), size=num_starts,
                                   replace=num_starts > len(self._start_states))
                starts = [self._start_states[int(i)] for i in picks]
            num_fresh = num_tasks - num_starts
            fresh = rng.choice(self._task_ids, size=num_fresh, replace=num_fresh > len(self._task_ids))
            task_ids = [s.data_idx for s in starts] + [int(x) for x in fresh]
            starts = starts + [None] * num_fresh
        starts = starts or [None] * len(task_ids)
        result = RolloutResult(trajectories=[], horizon=self._max_turns)
        sessions = self._ensure_sessions(len(task_ids) * group_size)
        sampling = SamplingConfig(
            max_new_tokens=int(self.config.max_new_tokens or self.spec.default_max_new_tokens),
            temperature=float(self.config.temperature if explore else 0.0),
            top_p=float(self.config.top_p),
        )
        num_greedy = int(greedy_members) if explore else 0
        greedy = replace(sampling, temperature=0.0)

        # Reset every session to its task, concurrently.
        specs = [(t, g) for t in task_ids for g in range(group_size)]
        group_base = (call * 1000 + (self.worker_index or 0)) * 10_000  # unique per (call, runner)
        t0 = time.perf_counter()
        resets = list(self._pool.map(
            lambda i: self._safe(self._reset, sessions[i], specs[i][0], starts[i // group_size]), range(len(specs))))
        result.env_s += time.perf_counter() - t0
        episodes: list[_Episode] = []
        for i, ((data_idx, _), reset) in enumerate(zip(specs, resets)):
            if isinstance(reset, EnvFailure):
                result.num_dropped += 1
                continue
            obs, replayed = reset
            traj = Trajectory(
                env=self.spec.name,
                data_idx=data_idx,
                group_id=group_base + i // group_size,
                category=self.spec.category(data_idx),
                greedy=sampling.temperature == 0 or i % group_size < num_greedy,
            )
            prompt = self._chat.prompt_ids(self._tokenizer, self.spec.instruction, obs)
            traj.append(prompt, generated=False)
            traj.prompt_len = len(prompt)
            for turn in replayed:  # context only: never trained on
                traj.append(self._chat.response_ids(self._tokenizer, turn.record.response), generated=False)
                traj.append(self._chat.observation_ids(self._tokenizer, turn.answer, False), generated=False)
                traj.replayed_turns.append(turn.record)
                obs = turn.answer
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
            per_episode = [greedy if e.trajectory.greedy else sampling for e in active] if num_greedy else sampling
            generations = self._engine.generate([e.trajectory.token_ids for e in active], per_episode, seeds)
            result.generation_s += time.perf_counter() - t0
            texts = []
            for e, gen in zip(active, generations):
                e.trajectory.append(gen.token_ids, generated=True, logprobs=gen.logprobs)
                result.num_generated_tokens += len(gen.token_ids)
                texts.append((self._tokenizer.decode(gen.token_ids, skip_special_tokens=True), gen.finished))

            t0 = time.perf_counter()
            outcomes = list(self._pool.map(lambda args: self._step(*args), [(e, *t) for e, t in zip(active, texts)]))
            result.env_s += time.perf_counter() - t0
            last_turn = turn == self._max_turns - 1
            for e, (text, closed), outcome in zip(active, texts, outcomes):
                if isinstance(outcome, EnvFailure):
                    e.finished = e.dropped = True
                    continue
                action, error, step, latency = outcome
                result.env_step_latencies_s.append(latency)
                result.num_actions += 1
                if error is not None:
                    result.num_format_errors += 1
                    result.format_errors[error] = result.format_errors.get(error, 0) + 1
                traj = e.trajectory
                refused = error is not None or bool(step.info.get("invalid_action", False))
                progress = step.info.get("progress")
                traj.turns.append(Turn(e.observation, text, action, float(step.reward), error is None, refused,
                                       None if progress is None else float(progress)))
                traj.reward += float(step.reward)
                traj.success = traj.success or bool(step.info.get("success", False))
                e.skipped = bool(step.info.get("skipped", False))
                e.observation = step.observation
                if step.done or last_turn:
                    e.finished = True
                    traj.done = bool(step.done)
                    traj.final_observation = step.observation
                    if not closed:
                        traj.truncated = True
                    continue
                traj.append(self._chat.observation_ids(self._tokenizer, step.observation, closed), generated=False)

        if self.spec.graded_at_horizon:
            self._grade_cut_episodes([e for e in episodes if not (e.dropped or e.trajectory.done)], result)
        for e in episodes:
            if e.dropped:
                result.num_dropped += 1
            elif e.skipped:
                result.num_skipped += 1
            else:
                result.trajectories.append(e.trajectory)
        steps = sum(t.num_turns for t in result.trajectories)
        self._env_steps_lifetime += steps
        result.wall_s = time.perf_counter() - start
        return result

    @staticmethod
    def _reset(session, data_idx: int, start: StartState | None) -> tuple[str, list[_Replayed]]:
        """Reset `session` to its task, then replay `start`'s prefix there: (the task's first
        observation, the replayed turns)."""
        first = observation = session.reset(data_idx)
        replayed: list[_Replayed] = []
        for response, action in (start.prefix if start else ()):
            step = session.step(action)
            if step.done:
                raise ValueError(f"a start state of task {data_idx} ends the episode at its action {action!r}: "
                                 "it leaves nothing to play from")
            progress = step.info.get("progress")
            record = Turn(observation, response, action, float(step.reward), True,
                          bool(step.info.get("invalid_action", False)), None if progress is None else float(progress))
            replayed.append(_Replayed(record, step.observation))
            observation = step.observation
        return first, replayed

    @staticmethod
    def _safe(fn, *args):
        try:
            return fn(*args)
        except EnvFailure as exc:
            logger.warning("env session failed: %s", exc)
            return exc

    def _grade_cut_episodes(self, cut: list[_Episode], result: RolloutResult) -> None:
        """The env's grade of episodes the horizon or the context cap ended (spec.graded_at_horizon)."""
        t0 = time.perf_counter()
        grades = list(self._pool.map(lambda e: self._safe(e.session.evaluate), cut))
        result.env_s += time.perf_counter() - t0
        for e, grade in zip(cut, grades):
            if isinstance(grade, EnvFailure):
                e.dropped = True
            elif grade is not None:  # None: this server cannot grade; the episode keeps its rewards
                traj = e.trajectory
                traj.reward += grade["reward"]
                traj.success = traj.success or grade["success"]
                if traj.turns:
                    traj.turns[-1].reward += grade["reward"]
                e.skipped = bool(grade.get("skipped", False))

    def _step(self, episode: _Episode, text: str, finished: bool):
        action, error = check_response(self.spec, text, finished)
        t0 = time.perf_counter()
        step = self._safe(episode.session.step, action)
        if isinstance(step, EnvFailure):
            return step
        return action, error, step, time.perf_counter() - t0

    def get_metrics(self):
        return self.metrics.reduce()

    # ---- weights and state ------------------------------------------------------

    def set_weights(self, weights: dict) -> None:
        """HF-named tensors (or arrays) from the learner -> the inference engine.

        A LoRA learner sends only its adapter; the adapted layers' merged
        weights W + (alpha / r) B A go to the engine (see core/lora.py).
        """
        import torch

        tensors = {k: torch.as_tensor(v) for k, v in weights.items()}
        if lora_lib.is_adapter_state(tensors):
            tensors = lora_lib.merge_adapter_into(
                self._base_weights(), tensors, lora_lib.lora_scaling(self.config.lora or {})
            )
        if self._engine is None:
            self._pending_weights = tensors
        else:
            self._load_into_engine(tensors)

    def _load_into_engine(self, tensors: dict) -> None:
        load_policy_weights(self._engine, tensors, bool(self.config.lora), self._base_weights)

    def _base_weights(self) -> dict:
        """The frozen base model's weights (read once from its safetensors files), for LoRA merges."""
        if self._base_weight_cache is None:
            self._base_weight_cache = load_model_weights(resolve_model_path(self.config.model_path))
        return self._base_weight_cache

    def _weights_to_load(self, module_state: dict) -> dict:
        return module_state.get(DEFAULT_MODULE_ID, module_state)  # the single policy's weights

    def stop(self) -> None:
        def _close(session) -> None:
            try:
                session.close()
            except Exception as exc:  # a dead server must not block shutdown
                logger.warning("closing env session failed: %s", exc)

        list(self._pool.map(_close, self._sessions))  # concurrently: each close is bounded in time
        self._sessions = []
        if self._factory is not None:
            self._factory.close()
            self._factory = None
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None
        self._pool.shutdown(wait=False)

"""Multi-agent GRPO: several LLM agents (or copies of one) learn in one text env.

RLlib's multi-agent config says who plays whom:

    config.multi_agent(policies={"shared"},                      # the default: self-play,
                       policy_mapping_fn=PolicyMapping())        # every agent -> "shared"
    config.multi_agent(policies={"x", "o"},                      # one LLM per role
                       policy_mapping_fn=PolicyMapping(by="role"))
    config.multi_agent(policies={"shared", "heuristic"},         # an LLM against a fixed opponent
                       policy_mapping_fn=PolicyMapping(by="table", table={"player_1": "shared", "player_2": "heuristic"}),
                       policies_to_train=["shared"])

Every policy id except the fixed players ("random", "heuristic", "scripted";
see `MultiAgentLLMEnvRunner`) is an LLM with its own `LLMRLModule` in the
MultiRLModule, its own optimizer and its own inference engine; per-module
settings (model_path, lr, ...) come from `algorithm_config_overrides_per_module`.
In YAML the mapping is built by RLlib's `from_config`:

    multiagent:
      policies: [x, o]
      policy_mapping_fn: {type: rllib_agentgym.algorithms.grpo.multi_agent.PolicyMapping, by: role}
      policies_to_train: [x]

One iteration: the runners play `group_size` episodes per task; each LLM
agent's trajectory lands in its policy's batch, with GRPO groups per (task,
agent); the advantages of each module's batch are computed on their own
(`GRPO._build_batch`), frozen modules (`policies_to_train`) get no batch, the
learner updates every module it got, and only those modules' weights go back
to the engines. Metrics per policy land under ``env_runners/policies/<id>``:
return_mean, win/draw/loss rates (games, also by role) or success_rate
(CoopCraft), invalid_action_rate.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.policy.policy import PolicySpec
from ray.rllib.policy.sample_batch import MultiAgentBatch
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS

from rllib_agentgym.algorithms.grpo.grpo import WARM_START_KEYS, GRPO, GRPOConfig
from rllib_agentgym.callbacks.scaling_inter import apply_schedule
from rllib_agentgym.core.trajectory import Trajectory
from rllib_agentgym.env_runners.multi_agent_llm_env_runner import (
    FIXED_POLICIES,
    GAME_OUTCOMES,
    MultiAgentLLMEnvRunner,
    llm_policy_ids,
)

EVALUATION_OPPONENTS = ("auto", "self", *FIXED_POLICIES)


class PolicyMapping:
    """A `policy_mapping_fn(agent_id, episode)` for the multi-agent text envs.

    by="shared": every agent -> `policy` (self-play with one LLM);
    by="role":   an agent -> its role, lower-cased ("x" / "o"; "leader" / "helper");
    by="agent":  an agent -> its agent id ("player_1", "alice", ...);
    by="table":  `table[agent_id]`, else `table[role]`.
    """

    MODES = ("shared", "role", "agent", "table")

    def __init__(self, by: str = "shared", policy: str = "shared", table: Mapping[str, str] | None = None):
        if by not in self.MODES:
            raise ValueError(f"PolicyMapping: by={by!r} unknown; use one of {self.MODES}")
        if by == "table" and not table:
            raise ValueError("PolicyMapping(by='table') needs a table {agent id or role: policy id}")
        self.by, self.policy, self.table = by, str(policy), dict(table or {})

    def __call__(self, agent_id: str, episode: Any = None, **kwargs) -> str:
        if self.by == "shared":
            return self.policy
        if self.by == "agent":
            return str(agent_id)
        role = str(getattr(episode, "roles", {}).get(agent_id, ""))
        if self.by == "role":
            if not role:
                raise ValueError(f"PolicyMapping(by='role'): no role known for agent {agent_id!r}")
            return role.lower()
        for key in (agent_id, role):
            if key in self.table:
                return str(self.table[key])
        raise ValueError(f"PolicyMapping(by='table'): neither agent {agent_id!r} nor role {role!r} is in {self.table}")

    def __repr__(self) -> str:
        return f"PolicyMapping(by={self.by!r}, policy={self.policy!r}, table={self.table!r})"


class MultiAgentGRPOConfig(GRPOConfig):
    """GRPOConfig for multi-agent text envs (agentgym/tictactoe, connect_four, coop_craft)."""

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or MultiAgentGRPO)
        self.env_runner_cls = MultiAgentLLMEnvRunner
        self.policies = {"shared": PolicySpec()}
        self.policy_mapping_fn = PolicyMapping()
        # Periodic evaluation: "auto" plays the games against "random" and CoopCraft in self-play.
        self.evaluation_opponent = "auto"

    def evaluation(self, *, evaluation_opponent: str | None = NotProvided, **kwargs) -> MultiAgentGRPOConfig:
        """GRPOConfig's evaluation settings, plus `evaluation_opponent` (one of EVALUATION_OPPONENTS)."""
        super().evaluation(**kwargs)
        if evaluation_opponent is not NotProvided:
            self.evaluation_opponent = evaluation_opponent
        return self

    def get_config_for_module(self, module_id) -> MultiAgentGRPOConfig:
        """RLlib's per-module config (`algorithm_config_overrides_per_module`), with that
        module's own warm start resolved: a module that names its starting model (model_path,
        init_from or load_checkpoint) replaces the run-wide one instead of clashing with it."""
        overrides = self.algorithm_config_overrides_per_module.get(module_id)
        if overrides and module_id not in self._per_module_overrides:
            config = self.copy(copy_frozen=False)
            if any(key in overrides for key in WARM_START_KEYS):
                config.model_path = type(self)().model_path
                config.init_from = config.load_checkpoint = None
            config.update_from_dict(overrides)
            config.resolve_warm_start()
            self._per_module_overrides[module_id] = config
        return super().get_config_for_module(module_id)

    def get_multi_rl_module_spec(self, *, env=None, spaces=None, inference_only: bool = False, **kwargs) -> MultiRLModuleSpec:
        """One LLMRLModule per LLM policy, each built as GRPO builds its single module
        (with that module's config overrides); the fixed players have none."""
        from rllib_agentgym.envs.gym_env import text_space

        specs = {}
        for policy_id in llm_policy_ids(self.policies):
            spec = self.get_config_for_module(policy_id).get_default_rl_module_spec()
            spec.observation_space = spec.action_space = text_space()
            spec.inference_only = inference_only
            specs[policy_id] = spec
        return MultiRLModuleSpec(rl_module_specs=specs)

    def validate(self) -> None:
        super().validate()
        from envs.multiagent.registry import MULTIAGENT_ENVS
        from rllib_agentgym.envs.registry import family_name

        if self.env is not None and family_name(str(self.env)) not in MULTIAGENT_ENVS:
            self._value_error(f"MultiAgentGRPO plays the multi-agent envs agentgym/{{{','.join(MULTIAGENT_ENVS)}}}, not {self.env!r}")
        if not llm_policy_ids(self.policies):
            self._value_error(f"policies {sorted(self.policies)} name no LLM policy (all are fixed players)")
        for policy_id in llm_policy_ids(self.policies):
            self.get_config_for_module(policy_id)  # a bad per-policy warm start fails here, at build
        train = self.policies_to_train
        if train is not None and not callable(train):
            unknown = set(train) - set(self.policies)
            if unknown:
                self._value_error(f"policies_to_train names unknown policies {sorted(unknown)}")
        if self.dynamic_sampling:
            self._value_error("dynamic_sampling is not implemented for MultiAgentGRPO")
        if self.evaluation_opponent not in EVALUATION_OPPONENTS:
            self._value_error(f"evaluation_opponent {self.evaluation_opponent!r} unknown; use one of {EVALUATION_OPPONENTS}")


class MultiAgentGRPO(GRPO):
    @classmethod
    def get_default_config(cls) -> MultiAgentGRPOConfig:
        return MultiAgentGRPOConfig()

    def training_step(self) -> None:
        apply_schedule(self)  # as GRPO.training_step: h(t) on every runner, restored ones too
        t_start = time.perf_counter()
        rollouts = self._sample()
        trajectories = [t for r in rollouts for t in r.trajectories]
        self._log_rollout_metrics(rollouts, trajectories, time.perf_counter() - t_start)
        self._log_policy_metrics(rollouts)
        batch = self._trainable(self._build_multi_agent_batch(trajectories))
        if batch.policy_batches:
            # Only the updated modules changed: only they go back to the engines.
            self._update_and_sync(batch, policies=sorted(batch.policy_batches))
        self._write_trajectories(rollouts)

    # ---- the batch: one padded SampleBatch per LLM module ------------------------------

    def _build_multi_agent_batch(self, trajectories: list[Trajectory]) -> MultiAgentBatch:
        """Each module's trajectories padded, with advantages over its own groups."""
        by_policy: dict[str, list[Trajectory]] = {}
        for t in trajectories:
            by_policy.setdefault(t.policy_id, []).append(t)
        batches = {
            policy_id: self._build_batch(trajs).policy_batches[DEFAULT_MODULE_ID]
            for policy_id, trajs in sorted(by_policy.items())
        }
        return MultiAgentBatch(batches, env_steps=len(trajectories))

    def _trainable(self, batch: MultiAgentBatch) -> MultiAgentBatch:
        """The batch without the modules `policies_to_train` freezes (RLlib's semantics:
        None trains all, a collection names them, a callable decides per (module id, batch))."""
        rule = self.config.policies_to_train
        keep = {}
        for policy_id, policy_batch in batch.policy_batches.items():
            if rule is None or (rule(policy_id, batch) if callable(rule) else policy_id in set(rule)):
                keep[policy_id] = policy_batch
        return MultiAgentBatch(keep, env_steps=batch.env_steps())

    # ---- metrics --------------------------------------------------------------------------

    def _log_policy_metrics(self, rollouts) -> None:
        """Per policy (LLM or fixed): return_mean, invalid_action_rate, and win/draw/loss
        rates (games; also by role) or success_rate (cooperative envs)."""
        records = [ep for r in rollouts for ep in getattr(r, "episodes", [])]
        seats: dict[str, list[tuple[Any, str]]] = {}
        for ep in records:
            for agent, policy_id in ep.policies.items():
                seats.setdefault(policy_id, []).append((ep, agent))
        log = self.metrics.log_value
        for policy_id, members in sorted(seats.items()):
            key = (ENV_RUNNER_RESULTS, "policies", policy_id)
            turns = sum(ep.turns[a] for ep, a in members)
            log(key + ("return_mean",), float(np.mean([ep.returns[a] for ep, a in members])), window=1)
            log(key + ("num_agent_episodes",), len(members), window=1)
            invalid = sum(ep.invalid_actions[a] for ep, a in members) / turns if turns else float("nan")
            log(key + ("invalid_action_rate",), invalid, window=1)
            outcomes = [ep.outcomes[a] for ep, a in members]
            if any(o in ("success", "failure") for o in outcomes):
                log(key + ("success_rate",), float(np.mean([o == "success" for o in outcomes])), window=1)
                continue
            for name in (*GAME_OUTCOMES, "unfinished"):
                log(key + (f"{name}_rate",), float(np.mean([o == name for o in outcomes])), window=1)
            for role in sorted({ep.roles[a] for ep, a in members}):
                of_role = [ep.outcomes[a] for ep, a in members if ep.roles[a] == role]
                log(key + ("win_rate_by_role", role), float(np.mean([o == "win" for o in of_role])), window=1)

    # ---- periodic evaluation (RLlib's `evaluation_interval`) --------------------------------

    def _evaluate_policies(self) -> dict:
        """Greedy games against `evaluation_opponent` (CoopCraft: self-play) on the
        evaluation split: see `rllib_agentgym.evaluation_multiagent`."""
        from rllib_agentgym.evaluation_multiagent import evaluate_multiagent_during_training

        return evaluate_multiagent_during_training(self)

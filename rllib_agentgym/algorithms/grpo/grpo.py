"""GRPO for multi-turn LLM agents on RLlib's new API stack.

One iteration (see DESIGN.md, "The loop"):
  1. every LLMEnvRunner plays `group_size` episodes for each of its tasks;
  2. advantages per group of one task's episodes (pure functions);
  3. the LearnerGroup updates the LLM (clipped surrogate + KL to the frozen reference);
  4. the new weights go to the runners' inference engines;
  5. metrics go to the MetricsLogger (Tune, TensorBoard, dashboard).
"""

from __future__ import annotations

import logging
import math
import os
import time
from typing import Any, Optional

import numpy as np
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
)
from ray.tune.execution.placement_groups import PlacementGroupFactory

from rllib_agentgym.algorithms.advantages import (
    compute_advantages,
    dynamic_sampling_keep_mask,
    invalid_turn_advantages,
)
from rllib_agentgym.algorithms.grpo.torch.grpo_torch_learner import CRITIC_ONLY
from rllib_agentgym.algorithms.resources import free_node_cpus, main_process_cpus, uses_local_cpu_learner
from rllib_agentgym.algorithms.rewards import (
    REWARD_TYPES,
    invalid_turn_flags,
    outcome_rewards,
    progress_stats,
    refusal_rates,
    repeated_refusal_flags,
)
from rllib_agentgym.algorithms.step_anchors import ANCHOR_KINDS, shared_turn_fraction, step_arrays
from rllib_agentgym.callbacks.scaling_inter import HorizonSchedule, ScalingInterCallback, apply_schedule
from rllib_agentgym.core.trajectory import Trajectory, pad_batch
from rllib_agentgym.env_runners.llm_env_runner import FORMAT_ERROR_KINDS, LLMEnvRunner, RolloutResult

# Estimators whose baseline needs whole groups: the batch's advantages are computed on the
# driver (`GRPO._build_batch`), before the batch is sharded across learners.
GROUP_ESTIMATORS = ("grpo", "rloo", "gigpo")
OLD_LOGPROB_SOURCES = ("learner", "engine")  # GRPOConfig.old_logprobs
MAIN_PROCESS_THREADS = "main_process_threads"  # a result key: torch's threads in the trial's process


# The optimizers a policy can train with (GRPOConfig.policy_optimizer).
POLICY_OPTIMIZERS = ("adamw", "sgd")

# The settings that name a run's starting model (see GRPOConfig.resolve_warm_start).
WARM_START_KEYS = ("model_path", "init_from", "load_checkpoint")


logger = logging.getLogger(__name__)


class GRPOConfig(AlgorithmConfig):
    """Config of GRPO (and its DAPO / Dr. GRPO options) for LLM agents."""

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or GRPO)
        # Model and rollout.
        self.model_path = "embedded"  # local path, hub id, "embedded", or a checkpoint dir (a warm start)
        # A warm start from an AgentSFT / GRPO checkpoint, as RLlib users write it: aliases that
        # validate() resolves into `model_path` (see `resolve_warm_start`).
        self.init_from = None
        self.load_checkpoint = None
        self.model_dtype = "float32"  # the inference engine's dtype; the learner autocasts to it
        self.learner_dtype = "float32"  # the trained (master) weights
        self.gradient_checkpointing = False
        self.inference_engine = "auto"  # "vllm" | "hf" | "auto"
        self.engine_options = {}  # extra kwargs for the engine (gpu_memory_utilization, tensor_parallel_size, ...)
        self.max_model_len = 4096
        self.max_new_tokens = None  # per turn; None: the env family's default
        self.temperature = 1.0
        self.top_p = 1.0
        self.group_size = 8
        # Members of each group played greedily (temperature 0), the rest sampled: the greedy
        # episode is what a greedy evaluation plays, so its turns take the group's credit too.
        self.greedy_group_members = 0
        self.tasks_per_iteration = 4  # tasks per training batch, split across env runners
        self.max_turns = 10  # horizon when `scaling_inter` is not set
        self.scaling_inter = None  # {schedule: [...], interval: D} or {start, delta, interval, max}
        self.env_step_threads = 16
        self.log_trajectories = 4  # trajectories written per iteration for the viewer / TensorBoard
        # Loss.
        self.reward_type = "return"  # "return": the env's summed reward; "success": 1[success] (rewards.py)
        self.invalid_action_penalty = 0.0  # subtracted from the outcome reward per invalid turn (rewards.py)
        self.progress_reward = 0.0  # times the episode's most info["progress"], added to it (rewards.py)
        # Subtracted from the advantage of the refused turn's own tokens (advantages.invalid_turn_advantages).
        self.invalid_turn_advantage = 0.0
        # The same, only on a turn that repeats the action refused the turn before
        # (rewards.repeated_refusal_flags): wrong in every state, unlike a first refusal.
        self.repeated_refusal_advantage = 0.0
        self.advantage_estimator = "grpo"
        self.norm_adv_by_std = True
        # GiGPO (advantage_estimator "gigpo"): omega times the step advantage among turns that
        # acted from one state (step_anchors.py), discounted by `gamma`, on top of GRPO's.
        self.step_advantage_weight = 1.0
        self.step_anchor = "observation"  # "observation" | "history"
        self.positive_advantage_weight = 1.0  # < 1: W-REINFORCE (0.1) / NSR (0), advantages.py
        self.negative_advantage_weight = 1.0  # 0: PSR, the above-baseline samples alone (advantages.py)
        self.clip_ratio_low = 0.2
        self.clip_ratio_high = 0.2
        self.use_kl_loss = True
        self.kl_coef = 0.001
        self.kl_estimator = "low_var_kl"  # k1 | k2 | k3 (= low_var_kl)
        self.loss_agg_mode = "token-mean"
        self.entropy_coeff = 0.0
        self.micro_batch_size = 4  # trajectories per forward/backward (gradient accumulation)
        # The tokens a micro-batch's rows all start with (the instruction, or one group's whole prompt)
        # run through the learner's model once, not once a row: the same log-probs and gradients.
        # "auto": on a CPU learner only (on a GPU the split forward costs more than it saves).
        self.share_prompt_prefix = "auto"
        # Rows whose advantage is 0 at every trained token (a GRPO group whose rewards are all
        # equal) add nothing to a loss that is the clipped surrogate alone: the learner leaves
        # them out of its forward and backward passes (not with a KL, entropy or value term).
        self.skip_zero_advantage_rows = True
        # pi_old of a batch that feeds several optimizer steps (minibatches, epochs):
        # "learner": a no-grad forward of the policy before the update (exact);
        # "engine": the rollout engine's log-probs of the tokens it sampled, no forward (the
        # learner's time -41% in a 2-minibatch BabyAI run, docs/learning.md section 3); they
        # are the sampling distribution's only at temperature 1 and top_p 1 (vLLM reports raw
        # log-probs), and differ from the learner's by the engine's numerics (a bf16 engine on
        # a GPU: the first step's ratio is then not exactly 1).
        self.old_logprobs = "learner"
        self.dynamic_sampling = False  # DAPO: drop groups whose rewards are all equal, refill the batch
        self.dynamic_sampling_max_rounds = 3  # extra sampling rounds at most, per iteration
        self.overlong_filter = False  # DAPO: mask trajectories cut by the length cap
        # Periodic evaluation (`evaluation_interval`): greedy, one episode per task of the split
        # in `evaluation_config: {env_config: {split}}` (default "test"); None: the whole split.
        self.evaluation_num_tasks = None
        self.kl_in_reward_coef = 0.0  # REINFORCE++ / PPO: -coef * KL_t in the token rewards
        # Expert data in every optimizer step (InstructGPT's PPO-ptx): L = L_RL + sft_coef * NLL of
        # `sft_batch_size` expert conversations (algorithms/sft/examples.py names the data options).
        self.sft_coef = 0.0
        self.sft_data = None  # a JSONL path or a list of them
        self.sft_expert = None  # {num, split, max_steps, expert_options, augmented_copies}: the env's expert plays
        self.sft_batch_size = 8  # expert conversations per optimizer step
        self.gamma = 1.0
        self.lambda_ = 1.0
        # PPO's critic (a value head on the LLM; used when advantage_estimator == "gae").
        self.vf_lr = 1e-5
        self.vf_loss_coeff = 0.5
        self.vf_clip_param = 0.2
        # Iterations at the start in which only the critic learns (verl's critic_warmup): a fresh
        # value head's first estimates are noise, and GAE advantages built on them would be too.
        self.critic_warmup = 0
        # LoRA through peft: {r, alpha, dropout, target_modules}; None trains all weights.
        self.lora = None
        self.weight_decay = 0.0
        # The policy's optimizer: "adamw", or "sgd" (with `sgd_momentum`). Adam moves every weight
        # by about `lr` whatever its gradient's size, so a weight whose gradient is only sampling
        # noise moves as far as one that carries the credit; SGD moves each in proportion to its
        # gradient (docs/learning.md, section 3, "Plain SGD").
        self.policy_optimizer = "adamw"
        self.sgd_momentum = 0.0
        # RLlib settings that fit LLM training.
        self.lr = 1e-6
        self.grad_clip = 1.0
        self.grad_clip_by = "global_norm"
        self.num_epochs = 1
        self.minibatch_size = None
        self.num_env_runners = 0
        self.env_runner_cls = LLMEnvRunner
        self.callbacks_class = ScalingInterCallback
        self.framework_str = "torch"

    def training(
        self,
        *,
        reward_type: Optional[str] = NotProvided,
        invalid_action_penalty: Optional[float] = NotProvided,
        progress_reward: Optional[float] = NotProvided,
        invalid_turn_advantage: Optional[float] = NotProvided,
        repeated_refusal_advantage: Optional[float] = NotProvided,
        advantage_estimator: Optional[str] = NotProvided,
        norm_adv_by_std: Optional[bool] = NotProvided,
        step_advantage_weight: Optional[float] = NotProvided,
        step_anchor: Optional[str] = NotProvided,
        positive_advantage_weight: Optional[float] = NotProvided,
        negative_advantage_weight: Optional[float] = NotProvided,
        clip_ratio_low: Optional[float] = NotProvided,
        clip_ratio_high: Optional[float] = NotProvided,
        use_kl_loss: Optional[bool] = NotProvided,
        kl_coef: Optional[float] = NotProvided,
        kl_estimator: Optional[str] = NotProvided,
        loss_agg_mode: Optional[str] = NotProvided,
        entropy_coeff: Optional[float] = NotProvided,
        micro_batch_size: Optional[int] = NotProvided,
        share_prompt_prefix: Optional[bool | str] = NotProvided,
        skip_zero_advantage_rows: Optional[bool] = NotProvided,
        old_logprobs: Optional[str] = NotProvided,
        group_size: Optional[int] = NotProvided,
        tasks_per_iteration: Optional[int] = NotProvided,
        dynamic_sampling: Optional[bool] = NotProvided,
        dynamic_sampling_max_rounds: Optional[int] = NotProvided,
        overlong_filter: Optional[bool] = NotProvided,
        kl_in_reward_coef: Optional[float] = NotProvided,
        sft_coef: Optional[float] = NotProvided,
        sft_data=NotProvided,
        sft_expert: Optional[dict] = NotProvided,
        sft_batch_size: Optional[int] = NotProvided,
        vf_lr: Optional[float] = NotProvided,
        vf_loss_coeff: Optional[float] = NotProvided,
        vf_clip_param: Optional[float] = NotProvided,
        critic_warmup: Optional[int] = NotProvided,
        lora: Optional[dict] = NotProvided,
        weight_decay: Optional[float] = NotProvided,
        policy_optimizer: Optional[str] = NotProvided,
        sgd_momentum: Optional[float] = NotProvided,
        **kwargs,
    ) -> "GRPOConfig":
        super().training(**kwargs)
        for name, value in dict(
            reward_type=reward_type, invalid_action_penalty=invalid_action_penalty, progress_reward=progress_reward,
            invalid_turn_advantage=invalid_turn_advantage, repeated_refusal_advantage=repeated_refusal_advantage,
            advantage_estimator=advantage_estimator, norm_adv_by_std=norm_adv_by_std,
            step_advantage_weight=step_advantage_weight, step_anchor=step_anchor,
            positive_advantage_weight=positive_advantage_weight, negative_advantage_weight=negative_advantage_weight,
            clip_ratio_low=clip_ratio_low,
            clip_ratio_high=clip_ratio_high, use_kl_loss=use_kl_loss,
            kl_coef=kl_coef, kl_estimator=kl_estimator, loss_agg_mode=loss_agg_mode,
            entropy_coeff=entropy_coeff, micro_batch_size=micro_batch_size,
            share_prompt_prefix=share_prompt_prefix, skip_zero_advantage_rows=skip_zero_advantage_rows,
            old_logprobs=old_logprobs,
            group_size=group_size,
            tasks_per_iteration=tasks_per_iteration, dynamic_sampling=dynamic_sampling,
            dynamic_sampling_max_rounds=dynamic_sampling_max_rounds, overlong_filter=overlong_filter,
            kl_in_reward_coef=kl_in_reward_coef, sft_coef=sft_coef, sft_data=sft_data, sft_expert=sft_expert,
            sft_batch_size=sft_batch_size, vf_lr=vf_lr, vf_loss_coeff=vf_loss_coeff,
            vf_clip_param=vf_clip_param, critic_warmup=critic_warmup, lora=lora, weight_decay=weight_decay,
            policy_optimizer=policy_optimizer, sgd_momentum=sgd_momentum,
        ).items():
            if value is not NotProvided:
                setattr(self, name, value)
        return self

    def llm(self, **kwargs) -> "GRPOConfig":
        """LLM rollout settings: model_path, inference_engine, max_turns, temperature, ..."""
        for name, value in kwargs.items():
            if not hasattr(self, name):
                raise AttributeError(f"unknown rollout setting {name!r}")
            setattr(self, name, value)
        return self

    def evaluation(self, *, evaluation_num_tasks: Optional[int] = NotProvided, **kwargs) -> "GRPOConfig":
        """RLlib's evaluation settings, plus `evaluation_num_tasks` (tasks of the evaluation
        split per periodic evaluation; None: all). A config dict's `evaluation_*` keys come here."""
        super().evaluation(**kwargs)
        if evaluation_num_tasks is not NotProvided:
            self.evaluation_num_tasks = evaluation_num_tasks
        return self

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from rllib_agentgym.core.rl_module import LLMRLModule

        return RLModuleSpec(
            module_class=LLMRLModule,
            model_config={
                "model": self.model_path,
                # The learner trains fp32 master weights (bf16 weights would drop most
                # lr-1e-6 updates); a lower `model_dtype` is the engine's dtype and the
                # learner's autocast (mixed precision).
                "dtype": self.learner_dtype,
                "autocast": self.model_dtype if self.model_dtype in ("bfloat16", "float16") else None,
                # Log-probs at the sampling temperature (greedy, 0, samples nothing to train on).
                "temperature": float(self.temperature) if self.temperature and self.temperature > 0 else 1.0,
                "gradient_checkpointing": self.gradient_checkpointing,
                "share_prefix": self.share_prompt_prefix,
                "entropy_grad": bool(self.entropy_coeff),
                "lora": self.lora,
                "value_head": self.advantage_estimator == "gae",
            },
        )

    def get_default_learner_class(self):
        from rllib_agentgym.algorithms.grpo.torch.grpo_torch_learner import GRPOTorchLearner

        return GRPOTorchLearner

    def resolve_warm_start(self) -> None:
        """`init_from: CKPT` (or `load_checkpoint: CKPT`) -> `model_path: CKPT`: the learner, the
        KL reference and the inference engines start from the checkpoint's policy (exported once,
        LoRA merged). A model folder or hub id belongs in `model_path` itself."""
        from rllib_agentgym.export import is_rllib_checkpoint

        named = {k: os.path.expanduser(str(v)) for k in ("init_from", "load_checkpoint") if (v := getattr(self, k))}
        if not named:
            return
        if len(set(named.values())) > 1:
            self._value_error(f"init_from and load_checkpoint name different checkpoints: {named}; set one")
        (alias, path), *_ = named.items()
        if not is_rllib_checkpoint(path):
            self._value_error(f"{alias}: {path!r} is not a checkpoint of a run (no policy module under it); "
                              "a model folder or hub id goes in model_path")
        if self.model_path not in (path, type(self)().model_path):
            self._value_error(f"{alias}: {path!r} and model_path: {self.model_path!r} both name the starting "
                              "model; set one")
        self.model_path = path

    def validate(self) -> None:
        self.resolve_warm_start()  # first: everything after reads model_path
        super().validate()
        from rllib_agentgym.algorithms.advantages import ESTIMATORS
        from rllib_agentgym.algorithms.losses import KL_KINDS, LOSS_AGG_MODES
        from rllib_agentgym.core.rl_module import SHARE_PREFIX_SETTINGS

        if self.reward_type not in REWARD_TYPES:
            self._value_error(f"reward_type {self.reward_type!r} unknown; valid: {list(REWARD_TYPES)}")
        if self.advantage_estimator not in ESTIMATORS:
            self._value_error(f"advantage_estimator {self.advantage_estimator!r} unknown; valid: {sorted(ESTIMATORS)}")
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            self._value_error(f"loss_agg_mode {self.loss_agg_mode!r} unknown; valid: {list(LOSS_AGG_MODES)}")
        if self.kl_estimator not in KL_KINDS:
            self._value_error(f"kl_estimator {self.kl_estimator!r} unknown; valid: {list(KL_KINDS)}")
        if self.share_prompt_prefix not in SHARE_PREFIX_SETTINGS:
            self._value_error(f"share_prompt_prefix must be one of {SHARE_PREFIX_SETTINGS}, "
                              f"got {self.share_prompt_prefix!r}")
        for name in ("invalid_action_penalty", "progress_reward", "invalid_turn_advantage", "repeated_refusal_advantage"):
            if not getattr(self, name) >= 0:
                self._value_error(f"{name} must be >= 0, got {getattr(self, name)!r}")
        for name in ("invalid_turn_advantage", "repeated_refusal_advantage"):
            if getattr(self, name) and self.advantage_estimator not in GROUP_ESTIMATORS:
                self._value_error(f"{name} needs a group estimator ({', '.join(GROUP_ESTIMATORS)}), "
                                  f"not {self.advantage_estimator!r}")
        if self.step_anchor not in ANCHOR_KINDS:
            self._value_error(f"step_anchor {self.step_anchor!r} unknown; valid: {list(ANCHOR_KINDS)}")
        if not self.step_advantage_weight >= 0:
            self._value_error(f"step_advantage_weight must be >= 0, got {self.step_advantage_weight!r}")
        for name in ("positive_advantage_weight", "negative_advantage_weight"):
            if not getattr(self, name) >= 0:
                self._value_error(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if self.old_logprobs not in OLD_LOGPROB_SOURCES:
            self._value_error(f"old_logprobs {self.old_logprobs!r} unknown; valid: {list(OLD_LOGPROB_SOURCES)}")
        if self.old_logprobs == "engine" and (self.temperature != 1.0 or self.top_p != 1.0):
            self._value_error(
                f"old_logprobs 'engine' needs temperature 1 and top_p 1 (got {self.temperature}, {self.top_p}): the "
                "engine reports log-probs of the raw logits, not of the distribution it sampled from; use 'learner'")
        if self.group_size < 1 or self.tasks_per_iteration < 1:
            self._value_error("group_size and tasks_per_iteration must be >= 1")
        if not 0 <= self.greedy_group_members < self.group_size:
            self._value_error(f"greedy_group_members must be in [0, group_size) = [0, {self.group_size}), "
                              f"got {self.greedy_group_members!r}: a group needs a sampled member")
        if self.greedy_group_members and self.old_logprobs == "engine":
            self._value_error("greedy_group_members needs old_logprobs 'learner': a greedy token's engine "
                              "log-prob is not its probability under the sampling distribution")
        if not self.sft_coef >= 0:
            self._value_error(f"sft_coef must be >= 0, got {self.sft_coef!r}")
        if self.sft_coef and not (self.sft_data or self.sft_expert):
            self._value_error("sft_coef > 0 needs expert data: `sft_data` (JSONL paths) or `sft_expert` ({num, split})")
        if self.sft_coef and self.is_multi_agent:
            self._value_error("sft_coef: expert data for one policy; a multi-agent run has several")
        if self.sft_coef and self.num_learners > 1:
            # The term's backward runs outside the DDP wrapper's forward, which would not all-reduce it.
            self._value_error("sft_coef runs on one learner (num_learners 0 or 1)")
        if self.sft_expert and not self.env:
            self._value_error("`sft_expert` needs `env` (whose expert plays the tasks)")
        if not (isinstance(self.sft_batch_size, int) and self.sft_batch_size >= 1):
            self._value_error(f"sft_batch_size must be an integer >= 1, got {self.sft_batch_size!r}")
        if self.policy_optimizer not in POLICY_OPTIMIZERS:
            self._value_error(f"policy_optimizer {self.policy_optimizer!r} unknown; valid: {list(POLICY_OPTIMIZERS)}")
        if not 0 <= self.sgd_momentum < 1:
            self._value_error(f"sgd_momentum must be in [0, 1), got {self.sgd_momentum!r}")
        if self.sgd_momentum and self.policy_optimizer != "sgd":
            self._value_error(f"sgd_momentum is SGD's; policy_optimizer is {self.policy_optimizer!r}")
        if self.critic_warmup < 0:
            self._value_error(f"critic_warmup must be >= 0, got {self.critic_warmup!r}")
        if self.critic_warmup and self.advantage_estimator != "gae":
            self._value_error(f"critic_warmup needs a critic: advantage_estimator 'gae', not {self.advantage_estimator!r}")
        HorizonSchedule.from_config(self.scaling_inter, self.max_turns)  # raises on a bad schedule
        callbacks = self.callbacks_class if isinstance(self.callbacks_class, (list, tuple)) else [self.callbacks_class]
        if not any(isinstance(c, type) and issubclass(c, ScalingInterCallback) for c in callbacks):
            # User callbacks come in addition to the horizon schedule, never instead of it.
            self.callbacks_class = [ScalingInterCallback, *callbacks]


class AgentPPOConfig(GRPOConfig):
    """PPO for LLM agents: a value head on the LLM, GAE, clipped value loss with its own lr.

    Registered as `AgentPPO` so that `run: PPO` keeps meaning RLlib's own PPO.
    """

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or AgentPPO)
        self.advantage_estimator = "gae"
        self.group_size = 1
        self.use_kl_loss = False
        self.kl_in_reward_coef = 0.001
        self.lambda_ = 0.95


class GRPO(Algorithm):
    @classmethod
    def get_default_config(cls) -> GRPOConfig:
        return GRPOConfig()

    @classmethod
    def default_resource_request(cls, config):
        """RLlib's request, except that a local CPU learner at `num_cpus_per_learner: "auto"`
        reserves the free CPUs its node has left after the trial's other bundles: Ray gives the
        trial's process as many OpenMP threads as it reserves, and that process trains (and,
        with a local env runner, generates). Several such trials on one node then run one
        after another; set `num_cpus_per_learner` to share a node."""
        request = super().default_resource_request(config)
        cfg = cls.get_default_config().update_from_dict(config.to_dict() if isinstance(config, AlgorithmConfig) else config)
        if not uses_local_cpu_learner(cfg):
            return request
        main, *others = request.bundles
        cpus = main_process_cpus(main.get("CPU", 0.0), [b.get("CPU", 0.0) for b in others], free_node_cpus())
        return PlacementGroupFactory([{**main, "CPU": cpus}, *others], strategy=request.strategy)

    def setup(self, config):
        super().setup(config)
        self._current_horizon = HorizonSchedule.from_config(self.config.scaling_inter, self.config.max_turns).horizon(
            self.iteration
        )

    # ---- sampling ---------------------------------------------------------------

    def _sample(self) -> list[RolloutResult]:
        """One sampling call. Its draw (tasks, seeds) is a pure function of (iteration, call
        within it), so a restored run or a runner restarted mid-call replays it exactly.

        A remote runner that dies mid-call is restarted by RLlib (`restart_failed_env_runners`);
        it gets the current weights and horizon and redoes its share, so the iteration
        completes. Shares that no runner delivered within `env_runner_restore_timeout_s`
        count as dropped episodes.
        """
        cfg = self.config
        group = self.env_runner_group
        iteration, k = getattr(self, "_sample_call", (None, -1))
        k = k + 1 if iteration == self.iteration else 0
        self._sample_call = (self.iteration, k)
        call = self.iteration * 1000 + k
        greedy_members = int(cfg.greedy_group_members)  # an int into the closure below, not the config
        if group.num_remote_env_runners() == 0:
            return [group.local_env_runner.sample(num_tasks=cfg.tasks_per_iteration, call_index=call,
                                                  greedy_members=greedy_members)]

        def restore() -> list[int]:
            restored = self.restore_env_runners(group)
            if restored:
                self._make_on_env_runners_recreated_callbacks(
                    config=cfg, env_runner_group=group, restored_env_runner_indices=restored
                )
                group.sync_weights(from_worker_or_learner_group=self.learner_group, to_worker_indices=restored,
                                   inference_only=True, timeout_seconds=600.0)
            return restored

        results: dict[int, RolloutResult] = {}

        def sample_on(ids: list[int]) -> None:
            for index, rollout in group.foreach_env_runner(
                lambda runner: (runner.worker_index, runner.sample(num_tasks=per_runner, call_index=call,
                                                                   greedy_members=greedy_members)),
                local_env_runner=False,
                remote_worker_ids=ids,
            ):
                results[index] = rollout

        ids = group.healthy_env_runner_ids()
        per_runner = math.ceil(cfg.tasks_per_iteration / max(1, len(ids) or group.num_remote_env_runners()))
        if ids:
            sample_on(ids)
        else:
            ids = list(range(1, group.num_remote_env_runners() + 1))  # all down: wait for restarts below
        # Ray restarts a dead runner's actor (a new process: seconds to a minute); wait for it.
        deadline = time.monotonic() + cfg.env_runner_restore_timeout_s
        while cfg.restart_failed_env_runners and len(results) < len(ids) and time.monotonic() < deadline:
            if restore():
                sample_on([i for i in ids if i not in results])
            else:
                time.sleep(1.0)
        rollouts = [results[i] for i in sorted(results)]
        lost = (len(ids) - len(results)) * per_runner
        if lost:
            rollouts.append(RolloutResult(trajectories=[], num_dropped=lost * cfg.group_size, horizon=self._current_horizon))
        return rollouts

    def training_step(self) -> None:
        cfg = self.config
        # The callback sets h(t) at init, restore and after every iteration; this also covers
        # runners restored from a checkpoint without a callback (Algorithm.from_checkpoint
        # restores the local runner's state only).
        apply_schedule(self)
        # What a local learner and engine compute with (default_resource_request).
        self.metrics.log_value(MAIN_PROCESS_THREADS, torch.get_num_threads(), window=1)
        t_start = time.perf_counter()
        rollouts = self._sample()
        trajectories = [t for r in rollouts for t in r.trajectories]
        if cfg.dynamic_sampling:
            trajectories = self._dynamic_sampling(trajectories, rollouts)  # extends `rollouts` with its refills
        # Every episode played counts (episodes, env steps, success), refills included.
        self._log_rollout_metrics(rollouts, [t for r in rollouts for t in r.trajectories], time.perf_counter() - t_start)
        if trajectories:
            batch = self._build_batch(trajectories)
            self._update_and_sync(batch, timesteps={CRITIC_ONLY: self.iteration < cfg.critic_warmup})
        self._write_trajectories(rollouts)

    def _update_and_sync(self, batch: MultiAgentBatch, policies: list[str] | None = None,
                         timesteps: dict | None = None) -> None:
        """One learner-group update on `batch`, then its new weights (of `policies`, or all) to the engines."""
        cfg = self.config
        with self._timer(LEARNER_UPDATE_TIMER):
            learner_results = self.learner_group.update(
                batch=batch,
                minibatch_size=cfg.minibatch_size,
                num_epochs=cfg.num_epochs,
                shuffle_batch_per_epoch=cfg.num_epochs > 1,
                timesteps={
                    NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                        (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0
                    ),
                    **(timesteps or {}),
                },
            )
        self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)
        with self._timer(SYNCH_WORKER_WEIGHTS_TIMER):
            self.env_runner_group.sync_weights(
                policies=policies,
                from_worker_or_learner_group=self.learner_group,
                inference_only=True,
                timeout_seconds=600.0,
            )

    def _timer(self, name: str):
        """RLlib's `timers/<name>` for this iteration's seconds (window 1, not RLlib's EMA: an
        LLM iteration's parts vary with its episodes' lengths, and its sampling time is
        `env_runners/rollout_wall_s`)."""
        return self.metrics.log_time((TIMERS, name), reduce="mean", window=1)

    def _informative(self, trajectories: list[Trajectory]) -> list[Trajectory]:
        """DAPO: only groups whose rewards differ carry a learning signal."""
        if not trajectories:
            return []
        cfg = self.config
        rewards = torch.as_tensor(outcome_rewards(trajectories, cfg.reward_type, cfg.invalid_action_penalty,
                                                  cfg.progress_reward))
        groups = torch.tensor([t.group_id for t in trajectories])
        keep = dynamic_sampling_keep_mask(rewards, groups)
        return [t for t, k in zip(trajectories, keep.tolist()) if k]

    def _dynamic_sampling(self, trajectories: list[Trajectory], rollouts: list[RolloutResult]) -> list[Trajectory]:
        """Drop uniform-reward groups and sample more tasks until the batch has
        `tasks_per_iteration` informative groups or `dynamic_sampling_max_rounds` extra rounds ran."""
        cfg = self.config
        kept = self._informative(trajectories)
        rounds = 0
        while len({t.group_id for t in kept}) < cfg.tasks_per_iteration and rounds < cfg.dynamic_sampling_max_rounds:
            rounds += 1
            more = self._sample()
            rollouts.extend(more)
            kept += self._informative([t for r in more for t in r.trajectories])
        groups = sorted({t.group_id for t in kept}, key=[t.group_id for t in kept].index)[: cfg.tasks_per_iteration]
        kept = [t for t in kept if t.group_id in set(groups)]
        key = ENV_RUNNER_RESULTS
        self.metrics.log_value((key, "dynamic_sampling_rounds"), rounds, window=1)
        self.metrics.log_value((key, "dynamic_sampling_groups_kept"), len(groups), window=1)
        return kept

    def _build_batch(self, trajectories: list[Trajectory]) -> MultiAgentBatch:
        cfg = self.config
        pad_id = 0
        arrays = pad_batch(trajectories, pad_id=pad_id, max_len=cfg.max_model_len)
        arrays["rewards"] = outcome_rewards(trajectories, cfg.reward_type, cfg.invalid_action_penalty,
                                            cfg.progress_reward)
        if cfg.progress_reward and trajectories and all(t.progress is None for t in trajectories):
            if not getattr(self, "_warned_no_progress", False):
                self._warned_no_progress = True
                logger.warning("progress_reward=%s has no effect: %s reports no info['progress']",
                               cfg.progress_reward, cfg.env)
        response_mask = torch.as_tensor(arrays["response_mask"])
        if cfg.overlong_filter:
            from rllib_agentgym.algorithms.losses import overlong_mask

            response_mask = overlong_mask(torch.as_tensor(arrays["truncated"]), response_mask)
            arrays["response_mask"] = response_mask.numpy()
        if cfg.advantage_estimator in GROUP_ESTIMATORS:
            # Group baselines need whole groups: computed here, before the batch is
            # sharded across learners. Token-level estimators run in the learner.
            kwargs: dict[str, Any] = dict(
                rewards=torch.as_tensor(arrays["rewards"]),
                group_ids=torch.as_tensor(arrays["group_ids"]),
                response_mask=response_mask,
            )
            if cfg.advantage_estimator in ("grpo", "gigpo"):
                kwargs["norm_by_std"] = cfg.norm_adv_by_std
            if cfg.advantage_estimator == "gigpo":
                step_returns, anchor_ids = step_arrays(trajectories, cfg.reward_type, cfg.invalid_action_penalty,
                                                       cfg.gamma, cfg.step_anchor, cfg.progress_reward)
                kwargs.update(step_returns=torch.as_tensor(step_returns), anchor_ids=torch.as_tensor(anchor_ids),
                              step_weight=cfg.step_advantage_weight)
            advantages, _ = compute_advantages(cfg.advantage_estimator, **kwargs)
            if cfg.invalid_turn_advantage:
                advantages = invalid_turn_advantages(advantages, torch.as_tensor(invalid_turn_flags(trajectories)),
                                                     response_mask, cfg.invalid_turn_advantage)
            if cfg.repeated_refusal_advantage:
                advantages = invalid_turn_advantages(advantages, torch.as_tensor(repeated_refusal_flags(trajectories)),
                                                     response_mask, cfg.repeated_refusal_advantage)
            arrays["advantages"] = advantages.numpy().astype(np.float32)
        else:
            arrays["advantages"] = np.zeros_like(arrays["response_mask"])
        for key in ("group_ids", "truncated"):
            arrays.pop(key)
        sample_batch = SampleBatch(arrays)
        return MultiAgentBatch({DEFAULT_MODULE_ID: sample_batch}, env_steps=len(trajectories))

    # ---- evaluation (RLlib's `evaluation_interval`) ----------------------------------

    @classmethod
    def _should_create_evaluation_env_runners(cls, eval_config) -> bool:
        """A separate evaluation EnvRunnerGroup (with its own inference engines) only for
        `evaluation_num_env_runners > 0`; otherwise evaluation reuses the training runners
        instead of loading the LLM a second time."""
        return eval_config.evaluation_num_env_runners > 0

    def evaluate(self, parallel_train_future=None) -> dict:
        """Called by `Algorithm._run_one_evaluation` every `evaluation_interval` iterations;
        what it returns lands under "evaluation" in the Tune result. Greedy Avg@1 per
        category: see `rllib_agentgym.evaluation.evaluate_during_training`."""
        import concurrent.futures

        from ray.rllib.callbacks.utils import make_callback

        if parallel_train_future is not None and self.eval_env_runner_group is None:
            # `evaluation_parallel_to_training` without eval runners: the training
            # runners are busy until the training step is done.
            concurrent.futures.wait([parallel_train_future])
        make_callback(
            "on_evaluate_start",
            callbacks_objects=self.callbacks,
            callbacks_functions=self.config.callbacks_on_evaluate_start,
            kwargs=dict(algorithm=self, metrics_logger=self.metrics),
        )
        results = self._evaluate_policies()
        make_callback(
            "on_evaluate_end",
            callbacks_objects=self.callbacks,
            callbacks_functions=self.config.callbacks_on_evaluate_end,
            kwargs=dict(algorithm=self, metrics_logger=self.metrics, evaluation_metrics=results),
        )
        return results

    def _evaluate_policies(self) -> dict:
        """The evaluation itself, between the two callbacks: greedy Avg@1 per category."""
        from rllib_agentgym.evaluation import evaluate_during_training

        return evaluate_during_training(self)

    # ---- metrics and logs -------------------------------------------------------

    def _log_rollout_metrics(self, rollouts: list[RolloutResult], trajectories: list[Trajectory], wall_s: float) -> None:
        log = self.metrics.log_value
        key = ENV_RUNNER_RESULTS
        n = len(trajectories)
        env_steps = sum(t.num_turns for t in trajectories)
        tokens = sum(r.num_generated_tokens for r in rollouts)
        gen_s = max(sum(r.generation_s for r in rollouts), 1e-9)
        actions = max(sum(r.num_actions for r in rollouts), 1)
        latencies = [x for r in rollouts for x in r.env_step_latencies_s]
        stats = {
            "episode_return_mean": float(np.mean([t.reward for t in trajectories])) if n else float("nan"),
            "success_rate": float(np.mean([t.success for t in trajectories])) if n else float("nan"),
            "num_turns_mean": float(np.mean([t.num_turns for t in trajectories])) if n else float("nan"),
            "num_episodes": n,
            "num_dropped_episodes": sum(r.num_dropped for r in rollouts),
            "num_skipped_episodes": sum(r.num_skipped for r in rollouts),  # ended ungraded by the env
            "horizon": rollouts[0].horizon if rollouts else self._current_horizon,
            "generated_tokens": tokens,
            "generated_tokens_per_s": tokens / gen_s,
            "rollout_tokens_per_s": tokens / max(wall_s, 1e-9),
            "format_error_rate": sum(r.num_format_errors for r in rollouts) / actions,
            # Turns the env refused or could not parse (what `invalid_turn_advantage` costs), and of
            # those the ones that resend the action refused just before (`repeated_refusal_advantage`).
            **refusal_rates(trajectories),
            **progress_stats(trajectories),
            "env_step_latency_ms_p50": float(np.percentile(latencies, 50) * 1e3) if latencies else float("nan"),
            "truncated_fraction": float(np.mean([t.truncated for t in trajectories])) if n else float("nan"),
            "rollout_wall_s": wall_s,
            "generation_s": gen_s,
            "env_s": sum(r.env_s for r in rollouts),
        }
        greedy = [t.success for t in trajectories if t.greedy]
        if self.config.greedy_group_members and greedy:
            # The train goals' greedy success, played in the batch (`greedy_group_members`).
            stats["greedy_member_success_rate"] = float(np.mean(greedy))
        if self.config.advantage_estimator == "gigpo" and n:
            _, anchor_ids = step_arrays(trajectories, anchor=self.config.step_anchor)
            stats["step_anchor_shared_fraction"] = shared_turn_fraction(anchor_ids)
        for name, value in stats.items():
            log((key, name), value, window=1)
        for kind in FORMAT_ERROR_KINDS:
            count = sum(r.format_errors.get(kind, 0) for r in rollouts)
            log((key, "format_error_rate_by_kind", kind), count / actions, window=1)
        for category in sorted({t.category for t in trajectories}):
            members = [t for t in trajectories if t.category == category]
            log((key, "success_rate_by_category", category), float(np.mean([t.success for t in members])), window=1)
        log((key, NUM_ENV_STEPS_SAMPLED_LIFETIME), env_steps, reduce="lifetime_sum")
        # The same numbers, live, for the Ray dashboard / Prometheus (rllib_agentgym/metrics.py).
        from rllib_agentgym.metrics import record_rollout, run_tags

        record_rollout(stats, env_steps, latencies, run_tags(self.config.env, self.trial_id))

    def run_dir(self) -> str:
        """The trial's results dir (under Tune: the storage dir TensorBoard reads, not the
        working dir, whose files Tune does not sync by default)."""
        storage = getattr(self, "_storage", None)
        if storage is not None and getattr(storage, "trial_fs_path", None):
            return storage.trial_fs_path
        return self.logdir

    def _write_trajectories(self, rollouts: list[RolloutResult]) -> None:
        count = int(self.config.log_trajectories)
        if count <= 0:
            return
        from rllib_agentgym.tb_logging import log_iteration_extras, write_trajectories

        summaries = [t.summary() for r in rollouts for t in r.trajectories]
        # Spread the logged ones over groups (tasks) rather than the first group only.
        stride = max(1, len(summaries) // count)
        write_trajectories(self.run_dir(), self.iteration + 1, summaries[::stride][:count])
        log_iteration_extras(self.run_dir(), self.iteration + 1, summaries)


class AgentPPO(GRPO):
    @classmethod
    def get_default_config(cls) -> AgentPPOConfig:
        return AgentPPOConfig()

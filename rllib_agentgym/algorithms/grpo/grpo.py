"""GRPO for multi-turn LLM agents on RLlib's new API stack.

One iteration (see DESIGN.md, "The loop"):
  1. every LLMEnvRunner plays `group_size` episodes for each of its tasks;
  2. advantages per group of one task's episodes (pure functions);
  3. the LearnerGroup updates the LLM (clipped surrogate + KL to the frozen reference);
  4. the new weights go to the runners' inference engines;
  5. metrics go to the MetricsLogger (Tune, TensorBoard, dashboard).
"""

from __future__ import annotations

import math
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
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
)

from rllib_agentgym.algorithms.advantages import compute_advantages, dynamic_sampling_keep_mask
from rllib_agentgym.callbacks.scaling_inter import HorizonSchedule, ScalingInterCallback
from rllib_agentgym.core.trajectory import Trajectory, pad_batch
from rllib_agentgym.env_runners.llm_env_runner import LLMEnvRunner, RolloutResult


class GRPOConfig(AlgorithmConfig):
    """Config of GRPO (and its DAPO / Dr. GRPO options) for LLM agents."""

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or GRPO)
        # Model and rollout.
        self.model_path = "embedded"  # local path, hub id, or "embedded"
        self.model_dtype = "float32"
        self.gradient_checkpointing = False
        self.inference_engine = "auto"  # "vllm" | "hf" | "auto"
        self.engine_options = {}  # extra kwargs for the engine (gpu_memory_utilization, tensor_parallel_size, ...)
        self.max_model_len = 4096
        self.max_new_tokens = None  # per turn; None: the env family's default
        self.temperature = 1.0
        self.top_p = 1.0
        self.group_size = 8
        self.tasks_per_iteration = 4  # tasks per training batch, split across env runners
        self.max_turns = 10  # horizon when `scaling_inter` is not set
        self.scaling_inter = None  # {schedule: [...], interval: D} or {start, delta, interval, max}
        self.env_step_threads = 16
        self.log_trajectories = 4  # trajectories written per iteration for the viewer / TensorBoard
        # Loss.
        self.advantage_estimator = "grpo"
        self.norm_adv_by_std = True
        self.clip_ratio_low = 0.2
        self.clip_ratio_high = 0.2
        self.use_kl_loss = True
        self.kl_coef = 0.001
        self.kl_estimator = "low_var_kl"  # k1 | k2 | k3 (= low_var_kl)
        self.loss_agg_mode = "token-mean"
        self.entropy_coeff = 0.0
        self.micro_batch_size = 4  # trajectories per forward/backward (gradient accumulation)
        self.dynamic_sampling = False  # DAPO: drop groups whose rewards are all equal
        self.overlong_filter = False  # DAPO: mask trajectories cut by the length cap
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
        advantage_estimator: Optional[str] = NotProvided,
        norm_adv_by_std: Optional[bool] = NotProvided,
        clip_ratio_low: Optional[float] = NotProvided,
        clip_ratio_high: Optional[float] = NotProvided,
        use_kl_loss: Optional[bool] = NotProvided,
        kl_coef: Optional[float] = NotProvided,
        kl_estimator: Optional[str] = NotProvided,
        loss_agg_mode: Optional[str] = NotProvided,
        entropy_coeff: Optional[float] = NotProvided,
        micro_batch_size: Optional[int] = NotProvided,
        group_size: Optional[int] = NotProvided,
        tasks_per_iteration: Optional[int] = NotProvided,
        dynamic_sampling: Optional[bool] = NotProvided,
        overlong_filter: Optional[bool] = NotProvided,
        **kwargs,
    ) -> "GRPOConfig":
        super().training(**kwargs)
        for name, value in dict(
            advantage_estimator=advantage_estimator, norm_adv_by_std=norm_adv_by_std,
            clip_ratio_low=clip_ratio_low, clip_ratio_high=clip_ratio_high, use_kl_loss=use_kl_loss,
            kl_coef=kl_coef, kl_estimator=kl_estimator, loss_agg_mode=loss_agg_mode,
            entropy_coeff=entropy_coeff, micro_batch_size=micro_batch_size, group_size=group_size,
            tasks_per_iteration=tasks_per_iteration, dynamic_sampling=dynamic_sampling,
            overlong_filter=overlong_filter,
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

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from rllib_agentgym.core.rl_module import LLMRLModule

        return RLModuleSpec(
            module_class=LLMRLModule,
            model_config={
                "model": self.model_path,
                "dtype": self.model_dtype,
                "gradient_checkpointing": self.gradient_checkpointing,
                "entropy_grad": bool(self.entropy_coeff),
            },
        )

    def get_default_learner_class(self):
        from rllib_agentgym.algorithms.grpo.torch.grpo_torch_learner import GRPOTorchLearner

        return GRPOTorchLearner

    def validate(self) -> None:
        super().validate()
        from rllib_agentgym.algorithms.advantages import ESTIMATORS
        from rllib_agentgym.algorithms.losses import KL_KINDS, LOSS_AGG_MODES

        if self.advantage_estimator not in ESTIMATORS:
            self._value_error(f"advantage_estimator {self.advantage_estimator!r} unknown; valid: {sorted(ESTIMATORS)}")
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            self._value_error(f"loss_agg_mode {self.loss_agg_mode!r} unknown; valid: {list(LOSS_AGG_MODES)}")
        if self.kl_estimator not in KL_KINDS:
            self._value_error(f"kl_estimator {self.kl_estimator!r} unknown; valid: {list(KL_KINDS)}")
        if self.group_size < 1 or self.tasks_per_iteration < 1:
            self._value_error("group_size and tasks_per_iteration must be >= 1")
        HorizonSchedule.from_config(self.scaling_inter, self.max_turns)  # raises on a bad schedule
        callbacks = self.callbacks_class if isinstance(self.callbacks_class, (list, tuple)) else [self.callbacks_class]
        if not any(isinstance(c, type) and issubclass(c, ScalingInterCallback) for c in callbacks):
            # User callbacks come in addition to the horizon schedule, never instead of it.
            self.callbacks_class = [ScalingInterCallback, *callbacks]


class GRPO(Algorithm):
    @classmethod
    def get_default_config(cls) -> GRPOConfig:
        return GRPOConfig()

    def setup(self, config):
        super().setup(config)
        self._current_horizon = HorizonSchedule.from_config(self.config.scaling_inter, self.config.max_turns).horizon(
            self.iteration
        )

    # ---- sampling ---------------------------------------------------------------

    def _sample(self) -> list[RolloutResult]:
        cfg = self.config
        group = self.env_runner_group
        n_remote = group.num_healthy_remote_workers() if group is not None else 0
        if n_remote == 0:
            return [group.local_env_runner.sample(num_tasks=cfg.tasks_per_iteration)]
        per_runner = math.ceil(cfg.tasks_per_iteration / n_remote)
        return group.foreach_env_runner(
            lambda runner: runner.sample(num_tasks=per_runner),
            local_env_runner=False,
        )

    def training_step(self) -> None:
        cfg = self.config
        t_start = time.perf_counter()
        rollouts = self._sample()
        trajectories = [t for r in rollouts for t in r.trajectories]
        self._log_rollout_metrics(rollouts, trajectories, time.perf_counter() - t_start)
        trajectories = self._filter(trajectories)
        if trajectories:
            batch = self._build_batch(trajectories)
            learner_results = self.learner_group.update(
                batch=batch,
                minibatch_size=cfg.minibatch_size,
                num_epochs=cfg.num_epochs,
                shuffle_batch_per_epoch=cfg.num_epochs > 1,
                timesteps={
                    NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                        (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0
                    )
                },
            )
            self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)
            self.env_runner_group.sync_weights(
                from_worker_or_learner_group=self.learner_group,
                inference_only=True,
                timeout_seconds=600.0,
            )
        self._write_trajectories(rollouts)

    def _filter(self, trajectories: list[Trajectory]) -> list[Trajectory]:
        if not self.config.dynamic_sampling or not trajectories:
            return trajectories
        rewards = torch.tensor([t.reward for t in trajectories])
        groups = torch.tensor([t.group_id for t in trajectories])
        keep = dynamic_sampling_keep_mask(rewards, groups)
        self.metrics.log_value((ENV_RUNNER_RESULTS, "dynamic_sampling_kept_fraction"), float(keep.float().mean()), window=1)
        return [t for t, k in zip(trajectories, keep.tolist()) if k]

    def _build_batch(self, trajectories: list[Trajectory]) -> MultiAgentBatch:
        cfg = self.config
        pad_id = 0
        arrays = pad_batch(trajectories, pad_id=pad_id, max_len=cfg.max_model_len)
        response_mask = torch.as_tensor(arrays["response_mask"])
        if cfg.overlong_filter:
            from rllib_agentgym.algorithms.losses import overlong_mask

            response_mask = overlong_mask(torch.as_tensor(arrays["truncated"]), response_mask)
            arrays["response_mask"] = response_mask.numpy()
        kwargs: dict[str, Any] = dict(
            rewards=torch.as_tensor(arrays["rewards"]),
            group_ids=torch.as_tensor(arrays["group_ids"]),
            response_mask=response_mask,
        )
        if cfg.advantage_estimator == "grpo":
            kwargs["norm_by_std"] = cfg.norm_adv_by_std
        advantages, _ = compute_advantages(cfg.advantage_estimator, **kwargs)
        arrays["advantages"] = advantages.numpy().astype(np.float32)
        for key in ("rewards", "group_ids", "truncated"):
            arrays.pop(key)
        sample_batch = SampleBatch(arrays)
        return MultiAgentBatch({DEFAULT_MODULE_ID: sample_batch}, env_steps=len(trajectories))

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
            "horizon": rollouts[0].horizon if rollouts else self._current_horizon,
            "generated_tokens": tokens,
            "generated_tokens_per_s": tokens / gen_s,
            "rollout_tokens_per_s": tokens / max(wall_s, 1e-9),
            "format_error_rate": sum(r.num_format_errors for r in rollouts) / actions,
            "env_step_latency_ms_p50": float(np.percentile(latencies, 50) * 1e3) if latencies else float("nan"),
            "truncated_fraction": float(np.mean([t.truncated for t in trajectories])) if n else float("nan"),
            "rollout_wall_s": wall_s,
            "generation_s": gen_s,
            "env_s": sum(r.env_s for r in rollouts),
        }
        for name, value in stats.items():
            log((key, name), value, window=1)
        for category in sorted({t.category for t in trajectories}):
            members = [t for t in trajectories if t.category == category]
            log((key, "success_rate_by_category", category), float(np.mean([t.success for t in members])), window=1)
        log((key, NUM_ENV_STEPS_SAMPLED_LIFETIME), env_steps, reduce="sum", clear_on_reduce=False)

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

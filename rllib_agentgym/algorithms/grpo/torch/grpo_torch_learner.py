"""The TorchLearner of GRPO and its relatives (RLOO, REINFORCE++, PPO).

Per `update()` call (one training batch):
  * with no gradient: the reference model's log-probs (KL term; with LoRA the
    reference is the base model, adapter off), the policy's log-probs before
    the update when the batch feeds more than one optimizer step (pi_old; with
    `old_logprobs: engine` the rollout engine's sampling log-probs instead),
    the values before the update (PPO), and the token-level advantages of the
    estimators that need them (REINFORCE++'s KL-shaped returns, GAE), whitened
    with statistics all-reduced over the learners' shards so that they are
    the whole batch's. GRPO and RLOO advantages arrive precomputed: they need
    whole groups, and several learners each get only a shard of the batch.
  * during `critic_warmup` iterations (PPO), only the value loss is trained
    and only the value head steps; the policy stays the one that sampled.
  * per minibatch (RLlib's `minibatch_size` / `num_epochs` iterator): the
    minibatch is cut into micro-batches of `micro_batch_size` trajectories
    (without the rows whose advantage is 0 at every trained token, when the
    loss is the clipped surrogate alone: `rows_with_signal`) whose gradients
    accumulate, normalized by the whole minibatch's token and
    sequence counts (summed over all learners under DDP) so that the sum is
    the full-batch loss; with `sft_coef`, the gradient of sft_coef times the
    NLL of a batch of expert conversations joins it (PPO-ptx); then gradient
    clipping and one optimizer step.
"""

from __future__ import annotations

import contextlib
import logging
import copy
from typing import Any, Dict

import numpy as np
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.policy.sample_batch import MultiAgentBatch

from rllib_agentgym.algorithms.advantages import compute_advantages, token_level_rewards, weight_advantages
from rllib_agentgym.algorithms.losses import (
    aggregate_loss,
    global_loss_counts,
    kl_penalty,
    policy_loss,
    value_loss,
)
from rllib_agentgym.algorithms.grpo.torch.gradients import all_finite, clip_gradients, global_norm
from rllib_agentgym.core.precision import autocast
from rllib_agentgym.core.rl_module import token_logprobs_and_entropy

logger = logging.getLogger(__name__)

POLICY_LOSS = "policy_loss"
VF_LOSS = "vf_loss"
KL = "kl"
ENTROPY = "entropy"
VALUE_OPTIMIZER = "value"
CRITIC_ONLY = "critic_only"  # a `timesteps` key of update(): this batch trains the critic alone (critic_warmup)
TOKEN_LEVEL_ESTIMATORS = ("reinforce_plus_plus", "gae")
TRAINED_ROWS_FRACTION = "trained_rows_fraction"  # of a minibatch's rows, those with a non-zero advantage
EXPERT_STREAM = "expert_stream"  # the learner's state key: where `sft_coef`'s expert batches are
SFT_LOSS = "sft_loss"  # the expert NLL: AgentSFT's loss, and GRPO's `sft_coef` term
SUMMED_STATS = {POLICY_LOSS, VF_LOSS, KL, ENTROPY, SFT_LOSS, "sft_observation_loss"}  # aggregated with the minibatch's counts


def micro_batches_by_length(lengths, micro: int) -> list[np.ndarray]:
    """Row indices of the micro-batches: rows sorted longest first, cut into groups of `micro`.

    Each micro-batch is trimmed to its longest row, so in batch order one long
    trajectory pads every short one beside it; grouping rows of similar length
    removes most of that padding (benchmarks/learner.py measures it). Every
    micro-batch loss is normalized by the whole minibatch's counts, so the
    summed loss and gradient do not depend on the grouping.
    """
    lengths = np.asarray(lengths)
    micro = max(1, int(micro or len(lengths)))
    order = np.argsort(-lengths, kind="stable")
    return [order[i : i + micro] for i in range(0, len(order), micro)]


def trim_to_longest(batch: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Cut right padding shared by every row of a micro-batch (saves compute)."""
    width = int(batch["attention_mask"].sum(dim=1).max().item())
    return {k: (v[:, :width] if v.dim() == 2 else v) for k, v in batch.items()}


def rows_with_signal(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """[B] bool: the rows with a non-zero advantage at some trained token.

    With the clipped surrogate as the whole loss,

        L = sum_{i,t} m_{i,t} max(-A_{i,t} rho_{i,t}, -A_{i,t} clip(rho_{i,t})) / N,

    a row with A_{i,t} = 0 at every trained token adds 0 to L and to its
    gradient, whatever rho is; with N (the token or sequence count) taken
    from the whole minibatch, dropping it changes neither. GRPO gives every
    row of a group that when the group's rewards are all equal.
    """
    return ((advantages != 0) & (response_mask != 0)).any(dim=1)


def micro_batches(batch: Dict[str, torch.Tensor], micro: int) -> list[Dict[str, torch.Tensor]]:
    """`batch` cut into micro-batches of rows of similar length (`micro_batches_by_length`),
    each trimmed to its longest row."""
    groups = micro_batches_by_length(batch["attention_mask"].sum(dim=1).cpu().numpy(), micro)
    device = batch["input_ids"].device
    return [trim_to_longest({k: v[torch.as_tensor(rows, device=device)] for k, v in batch.items()}) for rows in groups]


class GRPOTorchLearner(TorchLearner):
    """Handles every LLM module of the MultiRLModule (one for single-agent runs, one per
    policy in multi-agent ones); each module's batch is normalized on its own."""

    def __repr__(self) -> str:
        # Ray's dashboard shows this for remote learners, whose class Ray Train wraps
        # (their class name reads `create_executable_class.<locals>._WrappedExecutable`).
        name = next(c.__name__ for c in type(self).__mro__ if c.__name__ != "_WrappedExecutable")
        return f"{name}({getattr(getattr(self, 'config', None), 'env', None)})"

    def build(self) -> None:
        super().build()
        self._ref_models = {}
        self._critic_only = False  # set per update from `timesteps` (critic_warmup)
        self._expert_stream = None
        if self.config.sft_coef:
            from rllib_agentgym.algorithms.sft.examples import ExampleStream, load_conversations, tokenize_examples

            cfg = self.config
            examples, self._expert_pad_id = tokenize_examples(cfg.model_path, load_conversations(cfg), cfg.max_model_len)
            self._expert_stream = ExampleStream(examples, seed=cfg.seed or 0)
        if self._wants_reference():
            for module_id in self.module.keys():
                if not self._rl_module(module_id).uses_lora:
                    # A frozen copy of the starting policy (with LoRA: the base model, adapter off).
                    ref = copy.deepcopy(self._rl_module(module_id).llm).eval()
                    for p in ref.parameters():
                        p.requires_grad_(False)
                    self._ref_models[module_id] = ref

    def get_state(self, components=None, *, not_components=None, **kwargs):
        state = super().get_state(components, not_components=not_components, **kwargs)
        if self._expert_stream is not None and self._check_component(EXPERT_STREAM, components, not_components):
            # A restored run draws the expert batches it would have drawn had it not stopped.
            state[EXPERT_STREAM] = self._expert_stream.get_state()
        return state

    def set_state(self, state) -> None:
        super().set_state(state)
        if self._expert_stream is not None and EXPERT_STREAM in state:
            self._expert_stream.set_state(state[EXPERT_STREAM])

    def _skips_zero_advantage_rows(self, module_id) -> bool:
        """Whether the loss is the clipped surrogate alone (no KL, entropy or value term, which
        every row feeds), so that rows without advantage can be left out (`rows_with_signal`)."""
        cfg = self.config.get_config_for_module(module_id)
        return bool(
            cfg.skip_zero_advantage_rows
            and not self._is_distributed()  # DDP: every learner runs the same backward passes
            and not self._critic_only
            and not (cfg.use_kl_loss and cfg.kl_coef > 0)
            and not cfg.entropy_coeff
            and self._rl_module(module_id).value_head is None
        )

    def _wants_reference(self) -> bool:
        cfg = self.config
        return (cfg.use_kl_loss and cfg.kl_coef > 0) or (
            cfg.advantage_estimator in TOKEN_LEVEL_ESTIMATORS and cfg.kl_in_reward_coef > 0
        )

    def before_gradient_based_update(self, *, timesteps: Dict[str, Any]) -> None:
        super().before_gradient_based_update(timesteps=timesteps)
        self._critic_only = bool(timesteps.get(CRITIC_ONLY, False))

    def _rl_module(self, module_id=DEFAULT_MODULE_ID):
        return self.module[module_id].unwrapped()

    def _value_head_parameters(self, module_id) -> list[torch.nn.Parameter]:
        module = self._module[module_id]
        module = module.unwrapped() if hasattr(module, "unwrapped") else module
        return list(module.value_head.parameters()) if getattr(module, "value_head", None) is not None else []

    def configure_optimizers_for_module(self, module_id, config=None) -> None:
        head = self._value_head_parameters(module_id)
        head_ids = {id(p) for p in head}
        policy = [p for p in self.get_parameters(self._module[module_id]) if p.requires_grad and id(p) not in head_ids]
        if config.policy_optimizer == "sgd":
            optimizer = torch.optim.SGD(policy, momentum=config.sgd_momentum, weight_decay=config.weight_decay)
        else:
            optimizer = torch.optim.AdamW(policy, weight_decay=config.weight_decay)
        self.register_optimizer(
            module_id=module_id,
            optimizer=optimizer,
            params=policy,
            lr_or_lr_schedule=config.lr,
        )
        if head:
            # PPO's critic learns at its own rate.
            self.register_optimizer(
                module_id=module_id,
                optimizer_name=VALUE_OPTIMIZER,
                optimizer=torch.optim.AdamW(head, weight_decay=0.0),
                params=head,
                lr_or_lr_schedule=config.vf_lr,
            )

    @staticmethod
    def _get_clip_function():
        return clip_gradients  # RLlib's, with the global norm in multi-tensor kernels

    @staticmethod
    def _get_global_norm_function():
        return global_norm

    def apply_gradients(self, gradients_dict) -> None:
        """RLlib's optimizer step, with its check for non-finite gradients done in one read.

        RLlib's TorchLearner tests each gradient with `isfinite(grad).all()` in a Python `if`,
        twice: two device->host reads per parameter, each one waiting for the device (on a
        GPU, ~600 stalls per step at Qwen2.5-0.5B). Here one `all_finite` read decides:
        finite gradients are set and stepped (what RLlib does with them); otherwise
        `torch_skip_nan_gradients` skips the step, as documented (RLlib's own path tests
        that flag so that it steps with the NaNs), and by default RLlib zeroes the
        non-finite entries and steps.
        """
        if self._grad_scalers is not None or self._lr_scheduler_classes is not None:
            super().apply_gradients(gradients_dict)
        elif all_finite(gradients_dict.values()):
            for pid, grad in gradients_dict.items():
                self._params[pid].grad = grad
            for module_id, optimizer_names in self._module_optimizers.items():
                for optimizer_name in optimizer_names:
                    self.get_optimizer(module_id, optimizer_name).step()
        elif self.config.torch_skip_nan_gradients:
            logger.warning("Skipping this update: its gradients contain nan/inf (torch_skip_nan_gradients=True).")
        else:
            super().apply_gradients(gradients_dict)

    # ---- per-batch precomputation ----------------------------------------------

    @torch.no_grad()
    def _forward_no_grad(self, model, arrays, *, temperature: float, value_head=None,
                         only_rows: np.ndarray | None = None) -> Dict[str, np.ndarray]:
        # `temperature` has no default: pi_old and pi_ref must be scored at the policy's own.
        # `only_rows`: the rows to score; the others stay 0 (rows the loss will not read).
        shape = arrays["input_ids"].shape
        out = {"logprobs": np.zeros(shape, dtype=np.float32)}
        if value_head is not None:
            out["values"] = np.zeros(shape, dtype=np.float32)
        scored = np.arange(shape[0]) if only_rows is None else np.asarray(only_rows)
        lengths = np.asarray(arrays["attention_mask"])[scored].sum(axis=1)
        for micro in micro_batches_by_length(lengths, self.config.micro_batch_size):
            rows = scored[micro]
            ids = torch.as_tensor(arrays["input_ids"][rows], device=self._device)
            mask = torch.as_tensor(arrays["attention_mask"][rows], device=self._device)
            width = int(mask.sum(dim=1).max().item())
            # Log-probs where the loss reads them (pi_old, pi_ref): the response tokens.
            tokens = torch.as_tensor(arrays["response_mask"][rows], device=self._device)[:, :width]
            res = token_logprobs_and_entropy(model, ids[:, :width], mask[:, :width], False, False, value_head,
                                             token_mask=tokens, temperature=temperature,
                                             share_prefix=self.config.share_prompt_prefix)
            for key in out:
                out[key][rows, :width] = res[key].float().cpu().numpy()
        return out

    def update(self, batch: MultiAgentBatch | None = None, *, training_data: TrainingData | None = None, **kwargs):
        if training_data is None:
            training_data = TrainingData(batch=batch)
        training_data.solve_refs()
        if training_data.batch is not None:
            for module_id, policy_batch in training_data.batch.policy_batches.items():
                if module_id in self.module.keys():
                    self._prepare_batch(policy_batch, kwargs, module_id)
        return super().update(training_data=training_data, **kwargs)

    def _prepare_batch(self, policy_batch, kwargs: Dict[str, Any], module_id=DEFAULT_MODULE_ID) -> None:
        module = self._rl_module(module_id)
        was_training = module.llm.training
        module.llm.eval()
        # The same precision as the training forward, so that pi_old / pi_ref match it.
        try:
            with autocast(self._device.type, module._autocast):
                self._add_no_grad_columns(policy_batch, kwargs, module, module_id)
        finally:
            module.llm.train(was_training)

    def _add_no_grad_columns(self, policy_batch, kwargs: Dict[str, Any], module, module_id) -> None:
        cfg = self.config
        if self._wants_reference():
            if module.uses_lora:
                with module.reference_logprobs_context():
                    ref = self._forward_no_grad(module.llm, policy_batch, temperature=module.temperature)["logprobs"]
            else:
                ref = self._forward_no_grad(self._ref_models[module_id], policy_batch,
                                            temperature=module.temperature)["logprobs"]
            policy_batch["ref_logprobs"] = ref
        needs_old = self._needs_old_logprobs(policy_batch.count, kwargs)
        if needs_old or cfg.advantage_estimator in TOKEN_LEVEL_ESTIMATORS:
            from_engine = cfg.old_logprobs == "engine"
            if from_engine:  # the sampling log-probs as pi_old: no forward (GRPOConfig.old_logprobs)
                policy_batch["old_logprobs"] = np.asarray(policy_batch["sample_logprobs"], dtype=np.float32)
            if not from_engine or module.value_head is not None:  # PPO's values need the forward anyway
                only_rows = None
                if "advantages" in policy_batch and self._skips_zero_advantage_rows(module_id):
                    # pi_old of rows the loss leaves out (`rows_with_signal`) is never read.
                    only_rows = rows_with_signal(torch.as_tensor(policy_batch["advantages"]),
                                                 torch.as_tensor(policy_batch["response_mask"])).nonzero().squeeze(1).numpy()
                current = self._forward_no_grad(module.llm, policy_batch, temperature=module.temperature,
                                                value_head=module.value_head, only_rows=only_rows)
                if not from_engine:
                    policy_batch["old_logprobs"] = current["logprobs"]
                if "values" in current:
                    policy_batch["old_values"] = current["values"]
        if cfg.advantage_estimator in TOKEN_LEVEL_ESTIMATORS:
            self._token_level_advantages(policy_batch)

    def _token_level_advantages(self, policy_batch) -> None:
        cfg = self.config
        mask = torch.as_tensor(policy_batch["response_mask"])
        rewards = torch.as_tensor(policy_batch["rewards"])
        kl = None
        if "ref_logprobs" in policy_batch and cfg.kl_in_reward_coef > 0:
            kl = kl_penalty(torch.as_tensor(policy_batch["old_logprobs"]), torch.as_tensor(policy_batch["ref_logprobs"]), "k1")
        # Whitened over the whole batch, not this learner's shard of it.
        all_reduce = self._sum_across_learners if self._is_distributed() else None
        if cfg.advantage_estimator == "reinforce_plus_plus":
            adv, returns = compute_advantages(
                "reinforce_plus_plus", rewards=rewards, response_mask=mask, kl_per_token=kl,
                kl_coef=cfg.kl_in_reward_coef, gamma=cfg.gamma, all_reduce=all_reduce,
            )
        else:
            token_rewards = token_level_rewards(rewards, mask, kl, cfg.kl_in_reward_coef)
            adv, returns = compute_advantages(
                "gae", token_rewards=token_rewards, values=torch.as_tensor(policy_batch["old_values"]),
                response_mask=mask, gamma=cfg.gamma, lam=cfg.lambda_, all_reduce=all_reduce,
            )
        policy_batch["advantages"] = adv.float().numpy()
        policy_batch["returns"] = returns.float().numpy()

    @staticmethod
    def _needs_old_logprobs(batch_size: int, kwargs: Dict[str, Any]) -> bool:
        minibatch = kwargs.get("minibatch_size") or batch_size
        return kwargs.get("num_epochs", 1) > 1 or minibatch < batch_size

    # ---- one optimizer step over a minibatch ------------------------------------

    def _is_distributed(self) -> bool:
        return self.config.num_learners > 1 and torch.distributed.is_initialized()

    def _sum_across_learners(self, t: torch.Tensor) -> torch.Tensor:
        """The sum of `t` over all learners (on the learner's device: NCCL takes GPU tensors only)."""
        on_device = t.to(self._device)
        torch.distributed.all_reduce(on_device)
        return on_device.to(t.device)

    def _global_counts(self, response_mask: torch.Tensor) -> Dict[str, int]:
        counts = global_loss_counts(response_mask)
        if self._is_distributed():
            # DDP averages gradients over learners: normalize by the counts of the
            # whole batch (all shards) and scale by the world size so the average
            # is exactly the full-batch gradient.
            t = torch.tensor([counts["global_token_count"], counts["global_seq_count"]], dtype=torch.float64)
            t = self._sum_across_learners(t)
            counts = {"global_token_count": float(t[0]), "global_seq_count": float(t[1])}
        return counts

    def _uncompiled_update(self, batch: Dict, **kwargs):
        for optim in self._optimizer_parameters:
            optim.zero_grad(set_to_none=True)
        losses = {}
        for module_id, module_batch in batch.items():
            if self._expert_stream is not None and not self._critic_only:
                self._accumulate_expert_gradients(module_id)
            losses[module_id] = self._accumulate_gradients(module_id, module_batch)
        if self._critic_only:
            # The value loss reaches the shared trunk through its hidden states; keep the policy still.
            heads = {id(p) for mid in batch for p in self._value_head_parameters(mid)}
            for p in self._params.values():
                if id(p) not in heads:
                    p.grad = None
        grads = {pid: p.grad for pid, p in self._params.items() if p.grad is not None}
        self.apply_gradients(self.postprocess_gradients(grads))
        return {}, losses, {}

    def _accumulate_gradients(self, module_id, module_batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        """Backward over the micro-batches of one module's minibatch; returns its loss."""
        counts = self._global_counts(module_batch["response_mask"])
        world = torch.distributed.get_world_size() if self.config.num_learners > 1 and torch.distributed.is_initialized() else 1
        if "advantages" in module_batch and self._skips_zero_advantage_rows(module_id):
            # Their loss and gradient are 0 (`rows_with_signal`); the counts above keep the whole minibatch's.
            keep = rows_with_signal(module_batch["advantages"], module_batch["response_mask"])
            self._log_update_mean(module_id, TRAINED_ROWS_FRACTION, float(keep.float().mean()))
            if not keep.any():
                return self._zero_gradients(module_id)
            module_batch = {k: v[keep] for k, v in module_batch.items()}
        n = module_batch["input_ids"].shape[0]
        groups = micro_batches(module_batch, self.config.micro_batch_size)
        module = self.module[module_id]
        total_loss = 0.0
        stats_sums: Dict[str, float] = {}
        for k, micro in enumerate(groups):
            # Under DDP, all-reduce gradients only on the last micro-batch.
            sync = contextlib.nullcontext()
            if world > 1 and k < len(groups) - 1 and hasattr(module, "no_sync"):
                sync = module.no_sync()
            with sync:
                fwd_out = module.forward_train(micro)
                self._loss_counts = counts
                loss = self.compute_loss_for_module(
                    module_id=module_id, config=self.config.get_config_for_module(module_id), batch=micro, fwd_out=fwd_out
                )
                (loss * world).backward()
            total_loss += float(loss.detach())
            # Loss terms are already this micro-batch's share of the minibatch's (global counts):
            # they add up. Ratios and fractions are micro-batch means: weight them by rows.
            weight = micro["input_ids"].shape[0] / n
            for name, value in self._last_stats.items():
                share = 1.0 if name in SUMMED_STATS else weight
                stats_sums[name] = stats_sums.get(name, 0.0) + share * float(value)
        for name, value in stats_sums.items():
            self._log_update_mean(module_id, name, value)
        return torch.tensor(total_loss)

    def _log_update_mean(self, module_id, name: str, value: float) -> None:
        # The mean over the update's minibatches (Ray's mean stats start afresh at each reduce),
        # not the last minibatch's: that one may have had no advantage anywhere.
        self.metrics.log_value((module_id, name), value, reduce="mean", window=None)

    def _zero_gradients(self, module_id) -> torch.Tensor:
        """A minibatch without advantage anywhere: loss 0 and zero gradients, without a forward.
        The optimizer still steps over them, as it would have over the rows (Adam moves on its
        momentum; a parameter left without a gradient would not move)."""
        for p in self.module[module_id].parameters():
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)
        self._log_update_mean(module_id, POLICY_LOSS, 0.0)
        return torch.tensor(0.0)

    def _accumulate_expert_gradients(self, module_id) -> None:
        """Backward of sft_coef * NLL, the token-mean negative log-likelihood of the next
        `sft_batch_size` expert conversations' responses (PPO-ptx's term):

            NLL = - sum_{i,t} m_{i,t} log pi(x_{i,t} | x_{i,<t}) / sum_{i,t} m_{i,t}

        at temperature 1, the model's own distribution (the RL term scores tokens at the
        sampling temperature). Its gradients add to the RL minibatch's before the one step."""
        from rllib_agentgym.algorithms.sft.examples import pad_examples

        cfg = self.config
        arrays = pad_examples(self._expert_stream.next(cfg.sft_batch_size), self._expert_pad_id)
        batch = {k: torch.as_tensor(arrays[k], device=self._device) for k in ("input_ids", "attention_mask", "response_mask")}
        counts = global_loss_counts(batch["response_mask"])
        module = self._rl_module(module_id)
        nll_sum = 0.0
        for micro in micro_batches(batch, cfg.micro_batch_size):
            with autocast(self._device.type, module._autocast):
                out = token_logprobs_and_entropy(module.llm, micro["input_ids"], micro["attention_mask"], False,
                                                 token_mask=micro["response_mask"], temperature=1.0,
                                                 share_prefix=module.share_prefix)
            nll = aggregate_loss(-out["logprobs"], micro["response_mask"], "token-mean", **counts)
            (cfg.sft_coef * nll).backward()
            nll_sum += float(nll.detach())
        self._log_update_mean(module_id, SFT_LOSS, nll_sum)

    def compute_loss_for_module(self, *, module_id, config, batch: Dict[str, Any], fwd_out: Dict[str, Any]):
        """L = clipped surrogate + kl_coef * KL(pi || pi_ref) - entropy_coeff * H [+ vf_loss_coeff * L_V],
        each aggregated per `loss_agg_mode` with the whole minibatch's counts."""
        cfg = config
        counts = getattr(self, "_loss_counts", None) or global_loss_counts(batch["response_mask"])
        # Dr. GRPO's constant length: a micro-batch is trimmed to its own longest row, so its
        # width would weight each micro-batch's tokens differently. Every row fits max_model_len.
        norm_length = cfg.max_model_len
        mask = batch["response_mask"]
        logprobs = fwd_out["logprobs"]
        old = batch["old_logprobs"] if "old_logprobs" in batch else logprobs.detach()
        loss, stats = policy_loss(
            logprobs,
            old,
            weight_advantages(batch["advantages"], cfg.positive_advantage_weight, cfg.negative_advantage_weight),
            mask,
            clip_ratio_low=cfg.clip_ratio_low,
            clip_ratio_high=cfg.clip_ratio_high,
            loss_agg_mode=cfg.loss_agg_mode,
            norm_length=norm_length,
            **counts,
        )
        out = {POLICY_LOSS: loss.detach(), **stats}
        if self._critic_only:
            loss = torch.zeros((), device=logprobs.device)  # critic_warmup: the value loss alone
        if "ref_logprobs" in batch:
            kl = aggregate_loss(kl_penalty(logprobs, batch["ref_logprobs"], cfg.kl_estimator), mask, cfg.loss_agg_mode,
                                norm_length, **counts)
            if cfg.use_kl_loss and cfg.kl_coef > 0:
                loss = loss + cfg.kl_coef * kl
            out[KL] = kl.detach()
        if "entropy" in fwd_out:
            entropy = aggregate_loss(fwd_out["entropy"], mask, cfg.loss_agg_mode, norm_length, **counts)
            out[ENTROPY] = entropy.detach()
            if cfg.entropy_coeff:  # the module keeps the entropy's graph when this is set
                loss = loss - cfg.entropy_coeff * entropy
        if "values" in fwd_out and "returns" in batch:
            vf, vf_stats = value_loss(
                fwd_out["values"], batch["old_values"], batch["returns"], mask,
                clip_range=cfg.vf_clip_param, loss_agg_mode="token-mean", **counts,
            )
            loss = loss + cfg.vf_loss_coeff * vf
            out[VF_LOSS] = vf.detach()
            out.update(vf_stats)
        self._last_stats = out
        return loss

"""AgentSFT: supervised warm start of an LLM agent on expert conversations.

Data: `sft_data` (JSONL files of conversations, ours or AgentGym's format)
and/or `sft_expert: {num: N, split: train}` (generated at setup from the
env family's scripted expert). Each iteration trains on the next
`sft_batch_size` conversations (reshuffled every epoch, seeded). An `lr`
schedule is keyed by the number of conversations trained on.
`observation_loss_weight` > 0 adds a language-modelling loss on the
observation tokens (the learner's docstring has the equation). The module,
tokenization and loss masks are the RL ones, so `model_path: <an AgentSFT
checkpoint>` starts a GRPO run from the result.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.metrics import LEARNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME

from rllib_agentgym.algorithms.grpo.grpo import GRPO, GRPOConfig
from rllib_agentgym.core.embedded import resolve_model_path


class AgentSFTConfig(GRPOConfig):
    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or AgentSFT)
        self.sft_data = None  # a JSONL path or a list of them
        self.sft_expert = None  # {num, split, max_steps, expert_options, augmented_copies}: generate from the env's expert
        self.sft_batch_size = 16  # conversations per iteration
        # Weight of the next-token loss on observation tokens: they are already in the forward pass,
        # and they are mostly copies (an action list repeats the objects in view), which a small
        # model trained from scratch has to learn to make.
        self.observation_loss_weight = 0.0
        self.lr = 1e-4
        self.use_kl_loss = False
        self.log_trajectories = 0

    def training(self, *, sft_data=NotProvided, sft_expert=NotProvided, sft_batch_size: Optional[int] = NotProvided,
                 observation_loss_weight: Optional[float] = NotProvided, **kwargs):
        super().training(**kwargs)
        for name, value in dict(sft_data=sft_data, sft_expert=sft_expert, sft_batch_size=sft_batch_size,
                                observation_loss_weight=observation_loss_weight).items():
            if value is not NotProvided:
                setattr(self, name, value)
        return self

    def get_default_rl_module_spec(self):
        spec = super().get_default_rl_module_spec()
        spec.model_config["temperature"] = 1.0  # the expert's tokens under the model itself, whatever `temperature` says
        return spec

    def get_default_learner_class(self):
        from rllib_agentgym.algorithms.sft.torch.sft_torch_learner import SFTTorchLearner

        return SFTTorchLearner

    def validate(self) -> None:
        super().validate()
        if not self.sft_data and not self.sft_expert:
            self._value_error("AgentSFT needs `sft_data` (JSONL paths) or `sft_expert` ({num, split})")
        if self.sft_expert and not self.env:
            self._value_error("`sft_expert` needs `env` (whose expert plays the tasks)")
        if not (isinstance(self.observation_loss_weight, (int, float)) and self.observation_loss_weight >= 0):
            self._value_error(f"`observation_loss_weight` must be a number >= 0, got {self.observation_loss_weight!r}")


class AgentSFT(GRPO):
    @classmethod
    def get_default_config(cls) -> AgentSFTConfig:
        return AgentSFTConfig()

    def setup(self, config):
        super().setup(config)
        from transformers import AutoTokenizer

        from rllib_agentgym.core.chat import ChatFormat
        from rllib_agentgym.data.conversations import load_jsonl, normalize, tokenize_with_observations

        cfg = self.config
        conversations = load_jsonl(cfg.sft_data) if cfg.sft_data else []
        if cfg.sft_expert:
            from rllib_agentgym.data.experts import expert_conversations, with_augmented_copies

            e = dict(cfg.sft_expert)
            rows = expert_conversations(cfg.env, e.get("split", "train"), int(e.get("num", 100)), int(e.get("max_steps", 100)),
                                        expert_options=e.get("expert_options"))
            rows = with_augmented_copies(rows, cfg.env, int(e.get("augmented_copies", 0)), seed=cfg.seed or 0)
            conversations += [normalize(row) for row in rows]
        if not conversations:
            raise ValueError("AgentSFT: no conversations to train on")
        tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(cfg.model_path))
        chat = ChatFormat.from_tokenizer(tokenizer)
        self._pad_id = tokenizer.pad_token_id or 0
        self._examples = [tuple(column[: cfg.max_model_len] for column in tokenize_with_observations(tokenizer, chat, c))
                          for c in conversations]
        self._rng = np.random.default_rng(cfg.seed or 0)
        self._order: list[int] = []

    def _next_batch(self) -> list[tuple[list[int], list[int], list[int]]]:
        batch = []
        while len(batch) < self.config.sft_batch_size:
            if not self._order:
                self._order = list(self._rng.permutation(len(self._examples)))
            batch.append(self._examples[self._order.pop()])
        return batch

    def training_step(self) -> None:
        examples = self._next_batch()
        width = max(len(ids) for ids, _, _ in examples)
        b = len(examples)
        input_ids = np.full((b, width), self._pad_id, dtype=np.int64)
        attention = np.zeros((b, width), dtype=np.int64)
        mask = np.zeros((b, width), dtype=np.float32)
        observation = np.zeros((b, width), dtype=np.float32)
        for i, (ids, m, o) in enumerate(examples):
            input_ids[i, : len(ids)] = ids
            attention[i, : len(ids)] = 1
            mask[i, : len(m)] = m
            observation[i, : len(o)] = o
        columns = {"input_ids": input_ids, "attention_mask": attention, "response_mask": mask}
        if self.config.observation_loss_weight:
            columns["observation_mask"] = observation
        batch = SampleBatch(columns)
        # Timesteps = conversations trained on before this batch: an RLlib `lr`
        # schedule ([[0, lr0], [n, lr1], ...]) is keyed by it.
        seen = self.iteration * self.config.sft_batch_size
        results = self.learner_group.update(batch=MultiAgentBatch({DEFAULT_MODULE_ID: batch}, env_steps=b),
                                            timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: seen})
        self.metrics.aggregate(results, key=LEARNER_RESULTS)
        self.metrics.log_value("sft_tokens_trained", float(mask.sum()), reduce="sum")
        self.metrics.log_value("sft_epoch", self._epoch_progress(), window=1)
        if self.env_runner_group is not None:
            # Evaluation (evaluation_interval) samples with the current weights.
            self.env_runner_group.sync_weights(from_worker_or_learner_group=self.learner_group, inference_only=True)

    def _epoch_progress(self) -> float:
        return (self.iteration + 1) * self.config.sft_batch_size / len(self._examples)

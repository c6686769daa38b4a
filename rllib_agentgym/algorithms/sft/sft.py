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

from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.metrics import LEARNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME

from rllib_agentgym.algorithms.grpo.grpo import GRPO, GRPOConfig


class AgentSFTConfig(GRPOConfig):
    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or AgentSFT)
        self.sft_batch_size = 16  # conversations per iteration
        # Weight of the next-token loss on observation tokens: they are already in the forward pass,
        # and they are mostly copies (an action list repeats the objects in view), which a small
        # model trained from scratch has to learn to make.
        self.observation_loss_weight = 0.0
        self.lr = 1e-4
        self.use_kl_loss = False
        self.log_trajectories = 0

    def training(self, *, observation_loss_weight: Optional[float] = NotProvided, **kwargs):
        super().training(**kwargs)  # sft_data, sft_expert and sft_batch_size are GRPOConfig's
        if observation_loss_weight is not NotProvided:
            self.observation_loss_weight = observation_loss_weight
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
        if self.sft_coef:
            self._value_error("`sft_coef` mixes expert data into an RL loss; AgentSFT's loss is that data's alone")
        if not (isinstance(self.observation_loss_weight, (int, float)) and self.observation_loss_weight >= 0):
            self._value_error(f"`observation_loss_weight` must be a number >= 0, got {self.observation_loss_weight!r}")


class AgentSFT(GRPO):
    @classmethod
    def get_default_config(cls) -> AgentSFTConfig:
        return AgentSFTConfig()

    def setup(self, config):
        super().setup(config)
        from rllib_agentgym.algorithms.sft.examples import ExampleStream, load_conversations, tokenize_examples

        cfg = self.config
        examples, self._pad_id = tokenize_examples(cfg.model_path, load_conversations(cfg), cfg.max_model_len)
        self._stream = ExampleStream(examples, seed=cfg.seed or 0)

    def training_step(self) -> None:
        from rllib_agentgym.algorithms.sft.examples import pad_examples

        columns = pad_examples(self._stream.next(self.config.sft_batch_size), self._pad_id)
        if not self.config.observation_loss_weight:
            columns.pop("observation_mask")
        b = len(columns["input_ids"])
        batch = SampleBatch(columns)
        # Timesteps = conversations trained on before this batch: an RLlib `lr`
        # schedule ([[0, lr0], [n, lr1], ...]) is keyed by it.
        seen = self.iteration * self.config.sft_batch_size
        results = self.learner_group.update(batch=MultiAgentBatch({DEFAULT_MODULE_ID: batch}, env_steps=b),
                                            timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: seen})
        self.metrics.aggregate(results, key=LEARNER_RESULTS)
        self.metrics.log_value("sft_tokens_trained", float(columns["response_mask"].sum()), reduce="sum")
        self.metrics.log_value("sft_epoch", self._epoch_progress(), window=1)
        if self.env_runner_group is not None:
            # Evaluation (evaluation_interval) samples with the current weights.
            self.env_runner_group.sync_weights(from_worker_or_learner_group=self.learner_group, inference_only=True)

    def _epoch_progress(self) -> float:
        return (self.iteration + 1) * self.config.sft_batch_size / len(self._stream.examples)

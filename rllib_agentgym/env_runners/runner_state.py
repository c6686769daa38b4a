"""The state an LLM env runner shares with its Algorithm, for both runners.

The Algorithm pushes the learner's weights with a sequence number (a runner skips
a push it has already loaded), the turn horizon that ScalingInter-RL grows, and
the counters that seed the next call's episodes; a restored checkpoint sets them
back the same way.
"""

from __future__ import annotations

from typing import Any

import ray
from ray.rllib.core import COMPONENT_RL_MODULE
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME, WEIGHTS_SEQ_NO


class RunnerStateMixin:
    """get_state / set_state (RLlib's Checkpointable) of an LLM env runner.

    The runner keeps `_max_turns`, `_num_sample_calls`, `_env_steps_lifetime` and
    `_weights_seq_no`, and loads weights with `set_weights(self._weights_to_load(...))`.
    """

    def _weights_to_load(self, module_state: dict) -> dict:
        """What `set_weights` takes from the pushed RLModule state (default: all of it)."""
        return module_state

    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict[str, Any]:
        return {
            "max_turns": self._max_turns,
            "num_sample_calls": self._num_sample_calls,
            NUM_ENV_STEPS_SAMPLED_LIFETIME: self._env_steps_lifetime,
            WEIGHTS_SEQ_NO: self._weights_seq_no,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        if COMPONENT_RL_MODULE in state:
            seq_no = state.get(WEIGHTS_SEQ_NO, 0)
            if seq_no == 0 or seq_no > self._weights_seq_no:  # 0: a push outside training, always loaded
                module_state = state[COMPONENT_RL_MODULE]
                if isinstance(module_state, ray.ObjectRef):  # remote runners get the weights by reference
                    module_state = ray.get(module_state)
                self.set_weights(self._weights_to_load(module_state))
                self._weights_seq_no = seq_no
        if "max_turns" in state:
            self._max_turns = int(state["max_turns"])
        if "num_sample_calls" in state:
            self._num_sample_calls = int(state["num_sample_calls"])
        if state.get(NUM_ENV_STEPS_SAMPLED_LIFETIME) is not None:
            self._env_steps_lifetime = int(state[NUM_ENV_STEPS_SAMPLED_LIFETIME])

    def get_ctor_args_and_kwargs(self):
        return ((), {"config": self.config})

    def get_checkpointable_components(self):
        return []

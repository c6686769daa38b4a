"""The state both LLM env runners share with their Algorithm (env_runners/runner_state.py):
weights pushed with a sequence number, the ScalingInter horizon, and the sampling counters."""

from __future__ import annotations

from ray.rllib.core import COMPONENT_RL_MODULE, DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME, WEIGHTS_SEQ_NO

from rllib_agentgym.env_runners.llm_env_runner import LLMEnvRunner
from rllib_agentgym.env_runners.multi_agent_llm_env_runner import MultiAgentLLMEnvRunner
from rllib_agentgym.env_runners.runner_state import RunnerStateMixin


class _Runner(RunnerStateMixin):
    """The mixin's contract: the four fields, and `set_weights` (here: remembers what it got)."""

    def __init__(self):
        self._max_turns, self._num_sample_calls, self._env_steps_lifetime, self._weights_seq_no = 4, 0, 0, 0
        self.loaded: list[dict] = []

    def set_weights(self, weights: dict) -> None:
        self.loaded.append(weights)


def _push(seq_no: int, weights: dict) -> dict:
    return {COMPONENT_RL_MODULE: weights, WEIGHTS_SEQ_NO: seq_no}


def test_weights_load_once_per_sequence_number():
    runner = _Runner()
    runner.set_state(_push(2, {"w": 2}))
    runner.set_state(_push(2, {"w": "again"}))  # the same push, e.g. to a runner that has it
    runner.set_state(_push(1, {"w": "stale"}))
    assert runner.loaded == [{"w": 2}] and runner._weights_seq_no == 2
    runner.set_state(_push(0, {"w": "outside training"}))  # seq 0: always loaded
    runner.set_state(_push(3, {"w": 3}))
    assert runner.loaded == [{"w": 2}, {"w": "outside training"}, {"w": 3}]
    assert runner.get_state()[WEIGHTS_SEQ_NO] == 3


def test_horizon_and_counters_round_trip_and_none_is_ignored():
    runner = _Runner()
    runner._max_turns, runner._num_sample_calls, runner._env_steps_lifetime = 12, 7, 345
    restored = _Runner()
    restored.set_state(runner.get_state())
    assert restored.get_state() == runner.get_state()
    assert restored.loaded == []  # no weights in a state without the RLModule component
    restored.set_state({"max_turns": 6, NUM_ENV_STEPS_SAMPLED_LIFETIME: None})  # ScalingInter's push
    assert (restored._max_turns, restored._env_steps_lifetime) == (6, 345)


def test_single_agent_runner_takes_its_policy_and_multi_agent_runner_takes_all():
    module_state = {DEFAULT_MODULE_ID: {"w": 1}}
    assert LLMEnvRunner._weights_to_load(None, module_state) == {"w": 1}
    assert LLMEnvRunner._weights_to_load(None, {"w": 1}) == {"w": 1}  # a bare module state
    two = {"x": {"w": 1}, "y": {"w": 2}}
    assert MultiAgentLLMEnvRunner._weights_to_load(None, two) == two

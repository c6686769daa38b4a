"""A trial that trains on CPU in its own process reserves its node's free CPUs, so that Ray gives
that process as many threads (RLlib's "auto" reserved one: half of a 2-core machine idled)."""

from __future__ import annotations

import pytest

from rllib_agentgym.algorithms.grpo.grpo import GRPO, GRPOConfig
from rllib_agentgym.algorithms.resources import main_process_cpus


@pytest.mark.parametrize(
    "requested, others, node, expected",
    [
        (1, [], 2, 2),  # everything in the main process: the whole node
        (1, [1], 2, 1),  # one env runner keeps its core
        (1, [0.5], 2, 1),  # whole CPUs only
        (1, [0.5, 0.5], 4, 3),
        (2, [], 1, 2),  # never below RLlib's own request
        (1, [4], 2, 1),
    ],
)
def test_main_process_cpus(requested, others, node, expected):
    assert main_process_cpus(requested, others, node) == expected


def _bundles(**settings) -> list[dict]:
    config = GRPOConfig().environment("agentgym/textcraft").llm(inference_engine="hf")
    for name, value in settings.items():
        setattr(config, name, value)
    return GRPO.default_resource_request(config.to_dict()).bundles


def test_local_cpu_learner_reserves_the_free_cpus_of_the_node(ray_local):
    assert _bundles() == [{"CPU": 2.0}]
    # Runners keep theirs; the main process takes what is left.
    assert [b["CPU"] for b in _bundles(num_env_runners=1, num_cpus_per_env_runner=1)] == [1.0, 1.0]
    # A size the user chose stays; so do remote learners and a GPU learner.
    assert _bundles(num_cpus_per_learner=1) == [{"CPU": 1.0}]
    assert [b.get("CPU") for b in _bundles(num_learners=1, num_cpus_per_learner=1)] == [1, 1]
    assert _bundles(num_gpus_per_learner=1)[0]["CPU"] == 1


def test_cpus_held_by_a_running_actor_are_left_to_it(ray_local):
    """A request never exceeds what is free now: it would wait forever on a fixed cluster."""
    import ray

    @ray.remote(num_cpus=1)
    class Holder:
        def ping(self):
            return True

    holder = Holder.remote()
    try:
        assert ray.get(holder.ping.remote())
        assert _bundles() == [{"CPU": 1.0}]
    finally:
        ray.kill(holder)

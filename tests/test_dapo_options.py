"""DAPO / Dr. GRPO options through the config, on the real bandit env (envs/bandit) with
the embedded model and the transformers engine: dynamic sampling's refill loop inside the
Algorithm, overlong filtering and `norm_adv_by_std: false` in the batch the learner gets."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from rllib_agentgym.algorithms.grpo.grpo import GRPO, GRPOConfig
from rllib_agentgym.env_runners.llm_env_runner import LLMEnvRunner

from bandit_configs import GROUP_SIZE, mixed_bandit_config


def _informative_groups(trajectories) -> list[int]:
    """Group ids, in order of appearance, whose successes are not all equal."""
    outcomes: dict[int, set] = {}
    for t in trajectories:
        outcomes.setdefault(t.group_id, set()).add(bool(t.success))
    return [g for g, seen in outcomes.items() if len(seen) > 1]


def test_dynamic_sampling_refills_to_the_batch_size_and_trims_the_surplus(ray_local):
    """Each iteration: groups with equal rewards are dropped, further sampling calls run until
    `tasks_per_iteration` informative groups are in hand (at most `dynamic_sampling_max_rounds`
    extra calls), the surplus of the last call is cut, and the learner trains on exactly those."""
    tasks, max_rounds = 3, 3
    algo = mixed_bandit_config(dynamic_sampling=True, dynamic_sampling_max_rounds=max_rounds).llm(
        tasks_per_iteration=tasks).build_algo()
    refilled = trimmed = 0
    try:
        for _ in range(3):
            rollouts = algo._sample()
            kept = algo._dynamic_sampling([t for r in rollouts for t in r.trajectories], rollouts)
            # `rollouts` now holds every call of the loop (one per call: a local runner).
            rounds = len(rollouts) - 1
            found = [_informative_groups(r.trajectories) for r in rollouts]
            cumulative = np.cumsum([len(f) for f in found])
            assert rounds <= max_rounds
            assert all(cumulative[k] < tasks for k in range(rounds))  # each refill was needed
            assert cumulative[-1] >= tasks or rounds == max_rounds  # stopped: enough, or the cap
            expected = [g for f in found for g in f][:tasks]
            assert [t.group_id for t in kept][::GROUP_SIZE] == expected
            assert len(kept) == GROUP_SIZE * len(expected)
            refilled += rounds > 0
            trimmed += cumulative[-1] > tasks
            calls_before = algo.env_runner_group.local_env_runner._num_sample_calls
            result = algo.train()  # the same loop inside training_step, then the update
            runners = result["env_runners"]
            calls = algo.env_runner_group.local_env_runner._num_sample_calls - calls_before
            assert runners["dynamic_sampling_groups_kept"] == tasks
            # Episodes of every sampling call count in the metrics, the refills' included.
            assert runners["dynamic_sampling_rounds"] == calls - 1
            assert runners["num_episodes"] == calls * tasks * GROUP_SIZE
            assert result["learners"]["default_policy"]["num_module_steps_trained"] == GROUP_SIZE * tasks
    finally:
        algo.stop()
    # The draw (seed 0) exercises both branches; a change of draw that does not is reported here.
    assert refilled and trimmed, (refilled, trimmed)


def test_dynamic_sampling_stops_at_the_round_cap_and_skips_an_empty_update(ray_local):
    """Greedy replies make every group uniform: the loop gives up after the cap of extra
    sampling calls, and the iteration trains on nothing (the weights stay)."""
    algo = mixed_bandit_config(dynamic_sampling=True, dynamic_sampling_max_rounds=2).llm(
        tasks_per_iteration=2, temperature=0.0).build_algo()
    module = algo.learner_group._learner.module["default_policy"].unwrapped()
    try:
        before = torch.cat([p.detach().flatten() for p in module.llm.parameters()]).clone()
        result = algo.train()
        after = torch.cat([p.detach().flatten() for p in module.llm.parameters()])
        calls = algo.env_runner_group.local_env_runner._num_sample_calls
    finally:
        algo.stop()
    assert result["env_runners"]["dynamic_sampling_rounds"] == 2
    assert result["env_runners"]["num_episodes"] == 3 * 2 * GROUP_SIZE  # all three calls' episodes
    assert result["env_runners"]["dynamic_sampling_groups_kept"] == 0
    assert calls == 3  # the first call and 2 refills
    assert "default_policy" not in result.get("learners", {})
    assert torch.equal(before, after)


@pytest.fixture(scope="module")
def bandit_trajectories():
    """Real bandit episodes of the embedded agent with replies capped at 32 tokens: the
    ones it did not end by then are truncated (about 2 in 3), the others closed their turn."""
    cfg = mixed_bandit_config().llm(model_path="embedded-agent", max_new_tokens=32, tasks_per_iteration=4)
    runner = LLMEnvRunner(config=cfg, worker_index=0)
    try:
        trajectories = [t for call in range(2) for t in runner.sample(call_index=call).trajectories]
    finally:
        runner.stop()
    return trajectories


def _batch(trajectories, **config) -> dict:
    """The batch `GRPO.training_step` hands the learner, from a config dict as a YAML gives it."""
    cfg = GRPOConfig().update_from_dict({"env": "agentgym/bandit", "reward_type": "return", **config})
    return GRPO._build_batch(SimpleNamespace(config=cfg), trajectories).policy_batches["default_policy"]


def test_overlong_filter_zeroes_the_loss_mask_of_truncated_trajectories(bandit_trajectories):
    truncated = np.array([t.truncated for t in bandit_trajectories])
    assert truncated.any() and not truncated.all(), truncated  # both kinds, or the test shows nothing
    plain = _batch(bandit_trajectories, overlong_filter=False)
    filtered = _batch(bandit_trajectories, overlong_filter=True)
    generated = np.asarray(plain["response_mask"]).sum(axis=1)
    assert (generated > 0).all()  # every row has tokens the loss would train
    mask = np.asarray(filtered["response_mask"])
    assert (mask[truncated] == 0).all()
    np.testing.assert_array_equal(mask[~truncated], np.asarray(plain["response_mask"])[~truncated])
    # Nothing of a filtered row reaches the loss: its advantages are 0 as well.
    assert (np.asarray(filtered["advantages"])[truncated] == 0).all()


def test_norm_adv_by_std_false_gives_dr_grpo_advantages(bandit_trajectories):
    rewards = np.array([t.reward for t in bandit_trajectories])
    groups = np.array([t.group_id for t in bandit_trajectories])
    per_row = {}
    for flag in (True, False):
        batch = _batch(bandit_trajectories, norm_adv_by_std=flag)
        mask = np.asarray(batch["response_mask"])
        per_row[flag] = (np.asarray(batch["advantages"]) * mask).sum(1) / mask.sum(1)
    means = {g: rewards[groups == g].mean() for g in set(groups)}
    stds = {g: rewards[groups == g].std(ddof=1) for g in set(groups)}
    mixed = np.array([stds[g] > 0 for g in groups])
    assert mixed.any()
    dr_grpo = np.where(mixed, rewards - np.array([means[g] for g in groups]), 0.0)
    np.testing.assert_allclose(per_row[False], dr_grpo, atol=1e-6)  # r - mean, no std
    grpo = dr_grpo / (np.array([stds[g] for g in groups]) + 1e-6)
    np.testing.assert_allclose(per_row[True], grpo, rtol=1e-4, atol=1e-6)


def test_invalid_turn_advantage_costs_the_refused_turns_tokens_only(bandit_trajectories):
    trajectories = copy.deepcopy(bandit_trajectories)
    for i, t in enumerate(trajectories):
        for turn in t.turns:
            turn.invalid_action = i % 3 == 0
    refused = np.array([any(turn.invalid_action for turn in t.turns) for t in trajectories])
    plain = _batch(trajectories)
    costed = _batch(trajectories, invalid_turn_advantage=0.5)
    mask = np.asarray(plain["response_mask"]).astype(bool)
    delta = np.asarray(costed["advantages"]) - np.asarray(plain["advantages"])
    np.testing.assert_allclose(delta[refused][mask[refused]], -0.5, atol=1e-6)
    assert (delta[~mask] == 0).all() and (delta[~refused] == 0).all()
    np.testing.assert_array_equal(np.asarray(costed["rewards"]), np.asarray(plain["rewards"]))  # outcome untouched


def test_shuffled_advantage_control_permutes_episode_advantages(bandit_trajectories):
    """`learning_curves.py --shuffled-advantages`: the same advantages, on other episodes."""
    from benchmarks.learning_curves import shuffled_advantage_grpo

    cfg = GRPOConfig().update_from_dict({"env": "agentgym/bandit", "reward_type": "return"})

    def per_episode(batch):
        rows = batch.policy_batches["default_policy"]
        mask = np.asarray(rows["response_mask"], dtype=np.float64)
        return (np.asarray(rows["advantages"]) * mask).sum(1) / mask.sum(1)

    control = object.__new__(shuffled_advantage_grpo())
    control.config, control._iteration = cfg, 3
    plain = per_episode(GRPO._build_batch(SimpleNamespace(config=cfg), bandit_trajectories))
    shuffled = per_episode(control._build_batch(bandit_trajectories))
    assert np.abs(plain).max() > 0 and not np.allclose(plain, shuffled)
    np.testing.assert_allclose(np.sort(shuffled), np.sort(plain), atol=1e-6)
    np.testing.assert_allclose(per_episode(control._build_batch(bandit_trajectories)), shuffled)  # seeded

"""Advantage estimators against hand-computed values (torch + pytest only)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rllib_agentgym.algorithms.advantages import (
    compute_advantages,
    dynamic_sampling_keep_mask,
    gae_advantages,
    gigpo_advantages,
    grpo_advantages,
    invalid_turn_advantages,
    masked_mean,
    masked_whiten,
    reinforce_plus_plus_advantages,
    reinforce_pp_returns,
    rloo_advantages,
    to_token_level,
    token_level_rewards,
    turn_index,
    weight_advantages,
)


def close(actual, expected, atol=1e-6):
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert torch.allclose(actual, expected, atol=atol, rtol=0), (actual, expected)


# A batch mixing four groups, interleaved, with non-contiguous ids:
#   group 7: rewards 1, 0, 0, 1   mean 0.5, deviations +-0.5,
#            unbiased var = 4 * 0.25 / 3 = 1/3, std = 1/sqrt(3) = 0.57735
#            GRPO: +-0.5 * sqrt(3) = +-0.8660254
#   group 3: rewards 1, 2, 3      mean 2, deviations -1, 0, 1, var = 2 / 2 = 1, std 1
#   group 42: rewards 0.1 x 3     all equal -> 0
#   group 5: reward 5 alone       group of one -> 0
REWARDS = torch.tensor([1.0, 1.0, 0.1, 0.0, 2.0, 5.0, 0.0, 0.1, 3.0, 1.0, 0.1])
GROUPS = torch.tensor([7, 3, 42, 7, 3, 5, 7, 42, 3, 7, 42])
H = 0.5 * math.sqrt(3)  # 0.8660254


class TestGRPO:
    def test_hand_values(self):
        eps = 1e-6
        adv = grpo_advantages(REWARDS, GROUPS, eps=eps)
        s3 = 1.0 / math.sqrt(3)
        expected = [
            0.5 / (s3 + eps),  # group 7, r=1
            -1.0 / (1 + eps),  # group 3, r=1
            0.0,  # group 42
            -0.5 / (s3 + eps),  # group 7, r=0
            0.0,  # group 3, r=2
            0.0,  # group of one
            -0.5 / (s3 + eps),
            0.0,
            1.0 / (1 + eps),  # group 3, r=3
            0.5 / (s3 + eps),
            0.0,
        ]
        close(adv, expected)
        assert abs(expected[0] - H) < 1e-5

    def test_equal_rewards_exactly_zero(self):
        # 0.1 + 0.1 + 0.1 != 0.3 in floating point; the group must still be
        # exactly 0, not rounding noise divided by eps.
        adv = grpo_advantages(torch.tensor([0.1, 0.1, 0.1]), torch.tensor([0, 0, 0]))
        assert torch.equal(adv, torch.zeros(3))
        adv = grpo_advantages(torch.tensor([1.0, 1.0]), torch.tensor([0, 0]), norm_by_std=False)
        assert torch.equal(adv, torch.zeros(2))

    def test_group_of_one_is_zero_not_nan(self):
        adv = grpo_advantages(torch.tensor([3.0, -2.0]), torch.tensor([0, 1]))
        assert torch.equal(adv, torch.zeros(2))

    def test_dr_grpo_no_std(self):
        adv = grpo_advantages(REWARDS, GROUPS, norm_by_std=False)
        close(adv, [0.5, -1.0, 0.0, -0.5, 0.0, 0.0, -0.5, 0.0, 1.0, 0.5, 0.0])

    def test_uses_unbiased_std(self):
        # Rewards 0, 2: mean 1, unbiased std sqrt(2) (biased would be 1).
        adv = grpo_advantages(torch.tensor([0.0, 2.0]), torch.tensor([0, 0]), eps=0.0)
        close(adv, [-1 / math.sqrt(2), 1 / math.sqrt(2)])

    def test_integer_rewards_and_dtype(self):
        adv = grpo_advantages(torch.tensor([0, 1]), torch.tensor([0, 0]), eps=0.0)
        assert adv.dtype == torch.get_default_dtype()
        close(adv, [-1 / math.sqrt(2), 1 / math.sqrt(2)])
        adv64 = grpo_advantages(torch.tensor([0.0, 1.0], dtype=torch.float64), torch.tensor([0, 0]))
        assert adv64.dtype == torch.float64

    def test_shape_mismatch(self):
        with pytest.raises(ValueError):
            grpo_advantages(torch.zeros(3), torch.zeros(2, dtype=torch.long))


class TestRLOO:
    def test_hand_values(self):
        adv = rloo_advantages(REWARDS, GROUPS)
        # group 7 (1, 0, 0, 1): 1 - (0+0+1)/3 = 2/3 ; 0 - (1+0+1)/3 = -2/3
        # group 3 (1, 2, 3): 1 - 2.5 = -1.5 ; 2 - 2 = 0 ; 3 - 1.5 = 1.5
        expected = [2 / 3, -1.5, 0.0, -2 / 3, 0.0, 0.0, -2 / 3, 0.0, 1.5, 2 / 3, 0.0]
        close(adv, expected)

    def test_pair_and_single(self):
        # pair (4, 0): 4 - 0 = 4, 0 - 4 = -4 ; single -> 0
        adv = rloo_advantages(torch.tensor([4.0, 0.0, 9.0]), torch.tensor([1, 1, 2]))
        close(adv, [4.0, -4.0, 0.0])


class TestDynamicSampling:
    def test_keep_mask(self):
        keep = dynamic_sampling_keep_mask(REWARDS, GROUPS)
        assert keep.dtype == torch.bool
        # groups 7 and 3 vary -> kept; 42 all equal and 5 single -> dropped
        expected = [True, True, False, True, True, False, True, False, True, True, False]
        assert keep.tolist() == expected

    def test_all_solved_and_all_failed(self):
        r = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
        g = torch.tensor([0, 0, 1, 1, 2, 2])
        assert dynamic_sampling_keep_mask(r, g).tolist() == [False, False, False, False, True, True]


class TestHalfWeights:
    def test_only_positive_entries_shrink(self):
        adv = torch.tensor([[1.5, 0.0, -2.0], [-0.5, 0.25, 0.0]])
        close(weight_advantages(adv, 0.1), [[0.15, 0.0, -2.0], [-0.5, 0.025, 0.0]])
        close(weight_advantages(adv, 0.0), [[0.0, 0.0, -2.0], [-0.5, 0.0, 0.0]])

    def test_only_negative_entries_shrink(self):
        adv = torch.tensor([[1.5, 0.0, -2.0], [-0.5, 0.25, 0.0]])
        close(weight_advantages(adv, negative_weight=0.5), [[1.5, 0.0, -1.0], [-0.25, 0.25, 0.0]])
        # PSR: the above-baseline samples alone.
        close(weight_advantages(adv, negative_weight=0.0), [[1.5, 0.0, 0.0], [0.0, 0.25, 0.0]])

    def test_both_halves(self):
        adv = torch.tensor([2.0, -1.0])
        close(weight_advantages(adv, 0.5, 0.25), [1.0, -0.25])

    def test_weight_one_is_the_plain_estimator(self):
        adv = grpo_advantages(REWARDS, GROUPS)
        assert weight_advantages(adv, 1.0, 1.0) is adv

    @pytest.mark.parametrize("name", ["positive_advantage_weight", "negative_advantage_weight"])
    def test_config_rejects_negative_weight(self, name):
        from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig

        cfg = GRPOConfig().environment("agentgym/textcraft").training(**{name: -0.5})
        with pytest.raises(ValueError, match=name):
            cfg.validate()


class TestTokenHelpers:
    def test_to_token_level(self):
        mask = torch.tensor([[1, 1, 0], [0, 1, 1]], dtype=torch.bool)
        close(to_token_level(torch.tensor([2.0, -1.0]), mask), [[2, 2, 0], [0, -1, -1]])

    def test_token_level_rewards(self):
        mask = torch.tensor([[1, 1, 0, 1, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]])
        kl = torch.tensor([[1.0, 2.0, 50.0, 3.0, 50.0], [4.0, 50.0, 50.0, 50.0, 50.0], [50.0] * 5])
        out = token_level_rewards(torch.tensor([1.0, 2.0, 3.0]), mask, kl, kl_coef=0.1)
        # row 0: last valid token is index 3: [-0.1, -0.2, 0, 1 - 0.3, 0]
        # row 1: only index 0: 2 - 0.4
        # row 2: no valid token, nothing
        close(out, [[-0.1, -0.2, 0, 0.7, 0], [1.6, 0, 0, 0, 0], [0, 0, 0, 0, 0]])

    def test_masked_mean(self):
        x = torch.tensor([[1.0, 2.0, 99.0], [3.0, 99.0, 99.0]])
        m = torch.tensor([[1, 1, 0], [1, 0, 0]])
        close(masked_mean(x, m), 2.0)  # (1 + 2 + 3) / 3
        close(masked_mean(x, m, dim=-1), [1.5, 3.0])
        close(masked_mean(x, torch.zeros_like(m)), 0.0)

    def test_masked_whiten(self):
        x = torch.tensor([[1.0, 2.0, 9.0], [3.0, 100.0, 4.0]])
        m = torch.tensor([[1, 1, 0], [1, 0, 1]], dtype=torch.bool)
        # valid 1, 2, 3, 4: mean 2.5, devs -1.5 -0.5 0.5 1.5,
        # unbiased var = (2.25 + 0.25 + 0.25 + 2.25) / 3 = 5/3
        s = math.sqrt(5 / 3 + 1e-8)
        close(masked_whiten(x, m), [[-1.5 / s, -0.5 / s, 0], [0.5 / s, 0, 1.5 / s]])
        close(
            masked_whiten(x, m, shift_mean=False),
            [[-1.5 / s + 2.5, -0.5 / s + 2.5, 0], [0.5 / s + 2.5, 0, 1.5 / s + 2.5]],
        )

    def test_masked_whiten_single_element(self):
        out = masked_whiten(torch.tensor([[3.0, 7.0]]), torch.tensor([[0, 1]]))
        close(out, [[0.0, 0.0]])


class TestReinforcePP:
    MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    KL = torch.tensor([[0.1, 0.2, 0.3, 9.0], [0.5, 0.4, 9.0, 9.0]])

    def test_returns_and_whitening(self):
        adv, ret = reinforce_plus_plus_advantages(
            torch.tensor([1.0, 0.0]), self.MASK, self.KL, kl_coef=0.1, gamma=1.0
        )
        # token rewards: row 0: -0.01, -0.02, -0.03 + 1 = 0.97 ; row 1: -0.05, -0.04
        # returns-to-go: row 0: 0.94, 0.95, 0.97 ; row 1: -0.09, -0.04
        close(ret, [[0.94, 0.95, 0.97, 0], [-0.09, -0.04, 0, 0]])
        # whitening over the 5 valid tokens: mean = 2.73 / 5 = 0.546
        devs = [0.394, 0.404, 0.424, -0.636, -0.586]
        var = sum(d * d for d in devs) / 4  # 1.24612 / 4 = 0.31153 (unbiased)
        s = math.sqrt(var + 1e-8)
        close(
            adv,
            [[devs[0] / s, devs[1] / s, devs[2] / s, 0], [devs[3] / s, devs[4] / s, 0, 0]],
            1e-5,
        )
        # whitened: zero mean and unit (unbiased) variance on valid tokens
        v = adv[self.MASK.bool()]
        assert abs(v.mean().item()) < 1e-6 and abs(v.var().item() - 1) < 1e-5

    def test_discount_skips_holes(self):
        # valid tokens at 0, 2, 3 (hole at 1, padding at 4); reward 1 at t=3, gamma 0.5
        # G3 = 1, G2 = 0.5, G0 = 0.25 (the hole costs no discount step and gets 0)
        mask = torch.tensor([[1, 0, 1, 1, 0]])
        tr = torch.tensor([[0.0, 8.0, 0.0, 1.0, 0.0]])
        close(reinforce_pp_returns(tr, mask, gamma=0.5), [[0.25, 0, 0.5, 1.0, 0]])
        adv, ret = reinforce_plus_plus_advantages(torch.tensor([1.0]), mask, gamma=0.5)
        close(ret, [[0.25, 0, 0.5, 1.0, 0]])
        # mean 1.75/3 = 0.583333, devs -1/3, -1/12, 5/12, var = (1/9 + 1/144 + 25/144)/2 = 0.145833
        devs = [0.25 - 1.75 / 3, 0.5 - 1.75 / 3, 1.0 - 1.75 / 3]
        s = math.sqrt(sum(d * d for d in devs) / 2 + 1e-8)
        close(adv, [[devs[0] / s, 0, devs[1] / s, devs[2] / s, 0]], 1e-5)


class TestGAE:
    # Row 0: a two-turn trajectory: generated at 0, 1, observation tokens at 2, 3,
    # generated at 4, 5, padding at 6. Masked positions hold garbage that must be ignored.
    MASK = torch.tensor([[1, 1, 0, 0, 1, 1, 0], [1, 1, 1, 0, 0, 0, 0]])
    VALUES = torch.tensor(
        [[0.5, 0.4, 9.0, 9.0, 0.3, 0.2, 9.0], [1.0, 2.0, 3.0, 9.0, 9.0, 9.0, 9.0]]
    )
    REWARDS = torch.tensor(
        [[0.0, 0.1, 7.0, 7.0, 0.0, 1.0, 7.0], [0.0, 0.0, 2.0, 7.0, 7.0, 7.0, 7.0]]
    )

    def test_hole_hand_unrolled(self):
        adv, ret = gae_advantages(
            self.REWARDS, self.VALUES, self.MASK, gamma=0.9, lam=0.8, whiten=False
        )
        # row 0, valid steps 0 -> 1 -> 4 -> 5, gamma * lam = 0.72:
        #   d5 = 1 + 0.9*0 - 0.2 = 0.8              A5 = 0.8
        #   d4 = 0 + 0.9*0.2 - 0.3 = -0.12          A4 = -0.12 + 0.72*0.8 = 0.456
        #   d1 = 0.1 + 0.9*0.3 - 0.4 = -0.03        A1 = -0.03 + 0.72*0.456 = 0.29832
        #   d0 = 0 + 0.9*0.4 - 0.5 = -0.14          A0 = -0.14 + 0.72*0.29832 = 0.0747904
        # row 1, steps 0 -> 1 -> 2:
        #   d2 = 2 - 3 = -1                         A2 = -1
        #   d1 = 0 + 0.9*3 - 2 = 0.7                A1 = 0.7 - 0.72 = -0.02
        #   d0 = 0 + 0.9*2 - 1 = 0.8                A0 = 0.8 - 0.72*0.02 = 0.7856
        a0 = [0.0747904, 0.29832, 0, 0, 0.456, 0.8, 0]
        a1 = [0.7856, -0.02, -1.0, 0, 0, 0, 0]
        close(adv, [a0, a1])
        # returns = A + V on valid tokens
        close(ret, [[0.5747904, 0.69832, 0, 0, 0.756, 1.0, 0], [1.7856, 1.98, 2.0, 0, 0, 0, 0]])

    def test_lambda_one_gamma_one_is_return_minus_value(self):
        # With gamma = lam = 1, A_t = (sum of future rewards) - V_t.
        adv, ret = gae_advantages(
            self.REWARDS, self.VALUES, self.MASK, gamma=1.0, lam=1.0, whiten=False
        )
        # row 0: rewards-to-go over valid tokens: 1.1, 1.1, 1.0, 1.0
        close(adv[0], [1.1 - 0.5, 1.1 - 0.4, 0, 0, 1.0 - 0.3, 1.0 - 0.2, 0])
        close(ret[0], [1.1, 1.1, 0, 0, 1.0, 1.0, 0])

    def test_whiten(self):
        raw, ret = gae_advantages(
            self.REWARDS, self.VALUES, self.MASK, gamma=0.9, lam=0.8, whiten=False
        )
        adv, ret_w = gae_advantages(self.REWARDS, self.VALUES, self.MASK, gamma=0.9, lam=0.8)
        close(adv, masked_whiten(raw, self.MASK))
        close(ret_w, ret)  # returns come from the raw advantages

    def test_values_detached(self):
        values = self.VALUES.clone().requires_grad_(True)
        adv, ret = gae_advantages(self.REWARDS, values, self.MASK)
        assert not adv.requires_grad and not ret.requires_grad


class TestDispatcher:
    def test_grpo_broadcasts_over_tokens(self):
        mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 1, 1]])
        adv, ret = compute_advantages(
            "grpo",
            rewards=torch.tensor([1.0, 0.0, 5.0]),
            group_ids=torch.tensor([0, 0, 1]),
            response_mask=mask,
        )
        # group 0: (1, 0) mean 0.5, unbiased std sqrt(0.5) -> +-0.5/0.7071068 = +-0.7071068
        a = 0.5 / (math.sqrt(0.5) + 1e-6)
        close(adv, [[a, a, 0], [-a, 0, 0], [0, 0, 0]])
        assert torch.equal(adv, ret)

    def test_rloo(self):
        mask = torch.ones(2, 2)
        adv, _ = compute_advantages(
            "rloo",
            rewards=torch.tensor([1.0, 0.0]),
            group_ids=torch.tensor([0, 0]),
            response_mask=mask,
        )
        close(adv, [[1, 1], [-1, -1]])

    def test_reinforce_pp_and_gae_match_direct_calls(self):
        m = TestGAE.MASK
        direct = gae_advantages(TestGAE.REWARDS, TestGAE.VALUES, m, gamma=0.9, lam=0.8)
        via = compute_advantages(
            "gae",
            token_rewards=TestGAE.REWARDS,
            values=TestGAE.VALUES,
            response_mask=m,
            gamma=0.9,
            lam=0.8,
        )
        close(via[0], direct[0])
        close(via[1], direct[1])
        r = torch.tensor([1.0, 0.0])
        close(
            compute_advantages("reinforce_plus_plus", rewards=r, response_mask=m)[0],
            reinforce_plus_plus_advantages(r, m)[0],
        )

    def test_unknown_estimator(self):
        with pytest.raises(ValueError, match="gae, gigpo, grpo, reinforce_plus_plus, rloo"):
            compute_advantages("ppo", rewards=torch.zeros(1))


class TestOutcomeRewards:
    """`reward_type`: what each trajectory is trained on."""

    @staticmethod
    def trajectories(rewards, successes):
        from rllib_agentgym.core.trajectory import Trajectory

        return [Trajectory(env="babyai", data_idx=0, group_id=0, reward=r, success=s) for r, s in zip(rewards, successes)]

    def test_return_is_the_env_reward_and_success_is_the_flag(self):
        from rllib_agentgym.algorithms.rewards import outcome_rewards

        trajs = self.trajectories([0.93, 0.0, 0.25], [True, False, True])
        assert outcome_rewards(trajs, "return").tolist() == pytest.approx([0.93, 0.0, 0.25])
        assert outcome_rewards(trajs, "success").tolist() == [1.0, 0.0, 1.0]
        with pytest.raises(ValueError, match="'return', 'success'"):
            outcome_rewards(trajs, "score")

    def test_success_reward_silences_step_count_differences(self):
        # BabyAI: every sample succeeds, 1 - 0.9 * steps / 64 differs by one step. The
        # step-shaped return gives the group advantages of about +-1; 1[success] gives 0.
        from rllib_agentgym.algorithms.rewards import outcome_rewards

        trajs = self.trajectories([1 - 0.9 * s / 64 for s in (5, 6, 5, 6)], [True] * 4)
        groups = torch.zeros(4, dtype=torch.long)
        shaped = grpo_advantages(torch.as_tensor(outcome_rewards(trajs, "return")), groups)
        binary = grpo_advantages(torch.as_tensor(outcome_rewards(trajs, "success")), groups)
        assert shaped.abs().min() > 0.8
        close(binary, [0.0, 0.0, 0.0, 0.0])

    def test_invalid_action_penalty_per_refused_turn(self):
        from rllib_agentgym.algorithms.rewards import outcome_rewards
        from rllib_agentgym.core.trajectory import Turn

        trajs = self.trajectories([0.9, 0.9, 0.0], [True, True, False])
        refused = [[False, False], [True, True, False], [True]]
        for t, flags in zip(trajs, refused):
            t.turns = [Turn("obs", "Action: x", "x", invalid_action=f) for f in flags]
        assert outcome_rewards(trajs, "return", 0.1).tolist() == pytest.approx([0.9, 0.7, -0.1])
        assert outcome_rewards(trajs, "success", 0.25).tolist() == pytest.approx([1.0, 0.5, -0.25])
        assert outcome_rewards(trajs, "return").tolist() == pytest.approx([0.9, 0.9, 0.0])  # off by default
        # Two clean successes tie; the one that wasted turns on refused actions now ranks below.
        adv = grpo_advantages(torch.as_tensor(outcome_rewards(trajs[:2], "success", 0.1)), torch.zeros(2, dtype=torch.long))
        assert adv[0] > 0 > adv[1]

    def test_config_rejects_a_negative_penalty(self):
        from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig

        cfg = GRPOConfig().environment("agentgym/textcraft").training(invalid_action_penalty=-0.1)
        with pytest.raises(ValueError, match="invalid_action_penalty"):
            cfg.validate()


class TestProgressReward:
    """`progress_reward`: the most info["progress"] an episode reached, added to its reward."""

    @staticmethod
    def trajectories():
        from rllib_agentgym.core.trajectory import Trajectory, Turn

        def episode(progress, success, invalid=()):
            t = Trajectory(env="textcraft", data_idx=0, group_id=0, reward=float(success), success=success)
            t.turns = [Turn("obs", "Action: x", "x", reward=float(success and k == len(progress) - 1),
                            invalid_action=k in invalid, progress=p) for k, p in enumerate(progress)]
            return t

        # Every sample of the group fails but one; the failures got different shares of the way.
        return [episode([1 / 3, 2 / 3, 1.0], True), episode([1 / 3, 1 / 3, 2 / 3], False, invalid=(1,)),
                episode([0.0, 0.0, 0.0], False), episode([None, None], False)]

    def test_outcome_adds_the_most_progress(self):
        from rllib_agentgym.algorithms.rewards import outcome_rewards

        trajs = self.trajectories()
        assert outcome_rewards(trajs, "return", progress_reward=0.5).tolist() == pytest.approx([1.5, 1 / 3, 0.0, 0.0])
        assert outcome_rewards(trajs, "success", 0.1, 0.5).tolist() == pytest.approx([1.5, 1 / 3 - 0.1, 0.0, 0.0])
        assert outcome_rewards(trajs, "return").tolist() == [1.0, 0.0, 0.0, 0.0]  # off by default
        # Without it the three failures tie at zero advantage; with it the one that got further leads.
        groups = torch.zeros(3, dtype=torch.long)
        sparse = grpo_advantages(torch.as_tensor(outcome_rewards(trajs[1:], "return")), groups)
        dense = grpo_advantages(torch.as_tensor(outcome_rewards(trajs[1:], "return", progress_reward=0.5)), groups)
        close(sparse, [0.0, 0.0, 0.0])
        assert dense[0] > 0 > dense[1]

    def test_turn_rewards_pay_each_rise_of_the_running_maximum_and_sum_to_the_outcome(self):
        from rllib_agentgym.algorithms.rewards import outcome_rewards, turn_rewards

        trajs = self.trajectories()
        trajs[1].turns[2].progress = 0.0  # a report below an earlier one pays nothing and takes nothing back
        assert turn_rewards(trajs[1], "return", progress_reward=0.6).tolist() == pytest.approx([0.2, 0.0, 0.0])
        assert turn_rewards(trajs[0], "success", progress_reward=0.6).tolist() == pytest.approx([0.2, 0.2, 1.2])
        for reward_type in ("return", "success"):
            sums = [turn_rewards(t, reward_type, 0.1, 0.6).sum() for t in trajs]
            assert sums == pytest.approx(outcome_rewards(trajs, reward_type, 0.1, 0.6).tolist())

    def test_trajectory_progress_and_its_logged_mean(self):
        from rllib_agentgym.algorithms.rewards import progress_stats

        trajs = self.trajectories()
        assert [t.progress for t in trajs] == pytest.approx([1.0, 2 / 3, 0.0, None])
        assert trajs[0].summary()["progress"] == 1.0
        # Only episodes whose env reports progress count; an env without it logs none.
        assert progress_stats(trajs) == {"progress_mean": pytest.approx(5 / 9)}
        assert progress_stats(trajs[3:]) == {}

    def test_build_batch_trains_on_progress_and_warns_once_where_the_env_reports_none(self, caplog):
        from types import SimpleNamespace

        from rllib_agentgym.algorithms.grpo.grpo import GRPO, GRPOConfig

        trajs = self.trajectories()[1:3]  # two failures: 2/3 and 0 of the way
        for t in trajs:
            t.append([9, 9], generated=False)
            t.append([5, 5], generated=True)
        cfg = GRPOConfig().environment("agentgym/textcraft").training(progress_reward=0.5)
        algo = SimpleNamespace(config=cfg)
        batch = GRPO._build_batch(algo, trajs).policy_batches["default_policy"]
        assert batch["rewards"].tolist() == pytest.approx([1 / 3, 0.0])
        assert batch["advantages"][0, 2] > 0 > batch["advantages"][1, 2]
        for t in trajs:
            for turn in t.turns:
                turn.progress = None
        with caplog.at_level("WARNING", logger="rllib_agentgym.algorithms.grpo.grpo"):
            GRPO._build_batch(algo, trajs)
            GRPO._build_batch(algo, trajs)
        assert [r.getMessage() for r in caplog.records] == [
            "progress_reward=0.5 has no effect: agentgym/textcraft reports no info['progress']"]

    def test_config_rejects_a_negative_progress_reward(self):
        from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig

        cfg = GRPOConfig().environment("agentgym/textcraft").training(progress_reward=-0.5)
        with pytest.raises(ValueError, match="progress_reward"):
            cfg.validate()


class TestInvalidTurnAdvantage:
    """`invalid_turn_advantage`: a cost on the refused turn's own tokens."""

    @staticmethod
    def trajectories(rows):
        """One trajectory per row of (action, refused) turns, no tokens."""
        from rllib_agentgym.core.trajectory import Trajectory, Turn

        trajs = [Trajectory(env="babyai", data_idx=i, group_id=0) for i in range(len(rows))]
        for t, row in zip(trajs, rows):
            t.turns = [Turn("obs", f"Action: {a}", a, invalid_action=f) for a, f in row]
        return trajs

    def test_flags_per_turn(self):
        from rllib_agentgym.algorithms.rewards import invalid_turn_flags

        trajs = self.trajectories([[("x", False), ("x", True), ("x", True)], [("x", True)], []])
        assert invalid_turn_flags(trajs).tolist() == [[0, 1, 1], [1, 0, 0], [0, 0, 0]]
        assert invalid_turn_flags([]).shape == (0, 0)

    def test_hand_values(self):
        # Row 0: prompt, turn 0 (2 tokens), obs, obs, turn 1 (refused, 2 tokens), obs, turn 2 (1 token).
        # Row 1: turn 0 (refused) and turn 1, one token each; its group failed whole (A = 0).
        mask = torch.tensor([[0, 1, 1, 0, 0, 1, 1, 0, 1], [0, 1, 0, 1, 0, 0, 0, 0, 0]], dtype=torch.float32)
        adv = torch.tensor([[0, 0.8, 0.8, 0, 0, 0.8, 0.8, 0, 0.8], [0] * 9])
        refused = torch.tensor([[0, 1, 0], [1, 0, 0]])
        close(invalid_turn_advantages(adv, refused, mask, 0.5),
              [[0, 0.8, 0.8, 0, 0, 0.3, 0.3, 0, 0.8], [0, -0.5, 0, 0, 0, 0, 0, 0, 0]])
        # beta 0 changes nothing; tokens of turns past K get no cost.
        close(invalid_turn_advantages(adv, refused, mask, 0.0), adv)
        close(invalid_turn_advantages(adv, refused[:, :1], mask, 1.0)[0], adv[0])

    @pytest.mark.parametrize("name", ["invalid_turn_advantage", "repeated_refusal_advantage"])
    def test_config_checks(self, name):
        from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig

        with pytest.raises(ValueError, match=f"{name} must be >= 0"):
            GRPOConfig().environment("agentgym/textcraft").training(**{name: -1.0}).validate()
        with pytest.raises(ValueError, match=f"{name} needs a group estimator"):
            GRPOConfig().environment("agentgym/textcraft").training(
                **{name: 1.0}, advantage_estimator="gae").validate()

    def test_repeated_refusal_flags(self):
        """Only a refused action sent again right after its refusal is flagged."""
        from rllib_agentgym.algorithms.rewards import refusal_rates, repeated_refusal_flags

        trajs = self.trajectories([
            # refused, the same again (flag), again (flag), then another refused action (no flag)
            [("go to ball", True), ("go to ball", True), ("go to ball", True), ("go to key", True)],
            # a valid turn between two sends of the same action: the second is a first refusal
            [("go to ball", True), ("turn left", False), ("go to ball", True)],
            # the same action, valid the first time (the env moved on): not a repeated refusal
            [("move forward", False), ("move forward", True)],
            [],
        ])
        assert repeated_refusal_flags(trajs).tolist() == [[0, 1, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
        assert repeated_refusal_flags([]).shape == (0, 0)
        # 7 of the 9 turns refused, 2 of them repeats; no turns at all: 0, not a division by zero.
        assert refusal_rates(trajs) == pytest.approx({"invalid_action_rate": 7 / 9, "repeated_refusal_rate": 2 / 9})
        assert refusal_rates([]) == {"invalid_action_rate": 0.0, "repeated_refusal_rate": 0.0}

    def test_build_batch_costs_the_repeated_refusals_tokens_only(self):
        """Through the batch GRPO hands the learner: the cost lands on the repeat's tokens."""
        from types import SimpleNamespace

        from rllib_agentgym.algorithms.grpo.grpo import GRPO, GRPOConfig

        trajs = self.trajectories([[("go to ball", True), ("go to ball", True), ("turn left", False)],
                                   [("go to ball", True), ("turn left", False), ("go to ball", True)]])
        for t, success in zip(trajs, (False, True)):
            t.reward, t.success = float(success), success
            t.append([9, 9], generated=False)  # the prompt
            for k in range(len(t.turns)):
                if k:
                    t.append([8], generated=False)  # an observation
                t.append([5, 5], generated=True)
        cfg = GRPOConfig().training(repeated_refusal_advantage=0.5)
        costed = GRPO._build_batch(SimpleNamespace(config=cfg), trajs).policy_batches["default_policy"]
        plain = GRPO._build_batch(SimpleNamespace(config=GRPOConfig()), trajs).policy_batches["default_policy"]
        delta = torch.as_tensor(costed["advantages"]) - torch.as_tensor(plain["advantages"])
        # Row 0's second turn (tokens 5-6) repeats its refused first turn; row 1 never repeats one.
        close(delta, [[0, 0, 0, 0, 0, -0.5, -0.5, 0, 0, 0], [0] * 10], atol=1e-6)


class TestGiGPO:
    """Step-level credit among the turns of a group that acted from the same state."""

    # One group of three episodes (gamma 1, reward only at the end of `a`):
    #   a: s0 -> s1 -> solved        turn returns [1, 1]
    #   b: s0 -> s2 -> failed        [0, 0]
    #   c: s0 -> s1 -> s3 -> failed  [0, 0, 0]
    # Anchor s0 holds a0, b0, c0 (returns 1, 0, 0: mean 1/3, unbiased std 1/sqrt(3)):
    #   A^S = 2/sqrt(3) = 1.1547 for a0, -1/sqrt(3) = -0.57735 for b0, c0.
    # Anchor s1 holds a1, c1 (returns 1, 0): +-1/sqrt(2) = +-0.70711. s2, s3: seen once -> 0.
    # The episode term is GRPO's over R = (1, 0, 0): the same numbers as anchor s0.
    S = 1 / math.sqrt(3)
    Q = 1 / math.sqrt(2)

    @staticmethod
    def trajectories():
        from rllib_agentgym.core.trajectory import Trajectory, Turn

        def episode(states, rewards, success):
            t = Trajectory(env="babyai", data_idx=0, group_id=4, reward=sum(rewards), success=success)
            t.turns = [Turn(s, f"Action: {s}", s, reward=r) for s, r in zip(states, rewards)]
            return t

        return [episode(["s0", "s1"], [0.0, 1.0], True), episode(["s0", "s2"], [0.0, 0.0], False),
                episode(["s0", "s1", "s3"], [0.0, 0.0, 0.0], False)]

    def test_turn_index_counts_runs_of_the_mask(self):
        m = torch.tensor([[0, 1, 1, 0, 0, 1, 0, 1], [1, 1, 1, 1, 0, 0, 0, 0]])
        close(turn_index(m), [[-1, 0, 0, -1, -1, 1, -1, 2], [0, 0, 0, 0, -1, -1, -1, -1]])

    def test_step_arrays_by_hand(self):
        from rllib_agentgym.algorithms.step_anchors import shared_turn_fraction, step_arrays

        returns, anchors = step_arrays(self.trajectories())
        assert returns.tolist() == [[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
        # s0 -> 0, s1 -> 1, s2 -> 2, s3 -> 3; -1 where an episode has no such turn.
        assert anchors.tolist() == [[0, 1, -1], [0, 2, -1], [0, 1, 3]]
        # 5 of the 7 turns act from a state another turn shares (s0 three times, s1 twice).
        assert shared_turn_fraction(anchors) == pytest.approx(5 / 7)
        assert math.isnan(shared_turn_fraction(np.full((2, 0), -1)))

    def test_hand_values(self):
        from rllib_agentgym.algorithms.step_anchors import step_arrays

        trajs = self.trajectories()
        returns, anchors = step_arrays(trajs)
        # Rows: a = [resp0 x2, obs, resp1], b = [resp0, obs, resp1 x2], c = [resp0, obs, resp1, obs, resp2].
        mask = torch.tensor([[1, 1, 0, 1, 0], [1, 0, 1, 1, 0], [1, 0, 1, 0, 1]], dtype=torch.float32)
        adv, ret = gigpo_advantages(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([4, 4, 4]), torch.as_tensor(returns),
                                    torch.as_tensor(anchors), mask)
        S, Q = self.S, self.Q
        close(adv, [[4 * S, 4 * S, 0, 2 * S + Q, 0],
                    [-2 * S, 0, -S, -S, 0],
                    [-2 * S, 0, -S - Q, 0, -S]], atol=1e-5)
        assert ret is adv
        # omega scales the step term only.
        half, _ = gigpo_advantages(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([4, 4, 4]), torch.as_tensor(returns),
                                   torch.as_tensor(anchors), mask, step_weight=0.5)
        close(half[0], [3 * S, 3 * S, 0, 2 * S + Q / 2, 0], atol=1e-5)

    def test_no_shared_state_is_grpo(self):
        rewards, groups = torch.tensor([1.0, 0.0, 0.5, 2.0]), torch.tensor([0, 0, 1, 1])
        mask = torch.tensor([[1, 0, 1], [1, 1, 0], [0, 1, 1], [1, 0, 1]], dtype=torch.float32)
        anchors = torch.tensor([[0, 1], [2, -1], [3, -1], [4, 5]])  # every state seen once
        adv, _ = gigpo_advantages(rewards, groups, torch.rand(4, 2), anchors, mask)
        close(adv, to_token_level(grpo_advantages(rewards, groups), mask))

    def test_anchors_stay_inside_their_group(self):
        from rllib_agentgym.algorithms.step_anchors import step_arrays

        trajs = self.trajectories()
        trajs[1].group_id = 5  # same first observation, another task
        _, anchors = step_arrays(trajs)
        assert anchors[0, 0] == anchors[2, 0] != anchors[1, 0]

    def test_history_anchor_splits_what_the_observation_merges(self):
        from rllib_agentgym.algorithms.step_anchors import anchor_key, step_arrays
        from rllib_agentgym.core.trajectory import Turn

        trajs = self.trajectories()
        trajs[2].turns[0] = Turn("s0", "Action: other", "other")  # c reaches s1 by another action
        _, by_obs = step_arrays(trajs, anchor="observation")
        _, by_history = step_arrays(trajs, anchor="history")
        assert by_obs[0, 1] == by_obs[2, 1]  # both act from s1
        assert by_history[0, 1] != by_history[2, 1]  # by different paths
        assert by_history[0, 0] == by_history[2, 0]  # the first state is shared either way
        with pytest.raises(ValueError, match="'observation', 'history'"):
            anchor_key(trajs[0], 0, "state")

    def test_discounted_returns_and_turn_rewards_sum_to_the_outcome(self):
        from rllib_agentgym.algorithms.rewards import outcome_rewards, turn_rewards
        from rllib_agentgym.algorithms.step_anchors import step_arrays

        trajs = self.trajectories()
        trajs[2].turns[2].reward = 1.0  # c's reward on its last turn: returns 0.25, 0.5, 1 at gamma 0.5
        assert step_arrays([trajs[2]], gamma=0.5)[0].tolist() == [[0.25, 0.5, 1.0]]
        trajs[2].turns[2].reward = 0.0
        trajs[2].turns[1].invalid_action = True
        for reward_type in ("return", "success"):
            sums = [turn_rewards(t, reward_type, 0.1).sum() for t in trajs]
            assert sums == pytest.approx(outcome_rewards(trajs, reward_type, 0.1).tolist())
        assert turn_rewards(trajs[0], "success").tolist() == [0.0, 1.0]

    def test_build_batch_uses_the_turns(self):
        from types import SimpleNamespace

        from rllib_agentgym.algorithms.grpo.grpo import GRPO, GRPOConfig

        trajs = self.trajectories()
        for t, runs in zip(trajs, ([2, 1], [1, 2], [1, 1, 1])):
            t.append([9, 9], generated=False)  # the prompt
            for k, n in enumerate(runs):
                if k:
                    t.append([8], generated=False)  # an observation
                t.append([5] * n, generated=True)
        cfg = GRPOConfig().training(advantage_estimator="gigpo")
        batch = GRPO._build_batch(SimpleNamespace(config=cfg), trajs).policy_batches["default_policy"]
        adv = torch.as_tensor(batch["advantages"])
        S, Q = self.S, self.Q
        close(adv[0, :6], [0, 0, 4 * S, 4 * S, 0, 2 * S + Q], atol=1e-5)
        close(adv[2], [0, 0, -2 * S, 0, -S - Q, 0, -S], atol=1e-5)

    def test_config_rejects_bad_settings(self):
        from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig

        with pytest.raises(ValueError, match="step_anchor"):
            GRPOConfig().environment("agentgym/textcraft").training(step_anchor="state").validate()
        with pytest.raises(ValueError, match="step_advantage_weight"):
            GRPOConfig().environment("agentgym/textcraft").training(step_advantage_weight=-1.0).validate()

"""Losses, KL estimators and aggregation against hand-computed values (torch + pytest only)."""

from __future__ import annotations

import math

import pytest
import torch

from rllib_agentgym.algorithms.losses import (
    LOSS_AGG_MODES,
    aggregate_loss,
    entropy_from_logits,
    global_loss_counts,
    kl_penalty,
    logprobs_from_logits,
    overlong_mask,
    policy_loss,
    value_loss,
)


def close(actual, expected, atol=1e-6):
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert torch.allclose(actual, expected, atol=atol, rtol=0), (actual, expected)


class TestKL:
    LOGP = torch.tensor([-1.0, -2.0, -0.5])
    REF = torch.tensor([-1.5, -1.0, -0.5])

    def test_k1(self):
        # logp - ref = 0.5, -1.0, 0
        close(kl_penalty(self.LOGP, self.REF, "k1"), [0.5, -1.0, 0.0])
        close(kl_penalty(self.LOGP, self.REF, "kl"), [0.5, -1.0, 0.0])

    def test_k2(self):
        # 0.5 * (0.25, 1, 0)
        close(kl_penalty(self.LOGP, self.REF, "k2"), [0.125, 0.5, 0.0])
        close(kl_penalty(self.LOGP, self.REF, "mse"), [0.125, 0.5, 0.0])

    def test_k3(self):
        # d = ref - logp = -0.5, 1.0, 0 ; exp(d) - d - 1:
        #   e^-0.5 + 0.5 - 1 = 0.6065307 - 0.5 = 0.1065307
        #   e - 1 - 1 = 0.7182818
        #   1 - 0 - 1 = 0
        expected = [math.exp(-0.5) - 0.5, math.e - 2.0, 0.0]
        close(kl_penalty(self.LOGP, self.REF, "k3"), expected)
        close(kl_penalty(self.LOGP, self.REF, "low_var_kl"), expected)
        close(kl_penalty(self.LOGP, self.REF), expected)  # the default

    def test_k3_nonnegative_and_clamped(self):
        g = torch.Generator().manual_seed(0)
        logp = -torch.rand(1000, generator=g) * 10
        ref = -torch.rand(1000, generator=g) * 10
        k3 = kl_penalty(logp, ref, "k3")
        assert (k3 >= 0).all() and (k3 <= 10).all()
        # ref - logp = 30 -> e^20 (log-ratio clamped) ... -> clamped to 10, finite gradient
        logp = torch.tensor([-31.0, 0.0], requires_grad=True)
        k3 = kl_penalty(logp, torch.tensor([-1.0, -1.0]), "k3")
        assert k3[0].item() == 10.0
        k3.sum().backward()
        assert torch.isfinite(logp.grad).all()

    def test_k3_unbiased_on_samples(self):
        # E_{x~q}[k3] = KL(q || p). q = (0.5, 0.5), p = (0.9, 0.1):
        # KL = 0.5 ln(0.5/0.9) + 0.5 ln(0.5/0.1) = 0.5 (-0.5877867 + 1.6094379) = 0.5108256
        q = torch.tensor([0.5, 0.5]).log()
        p = torch.tensor([0.9, 0.1]).log()
        exact = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
        # exact expectation under q (each outcome weighted 0.5)
        for kind in ("k1", "k3"):
            assert abs(0.5 * kl_penalty(q, p, kind).sum().item() - exact) < 1e-6

    def test_unknown_kind(self):
        with pytest.raises(ValueError, match="low_var_kl"):
            kl_penalty(self.LOGP, self.REF, "k4")


class TestPolicyLoss:
    # Six tokens, eps_low 0.2, eps_high 0.28 (clip range [0.8, 1.28]):
    #  A   ratio  unclipped -rA  clipped -clip(r)A   loss = max      clipped?
    #  +1  1.5    -1.5           -1.28               -1.28           yes (high)
    #  +1  0.5    -0.5           -0.8                -0.5            no
    #  -1  0.5     0.5            0.8                 0.8            yes (low)
    #  -1  1.5     1.5            1.28                1.5            no
    #  +1  1.25   -1.25          -1.25               -1.25           no (eps_high 0.2 would clip)
    #  -1  0.75    0.75           0.8                 0.8            yes (low)
    ADV = torch.tensor([[1.0, 1.0, -1.0, -1.0, 1.0, -1.0]])
    RATIO = torch.tensor([[1.5, 0.5, 0.5, 1.5, 1.25, 0.75]])
    MASK = torch.ones(1, 6)

    def _call(self, **kw):
        old = torch.full((1, 6), -1.0)
        logp = (old + self.RATIO.log()).requires_grad_(True)
        loss, stats = policy_loss(logp, old, self.ADV, kw.pop("mask", self.MASK), **kw)
        return logp, loss, stats

    def test_asymmetric_clip_values(self):
        logp, loss, stats = self._call(clip_ratio_low=0.2, clip_ratio_high=0.28)
        per_token = [-1.28, -0.5, 0.8, 1.5, -1.25, 0.8]
        close(loss, sum(per_token) / 6)  # 0.07 / 6 = 0.0116667
        close(stats["clip_fraction"], 3 / 6)
        close(stats["clip_fraction_high"], 1 / 6)
        close(stats["clip_fraction_low"], 2 / 6)
        close(stats["ratio_mean"], (1.5 + 0.5 + 0.5 + 1.5 + 1.25 + 0.75) / 6)
        close(stats["ratio_min"], 0.5)
        close(stats["ratio_max"], 1.5)
        # approx_kl = mean(old - new) = -mean(log ratio)
        close(stats["approx_kl"], -sum(math.log(r) for r in [1.5, 0.5, 0.5, 1.5, 1.25, 0.75]) / 6)
        # gradient: d(-rA)/dlogp = -A r / 6 on unclipped tokens, 0 on clipped ones
        loss.backward()
        close(logp.grad, [[0.0, -0.5 / 6, 0.0, 1.5 / 6, -1.25 / 6, 0.0]])

    def test_symmetric_clip_clips_1_25(self):
        _, loss, stats = self._call(clip_ratio_low=0.2, clip_ratio_high=0.2)
        # same as above but token 5 -> -1.2 and token 1 -> -1.2
        close(loss, (-1.2 - 0.5 + 0.8 + 1.5 - 1.2 + 0.8) / 6)
        close(stats["clip_fraction"], 4 / 6)

    def test_dual_clip(self):
        # A = -1, ratio 5: standard loss max(5, 1.2) = 5 ; dual clip c = 3 caps it at -cA = 3.
        # A = +1, ratio 5: -1.2 (dual clip never applies to A > 0)
        old = torch.zeros(1, 2)
        logp = torch.full((1, 2), math.log(5.0), requires_grad=True)
        adv = torch.tensor([[-1.0, 1.0]])
        loss, stats = policy_loss(logp, old, adv, torch.ones(1, 2), dual_clip_c=3.0)
        close(loss, (3.0 - 1.2) / 2)
        close(stats["dual_clip_fraction"], 0.5)
        loss.backward()
        close(logp.grad, [[0.0, 0.0]])
        loss_nodual, _ = policy_loss(logp, old, adv, torch.ones(1, 2))
        close(loss_nodual, (5.0 - 1.2) / 2)
        with pytest.raises(ValueError):
            policy_loss(logp, old, adv, torch.ones(1, 2), dual_clip_c=0.5)

    def test_mask_and_agg_mode(self):
        # Only tokens 0 and 3 valid: (-1.28 + 1.5) / 2 = 0.11
        mask = torch.tensor([[1, 0, 0, 1, 0, 0]], dtype=torch.bool)
        _, loss, stats = self._call(clip_ratio_high=0.28, mask=mask)
        close(loss, 0.11)
        close(stats["clip_fraction"], 0.5)
        _, loss, _ = self._call(
            clip_ratio_high=0.28, mask=mask, loss_agg_mode="seq-mean-token-sum-norm"
        )
        close(loss, 0.22 / 6)  # sum / (1 sequence * T=6)

    def test_on_policy_ratio_one(self):
        # ratio = 1 everywhere: loss = -mean(A), gradient -A / N, no clipping
        old = torch.tensor([[-0.3, -2.0, -1.0]])
        logp = old.clone().requires_grad_(True)
        adv = torch.tensor([[2.0, -1.0, 0.5]])
        loss, stats = policy_loss(logp, old, adv, torch.ones(1, 3))
        close(loss, -(2.0 - 1.0 + 0.5) / 3)
        close(stats["clip_fraction"], 0.0)
        close(stats["approx_kl"], 0.0)
        loss.backward()
        close(logp.grad, [[-2.0 / 3, 1.0 / 3, -0.5 / 3]])


class TestAggregate:
    # Masked positions hold 100 and must never count.
    LOSS = torch.tensor(
        [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 100.0, 100.0], [7.0, 100.0, 100.0, 100.0]]
    )
    MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])

    def test_token_mean(self):
        close(aggregate_loss(self.LOSS, self.MASK, "token-mean"), 28 / 7)  # (1+..+7)/7 = 4

    def test_seq_mean_token_mean(self):
        # per-sequence means 2.5, 5.5, 7 -> 15 / 3 = 5
        close(aggregate_loss(self.LOSS, self.MASK, "seq-mean-token-mean"), 5.0)

    def test_seq_mean_token_sum(self):
        # per-sequence sums 10, 11, 7 -> 28 / 3
        close(aggregate_loss(self.LOSS, self.MASK, "seq-mean-token-sum"), 28 / 3)

    def test_seq_mean_token_sum_norm(self):
        # 28 / (B=3 * T=4) ; with norm_length 8: 28 / 24
        close(aggregate_loss(self.LOSS, self.MASK, "seq-mean-token-sum-norm"), 28 / 12)
        close(
            aggregate_loss(self.LOSS, self.MASK, "seq-mean-token-sum-norm", norm_length=8), 28 / 24
        )

    def test_fully_masked_row_is_not_a_sequence(self):
        loss = torch.cat([self.LOSS, torch.full((1, 4), 100.0)])
        mask = torch.cat([self.MASK, torch.zeros(1, 4, dtype=self.MASK.dtype)])
        assert global_loss_counts(mask) == {"global_token_count": 7, "global_seq_count": 3}
        for mode, value in [
            ("token-mean", 4.0),
            ("seq-mean-token-mean", 5.0),
            ("seq-mean-token-sum", 28 / 3),
        ]:
            close(aggregate_loss(loss, mask, mode), value)

    def test_nan_on_padding_is_ignored(self):
        loss = torch.tensor([[1.0, float("nan")], [2.0, float("inf")]])
        mask = torch.tensor([[1, 0], [1, 0]])
        # token-mean (1 + 2) / 2 ; sum-norm 3 / (2 * 2)
        close(aggregate_loss(loss, mask, "token-mean"), 1.5)
        close(aggregate_loss(loss, mask, "seq-mean-token-sum-norm"), 0.75)

    def test_empty_batch_is_zero(self):
        for mode in LOSS_AGG_MODES:
            out = aggregate_loss(self.LOSS, torch.zeros_like(self.MASK), mode)
            assert out.item() == 0.0

    def test_unknown_mode(self):
        with pytest.raises(ValueError, match="seq-mean-token-sum-norm"):
            aggregate_loss(self.LOSS, self.MASK, "sum")

    @pytest.mark.parametrize("mode", LOSS_AGG_MODES)
    def test_micro_batches_sum_to_full_batch(self, mode):
        g = torch.Generator().manual_seed(1)
        B, T = 7, 5
        mask = torch.rand(B, T, generator=g) > 0.3
        mask[3] = False  # an overlong-filtered row
        mask[:, 0] |= torch.arange(B) != 3
        x = torch.randn(B, T, generator=g)

        w_full = torch.tensor(0.7, requires_grad=True)
        full = aggregate_loss((w_full * x) ** 2, mask, mode)
        full.backward()

        counts = global_loss_counts(mask)
        w_micro = torch.tensor(0.7, requires_grad=True)
        total = torch.zeros(())
        for rows in (slice(0, 2), slice(2, 3), slice(3, 7)):  # uneven micro-batches
            part = aggregate_loss((w_micro * x[rows]) ** 2, mask[rows], mode, **counts)
            part.backward()  # gradient accumulation
            total = total + part.detach()
        close(total, full.detach(), 1e-6)
        close(w_micro.grad, w_full.grad, 1e-6)

        # Without the global counts the micro-batch losses do not add up (sanity check
        # that the test has teeth for the normalized modes).
        naive = sum(
            aggregate_loss(x[r] ** 2, mask[r], mode)
            for r in (slice(0, 2), slice(2, 3), slice(3, 7))
        )
        assert not torch.allclose(naive, aggregate_loss(x**2, mask, mode))

    def test_policy_loss_micro_batches(self):
        g = torch.Generator().manual_seed(2)
        B, T = 6, 4
        mask = torch.rand(B, T, generator=g) > 0.2
        mask[:, 0] = True
        old = -torch.rand(B, T, generator=g)
        new = old + 0.3 * torch.randn(B, T, generator=g)
        adv = torch.randn(B, 1, generator=g).expand(B, T)
        full, _ = policy_loss(new, old, adv, mask, loss_agg_mode="seq-mean-token-mean")
        counts = global_loss_counts(mask)
        parts = [
            policy_loss(
                new[r], old[r], adv[r], mask[r], loss_agg_mode="seq-mean-token-mean", **counts
            )[0]
            for r in (slice(0, 4), slice(4, 6))
        ]
        close(sum(parts), full)


class TestValueLoss:
    def test_hand_values(self):
        # clip range 0.2:
        #  v    v_old  R     (v-R)^2   v_clip   (v_clip-R)^2   0.5*max
        #  1.0  0.8    0.0   1         1.0      1              0.5
        #  2.0  1.0    3.0   1         1.2      3.24           1.62   (clipped term larger)
        #  0.5  0.5    1.5   1         0.5      1              0.5
        # token-mean = 2.62 / 3
        v = torch.tensor([[1.0, 2.0, 0.5, 50.0]], requires_grad=True)
        old = torch.tensor([[0.8, 1.0, 0.5, 0.0]])
        ret = torch.tensor([[0.0, 3.0, 1.5, 0.0]])
        mask = torch.tensor([[1, 1, 1, 0]])
        loss, stats = value_loss(v, old, ret, mask, clip_range=0.2)
        close(loss, 2.62 / 3)
        close(stats["vf_clip_fraction"], 1 / 3)
        close(stats["value_mean"], 3.5 / 3)
        close(stats["return_mean"], 4.5 / 3)
        loss.backward()
        # d/dv 0.5 (v-R)^2 = (v-R)/3 on tokens 0 and 2; token 1's clipped term is constant in v
        close(v.grad, [[1.0 / 3, 0.0, -1.0 / 3, 0.0]])

    def test_no_clip(self):
        v = torch.tensor([[2.0, 0.0]])
        loss, stats = value_loss(
            v, torch.zeros(1, 2), torch.tensor([[0.0, 1.0]]), torch.ones(1, 2), clip_range=None
        )
        close(loss, (0.5 * 4 + 0.5 * 1) / 2)
        close(stats["vf_clip_fraction"], 0.0)


class TestOverlongMask:
    def test_float_and_bool(self):
        mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 1.0, 1.0]])
        truncated = torch.tensor([False, True, False])
        out = overlong_mask(truncated, mask)
        assert out.dtype == mask.dtype
        close(out, [[1, 1, 0], [0, 0, 0], [0, 1, 1]])
        out_b = overlong_mask(truncated, mask.bool())
        assert out_b.dtype == torch.bool
        assert out_b.tolist() == [[True, True, False], [False, False, False], [False, True, True]]

    def test_truncated_row_leaves_the_loss(self):
        loss = torch.tensor([[1.0, 3.0], [100.0, 100.0]])
        m = overlong_mask(torch.tensor([False, True]), torch.ones(2, 2))
        close(aggregate_loss(loss, m, "token-mean"), 2.0)
        close(aggregate_loss(loss, m, "seq-mean-token-mean"), 2.0)


class TestFromLogits:
    def test_logprobs(self):
        logits = torch.tensor([[[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]])
        labels = torch.tensor([[2, 0]])
        # 3 - log(e + e^2 + e^3) = -log(1 + e^-1 + e^-2) = -log(1.5032147) = -0.4076060
        # uniform over 3: -log 3
        close(
            logprobs_from_logits(logits, labels),
            [[-math.log(1 + math.exp(-1) + math.exp(-2)), -math.log(3)]],
        )

    def test_logprobs_match_log_softmax_and_grad(self):
        g = torch.Generator().manual_seed(3)
        logits = torch.randn(2, 5, 11, generator=g, requires_grad=True)
        labels = torch.randint(0, 11, (2, 5), generator=g)
        ref = torch.log_softmax(logits, -1).gather(-1, labels[..., None]).squeeze(-1)
        out = logprobs_from_logits(logits, labels)
        close(out, ref.detach(), 1e-5)
        (gout,) = torch.autograd.grad(out.sum(), logits)
        (gref,) = torch.autograd.grad(ref.sum(), logits)
        close(gout, gref, 1e-6)

    def test_bf16_upcast(self):
        logits = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.bfloat16)
        out = logprobs_from_logits(logits, torch.tensor([2]))
        assert out.dtype == torch.float32
        close(out, [-math.log(1 + math.exp(-1) + math.exp(-2))], 1e-6)
        assert entropy_from_logits(logits).dtype == torch.float32

    def test_entropy(self):
        # [0, 0]: uniform over 2 -> ln 2
        # [0, ln 3]: p = (1/4, 3/4) -> -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.5623351
        # [30, 0]: nearly deterministic -> ~ 0 (31 e^-30 ~ 3e-12)
        logits = torch.tensor([[0.0, 0.0], [0.0, math.log(3.0)], [30.0, 0.0]])
        expected = [math.log(2), -(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), 0.0]
        close(entropy_from_logits(logits), expected)

    def test_entropy_matches_definition(self):
        g = torch.Generator().manual_seed(4)
        logits = torch.randn(3, 4, 13, generator=g)
        p = torch.softmax(logits, -1)
        close(entropy_from_logits(logits), -(p * p.log()).sum(-1), 1e-5)

"""Policy / value losses, KL estimators and loss aggregation as pure functions.

Token tensors are ``[B, T]``; ``response_mask`` (bool or float) is 1 only on
tokens the model generated (see `advantages.py` for the conventions).

Gradient accumulation: `aggregate_loss` (and the losses built on it) accept
``global_token_count`` / ``global_seq_count``. Pass the counts of the *whole*
mini-batch (`global_loss_counts(full_mask)`) to every micro-batch call and
the micro-batch losses sum to the full-batch loss in every aggregation mode,
so ``loss.backward()`` per micro-batch accumulates exactly the full-batch
gradient. Under DDP, which averages gradients over W ranks, pass the counts
summed over ranks and multiply the loss by W.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from rllib_agentgym.algorithms.advantages import masked_mean

__all__ = [
    "KL_KINDS",
    "LOSS_AGG_MODES",
    "aggregate_loss",
    "entropy_from_logits",
    "global_loss_counts",
    "kl_penalty",
    "logprobs_from_logits",
    "overlong_mask",
    "policy_loss",
    "value_loss",
]

LOSS_AGG_MODES = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)

# Canonical name for each accepted spelling.
KL_KINDS = {
    "k1": "k1",
    "kl": "k1",
    "k2": "k2",
    "mse": "k2",
    "k3": "k3",
    "low_var_kl": "k3",
}

# exp() of a log-ratio beyond this overflows float32 gradients; verl clamps too.
_LOG_RATIO_CLAMP = 20.0
_K3_CLAMP = 10.0


# ----------------------------------------------------------------------------
# aggregation
# ----------------------------------------------------------------------------


def global_loss_counts(response_mask: Tensor) -> dict[str, int]:
    """Normalizers of a full (mini-)batch, to pass to every micro-batch's loss.

    ``global_token_count`` = number of valid tokens; ``global_seq_count`` =
    number of sequences with at least one valid token (a fully masked row,
    e.g. an overlong-filtered trajectory, is not a sample).
    """
    m = response_mask.bool()
    return {
        "global_token_count": int(m.sum().item()),
        "global_seq_count": int(m.any(dim=-1).sum().item()),
    }


def aggregate_loss(
    per_token_loss: Tensor,
    mask: Tensor,
    mode: str = "token-mean",
    norm_length: int | None = None,
    global_token_count: int | float | Tensor | None = None,
    global_seq_count: int | float | Tensor | None = None,
) -> Tensor:
    """Reduce a [B, T] per-token loss L to a scalar.

    With m the mask, n_i = sum_t m_{i,t} the valid tokens of row i,
    N = sum_i n_i (``global_token_count``) and M = #{i : n_i > 0}
    (``global_seq_count``):

        token-mean               sum_{i,t} L m / N
        seq-mean-token-mean      1/M sum_i (sum_t L m / n_i)
        seq-mean-token-sum       1/M sum_i  sum_t L m
        seq-mean-token-sum-norm  sum_{i,t} L m / (M * norm_length)     (Dr. GRPO)

    ``norm_length`` defaults to T; Dr. GRPO uses a constant (the generation
    budget) so a token's weight depends neither on its sequence's length nor
    on the batch's. M counts only rows with a valid token, so a row zeroed by
    `overlong_mask` leaves the batch instead of diluting it; with no such row
    M = B. token-mean weights every token equally (DAPO); seq-mean-token-mean
    weights every trajectory equally (original GRPO), which favours long
    wrong answers.

    N and M default to this batch's own counts. For gradient accumulation
    pass the full batch's (`global_loss_counts`): micro-batches split along
    B then sum to the full-batch loss in every mode. Empty batches give 0.
    """
    m = mask.to(per_token_loss.dtype)
    # where, not multiply: a NaN/inf on a padding position must not leak in
    masked = torch.where(mask.bool(), per_token_loss, torch.zeros_like(per_token_loss))
    if mode == "token-mean":
        n = m.sum() if global_token_count is None else global_token_count
        return masked.sum() / _clamp_count(n, masked)
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {mode!r}; valid: {', '.join(LOSS_AGG_MODES)}")
    seq_tokens = m.sum(dim=-1)
    n_seqs = (seq_tokens > 0).sum() if global_seq_count is None else global_seq_count
    n_seqs = _clamp_count(n_seqs, masked)
    seq_sums = masked.sum(dim=-1)
    if mode == "seq-mean-token-mean":
        return (seq_sums / seq_tokens.clamp(min=1)).sum() / n_seqs
    if mode == "seq-mean-token-sum":
        return seq_sums.sum() / n_seqs
    length = per_token_loss.shape[-1] if norm_length is None else norm_length
    return seq_sums.sum() / (n_seqs * length)


def _clamp_count(n: int | float | Tensor, like: Tensor) -> Tensor:
    return torch.as_tensor(n, dtype=like.dtype, device=like.device).clamp(min=1)


# ----------------------------------------------------------------------------
# KL estimators
# ----------------------------------------------------------------------------


def kl_penalty(logprob: Tensor, ref_logprob: Tensor, kind: str = "low_var_kl") -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) from tokens sampled from pi.

    With log r = log pi_ref(x) - log pi(x) (Schulman, "Approximating KL
    Divergence", 2020, http://joschu.net/blog/kl-approx.html):

        k1 ("kl")         = -log r = logp - logp_ref
                            unbiased, high variance, negative on some tokens
        k2 ("mse")        = 1/2 (log r)^2
                            biased but low variance, >= 0; its gradient is
                            the gradient of KL to second order
        k3 ("low_var_kl") = (r - 1) - log r = exp(logp_ref - logp) - (logp_ref - logp) - 1
                            unbiased (E_pi[r] = 1) and >= 0 (since e^y >= 1 + y),
                            low variance; GRPO's default

    k3 is computed with the log-ratio clamped to [-20, 20] (so exp cannot
    overflow into inf/NaN gradients) and the result clamped to [-10, 10],
    as verl does. Returns a tensor shaped like ``logprob``.
    """
    try:
        canonical = KL_KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown KL kind {kind!r}; valid: {', '.join(KL_KINDS)}") from None
    diff = logprob - ref_logprob
    if canonical == "k1":
        return diff
    if canonical == "k2":
        return 0.5 * diff.square()
    log_r = (-diff).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    return (log_r.exp() - log_r - 1).clamp(-_K3_CLAMP, _K3_CLAMP)


# ----------------------------------------------------------------------------
# policy and value losses
# ----------------------------------------------------------------------------


def policy_loss(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    loss_agg_mode: str = "token-mean",
    dual_clip_c: float | None = None,
    norm_length: int | None = None,
    global_token_count: int | float | Tensor | None = None,
    global_seq_count: int | float | Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate with asymmetric clip (DAPO) and optional dual clip.

        rho_t = exp(logp_t - logp_old_t)
        L_t   = -min(rho_t A_t, clip(rho_t, 1 - eps_low, 1 + eps_high) A_t)

    eps_low = ``clip_ratio_low``, eps_high = ``clip_ratio_high``; DAPO's
    "clip-higher" raises eps_high (e.g. 0.28) so low-probability tokens with
    A > 0 can grow more before the clip stops them, which keeps entropy up.

    Dual clip (Ye et al. 2020), for c = ``dual_clip_c`` > 1: when A_t < 0 the
    loss is also capped at -c A_t, so a huge ratio on a bad token cannot
    produce an unbounded update:

        L_t = min(L_t, -c A_t)    if A_t < 0

    The per-token loss is reduced by `aggregate_loss` with ``loss_agg_mode``
    (and the global counts for micro-batching). The log-ratio is clamped to
    [-20, 20] before exp.

    Returns ``(loss, stats)``; stats are detached scalars over this batch's
    valid tokens: ``clip_fraction`` (tokens where the clipped term was the
    one taken), ``clip_fraction_low`` / ``clip_fraction_high`` (of those, the
    ones at the lower / upper bound), ``dual_clip_fraction``, ``approx_kl``
    (k1 estimate of KL(pi_old || pi) = mean(logp_old - logp)), ``ratio_mean``,
    ``ratio_min``, ``ratio_max``.
    """
    if dual_clip_c is not None and dual_clip_c <= 1.0:
        raise ValueError(f"dual_clip_c must be > 1, got {dual_clip_c}")
    log_ratio = (logprob - old_logprob).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    ratio = log_ratio.exp()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    per_token = torch.maximum(unclipped, clipped)

    mask = response_mask.bool()
    stats: dict[str, Tensor] = {}
    with torch.no_grad():
        was_clipped = clipped > unclipped
        stats["clip_fraction"] = masked_mean(was_clipped.float(), mask)
        stats["clip_fraction_low"] = masked_mean((was_clipped & (advantages < 0)).float(), mask)
        stats["clip_fraction_high"] = masked_mean((was_clipped & (advantages > 0)).float(), mask)

    if dual_clip_c is not None:
        cap = -advantages * dual_clip_c
        dual = (advantages < 0) & (per_token > cap)
        per_token = torch.where(dual, cap, per_token)
        stats["dual_clip_fraction"] = masked_mean(dual.float().detach(), mask)
    else:
        stats["dual_clip_fraction"] = torch.zeros((), device=ratio.device)

    loss = aggregate_loss(
        per_token, mask, loss_agg_mode, norm_length, global_token_count, global_seq_count
    )
    with torch.no_grad():
        r = ratio.detach()
        stats["approx_kl"] = masked_mean(-log_ratio.detach(), mask)
        stats["ratio_mean"] = masked_mean(r, mask)
        # masked_fill instead of r[mask]: no host sync on GPU; 1.0 when nothing is valid
        any_valid = mask.any()
        one = torch.ones((), dtype=r.dtype, device=r.device)
        stats["ratio_min"] = torch.where(any_valid, r.masked_fill(~mask, math.inf).min(), one)
        stats["ratio_max"] = torch.where(any_valid, r.masked_fill(~mask, -math.inf).max(), one)
    return loss, stats


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    response_mask: Tensor,
    clip_range: float | None = 0.2,
    loss_agg_mode: str = "token-mean",
    global_token_count: int | float | Tensor | None = None,
    global_seq_count: int | float | Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped value loss.

        V_clip = V_old + clip(V - V_old, -c, c)
        L_t    = 1/2 max((V - R)^2, (V_clip - R)^2)

    c = ``clip_range`` (None: no clipping, L_t = 1/2 (V - R)^2). Aggregated
    token-mean by default (`aggregate_loss`). Returns ``(loss, stats)`` with
    ``vf_clip_fraction`` (tokens where the clipped error was the larger),
    ``value_mean`` and ``return_mean`` (detached, over valid tokens).
    """
    mask = response_mask.bool()
    err = (values - returns).square()
    if clip_range is None:
        per_token = 0.5 * err
        frac = torch.zeros((), device=values.device)
    else:
        v_clip = old_values + (values - old_values).clamp(-clip_range, clip_range)
        err_clip = (v_clip - returns).square()
        per_token = 0.5 * torch.maximum(err, err_clip)
        frac = masked_mean((err_clip > err).float().detach(), mask)
    loss = aggregate_loss(
        per_token, mask, loss_agg_mode, None, global_token_count, global_seq_count
    )
    stats = {
        "vf_clip_fraction": frac,
        "value_mean": masked_mean(values.detach(), mask),
        "return_mean": masked_mean(returns.detach(), mask),
    }
    return loss, stats


def overlong_mask(truncated: Tensor, response_mask: Tensor) -> Tensor:
    """DAPO overlong filtering: drop trajectories that hit the length cap.

        m'_{i,t} = m_{i,t} * (1 - truncated_i)

    A truncated trajectory's reward says nothing about its content (it was
    cut off, not judged), so its tokens leave the loss. Returns a mask of
    ``response_mask``'s dtype; aggregation then ignores the zeroed rows.
    """
    keep = ~truncated.bool()
    if response_mask.dtype == torch.bool:
        return response_mask & keep[:, None]
    return response_mask * keep[:, None].to(response_mask.dtype)


# ----------------------------------------------------------------------------
# from logits
# ----------------------------------------------------------------------------


def _at_least_fp32(logits: Tensor) -> Tensor:
    return logits if logits.dtype in (torch.float32, torch.float64) else logits.float()


def logprobs_from_logits(logits: Tensor, labels: Tensor) -> Tensor:
    """log softmax(z)[y] = z_y - logsumexp(z), without a [.., V] log-softmax.

    ``logits`` [..., V], ``labels`` [...] (int). Gathers one logit per token
    and subtracts logsumexp, so no second vocabulary-sized tensor is built.
    Half-precision logits are upcast to float32: a bf16 log-prob has ~3
    significant digits, too few for the importance ratio. Returns float32
    (or float64) of shape ``labels.shape``.
    """
    z = _at_least_fp32(logits)
    picked = z.gather(-1, labels.long().unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(z, dim=-1)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Per-token entropy of softmax(z): H = logsumexp(z) - sum_v softmax(z)_v z_v.

    Equal to -sum p log p without forming a [..., V] log-softmax beside the
    softmax. Logits must be finite. ``logits`` [..., V] -> [...], float32 or
    float64.
    """
    z = _at_least_fp32(logits)
    p = torch.softmax(z, dim=-1)
    return torch.logsumexp(z, dim=-1) - (p * z).sum(dim=-1)

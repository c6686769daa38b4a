"""Advantage estimators as pure functions over torch tensors.

Conventions (shared with `losses.py`):

- ``rewards: Tensor[B]``: one scalar reward per trajectory (sequence level).
- ``group_ids: Tensor[B]`` (int): trajectories sampled for the same task share
  an id; ids need not be contiguous or sorted.
- Token tensors are ``[B, T]`` with ``response_mask`` (bool or float) equal to
  1 only on tokens the model generated. In a multi-turn trajectory the mask has
  holes: observation tokens sit between the turns the model generated.
- Estimators that work per token treat the *valid* (mask = 1) tokens of a row
  as its sequence of timesteps: the step after a valid token is the next valid
  token, whatever observation tokens lie between them. Results are 0 on
  masked positions.

`compute_advantages` returns per-token ``(advantages, returns)`` of shape
``[B, T]`` for every estimator, so the policy loss takes one shape.

Statistics (group means, whitening) are computed in float64 and cast back,
because a near-zero spread divided by a small epsilon amplifies rounding.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

# Sums a tensor over the processes that each hold a shard of the batch (identity on one).
SumAcross = Callable[[Tensor], Tensor]

__all__ = [
    "ESTIMATORS",
    "compute_advantages",
    "dynamic_sampling_keep_mask",
    "gae_advantages",
    "gigpo_advantages",
    "grpo_advantages",
    "invalid_turn_advantages",
    "masked_mean",
    "masked_whiten",
    "per_turn_to_tokens",
    "reinforce_plus_plus_advantages",
    "reinforce_pp_returns",
    "rloo_advantages",
    "to_token_level",
    "token_level_rewards",
    "turn_index",
    "weight_advantages",
]


# ----------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------


def _float_dtype(x: Tensor) -> torch.dtype:
    return x.dtype if x.is_floating_point() else torch.get_default_dtype()


def _group_stats(rewards: Tensor, group_ids: Tensor) -> dict[str, Tensor]:
    """Per-trajectory statistics of its group, gathered back to shape [B].

    Returns float64 tensors: ``count`` (group size n_g), ``sum``, ``mean``,
    ``sq_dev_sum`` (sum of squared deviations from the group mean) and
    ``all_equal`` (bool: every reward of the group is identical).
    """
    if rewards.dim() != 1 or group_ids.shape != rewards.shape:
        raise ValueError(
            f"rewards and group_ids must both be [B]; got {tuple(rewards.shape)} "
            f"and {tuple(group_ids.shape)}"
        )
    r = rewards.to(torch.float64)
    unique_ids, inverse = torch.unique(group_ids.to(r.device), return_inverse=True)
    n_groups = unique_ids.numel()
    zeros = torch.zeros(n_groups, dtype=torch.float64, device=r.device)
    count = zeros.index_add(0, inverse, torch.ones_like(r))
    total = zeros.index_add(0, inverse, r)
    mean = total / count
    dev = r - mean[inverse]
    sq_dev_sum = zeros.index_add(0, inverse, dev * dev)
    gmax = zeros.scatter_reduce(0, inverse, r, reduce="amax", include_self=False)
    gmin = zeros.scatter_reduce(0, inverse, r, reduce="amin", include_self=False)
    return {
        "count": count[inverse],
        "sum": total[inverse],
        "mean": mean[inverse],
        "sq_dev_sum": sq_dev_sum[inverse],
        "all_equal": (gmax == gmin)[inverse],
    }


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """mean(x) over positions where mask = 1: sum(x * m) / max(sum(m), 1).

    An all-masked reduction gives 0, not NaN.
    """
    m = mask.to(x.dtype)
    if dim is None:
        return (x * m).sum() / m.sum().clamp(min=1)
    return (x * m).sum(dim) / m.sum(dim).clamp(min=1)


def _local_sum(t: Tensor) -> Tensor:
    return t


def masked_whiten(
    x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8, all_reduce: SumAcross | None = None
) -> Tensor:
    """Whiten x over the valid positions of the whole batch.

        mu  = sum(x m) / sum(m)
        var = sum((x - mu)^2 m) / (sum(m) - 1)          (unbiased, like verl)
        out = (x - mu) / sqrt(var + eps)                shift_mean=True
        out = (x - mu) / sqrt(var + eps) + mu           shift_mean=False

    With ``shift_mean=False`` the mean is kept, so only the spread is
    rescaled. With a single valid element the variance is taken as 0. Masked
    positions are 0 in the output.

    When the batch is sharded (several learners), ``all_reduce`` sums a
    tensor over the shards (e.g. ``torch.distributed.all_reduce``), so that
    the sums above, and the result, are those of the whole batch.
    """
    reduce = all_reduce or _local_sum
    m = mask.to(torch.float64)
    xf = x.to(torch.float64)
    n, total = reduce(torch.stack([m.sum(), (xf * m).sum()]))
    mu = total / n.clamp(min=1)
    sq = reduce(((xf - mu) ** 2 * m).sum())
    var = torch.where(n > 1, sq / (n - 1).clamp(min=1), torch.zeros_like(sq))
    out = (xf - mu) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mu
    return (out * m).to(_float_dtype(x))


def to_token_level(seq_values: Tensor, response_mask: Tensor) -> Tensor:
    """Broadcast a per-sequence value [B] to the response tokens: a_{i,t} = a_i * m_{i,t}."""
    return seq_values.to(_float_dtype(seq_values))[:, None] * response_mask.to(
        _float_dtype(seq_values)
    )


def token_level_rewards(
    rewards: Tensor,
    response_mask: Tensor,
    kl_per_token: Tensor | None = None,
    kl_coef: float = 0.0,
) -> Tensor:
    """Spread a sequence reward over tokens, with an optional per-token KL penalty.

        r_t = -beta * KL_t * m_t + R * [t = last valid token]

    where beta = ``kl_coef`` and KL_t is an estimate of the KL between the
    policy and the reference at token t (see `losses.kl_penalty`). A row with
    no valid token gets no reward (there is no token to carry it).
    """
    dtype = _float_dtype(rewards)
    m = response_mask.to(dtype)
    T = m.shape[1]
    positions = torch.arange(T, device=m.device, dtype=dtype)
    last = (positions * m).argmax(dim=1)  # index of the last valid token
    has_valid = m.sum(dim=1) > 0
    out = torch.zeros_like(m)
    out[torch.arange(m.shape[0], device=m.device), last] = torch.where(
        has_valid, rewards.to(dtype), torch.zeros_like(rewards, dtype=dtype)
    )
    if kl_per_token is not None and kl_coef != 0.0:
        out = out - kl_coef * kl_per_token.to(dtype) * m
    return out


def _reverse_scan(
    response_mask: Tensor, step: Callable[[int, Tensor, Tensor], Tensor], init: Tensor
) -> Tensor:
    """Run ``carry_t = step(t, carry_next, valid_t)`` from t = T-1 down to 0.

    The carry moves only across valid tokens: at a masked position the output
    is 0 and the carry passes through unchanged to the previous valid token.
    """
    valid = response_mask.bool()
    out = torch.zeros(valid.shape, dtype=init.dtype, device=init.device)
    carry = init
    for t in range(valid.shape[1] - 1, -1, -1):
        v = valid[:, t]
        new = step(t, carry, v)
        out[:, t] = torch.where(v, new, torch.zeros_like(new))
        carry = torch.where(v, new, carry)
    return out


# ----------------------------------------------------------------------------
# sequence-level estimators (one advantage per trajectory)
# ----------------------------------------------------------------------------


def grpo_advantages(
    rewards: Tensor, group_ids: Tensor, eps: float = 1e-6, norm_by_std: bool = True
) -> Tensor:
    """GRPO group-normalized advantage (Shao et al. 2024), one per trajectory.

        A_i = (r_i - mean_g) / (std_g + eps)       norm_by_std=True  (GRPO)
        A_i =  r_i - mean_g                        norm_by_std=False (Dr. GRPO)

    where g is the group of trajectory i, mean_g its mean reward and std_g the
    *unbiased* standard deviation (divides by n_g - 1, as ``torch.std`` and
    verl do). A group whose rewards are all identical carries no learning
    signal and gets exactly 0 (not rounding noise divided by eps); a group of
    one has no baseline and gets 0 (never NaN).

    Returns ``Tensor[B]`` in the rewards' float dtype.
    """
    s = _group_stats(rewards, group_ids)
    r = rewards.to(torch.float64)
    adv = r - s["mean"]
    if norm_by_std:
        var = s["sq_dev_sum"] / (s["count"] - 1).clamp(min=1)
        adv = adv / (var.sqrt() + eps)
    degenerate = s["all_equal"] | (s["count"] < 2)
    adv = torch.where(degenerate, torch.zeros_like(adv), adv)
    return adv.to(_float_dtype(rewards))


def rloo_advantages(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """REINFORCE leave-one-out advantage (Kool et al. 2019; Ahmadian et al. 2024).

        A_i = r_i - 1/(n_g - 1) * sum_{j in g, j != i} r_j
            = n_g / (n_g - 1) * (r_i - mean_g)

    Each trajectory's baseline is the mean of the *other* rollouts of its
    task, so the baseline is independent of the sample it scores. A group of
    one has no other rollout and gets 0. Returns ``Tensor[B]``.
    """
    s = _group_stats(rewards, group_ids)
    r = rewards.to(torch.float64)
    n = s["count"]
    baseline = (s["sum"] - r) / (n - 1).clamp(min=1)
    adv = torch.where((n < 2) | s["all_equal"], torch.zeros_like(r), r - baseline)
    return adv.to(_float_dtype(rewards))


def dynamic_sampling_keep_mask(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """DAPO dynamic sampling (Yu et al. 2025): which trajectories to keep.

        keep_i = not (r_j == r_k for all j, k in group(i))

    A group whose rewards are all identical (all solved or all failed) has
    zero group-relative advantage and only dilutes the batch; DAPO drops it
    and samples more tasks. A group of one is trivially all-identical and is
    dropped too. Returns ``BoolTensor[B]``.
    """
    return ~_group_stats(rewards, group_ids)["all_equal"]


def weight_advantages(advantages: Tensor, positive_weight: float = 1.0, negative_weight: float = 1.0) -> Tensor:
    """Weight the two halves of the policy gradient (Zhu et al. 2025, "The
    Surprising Effectiveness of Negative Reinforcement in LLM Reasoning"):

        A'_t = lambda_+ * A_t    if A_t > 0
        A'_t = lambda_- * A_t    otherwise

    The gradient splits into positive-sample reinforcement (PSR: raise the
    above-baseline samples, which sharpens the policy onto them) and
    negative-sample reinforcement (NSR: lower the below-baseline ones, which
    hands their probability to the other actions in proportion to what the
    policy already gives them). (1, 1) is the plain estimator, (0, 1) is NSR,
    (0.1, 1) the paper's W-REINFORCE, and (1, 0) PSR: learning from the
    above-baseline samples alone, on-policy rejection-sampling fine-tuning.
    Works on any shape (sequence- or token-level advantages).
    """
    if positive_weight == 1.0 and negative_weight == 1.0:
        return advantages
    return advantages * torch.where(advantages > 0, positive_weight, negative_weight)


# ----------------------------------------------------------------------------
# token-level estimators
# ----------------------------------------------------------------------------


def reinforce_pp_returns(
    token_rewards: Tensor, response_mask: Tensor, gamma: float = 1.0
) -> Tensor:
    """Discounted returns-to-go over the valid tokens of each row.

        G_t = r_t + gamma * G_{t'}       t' = next valid token after t (G = 0 past the end)

    Masked positions (observation tokens between turns, padding) are skipped:
    they neither add reward nor cost a discount step, and their return is 0.
    So a reward on the last generated token reaches every earlier turn.
    """
    dtype = _float_dtype(token_rewards)
    r = token_rewards.to(dtype)
    init = torch.zeros(r.shape[0], dtype=dtype, device=r.device)
    return _reverse_scan(response_mask, lambda t, g_next, v: r[:, t] + gamma * g_next, init)


def reinforce_plus_plus_advantages(
    rewards: Tensor,
    response_mask: Tensor,
    kl_per_token: Tensor | None = None,
    kl_coef: float = 0.0,
    gamma: float = 1.0,
    all_reduce: SumAcross | None = None,
) -> tuple[Tensor, Tensor]:
    """REINFORCE++ (Hu 2025): token-level KL in the reward, global whitening.

        r_t = -beta * KL_t + R * [t = last valid token]        (`token_level_rewards`)
        G_t = r_t + gamma * G_{t'}                              (`reinforce_pp_returns`)
        A_t = (G_t - mu) / sqrt(var + 1e-8)                     (`masked_whiten`)

    with mu and the unbiased var taken over every valid token of the whole
    batch (no per-group baseline: the global normalization is the baseline;
    a sharded batch passes ``all_reduce``, see `masked_whiten`).
    Returns ``(advantages, returns)``, both [B, T] and 0 on masked positions.
    """
    token_r = token_level_rewards(rewards, response_mask, kl_per_token, kl_coef)
    returns = reinforce_pp_returns(token_r, response_mask, gamma)
    return masked_whiten(returns, response_mask, all_reduce=all_reduce), returns


def gae_advantages(
    token_rewards: Tensor,
    values: Tensor,
    response_mask: Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
    whiten: bool = True,
    all_reduce: SumAcross | None = None,
) -> tuple[Tensor, Tensor]:
    """Generalized advantage estimation (Schulman et al. 2016) for PPO.

        delta_t = r_t + gamma * V_{t'} - V_t
        A_t     = delta_t + gamma * lam * A_{t'}
        R_t     = A_t + V_t                      (value-function target)

    where t' is the next *valid* token after t, and V_{t'} = A_{t'} = 0 past
    the last valid token. Observation tokens between turns are not
    timesteps: the value bootstraps from the first token the model generates
    in the next turn, and no discount is spent on the hole. Rewards and
    values on masked positions are ignored.

    ``whiten=True`` (PPO's usual choice, and verl's) whitens the advantages
    over all valid tokens of the batch with `masked_whiten` (of the whole
    batch when it is sharded: ``all_reduce``); the returns are always built
    from the raw advantages. Returns ``(advantages, returns)``,
    both [B, T] and 0 on masked positions.
    """
    dtype = _float_dtype(values)
    r = token_rewards.to(dtype)
    v = values.to(dtype).detach()
    B = v.shape[0]
    zeros = torch.zeros(B, dtype=dtype, device=v.device)
    valid = response_mask.bool()

    # Value of the next valid token, per position (0 after the last one).
    next_value = torch.zeros_like(v)
    carry = zeros
    for t in range(v.shape[1] - 1, -1, -1):
        next_value[:, t] = carry
        carry = torch.where(valid[:, t], v[:, t], carry)

    deltas = r + gamma * next_value - v
    advantages = _reverse_scan(
        response_mask, lambda t, a_next, _: deltas[:, t] + gamma * lam * a_next, zeros
    )
    returns = (advantages + v) * valid.to(dtype)
    if whiten:
        advantages = masked_whiten(advantages, response_mask, all_reduce=all_reduce)
    return advantages, returns


# ----------------------------------------------------------------------------
# turn-level (step) credit
# ----------------------------------------------------------------------------


def turn_index(response_mask: Tensor) -> Tensor:
    """Which turn each response token belongs to: k on the tokens of the k-th
    run of valid tokens of its row (0-based), -1 on masked positions.

    A multi-turn row is prompt, response_0, observation_1, response_1, ...; the
    model's turns are exactly the runs of mask = 1 between the observation
    holes. Returns an int64 tensor of the mask's shape.
    """
    valid = response_mask.bool()
    starts = valid.clone()
    starts[:, 1:] &= ~valid[:, :-1]  # a valid token whose left neighbour is not valid
    index = torch.cumsum(starts.to(torch.int64), dim=1) - 1
    return torch.where(valid, index, torch.full_like(index, -1))


def per_turn_to_tokens(per_turn: Tensor, response_mask: Tensor) -> Tensor:
    """A value per turn, ``[B, K]``, on that turn's response tokens: ``[B, T]``, 0 on
    masked positions and on the tokens of a turn past the K-th (`turn_index`)."""
    k = turn_index(response_mask)
    padded = torch.cat([per_turn, torch.zeros_like(per_turn[:, :1])], dim=1)  # column K: 0
    k = torch.where((k >= 0) & (k < per_turn.shape[1]), k, torch.full_like(k, per_turn.shape[1]))
    return torch.gather(padded, 1, k) * response_mask.to(padded.dtype)


def gigpo_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    step_returns: Tensor,
    anchor_ids: Tensor,
    response_mask: Tensor,
    step_weight: float = 1.0,
    eps: float = 1e-6,
    norm_by_std: bool = True,
) -> tuple[Tensor, Tensor]:
    """GiGPO (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM
    Agent Training"): GRPO's episode advantage plus a step advantage taken
    among the turns of a group that acted from the same env state.

        A^E_i    = grpo_advantages(R_i; group of i)
        A^S_{ik} = (G_{ik} - mean_a) / (std_a + eps)     over turns (j, l) with anchor_{jl} = a = anchor_{ik}
        A_{i,t}  = A^E_i + omega * A^S_{i,k(t)}           k(t) = `turn_index` of token t

    ``step_returns [B, K]`` holds G_{ik}, the (discounted) return from turn k of
    row i; ``anchor_ids [B, K]`` the id of the state turn k acted from, equal
    for equal states of the same group and -1 where row i has no turn k.
    An anchor seen once, or whose returns are all equal, gives A^S = 0 (as
    `grpo_advantages` does for a group), so with no repeated state GiGPO is
    GRPO. The step term compares actions taken from one state by their
    outcomes, which an episode-level advantage cannot: it credits a whole
    trajectory, good turns and bad alike. omega = ``step_weight``.

    Response tokens past the K-th turn (none, when the arrays come from the
    same trajectories) get the episode term only. Returns ``(advantages,
    advantages)``, [B, T], 0 on masked positions, as the other sequence-level
    estimators do.
    """
    episode = grpo_advantages(rewards, group_ids, eps, norm_by_std)
    present = anchor_ids >= 0
    step = torch.zeros(step_returns.shape, dtype=torch.float64, device=step_returns.device)
    if present.any():
        step[present] = grpo_advantages(step_returns[present].to(torch.float64), anchor_ids[present], eps, norm_by_std)
    m = response_mask.to(torch.float64)
    adv = (episode.to(torch.float64)[:, None] + step_weight * per_turn_to_tokens(step, response_mask)) * m
    adv = adv.to(_float_dtype(rewards))
    return adv, adv


def invalid_turn_advantages(advantages: Tensor, invalid_turns: Tensor, response_mask: Tensor,
                            penalty: float) -> Tensor:
    """A turn-level cost on the actions the env refused, on top of any estimator's advantages:

        A'_{i,t} = A_{i,t} - beta * 1[turn k(t) of row i was refused]     k(t) = `turn_index` of token t

    A refused action changes nothing in the env but spends a turn, so its cost
    is local and known without any outcome: it goes on that turn's tokens
    alone. Outcome credit cannot say this: in a group where every sample fails
    (or every one succeeds) A = 0 on every token, and where outcomes differ
    the refused turn shares its episode's sign with the valid ones around it.
    ``invalid_turns [B, K]`` is 1 where row i's turn k was refused; tokens of a
    turn past K get no cost. beta = ``penalty``; masked positions stay 0. With
    ``rewards.repeated_refusal_flags`` as ``invalid_turns`` it costs only the turns that
    send a refused action again (GRPO's ``repeated_refusal_advantage``).
    """
    cost = per_turn_to_tokens(invalid_turns.to(torch.float64), response_mask)
    return (advantages.to(torch.float64) - penalty * cost).to(advantages.dtype)


# ----------------------------------------------------------------------------
# dispatcher
# ----------------------------------------------------------------------------


def _grpo(
    rewards: Tensor,
    group_ids: Tensor,
    response_mask: Tensor,
    eps: float = 1e-6,
    norm_by_std: bool = True,
) -> tuple[Tensor, Tensor]:
    adv = to_token_level(grpo_advantages(rewards, group_ids, eps, norm_by_std), response_mask)
    return adv, adv


def _rloo(rewards: Tensor, group_ids: Tensor, response_mask: Tensor) -> tuple[Tensor, Tensor]:
    adv = to_token_level(rloo_advantages(rewards, group_ids), response_mask)
    return adv, adv


ESTIMATORS: dict[str, Callable[..., tuple[Tensor, Tensor]]] = {
    "grpo": _grpo,
    "rloo": _rloo,
    "gigpo": gigpo_advantages,
    "reinforce_plus_plus": reinforce_plus_plus_advantages,
    "gae": gae_advantages,
}


def compute_advantages(estimator: str, **kwargs) -> tuple[Tensor, Tensor]:
    """Per-token ``(advantages, returns)``, both [B, T], for the named estimator.

    Keyword arguments per estimator:

    - ``"grpo"``: rewards, group_ids, response_mask, eps=1e-6, norm_by_std=True
    - ``"rloo"``: rewards, group_ids, response_mask
    - ``"gigpo"``: rewards, group_ids, step_returns, anchor_ids, response_mask,
      step_weight=1.0, eps=1e-6, norm_by_std=True
    - ``"reinforce_plus_plus"``: rewards, response_mask, kl_per_token=None,
      kl_coef=0.0, gamma=1.0, all_reduce=None
    - ``"gae"``: token_rewards, values, response_mask, gamma=1.0, lam=1.0,
      whiten=True, all_reduce=None

    For the group estimators (grpo, rloo, gigpo) the advantage is broadcast
    over the response tokens and ``returns`` is the same tensor (there is no
    value function to fit), as in verl.
    """
    try:
        fn = ESTIMATORS[estimator]
    except KeyError:
        raise ValueError(
            f"unknown advantage estimator {estimator!r}; valid: {', '.join(sorted(ESTIMATORS))}"
        ) from None
    return fn(**kwargs)

"""A hand-set induction circuit in a fresh Qwen2 model: it copies before any training.

An agent writes back names it has read ("Loutife Rapionus", "acacia boat").
A transformer copies with an induction circuit: a previous-token head writes
each token's predecessor into its position, and a later induction head, at
token x, attends to the position whose predecessor was x and emits the token
found there. Trained from scratch on a 20-minute budget the embedded model
never forms it (docs/learning.md, section 2), so this sets it by hand at
initialisation, in the model's own weights (an ordinary Qwen2 checkpoint:
transformers and vLLM load it as any other); SFT then trains every weight as
usual.

The residual stream of width H is split: the token embeddings live in the
first H - r dimensions, the last r (= head_dim) carry the previous token.

Layer 0, head 0 (previous-token head): query and key weights are zero and
their biases depend on position only, through RoPE. On the `fast_pairs`
fastest rotary pairs j (frequency theta_j), q = c e_j and k = c R(theta_j) e_j, so

    q_m . k_n = c^2 sum_j cos((n - m + 1) theta_j)

is largest at n = m - 1. Its value reads P x (P: head_dim x (H - r) with
orthonormal rows) and its output writes g P x_{m-1} into the last r
dimensions; g makes that write about as large as a token embedding. The
other heads and the MLP of layer 0 start at zero output, so nothing else
writes there (they learn from zero).

Layer 1, head 0 (induction head): on the slower half of the rotary pairs
(RoPE hardly turns them over a context) the query reads Q P x_m and the key reads
Q (the previous-token write), Q: (head_dim / 2) x head_dim orthonormal, so

    q_m . k_n ~ c'^2 (Q P x_m) . (Q P x_{n-1})

is large where x_{n-1} = x_m. Its value reads P x_n and its output writes
P^T P x_n back into the embedding dimensions, which the tied LM head turns
into a high logit for x_n. The final norm's weight is scaled up so that this
logit dominates the (small, random) others.

Measured on random sequences written twice (the induction stage's data,
algorithms/sft/induction.py), the agent-size model copies at initialisation:
0.47 nats per token against 8.36 without the circuit (chance 8.32).

Two-token matches (`match_tokens=2`). One token is too little context where
words repeat: in a TextCraft task "acacia" starts several command lines and
the goal, so the head above averages what followed each "acacia". With
`match_tokens=2` a second head of layer 0 (query head 2, on key/value head 1)
peaks two positions back and writes g P x_{m-2} into a second reserved block
of head_dim dimensions (the embeddings then keep H - 2 head_dim), and the
induction head's slow dimensions are split in two halves:

    q_m . k_n ~ c'^2 [(Q1 P x_m) . (Q1 P x_{n-1}) + (Q2 P x_{m-1}) . (Q2 P x_{n-2})]

so a position whose two predecessors are the current token and the one before
it scores twice as high as a one-token match, which it still prefers to none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class InductionCircuit:
    position_scale: float = 8.0  # c: sharpness of the previous-token head
    fast_pairs: int = 8  # rotary pairs the previous-token head uses
    match_scale: float = 2.5  # c': sharpness of the induction head's match
    output_scale: float = 6.0  # final norm weight multiplier: the copied token's logit
    match_tokens: int = 1  # tokens the induction head matches: 1, or 2 (the token and the one before)
    seed: int = 0

    def __post_init__(self):
        if self.match_tokens not in (1, 2):
            raise ValueError(f"match_tokens must be 1 or 2, got {self.match_tokens}")


def orthonormal_rows(rows: int, cols: int, generator):
    """A rows x cols matrix with orthonormal rows (rows <= cols): the Q of a Gaussian matrix's QR."""
    import torch

    q, _ = torch.linalg.qr(torch.randn(cols, rows, generator=generator))
    return q.T.contiguous()


def previous_token_biases(head_dim: int, inv_freq, fast_pairs: int, scale: float, offset: int = 1):
    """Query and key biases of one head whose score peaks `offset` positions back (neox rotary
    layout: pair j is dimensions j and j + head_dim / 2).

        q = c e_j,  k = c (cos(o theta_j) e_j + sin(o theta_j) e_{j + d/2})   for j < fast_pairs
        =>  q_m . k_n = c^2 sum_{j < fast_pairs} cos((n - m + o) theta_j)
    """
    import torch

    half = head_dim // 2
    q, k = torch.zeros(head_dim), torch.zeros(head_dim)
    for j in range(fast_pairs):
        angle = offset * float(inv_freq[j])
        q[j] = scale
        k[j] = scale * math.cos(angle)
        k[j + half] = scale * math.sin(angle)
    return q, k


def install_induction_circuit(model, circuit: InductionCircuit = InductionCircuit()) -> None:
    """Set layer 0 head 0 as a previous-token head (and head 2 as a two-back head when
    `circuit.match_tokens` is 2) and layer 1 head 0 as an induction head, in place.

    Needs a Qwen2-style model with q/k/v biases, tied embeddings and at least two layers
    (for two-token matches also a second key/value head: the two-back head is the first query
    head on it, head 2 at the agent's size)."""
    import torch

    cfg = model.config
    d, hidden, reserved = cfg.head_dim, cfg.hidden_size, circuit.match_tokens * cfg.head_dim
    half, content = d // 2, hidden - reserved
    if cfg.num_hidden_layers < 2 or not cfg.tie_word_embeddings or content < d:
        raise ValueError(f"the induction circuit needs 2+ layers, tied embeddings and hidden_size >= "
                         f"{circuit.match_tokens + 1} * head_dim")
    groups = cfg.num_attention_heads // cfg.num_key_value_heads  # query heads per key/value head
    if circuit.match_tokens == 2 and cfg.num_key_value_heads < 2:
        raise ValueError("two-token matches need a second key/value head (for the two-back head)")
    inv_freq = model.model.rotary_emb.inv_freq  # theta_j of the model's own RoPE
    generator = torch.Generator().manual_seed(circuit.seed)
    read = torch.zeros(d, hidden)  # P: a head_dim projection of the embedding dimensions
    read[:, :content] = orthonormal_rows(d, content, generator)
    slow = [*range(half // 2, half), *range(half + half // 2, d)]  # the slowest rotary pairs' dimensions
    with torch.no_grad():
        embeddings = model.model.embed_tokens.weight
        embeddings[:, content:] = 0  # the reserved dimensions carry the previous token(s) only
        # The input norm rescales x to RMS 1 (norm sqrt(H)), so P x has norm ~ sqrt(d / content * H).
        write_gain = float(embeddings[:, :content].norm(dim=1).mean()) / math.sqrt(d / content * hidden)

        first = model.model.layers[0].self_attn
        first.o_proj.weight.zero_()  # other heads start silent: nothing else writes the reserved dims
        model.model.layers[0].mlp.down_proj.weight.zero_()
        for back in range(1, circuit.match_tokens + 1):  # head 0: one back; head `groups`: two back
            head, kv = (0, 0) if back == 1 else (groups, 1)
            q_rows, kv_rows = slice(head * d, (head + 1) * d), slice(kv * d, (kv + 1) * d)
            q_bias, k_bias = previous_token_biases(d, inv_freq, circuit.fast_pairs, circuit.position_scale, back)
            first.q_proj.weight[q_rows] = 0
            first.q_proj.bias[q_rows] = q_bias
            first.k_proj.weight[kv_rows] = 0
            first.k_proj.bias[kv_rows] = k_bias
            first.v_proj.weight[kv_rows] = read
            first.v_proj.bias[kv_rows] = 0
            block = content + (back - 1) * d  # where this head writes x_{m - back}
            first.o_proj.weight[block:block + d, q_rows] = write_gain * torch.eye(d)

        second = model.model.layers[1].self_attn
        q0, kv = slice(0, d), slice(0, d)  # query head 0 on key/value head 0
        second.q_proj.weight[q0] = 0
        second.q_proj.bias[q0] = 0
        second.k_proj.weight[kv] = 0
        second.k_proj.bias[kv] = 0
        # Each matched token gets an equal share of the slow dimensions: (Q_t P x_{m-t}) . (Q_t P x_{n-1-t}).
        share = len(slow) // circuit.match_tokens
        for t in range(circuit.match_tokens):
            rows = slow[t * share:(t + 1) * share]
            match = orthonormal_rows(share, d, generator)  # Q_t
            if t == 0:
                query_rows = match @ read  # the current token itself
            else:
                query_rows = torch.zeros(share, hidden)
                query_rows[:, content:content + d] = match  # the previous-token write at m
            key_rows = torch.zeros(share, hidden)
            key_rows[:, content + t * d:content + (t + 1) * d] = match  # the write of x_{n-1-t} at n
            second.q_proj.weight[rows] = circuit.match_scale * query_rows
            second.k_proj.weight[rows] = circuit.match_scale * key_rows
        second.v_proj.weight[kv] = read
        second.v_proj.bias[kv] = 0
        second.o_proj.weight[:, q0] = read.T
        model.model.norm.weight.mul_(circuit.output_scale)

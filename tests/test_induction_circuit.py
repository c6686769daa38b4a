"""The hand-set induction circuit (rllib_agentgym/core/induction_circuit.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rllib_agentgym.algorithms.sft.induction import induction_batch
from rllib_agentgym.core.embedded import EmbeddedModelConfig, _fingerprint
from rllib_agentgym.core.induction_circuit import (InductionCircuit, install_induction_circuit,
                                                   orthonormal_rows, previous_token_biases)


def rotate(x: torch.Tensor, position: int, inv_freq: torch.Tensor) -> torch.Tensor:
    """RoPE in the neox layout (pair j = dimensions j and j + d/2), as Qwen2 applies it."""
    half = x.shape[-1] // 2
    angle = position * inv_freq
    a, b = x[:half], x[half:]
    return torch.cat([a * angle.cos() - b * angle.sin(), b * angle.cos() + a * angle.sin()])


def small_model(layers: int = 2, seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=2048, hidden_size=256, intermediate_size=512, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=64, tie_word_embeddings=True,
                         rope_theta=10000.0, attn_implementation="eager")
    return Qwen2ForCausalLM(config).eval()


def test_previous_token_score_peaks_one_position_back():
    inv_freq = 10000.0 ** (-torch.arange(0, 32, dtype=torch.float32) * 2 / 64)
    q, k = previous_token_biases(64, inv_freq, fast_pairs=8, scale=8.0)
    for m in (1, 7, 40, 300):
        scores = torch.stack([rotate(q, m, inv_freq) @ rotate(k, n, inv_freq) for n in range(m + 1)])
        assert int(scores.argmax()) == m - 1
        assert float(scores[m - 1]) == pytest.approx(64.0 * 8, rel=1e-4)  # c^2 * fast_pairs


def test_the_two_back_score_peaks_two_positions_back():
    inv_freq = 10000.0 ** (-torch.arange(0, 32, dtype=torch.float32) * 2 / 64)
    q, k = previous_token_biases(64, inv_freq, fast_pairs=8, scale=8.0, offset=2)
    for m in (2, 9, 40, 300):
        scores = torch.stack([rotate(q, m, inv_freq) @ rotate(k, n, inv_freq) for n in range(m + 1)])
        assert int(scores.argmax()) == m - 2


def test_orthonormal_rows():
    rows = orthonormal_rows(16, 40, torch.Generator().manual_seed(0))
    assert torch.allclose(rows @ rows.T, torch.eye(16), atol=1e-5)


def test_a_fresh_model_with_the_circuit_copies_repeated_text():
    plain, wired = small_model(), small_model()
    install_induction_circuit(wired, InductionCircuit())
    ids, labels = induction_batch(8, 32, 2048, 8, torch.Generator().manual_seed(1))  # random text written twice
    with torch.no_grad():
        plain_loss = float(plain(input_ids=ids, labels=labels).loss)
        out = wired(input_ids=ids, labels=labels, output_attentions=True)
    assert plain_loss > 7.0  # chance is log(2048) = 7.6
    assert float(out.loss) < 1.5
    previous = out.attentions[0][:, 0]  # layer 0, head 0: [batch, query, key]
    assert float(torch.stack([previous[:, i, i - 1] for i in range(1, 64)]).mean()) > 0.95
    induction = out.attentions[1][:, 0]  # at position 32 + i it attends to i + 1, the token that followed
    assert float(torch.stack([induction[:, 32 + i, i + 1] for i in range(31)]).mean()) > 0.8


def test_two_token_matches_copy_where_single_tokens_repeat():
    # Random text over only 60 token ids (8..67) written twice: most tokens recur within a half, pairs rarely.
    ids, labels = induction_batch(16, 48, 68, 8, torch.Generator().manual_seed(1))
    losses = {}
    for tokens in (1, 2):
        model = small_model()
        install_induction_circuit(model, InductionCircuit(match_tokens=tokens))
        with torch.no_grad():
            losses[tokens] = float(model(input_ids=ids, labels=labels).loss)
    assert losses[1] > 2.5  # one token matches several earlier positions: their successors blur
    assert losses[2] < 1.0  # the pair picks the one that continues the copy (measured: 3.72 vs 0.63)
    with torch.no_grad():  # and on text of distinct tokens it copies as the one-token circuit does
        ids, labels = induction_batch(8, 32, 2048, 8, torch.Generator().manual_seed(1))
        assert float(model(input_ids=ids, labels=labels).loss) < 1.5


def test_two_token_matches_need_room_and_a_second_key_value_head():
    with pytest.raises(ValueError, match="match_tokens"):
        InductionCircuit(match_tokens=3)
    from transformers import Qwen2Config, Qwen2ForCausalLM

    one_kv_head = Qwen2ForCausalLM(Qwen2Config(vocab_size=512, hidden_size=256, intermediate_size=256,
                                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                                               head_dim=64, tie_word_embeddings=True))
    with pytest.raises(ValueError, match="second key/value head"):
        install_induction_circuit(one_kv_head, InductionCircuit(match_tokens=2))
    narrow = Qwen2ForCausalLM(Qwen2Config(vocab_size=512, hidden_size=128, intermediate_size=256,
                                          num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                          head_dim=64, tie_word_embeddings=True))
    with pytest.raises(ValueError, match="3 \\* head_dim"):  # two reserved blocks and the embeddings
        install_induction_circuit(narrow, InductionCircuit(match_tokens=2))


def test_the_circuit_needs_two_layers():
    with pytest.raises(ValueError, match="2\\+ layers"):
        install_induction_circuit(small_model(layers=1))


def test_the_option_keys_the_model_only_when_used():
    base = EmbeddedModelConfig()
    assert _fingerprint(dataclasses.replace(base, induction_circuit=False)) == _fingerprint(base)
    assert _fingerprint(dataclasses.replace(base, induction_circuit=True)) != _fingerprint(base)
    circuit = dataclasses.replace(base, induction_circuit=True)
    assert _fingerprint(dataclasses.replace(circuit, induction_match_tokens=1)) == _fingerprint(circuit)
    assert _fingerprint(dataclasses.replace(circuit, induction_match_tokens=2)) != _fingerprint(circuit)
    with pytest.raises(ValueError, match="induction_circuit"):
        EmbeddedModelConfig(induction_match_tokens=2)

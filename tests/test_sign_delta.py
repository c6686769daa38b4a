"""core/sign_delta.py: a fine-tune's change stored as packed signs and row scales."""

from __future__ import annotations

import pytest
import torch

from rllib_agentgym.core.sign_delta import compress, decompress, pack_bits, unpack_bits


@pytest.mark.parametrize("cols", [1, 8, 13, 64])
def test_bits_round_trip_at_any_width(cols):
    bits = torch.rand(5, cols, generator=torch.Generator().manual_seed(cols)) > 0.5
    packed = pack_bits(bits)
    assert packed.dtype == torch.uint8 and packed.shape == (5, -(-cols // 8))
    assert torch.equal(unpack_bits(packed, cols), bits)


def test_bit_k_of_byte_j_is_column_8j_plus_k():
    bits = torch.zeros(1, 10, dtype=torch.bool)
    bits[0, 1] = bits[0, 9] = True
    assert pack_bits(bits).tolist() == [[2, 2]]


def test_hand_values_row_scale_is_the_mean_absolute_change():
    base = {"w": torch.zeros(2, 3), "norm": torch.ones(3)}
    tuned = {"w": torch.tensor([[0.3, -0.1, 0.2], [0.0, 0.0, 0.0]]), "norm": torch.tensor([1.0, 2.0, 3.0])}
    stored = compress(base, tuned)
    assert torch.allclose(stored["w:scale"], torch.tensor([0.2, 0.0]))
    out = decompress(base, stored)
    assert torch.allclose(out["w"], torch.tensor([[0.2, -0.2, 0.2], [0.0, 0.0, 0.0]]))
    assert torch.equal(out["norm"], tuned["norm"])  # 1-D tensors whole


def test_a_change_of_one_magnitude_a_row_comes_back_exactly():
    g = torch.Generator().manual_seed(0)
    base = {"w": torch.randn(16, 40, generator=g)}
    signs = torch.randint(0, 2, (16, 40), generator=g).float() * 2 - 1
    tuned = {"w": base["w"] + torch.linspace(0.01, 0.2, 16).unsqueeze(1) * signs}
    assert torch.allclose(decompress(base, compress(base, tuned))["w"], tuned["w"], atol=1e-6)


def test_row_scales_fit_no_worse_than_one_scale_a_matrix():
    """The least-squares claim of the docstring: any other scale of a row's signs fits that row worse."""
    g = torch.Generator().manual_seed(1)
    base = {"w": torch.zeros(8, 64)}
    tuned = {"w": torch.randn(8, 64, generator=g) * torch.linspace(0.1, 2.0, 8).unsqueeze(1)}
    stored = compress(base, tuned)
    err = (decompress(base, stored)["w"] - tuned["w"]).pow(2).sum(dim=1)
    for factor in (0.9, 1.1):
        worse = dict(stored, **{"w:scale": stored["w:scale"] * factor})
        assert (err < (decompress(base, worse)["w"] - tuned["w"]).pow(2).sum(dim=1)).all()
    one_scale = dict(stored, **{"w:scale": torch.full((8,), float(tuned["w"].abs().mean()))})
    assert err.sum() < (decompress(base, one_scale)["w"] - tuned["w"]).pow(2).sum()


def test_a_matrix_is_stored_in_a_thirtysecond_of_its_float32_bytes_plus_its_row_scales():
    base = {"w": torch.zeros(64, 256)}
    stored = compress(base, {"w": torch.randn(64, 256)})
    size = sum(t.numel() * t.element_size() for t in stored.values())
    assert size == 64 * 256 // 8 + 64 * 4


def test_mismatched_weights_are_refused_clearly():
    with pytest.raises(ValueError, match="differ in names"):
        compress({"a": torch.zeros(2, 2)}, {"b": torch.zeros(2, 2)})
    with pytest.raises(ValueError, match=r"a: tuned shape \(2, 3\) != base \(2, 2\)"):
        compress({"a": torch.zeros(2, 2)}, {"a": torch.zeros(2, 3)})

"""The learner's multi-tensor gradient helpers give RLlib's per-parameter results."""

from __future__ import annotations

import pytest
import torch
from ray.rllib.utils.torch_utils import clip_gradients as rllib_clip_gradients
from ray.rllib.utils.torch_utils import compute_global_norm

from rllib_agentgym.algorithms.grpo.torch.gradients import all_finite, clip_gradients, global_norm

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
NAN, INF = float("nan"), float("inf")


def _grads(device, scale=1.0, bad=None):
    """A parameter-shaped gradient dict; `bad` (a value) goes into one entry of the second tensor."""
    gen = torch.Generator().manual_seed(0)
    grads = {f"p{i}": (torch.randn(*shape, generator=gen) * scale).to(device)
             for i, shape in enumerate([(7, 5), (11,), (3, 4, 2), (1,)])}
    grads["none"] = None
    if bad is not None:
        grads["p1"][3] = bad
    return grads


@pytest.mark.parametrize("device", DEVICES)
def test_all_finite_sees_every_nan_and_inf(device):
    finite = [torch.randn(5, 3, device=device), torch.randn(7, device=device).bfloat16()]
    assert all_finite(finite) and all_finite([]) and all_finite([None, *finite])
    for bad in (NAN, INF, -INF):
        for i in range(len(finite)):  # in the first tensor or a later one, of either dtype
            broken = [x.clone() for x in finite]
            broken[i].view(-1)[-1] = bad
            assert not all_finite(broken), (bad, i)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bad", [None, NAN, INF, -INF], ids=["finite", "nan", "inf", "-inf"])
def test_global_norm_is_rllibs(device, bad):
    grads = _grads(device, bad=bad)
    ours, theirs = global_norm(grads.values()), compute_global_norm(list(grads.values()))
    torch.testing.assert_close(ours.cpu(), theirs.cpu().float(), rtol=1e-6, atol=0)
    assert float(global_norm([])) == 0.0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scale, bad", [(1.0, None), (1e-4, None), (1.0, NAN), (1.0, INF)],
                         ids=["clipped", "under-the-clip", "nan", "inf"])
@pytest.mark.parametrize("grad_clip_by", ["global_norm", "norm", "value"])
def test_clip_gradients_is_rllibs(device, scale, bad, grad_clip_by):
    ours, theirs = _grads(device, scale, bad), _grads(device, scale, bad)
    norm_ours = clip_gradients(ours, grad_clip=0.5, grad_clip_by=grad_clip_by)
    norm_theirs = rllib_clip_gradients(theirs, grad_clip=0.5, grad_clip_by=grad_clip_by)
    if grad_clip_by == "global_norm":
        torch.testing.assert_close(norm_ours.cpu(), norm_theirs.cpu().float(), rtol=1e-6, atol=0)
        if bad is None and scale == 1.0:
            assert float(norm_ours) > 0.5  # the clip had work to do
    for name in theirs:
        if theirs[name] is None:
            assert ours[name] is None
        else:
            torch.testing.assert_close(ours[name], theirs[name], rtol=1e-6, atol=0, equal_nan=True, msg=name)
    assert clip_gradients(_grads(device), grad_clip=None) is None

"""interpolate.py and `rllib interpolate`: the straight line between two models' weights (WiSE-FT)."""

from __future__ import annotations

import shutil

import pytest
import torch

from rllib_agentgym.cli import main
from rllib_agentgym.core.embedded import load_model_weights
from rllib_agentgym.interpolate import interpolate_weights


def test_hand_values_on_the_line_and_past_its_ends():
    start = {"w": torch.tensor([0.0, 2.0]), "step": torch.tensor([3])}
    end = {"w": torch.tensor([1.0, 0.0]), "step": torch.tensor([3])}
    assert interpolate_weights(start, end, 0.25)["w"].tolist() == [0.25, 1.5]
    assert interpolate_weights(start, end, 1.5)["w"].tolist() == [1.5, -1.0]
    assert interpolate_weights(start, end, 0.25)["step"].tolist() == [3]  # integers must agree, and pass


def test_ends_give_back_each_model_in_the_wider_dtype():
    g = torch.Generator().manual_seed(0)
    start = {"w": torch.randn(4, 8, generator=g).to(torch.bfloat16)}
    end = {"w": torch.randn(4, 8, generator=g).to(torch.bfloat16)}
    assert torch.equal(interpolate_weights(start, end, 0.0)["w"], start["w"])
    assert torch.equal(interpolate_weights(start, end, 1.0)["w"], end["w"])
    assert interpolate_weights(start, end, 0.5)["w"].dtype == torch.bfloat16
    wide = interpolate_weights({"w": start["w"].float()}, end, 0.5)["w"]
    assert wide.dtype == torch.float32  # a float32 start is not rounded to the end's bfloat16
    assert torch.equal(wide, (start["w"].float() + end["w"].float()) / 2)


@pytest.mark.parametrize("start, end, match", [
    ({"a": torch.zeros(2)}, {"b": torch.zeros(2)}, "different tensors"),
    ({"a": torch.zeros(2)}, {"a": torch.zeros(3)}, "shape"),
    ({"a": torch.tensor([1])}, {"a": torch.tensor([2])}, "integer tensors differ"),
])
def test_models_that_do_not_share_a_layout_are_refused(start, end, match):
    with pytest.raises(ValueError, match=match):
        interpolate_weights(start, end, 0.5)


def test_cli_writes_a_model_folder_that_transformers_loads(embedded_model, tmp_path):
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    start = load_model_weights(embedded_model)
    end_dir = tmp_path / "end"
    shutil.copytree(embedded_model, end_dir, ignore=shutil.ignore_patterns("*.safetensors"))
    end = {name: t + 0.01 if t.is_floating_point() else t for name, t in start.items()}
    save_file(end, str(end_dir / "model.safetensors"))

    out = tmp_path / "half"
    assert main(["interpolate", embedded_model, str(end_dir), "--alpha", "0.5", "--to", str(out)]) == 0
    mixed = load_model_weights(out)
    name = next(n for n, t in start.items() if t.is_floating_point())
    assert torch.allclose(mixed[name], start[name] + 0.005, atol=1e-6)

    model = AutoModelForCausalLM.from_pretrained(out)
    loaded = dict(model.named_parameters())[name]
    assert torch.allclose(loaded, mixed[name])
    logits = model(torch.tensor([[1, 5, 9]])).logits
    assert logits.shape[:2] == (1, 3) and torch.isfinite(logits).all()


def test_cli_names_a_folder_without_weights(embedded_model, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code = main(["interpolate", embedded_model, str(tmp_path / "empty"), "--alpha", "0.5", "--to", str(tmp_path / "out")])
    assert code == 2
    assert "no *.safetensors weights" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_failed_write_leaves_the_old_folder_whole(tmp_path):
    from rllib_agentgym.export import replacing_folder

    out = tmp_path / "model"
    with replacing_folder(out) as tmp:
        (tmp / "a").write_text("first")
    with pytest.raises(RuntimeError):
        with replacing_folder(out) as tmp:
            (tmp / "a").write_text("half")
            raise RuntimeError("disk full")
    assert (out / "a").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temp folder left
    with replacing_folder(out) as tmp:
        (tmp / "b").write_text("second")
    assert sorted(p.name for p in out.iterdir()) == ["b"]  # replaced whole, not merged

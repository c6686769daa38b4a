"""`plot_run` writes real PNG curves for one trial and for a multi-trial experiment."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image
from synthetic_run import make_run_dir

from rllib_agentgym.plotting import COMBINED_NAME, plot_run
from rllib_agentgym.run_logs import CURVES


def assert_real_png(path):
    assert path.is_file() and path.stat().st_size > 2000
    image = Image.open(path)
    assert image.format == "PNG" and image.width > 300 and image.height > 200
    pixels = np.asarray(image.convert("RGB"))
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 20  # axes, text and lines, not one color


def test_experiment_with_two_trials(tmp_path):
    make_run_dir(tmp_path / "exp" / "trial_0", num_iterations=4)
    make_run_dir(tmp_path / "exp" / "trial_1", num_iterations=3, progress_only=True)
    paths = plot_run(tmp_path / "exp", tmp_path / "plots")
    assert [p.name for p in paths] == [f"{c}.png" for c in CURVES] + [COMBINED_NAME]
    for path in paths:
        assert path.parent == tmp_path / "plots"
        assert_real_png(path)


def test_missing_curves_are_skipped_but_combined_is_written(tmp_path):
    trial = tmp_path / "trial"
    trial.mkdir()
    with open(trial / "result.json", "w") as f:
        f.writelines(json.dumps({"training_iteration": it, "env_runners": {"episode_return_mean": 0.1 * it}}) + "\n" for it in (1, 2))
    paths = plot_run(trial, tmp_path / "out")
    assert [p.name for p in paths] == ["reward.png", COMBINED_NAME]
    for path in paths:
        assert_real_png(path)


def test_nothing_to_plot_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        plot_run(tmp_path, tmp_path / "out")
    (tmp_path / "trial" / "trajectories").mkdir(parents=True)  # a trial that has not finished an iteration
    with pytest.raises(ValueError, match="no training curves"):
        plot_run(tmp_path / "trial", tmp_path / "out")

"""Ray Tune: the search example (search algorithm + ASHA) runs 2 trials of GRPO on the tiny model."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _example():
    spec = importlib.util.spec_from_file_location("tune_search", ROOT / "examples" / "tune_search.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_two_trial_search_writes_both_trials(ray_local, tmp_path):
    example = _example()
    results = example.main([
        "--engine", "hf", "--num-samples", "2", "--iterations", "1", "--group-sizes", "1", "2",
        "--kl-coefs", "0.0", "0.01", "--tasks-per-iteration", "1", "--max-turns", "1", "--max-new-tokens", "8",
        "--max-model-len", "1024", "--search", "random", "--storage-path", str(tmp_path), "-v", "0",
    ])
    assert len(results) == 2 and not results.errors
    trials = sorted((tmp_path / "textcraft-grpo-search").glob("GRPO_*"))
    assert len(trials) == 2
    lrs = set()
    for trial in trials:
        rows = [json.loads(line) for line in (trial / "result.json").read_text().splitlines() if line.strip()]
        assert [r["training_iteration"] for r in rows] == [1]
        config = rows[0]["config"]
        assert 1e-6 <= config["lr"] <= 1e-4 and config["kl_coef"] in (0.0, 0.01) and config["group_size"] in (1, 2)
        assert rows[0]["env_runners"]["num_episodes"] == config["group_size"]
        assert "episode_return_mean" in rows[0]["env_runners"]
        lrs.add(config["lr"])
        # Each trial's TensorBoard files sit in its own dir: side by side under the experiment.
        assert list(trial.glob("events.out.tfevents.*"))
    assert len(lrs) == 2  # two draws from the log-uniform space


@pytest.mark.slow
def test_yaml_search_spaces_run_end_to_end(ray_local, tmp_path):
    """`grid_search` and the `choice` / `loguniform` shorthands of the classic YAML, through `rllib train`."""
    import yaml

    from rllib_agentgym.cli import main

    spec = {"search": {
        "run": "GRPO", "env": "agentgym/textcraft", "stop": {"training_iteration": 1},
        "config": {
            "inference_engine": "hf", "max_model_len": 1024, "max_new_tokens": 8, "max_turns": 1,
            "tasks_per_iteration": 1, "log_trajectories": 0,
            "group_size": {"grid_search": [1, 2]},
            "kl_coef": {"choice": [0.0, 0.01]},
            "lr": {"loguniform": [1e-6, 1e-4]},
        },
    }}
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["train", "file", str(path), "--storage-path", str(tmp_path / "out"), "-v", "0"]) == 0
    configs = []
    for result in sorted((tmp_path / "out" / "search").glob("GRPO_*/result.json")):
        configs.append(json.loads(result.read_text().splitlines()[-1])["config"])
    assert sorted(c["group_size"] for c in configs) == [1, 2]
    assert all(c["kl_coef"] in (0.0, 0.01) and 1e-6 <= c["lr"] <= 1e-4 for c in configs)

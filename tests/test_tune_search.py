"""Ray Tune: the search example (Optuna + ASHA) runs 2 trials of GRPO on the tiny model; the classic
YAML's search spaces through `rllib train`."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from run_files import tensorboard_scalars, trial_results

ROOT = Path(__file__).resolve().parents[1]


def _example():
    spec = importlib.util.spec_from_file_location("tune_search", ROOT / "examples" / "tune_search.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_optuna_search_with_asha_runs_two_trials(ray_local, tmp_path):
    """Optuna's TPE proposes two configs; ASHA (grace period 1, max_t 2) judges both trials at its
    first rung; each trial's TensorBoard scalars and extras (text, histograms) read back."""
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch
    from tensorboard.backend.event_processing.event_accumulator import HISTOGRAMS, TENSORS, EventAccumulator

    example = _example()
    argv = [
        "--engine", "hf", "--num-samples", "2", "--iterations", "2", "--grace-period", "1",
        "--group-sizes", "1", "2", "--kl-coefs", "0.0", "0.01", "--tasks-per-iteration", "1", "--max-turns", "1",
        "--max-new-tokens", "8", "--max-model-len", "1024", "--search", "optuna", "--storage-path", str(tmp_path),
        "-v", "0",
    ]
    assert isinstance(example.search_algorithm("auto", 0), OptunaSearch)  # optuna is pinned in requirements.txt
    searcher = example.search_algorithm("optuna", 0)
    scheduler = example.asha_scheduler(example.build_parser().parse_args(argv))
    assert isinstance(searcher, OptunaSearch) and isinstance(scheduler, ASHAScheduler)
    results = example.main(argv, search_alg=searcher, scheduler=scheduler)
    assert len(results) == 2 and not results.errors

    # Optuna asked for both trials' configs and was told both outcomes.
    study = searcher._ot_study
    assert len(study.trials) == 2 and all(t.state.name == "COMPLETE" for t in study.trials)
    # ASHA recorded both trials' metric at its first rung (iteration 1) and decided there.
    rungs = dict(scheduler._brackets[0]._rungs)
    assert sorted(rungs) == [1, 2] and len(rungs[1]) == 2

    trials = sorted((tmp_path / "textcraft-grpo-search").glob("GRPO_*"))
    assert len(trials) == 2
    configs = []
    for trial in trials:
        rows = trial_results(trial)
        iterations = [r["training_iteration"] for r in rows]
        assert iterations in ([1], [1, 2])  # stopped by ASHA at its rung, or run to max_t
        config = rows[0]["config"]
        assert 1e-6 <= config["lr"] <= 1e-4 and config["kl_coef"] in (0.0, 0.01) and config["group_size"] in (1, 2)
        assert all(r["env_runners"]["num_episodes"] == config["group_size"] for r in rows)
        configs.append((config["lr"], config["kl_coef"], config["group_size"]))

        # Tune's scalars, one per iteration, equal to the result rows.
        scalars = tensorboard_scalars(trial)
        returns = scalars["ray/tune/env_runners/episode_return_mean"]
        assert [step for step, _ in returns] == iterations
        assert [v for _, v in returns] == pytest.approx([r["env_runners"]["episode_return_mean"] for r in rows])
        # Our extras: sample trajectories as text and histograms of turns and rewards, per iteration.
        extras = EventAccumulator(str(trial / "extras"), size_guidance={TENSORS: 0, HISTOGRAMS: 0})
        extras.Reload()
        turns = extras.Histograms("trajectories/num_turns")
        assert [h.step for h in turns] == iterations
        assert all(h.histogram_value.num == config["group_size"] and h.histogram_value.max == 1 for h in turns)
        rewards = extras.Histograms("trajectories/reward")
        assert [h.histogram_value.sum for h in rewards] == pytest.approx(
            [r["env_runners"]["episode_return_mean"] * config["group_size"] for r in rows])
        text = extras.Tensors("trajectories/sample_0/text_summary")[0].tensor_proto.string_val[0].decode()
        assert text.startswith("**textcraft task ") and "#### Turn 1" in text and "Crafting commands:" in text
    assert len(set(configs)) == 2  # two distinct proposals

    # The real run dir through `rllib plot` and the trajectory viewer's API.
    import urllib.request

    from rllib_agentgym.cli import main as rllib
    from rllib_agentgym.viewer import serve

    experiment = tmp_path / "textcraft-grpo-search"
    assert rllib(["plot", str(experiment), "--out", str(tmp_path / "plots")]) == 0
    assert (tmp_path / "plots" / "curves.png").stat().st_size > 2000 and (tmp_path / "plots" / "reward.png").is_file()
    server, url = serve(experiment)
    try:
        with urllib.request.urlopen(url + "api/trials", timeout=10) as reply:
            assert {t["name"] for t in json.load(reply)} == {t.name for t in trials}
        for trial, (_, _, group_size) in zip(trials, configs):
            with urllib.request.urlopen(f"{url}api/trajectories?trial={trial.name}", timeout=10) as reply:
                listed = json.load(reply)
            num_iterations = len((trial / "result.json").read_text().splitlines())
            assert listed["total"] == group_size * num_iterations  # every episode (fewer than log_trajectories)
            assert {r["env"] for r in listed["trajectories"]} == {"textcraft"}
    finally:
        server.stop()


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

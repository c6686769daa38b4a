"""End to end: `rllib train file tuned_examples/webarena_cpu.yaml` (shortened) through the CLI and Tune:
the runner launches `python -m envs.webarena`, Chromium plays the embedded sites, the evaluators grade."""

from __future__ import annotations

import json

import pytest

from rllib_agentgym.cli import main
from run_files import shortened_example, trial_results

SITES = {"shopping", "reddit", "gitlab"}


@pytest.mark.slow  # vLLM start, a WebArena server with Chromium, one GRPO iteration: minutes on 2 cores
def test_webarena_cpu_yaml_trains_one_iteration(ray_local, tmp_path):
    # Same file, smaller budget: 1 iteration of 3 tasks x 2 rollouts at the first horizon (2 turns).
    path, _, _ = shortened_example("webarena_cpu.yaml", tmp_path, 1, group_size=2, tasks_per_iteration=3,
                                   max_new_tokens=16)

    assert main(["train", "file", str(path), "--storage-path", str(tmp_path / "results"), "-v", "0"]) == 0
    (trial,) = list((tmp_path / "results" / "webarena-grpo-cpu").glob("GRPO_*"))
    (result,) = trial_results(trial)
    runners = result["env_runners"]
    assert runners["horizon"] == 2 and runners["num_episodes"] == 6
    assert runners["num_dropped_episodes"] == 0 and runners["num_skipped_episodes"] == 0
    assert 0.0 <= runners["episode_return_mean"] <= 1.0 and 0.0 <= runners["success_rate"] <= 1.0
    assert "policy_loss" in result["learners"]["default_policy"]
    # Per-site success rates, as in the paper's table: one key per site the drawn tasks are on.
    by_site = runners["success_rate_by_category"]
    episodes = [json.loads(line) for line in (trial / "trajectories" / "iter_000001.jsonl").read_text().splitlines()]
    assert by_site and set(by_site) <= SITES and all(0.0 <= v <= 1.0 for v in by_site.values())
    assert {e["category"] for e in episodes} <= set(by_site)
    for e in episodes:  # graded by the evaluators: 1 / 0, at `stop` or at the horizon
        assert e["reward"] in (0.0, 1.0) and e["success"] == (e["reward"] == 1.0)
        assert e["done"] or e["num_turns"] == 2

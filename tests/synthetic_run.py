"""A small, deterministic run directory in the exact layout training writes.

Trajectories are real `Trajectory` objects turned into summaries by
`Trajectory.summary()` and written by `write_trajectories`; results are the
nested dicts Tune writes to result.json (and flattened into progress.csv).
Shared by the viewer, plotting and TensorBoard tests.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from rllib_agentgym.core.trajectory import Trajectory, Turn
from rllib_agentgym.run_logs import flatten
from rllib_agentgym.tb_logging import write_trajectories

NUM_ITERATIONS = 3
TASKS_PER_ITERATION = 3
GROUP_SIZE = 2
CATEGORIES = {0: "depth 1", 1: "depth 2", 2: "depth 3"}  # data_idx % 3 -> category


def make_trajectory(iteration: int, data_idx: int, group_id: int, member: int) -> Trajectory:
    """A TextCraft-like episode. Shallow tasks always succeed, the others more often
    in later iterations (so the curves rise); failures get a partial reward on odd tasks."""
    category = CATEGORIES[data_idx % 3]
    success = data_idx % 3 == 0 or member < iteration - 1
    num_turns = 2 + (data_idx % 3) + member
    t = Trajectory(env="textcraft", data_idx=data_idx, group_id=group_id, category=category)
    observation = (f"Crafting commands:\nget 1 oak planks\ncraft 4 stick using 2 oak planks\n"
                   f"Goal: craft item {data_idx}.\n<b>markup must show as text</b>")
    for turn in range(num_turns):
        action = f"get {turn + 1} oak log" if turn % 2 == 0 else "inventory"
        valid = not (member == 1 and turn == 1)
        t.turns.append(Turn(observation=observation,
                            response=f"Thought: step {turn} towards item {data_idx}.\nAction: {action}",
                            action=action if valid else "", reward=0.0, valid_format=valid))
        observation = f"Got {turn + 1} oak log" if valid else "Invalid format: answer 'Thought: ...\\nAction: ...'"
    t.reward = 1.0 if success else 0.25 * (data_idx % 2)
    t.turns[-1].reward = t.reward
    t.success = success
    t.done = success
    t.truncated = False
    t.final_observation = f"Crafted item {data_idx}." if success else observation
    t.token_ids = list(range(40 * num_turns))
    t.loss_mask = [1 if i % 4 == 0 else 0 for i in t.token_ids]
    return t


def iteration_summaries(iteration: int) -> list[dict]:
    summaries = []
    for g in range(TASKS_PER_ITERATION):
        data_idx = 10 * iteration + g
        for member in range(GROUP_SIZE):
            summaries.append(make_trajectory(iteration, data_idx, g, member).summary())
    return summaries


def result_record(iteration: int) -> dict:
    """One result.json line as Tune writes it for our GRPO (nested; a config that is not a metric)."""
    summaries = iteration_summaries(iteration)
    return {
        "training_iteration": iteration,
        "env_runners": {
            "episode_return_mean": sum(s["reward"] for s in summaries) / len(summaries),
            "success_rate": sum(s["success"] for s in summaries) / len(summaries),
            "num_turns_mean": sum(s["num_turns"] for s in summaries) / len(summaries),
            "horizon": 5 if iteration < 3 else 8,
            "generated_tokens_per_s": 100.0 * iteration,
            "success_rate_by_category": {"depth 1": 1.0, "depth 2": 0.5},
        },
        "learners": {"default_policy": {"policy_loss": 0.1 / iteration, "kl": 0.001 * iteration, "entropy": 2.0,
                                        "clip_fraction": 0.05, "gradients_default_optimizer_global_norm": 1.5}},
        "config": {"lr": 1e-5, "env": "agentgym/textcraft"},
        "date": "2026-11-02_11-00-00",
    }


def make_run_dir(trial_dir: Path, num_iterations: int = NUM_ITERATIONS, progress_only: bool = False) -> Path:
    """Write trajectories/iter_*.jsonl, result.json and progress.csv for `num_iterations`."""
    trial_dir.mkdir(parents=True, exist_ok=True)
    records = [result_record(it) for it in range(1, num_iterations + 1)]
    for it in range(1, num_iterations + 1):
        write_trajectories(trial_dir, it, iteration_summaries(it))
    if not progress_only:
        with open(trial_dir / "result.json", "w") as f:
            f.writelines(json.dumps(record) + "\n" for record in records)
    flat = [flatten(r) for r in records]
    columns = list(dict.fromkeys(k for row in flat for k in row))
    with open(trial_dir / "progress.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(flat)
    return trial_dir

"""Where GRPO's outcome credit goes on BabyAI GoTo: the first action, by context.

    python benchmarks/first_action_credit.py --tasks 48 --group-size 8 \\
        --out docs/results/learning/first_action_credit_babyai.json

A diagnostic for docs/learning.md, section 3, not a speed benchmark. It plays
`--group-size` samples (the training temperature) of `--tasks` GoTo train tasks
with the model of `tuned_examples/babyai_warmstart_cpu.yaml` (the warm start,
or `--model` for another), computes the group-relative advantages GRPO would
train on (1[success], the groups of the draw), and splits the episodes by

- context: is the goal among the first observation's available actions
  (`go to <goal>` listed: the goal is in view), and
- the first action: `go to ...`, an exploring move (`turn left`, `turn right`,
  `move forward`), or anything else.

Per cell it reports episodes, success rate, mean advantage and mean turns.
A negative mean advantage is what the update pushes down in that context.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/...`

from benchmarks.common import emit, meta, quiet_logs  # noqa: E402
from benchmarks.learning_curves import experiment_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXPLORING = ("turn left", "turn right", "move forward")
_GOAL = re.compile(r"Your goal: go to (?:the |a )?(\w+ \w+)")


def first_action_kind(response: str) -> str:
    from rllib_agentgym.envs.spec import parse_react_action  # the runner's own ReAct parsing

    action = (parse_react_action(response) or "").lower()
    if action.startswith("go to"):
        return "go to"
    return "explore" if action in EXPLORING else "other"


def goal_in_view(first_observation: str) -> bool:
    """The goal object is listed as `go to <color> <type> <n>` among the available actions."""
    goal = _GOAL.search(first_observation)
    listed = first_observation[first_observation.find("Available actions"):]
    return bool(goal) and f"go to {goal.group(1)}" in listed


def credit_by_context(trajectories, advantages) -> dict[str, dict[str, float]]:
    cells: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: {"n": 0, "success": 0, "adv": 0.0, "turns": 0})
    for traj, adv in zip(trajectories, advantages):
        view = "goal in view" if goal_in_view(traj.turns[0].observation) else "goal not in view"
        cell = cells[(view, first_action_kind(traj.turns[0].response))]
        cell["n"] += 1
        cell["success"] += int(traj.success)
        cell["adv"] += float(adv)
        cell["turns"] += len(traj.turns)
    return {
        f"{view} / first action {kind}": {"episodes": c["n"], "success": c["success"] / c["n"],
                                          "mean_advantage": c["adv"] / c["n"], "mean_turns": c["turns"] / c["n"]}
        for (view, kind), c in sorted(cells.items())
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=48, help="GoTo train tasks, spread over the category")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--model", default=None, help="model_path (default: the tuned example's)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    quiet_logs()

    import torch

    from rllib_agentgym.algorithms.advantages import grpo_advantages
    from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
    from rllib_agentgym.env_runners.llm_env_runner import LLMEnvRunner
    from rllib_agentgym.envs.gym_env import text_space
    from rllib_agentgym.envs.registry import get_spec

    overrides = {"evaluation_interval": None, "log_trajectories": 0, "scaling_inter": None, "max_turns": 12}
    if args.model:
        overrides["model_path"] = args.model
    config = GRPOConfig().update_from_dict(experiment_config(ROOT / "tuned_examples" / "babyai_warmstart_cpu.yaml", overrides))
    config.observation_space = config.action_space = text_space()
    goto = get_spec("agentgym/babyai").task_ids("train", ["GoTo"])
    task_ids = goto[:: max(1, len(goto) // args.tasks)][: args.tasks]
    runner = LLMEnvRunner(config=config, worker_index=0)
    try:
        # A draw of its own (call_index), not one a training run of this seed makes.
        trajectories = runner.sample(task_ids=task_ids, group_size=args.group_size, explore=True,
                                     call_index=5 * 10**6).trajectories
    finally:
        runner.stop()
    advantages = grpo_advantages(torch.tensor([float(t.success) for t in trajectories]),
                                 torch.tensor([t.group_id for t in trajectories]))
    result = {"meta": meta(__file__, argv), "model_path": config.model_path, "tasks": len(task_ids),
              "group_size": args.group_size, "episodes": len(trajectories),
              "by_context": credit_by_context(trajectories, advantages.tolist())}
    return emit(result, args.out)


if __name__ == "__main__":
    main()

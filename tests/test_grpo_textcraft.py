"""End to end: `rllib train file tuned_examples/textcraft_cpu.yaml` (shortened), checkpoint, restore."""

from __future__ import annotations

import math


from rllib_agentgym.cli import main
from run_files import shortened_example, tensorboard_scalars, trial_results


# The scalars the issue asks TensorBoard to show, under the tags Tune's TensorBoard logger gives
# them: reward mean, success rate, mean turns, horizon, generated tokens/s, KL, clip fraction,
# entropy, grad norm.
TB_SCALARS = [
    "ray/tune/env_runners/episode_return_mean",
    "ray/tune/env_runners/success_rate",
    "ray/tune/env_runners/num_turns_mean",
    "ray/tune/env_runners/horizon",
    "ray/tune/env_runners/generated_tokens_per_s",
    "ray/tune/learners/default_policy/kl",
    "ray/tune/learners/default_policy/clip_fraction",
    "ray/tune/learners/default_policy/entropy",
    "ray/tune/learners/default_policy/gradients_default_optimizer_global_norm",
]


def test_textcraft_cpu_yaml_trains_checkpoints_and_restores(ray_local, tmp_path):
    # Same file, smaller budget: 3 iterations, horizon 2 then 4 from iteration 2 on.
    path, _, _ = shortened_example("textcraft_cpu.yaml", tmp_path, 3, checkpoint_frequency=2, checkpoint_at_end=True,
                                   group_size=2, greedy_group_members=1, tasks_per_iteration=2, max_new_tokens=16,
                                   scaling_inter={"schedule": [2, 4], "interval": 2})

    assert main(["train", "file", str(path), "--storage-path", str(tmp_path / "results"), "-v", "0"]) == 0
    (trial,) = list((tmp_path / "results" / "textcraft-grpo-cpu").glob("GRPO_*"))
    results = trial_results(trial)
    assert [r["training_iteration"] for r in results] == [1, 2, 3]
    # ScalingInter: h(0)=h(1)=2, h(2)=4.
    assert [r["env_runners"]["horizon"] for r in results] == [2, 2, 4]
    for r in results:
        learner = r["learners"]["default_policy"]
        for key in ("policy_loss", "kl", "clip_fraction", "entropy", "gradients_default_optimizer_global_norm"):
            assert key in learner
        for key in ("episode_return_mean", "success_rate", "num_turns_mean", "generated_tokens_per_s"):
            assert key in r["env_runners"]
        assert r["env_runners"]["num_episodes"] == 4
        # One member of each group played greedily: its success on the train goals.
        assert 0.0 <= r["env_runners"]["greedy_member_success_rate"] <= 1.0
        # TextCraft reports info["progress"] every step; the runner keeps it per turn.
        assert 0.0 <= r["env_runners"]["progress_mean"] <= 1.0
    # TensorBoard event files (Tune's scalars and our extras), trajectories for the viewer.
    assert list(trial.glob("events.out.tfevents.*"))
    scalars = tensorboard_scalars(trial)
    for tag in TB_SCALARS:
        assert len(scalars.get(tag, [])) == 3, (tag, sorted(scalars))  # one per iteration
        assert all(math.isfinite(value) for _, value in scalars[tag]), (tag, scalars[tag])
    assert [value for _, value in scalars["ray/tune/env_runners/horizon"]] == [2, 2, 4]
    assert list((trial / "extras").glob("events.out.tfevents.*"))
    assert sorted(p.name for p in (trial / "trajectories").glob("*.jsonl")) == [
        "iter_000001.jsonl", "iter_000002.jsonl", "iter_000003.jsonl"]
    checkpoints = sorted(trial.glob("checkpoint_*"))
    assert len(checkpoints) == 2

    # Restore the iteration-2 checkpoint: the run continues at iteration 3 with h(2) = 4.
    from ray.rllib.algorithms.algorithm import Algorithm

    algo = Algorithm.from_checkpoint(str(checkpoints[0]))
    try:
        assert algo.iteration == 2
        result = algo.train()
        assert result["training_iteration"] == 3
        assert result["env_runners"]["horizon"] == 4
        assert algo.env_runner_group.local_env_runner.get_max_turns() == 4
    finally:
        algo.stop()

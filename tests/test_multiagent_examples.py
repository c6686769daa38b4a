"""End to end: `rllib train file tuned_examples/{tictactoe_selfplay,coop_craft}_cpu.yaml` (shortened)
through the CLI and Tune, a checkpoint, a restore, vLLM weight sync into every policy's engine,
and `rllib evaluate` of the trial against the example's fixed opponent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from rllib_agentgym.cli import main
from rllib_agentgym.env_runners.engines import SamplingConfig
from run_files import trial_results

ROOT = Path(__file__).resolve().parents[1]
GREEDY = SamplingConfig(max_new_tokens=16, temperature=0.0)

# example file, experiment name, its LLM policies, `rllib evaluate` flags its header suggests
EXAMPLES = {
    "tictactoe": ("tictactoe_selfplay_cpu.yaml", "tictactoe-selfplay-cpu", ["shared"], ["--opponent", "heuristic"]),
    "coop_craft": ("coop_craft_cpu.yaml", "coop-craft-cpu", ["helper", "leader"],
                   ["--policy", "leader", "--opponent", "scripted"]),
}


def _shortened(name: str, tmp_path: Path) -> Path:
    """The example file with a smaller budget: 2 iterations, a checkpoint after each, horizon
    2 then 3, 2 samples per task. The random-init embedded model never wins or succeeds, so an
    entropy bonus (and a larger lr) makes each update move the weights far enough for the
    greedy-token checks of the weight sync to see it."""
    file, experiment, _, _ = EXAMPLES[name]
    spec = yaml.safe_load((ROOT / "tuned_examples" / file).read_text())
    exp = spec[experiment]
    exp["stop"] = {"training_iteration": 2}
    exp["checkpoint_config"] = {"checkpoint_frequency": 1, "checkpoint_at_end": True}
    exp["config"].update(group_size=2, max_new_tokens=16, log_trajectories=2, lr=5e-3, entropy_coeff=0.01,
                         scaling_inter={"schedule": [2, 3], "interval": 1})
    if "evaluation_interval" in exp["config"]:
        exp["config"].update(evaluation_interval=2, evaluation_num_tasks=1, evaluation_config={"max_turns": 4})
    path = tmp_path / file
    path.write_text(yaml.safe_dump(spec))
    return path


def _prompts(runner, policy_id: str) -> list[list[int]]:
    """Two real first prompts (instruction + first observation) in the policy's chat format."""
    env = runner._ensure_envs(1)[0]
    tokenizer, chat = runner._tokenizers[policy_id], runner._chats[policy_id]
    return [chat.prompt_ids(tokenizer, runner.instruction, next(iter(env.reset(i).values()))) for i in (1, 2)]


def _check_engines_hold_learner_weights(algo, policies: list[str]) -> list[list[list[int]]]:
    """Each policy's vLLM engine gives transformers' greedy tokens of the learner's module."""
    runner = algo.env_runner_group.local_env_runner
    out = []
    for policy_id in policies:
        engine = runner._ensure_engine(policy_id)
        assert type(engine).__name__ == "VLLMEngine"
        prompts = _prompts(runner, policy_id)
        engine_tokens = [g.token_ids for g in engine.generate(prompts, GREEDY)]
        llm = algo.learner_group._learner.module[policy_id].unwrapped().llm
        llm.eval()
        with torch.no_grad():
            hf_tokens = [llm.generate(torch.tensor([p]), max_new_tokens=GREEDY.max_new_tokens, do_sample=False)[0, len(p):].tolist()
                         for p in prompts]
        # vLLM stops at EOS; generate may pad past it: the engine's tokens are a prefix.
        assert all(e and h[: len(e)] == e for e, h in zip(engine_tokens, hf_tokens)), (policy_id, engine_tokens, hf_tokens)
        out.append(engine_tokens)
    return out


def _moved_from_base(algo, policy_id: str, base_path: str) -> bool:
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32).state_dict()
    llm = algo.learner_group._learner.module[policy_id].unwrapped().llm
    return any(not torch.equal(base[k], v.detach().float()) for k, v in llm.state_dict().items() if k in base)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_multiagent_example_trains_checkpoints_restores_and_evaluates(ray_local, embedded_model, tmp_path, name):
    _, experiment, policies, eval_flags = EXAMPLES[name]
    path = _shortened(name, tmp_path)
    assert main(["train", "file", str(path), "--storage-path", str(tmp_path / "results"), "-v", "0"]) == 0
    (trial,) = list((tmp_path / "results" / experiment).glob("MultiAgentGRPO_*"))
    results = trial_results(trial)
    assert [r["training_iteration"] for r in results] == [1, 2]
    assert [r["env_runners"]["horizon"] for r in results] == [2, 3]  # ScalingInter: h(0)=2, h(1)=3
    for r in results:
        for policy_id in policies:  # every LLM policy trained, its agents' episodes counted
            assert "policy_loss" in r["learners"][policy_id] and "entropy" in r["learners"][policy_id]
            stats = r["env_runners"]["policies"][policy_id]
            assert stats["num_agent_episodes"] == (8 if name == "tictactoe" else 4)  # 2 tasks x 2 samples x seats
    if name == "tictactoe":
        evaluation = results[1]["evaluation"]["env_runners"]
        assert evaluation["opponent"] == "random" and evaluation["num_games"] == 2  # 1 test task, both seats
        assert evaluation["win_rate"] + evaluation["draw_rate"] + evaluation["loss_rate"] == pytest.approx(1.0)
    else:
        assert 0.0 <= results[1]["env_runners"]["policies"]["leader"]["success_rate"] <= 1.0
    assert sorted(p.name for p in (trial / "trajectories").glob("*.jsonl")) == ["iter_000001.jsonl", "iter_000002.jsonl"]
    checkpoints = sorted(trial.glob("checkpoint_*"))
    assert len(checkpoints) == 2

    from ray.rllib.algorithms.algorithm import Algorithm

    from rllib_agentgym.evaluation_multiagent import checkpoint_policy_ids

    assert checkpoint_policy_ids(str(checkpoints[0])) == policies
    # Restore iteration 1: the engines get the checkpoint's weights (not the base model's), the run
    # continues at iteration 2 with h(1) = 3, and after its update the engines hold the new weights.
    algo = Algorithm.from_checkpoint(str(checkpoints[0]))
    try:
        assert algo.iteration == 1
        assert all(_moved_from_base(algo, p, embedded_model) for p in policies)
        restored = _check_engines_hold_learner_weights(algo, policies)
        result = algo.train()
        assert result["training_iteration"] == 2 and result["env_runners"]["horizon"] == 3
        assert algo.env_runner_group.local_env_runner.get_max_turns() == 3
        updated = _check_engines_hold_learner_weights(algo, policies)
        assert restored != updated  # the iteration's sync changed what the engines generate
    finally:
        algo.stop()

    # `rllib evaluate <trial>` as the example's header says (the latest checkpoint, its vLLM engine).
    out = tmp_path / "eval.json"
    assert main(["evaluate", str(trial), *eval_flags, "--num-tasks", "1", "--max-turns", "4", "--max-new-tokens", "16",
                 "--no-progress", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    overall = report["overall"]
    assert report["opponent"] == eval_flags[-1] and overall["num_games"] == 2  # 1 task from both seats
    if name == "tictactoe":
        assert overall["win_rate"] + overall["draw_rate"] + overall["loss_rate"] == pytest.approx(1.0)
        assert sorted(report["roles"]) == ["O", "X"]
    else:
        assert report["policy"] == "leader" and 0.0 <= overall["success_rate"] <= 1.0
        assert {s["role"] for s in report["seats"]} == {"leader", "helper"}  # the LLM took each seat once

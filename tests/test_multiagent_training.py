"""Multi-agent training: per-agent token trajectories, per-module updates, evaluation vs fixed opponents.

The embedded model is random-init, so its replies never hold a legal move:
the board-game agents forfeit after three tries and CoopCraft never succeeds.
That is enough to check the plumbing exactly (whose tokens, which masks,
which rewards and groups, which module learns); for those training checks an
entropy bonus gives every trained module a gradient, since all-equal group
rewards make every GRPO advantage zero. The GRPO signal itself is checked
(`-m slow`) with a warm start that writes readable moves (`tests/move_maker.py`):
against the random opponent its groups win, lose, forfeit and run out of turns.
"""

from __future__ import annotations

import json

import pytest
import torch

from rllib_agentgym.algorithms.grpo.multi_agent import (
    MultiAgentGRPOConfig,
    PolicyMapping,
)
from rllib_agentgym.env_runners.multi_agent_llm_env_runner import MultiAgentLLMEnvRunner, pinned_task_ids


def _config(env: str, **llm) -> MultiAgentGRPOConfig:
    settings = dict(inference_engine="hf", max_model_len=1024, max_new_tokens=8, group_size=2,
                    tasks_per_iteration=2, max_turns=3)
    settings.update(llm)
    return MultiAgentGRPOConfig().environment(f"agentgym/{env}").llm(**settings).debugging(seed=0)


def _spans(traj) -> list[list[int]]:
    """The maximal runs of loss-masked (generated) token ids."""
    spans, current = [], []
    for token, mask in zip(traj.token_ids, traj.loss_mask):
        if mask:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    return spans + ([current] if current else [])


def _check_own_tokens(traj, tokenizer) -> None:
    assert len(traj.token_ids) == len(traj.loss_mask) == len(traj.sample_logprobs)
    assert traj.loss_mask[: traj.prompt_len] == [0] * traj.prompt_len
    spans = _spans(traj)
    assert len(spans) == traj.num_turns
    for span, turn in zip(spans, traj.turns):
        assert tokenizer.decode(span, skip_special_tokens=True) == turn.response


def _sample(cfg, task_ids: list[int], group_size: int = 2):
    """One `sample` of a fresh MultiAgentLLMEnvRunner: (its result, the "shared" policy's tokenizer)."""
    runner = MultiAgentLLMEnvRunner(config=cfg, worker_index=0)
    try:
        return runner.sample(task_ids=task_ids, group_size=group_size), runner._tokenizers["shared"]
    finally:
        runner.stop()


def test_game_vs_fixed_opponent_tokens_rewards_groups(embedded_model):
    """X is the LLM, O the random opponent: X's trajectory holds X's replies (masked 1)
    and O's move only inside X's observations (masked 0)."""
    cfg = _config("tictactoe").multi_agent(
        policies={"shared", "random"},
        policy_mapping_fn=PolicyMapping(by="table", table={"X": "shared", "O": "random"}),
    )
    # Tasks 1 and 3 open with an odd number of moves: O (random) moves before X's first turn.
    result, tokenizer = _sample(cfg, [1, 3])
    assert len(result.episodes) == 4 and len(result.trajectories) == 4  # only the LLM seat has one
    for ep, traj in zip(result.episodes, result.trajectories):
        assert (traj.agent, traj.role, traj.policy_id) == ("player_1", "X", "shared")
        assert ep.policies == {"player_1": "shared", "player_2": "random"}
        # Three unreadable replies in a row forfeit the game: X loses, O wins.
        assert traj.num_turns == 3 and traj.done and traj.outcome == "loss"
        assert all(turn.invalid_action for turn in traj.turns)  # what invalid_action_penalty counts
        assert traj.reward == ep.returns["player_1"] == -1.0 and ep.returns["player_2"] == 1.0
        assert ep.outcomes == {"player_1": "loss", "player_2": "win"}
        _check_own_tokens(traj, tokenizer)
        o_move = next(line for line in traj.turns[0].observation.splitlines() if line.startswith("O played place"))
        masked = tokenizer.decode([t for t, m in zip(traj.token_ids, traj.loss_mask) if not m])
        generated = tokenizer.decode([t for t, m in zip(traj.token_ids, traj.loss_mask) if m])
        assert o_move in masked and "O played" not in generated
    # One group per (task, agent): the 2 samples of a task share it, tasks differ.
    groups = [t.group_id for t in result.trajectories]
    assert groups[0] == groups[1] != groups[2] == groups[3]


def test_shared_self_play_per_agent_trajectories_and_groups(embedded_model):
    """CoopCraft self-play: both agents act every turn on one engine; each gets its own chat."""
    cfg = _config("coop_craft", max_turns=2)
    runner = MultiAgentLLMEnvRunner(config=cfg, worker_index=0)
    try:
        result = runner.sample(task_ids=[11, 12], group_size=2)
        tokenizer = runner._tokenizers["shared"]
        assert list(runner._engines) == ["shared"]
    finally:
        runner.stop()
    trajs = result.trajectories
    assert len(trajs) == 8 and {t.policy_id for t in trajs} == {"shared"}
    by_agent = {a: [t for t in trajs if t.agent == a] for a in ("alice", "bob")}
    assert [t.data_idx for t in by_agent["alice"]] == [11, 11, 12, 12]
    for alice, bob in zip(by_agent["alice"], by_agent["bob"]):
        assert alice.num_turns == bob.num_turns == 2  # the horizon
        assert alice.reward == bob.reward == 0.0 and alice.outcome == "failure"
        _check_own_tokens(alice, tokenizer)
        _check_own_tokens(bob, tokenizer)
        assert "You are alice" in tokenizer.decode(alice.token_ids) and "You are bob" in tokenizer.decode(bob.token_ids)
        bob_text = tokenizer.decode(bob.token_ids)
        assert all(turn.response not in bob_text for turn in alice.turns if len(turn.response) > 10)
    # Groups per (task, agent): 4 groups of 2.
    groups = {}
    for t in trajs:
        groups.setdefault(t.group_id, set()).add((t.data_idx, t.agent))
    assert len(groups) == 4 and all(len(members) == 1 for members in groups.values())
    assert all(sum(t.group_id == g for t in trajs) == 2 for g in groups)


def test_any_pettingzoo_env_through_the_runner(embedded_model):
    """agentgym/pettingzoo: a Parallel PettingZoo env (rps_v2) built from env_options, as the
    RLlib wrapper builds it; the LLM against the random legal player."""
    options = {"factory": "pettingzoo.classic.rps_v2:parallel_env", "env_kwargs": {"max_cycles": 2}}
    cfg = (
        _config("pettingzoo")
        .environment(env_config={"env_options": options})
        .multi_agent(policies={"shared", "random"},
                     policy_mapping_fn=PolicyMapping(by="table", table={"player_0": "shared", "player_1": "random"}))
    )
    runner = MultiAgentLLMEnvRunner(config=cfg, worker_index=0)
    try:
        result = runner.sample(task_ids=[1, 2], group_size=2)
        tokenizer, instruction = runner._tokenizers["shared"], runner.instruction
    finally:
        runner.stop()
    from rllib_agentgym.envs.multiagent_env import TextMultiAgentEnv

    assert instruction == TextMultiAgentEnv({"env": "pettingzoo", "env_options": options}).instruction
    assert len(result.trajectories) == 4 and {t.env for t in result.trajectories} == {"pettingzoo"}
    for ep, traj in zip(result.episodes, result.trajectories):
        prompt = tokenizer.decode(traj.token_ids[: traj.prompt_len])
        assert "rps_v2 (a PettingZoo environment)" in prompt and "Legal moves: rock, paper, scissors" in prompt
        # Three unreadable replies: refused (the step is replayed), then a forfeit.
        assert traj.num_turns == 3 and all(turn.invalid_action for turn in traj.turns) and traj.outcome == "loss"
        assert "No move of the last step was played" not in traj.turns[1].observation  # that text is for the other agent
        assert "could not read" in traj.turns[1].observation
        assert ep.returns == {"player_0": -1.0, "player_1": 1.0} and ep.turns == {"player_0": 3, "player_1": 3}
        _check_own_tokens(traj, tokenizer)


def test_pettingzoo_env_trains_from_a_yaml_style_config(ray_local):
    """MultiAgentGRPO on agentgym/pettingzoo from the dict a YAML file gives: self-play on
    rps_v2's parallel env, one shared policy (entropy bonus: all rewards are equal)."""
    cfg = MultiAgentGRPOConfig().update_from_dict({
        "env": "agentgym/pettingzoo",
        "env_config": {"env_options": {"factory": "pettingzoo.classic.rps_v2:parallel_env", "env_kwargs": {"max_cycles": 2}}},
        "multiagent": {"policies": ["shared"],
                       "policy_mapping_fn": {"type": "rllib_agentgym.algorithms.grpo.multi_agent.PolicyMapping", "by": "shared"}},
        "inference_engine": "hf", "max_model_len": 1024, "max_new_tokens": 8, "group_size": 2, "tasks_per_iteration": 1,
        "max_turns": 3, "lr": 1e-3, "entropy_coeff": 0.01, "micro_batch_size": 8, "log_trajectories": 0, "seed": 0,
    })
    changed, result = _train_once(cfg, "shared")
    assert changed and "policy_loss" in result["learners"]["shared"]
    stats = result["env_runners"]["policies"]["shared"]
    assert stats["num_agent_episodes"] == 4 and stats["invalid_action_rate"] == 1.0  # 2 samples x 2 seats


def test_pinned_task_ids_must_belong_to_the_split():
    assert pinned_task_ids("tictactoe", "train", None)[:3] == [1, 2, 3]
    assert pinned_task_ids("tictactoe", "train", [2, 1]) == [2, 1]
    with pytest.raises(ValueError, match=r"tictactoe split 'train' has no task ids \[0, 5\]"):
        pinned_task_ids("tictactoe", "train", [0, 1, 5])  # 0 and 5 are test tasks
    with pytest.raises(ValueError, match=r"has no task ids \[\]"):
        pinned_task_ids("tictactoe", "train", [])


def test_multiagent_config_from_yaml_dict():
    cfg = MultiAgentGRPOConfig().update_from_dict({
        "env": "agentgym/tictactoe",
        "multiagent": {
            "policies": ["x", "o", "heuristic"],
            "policy_mapping_fn": {"type": "rllib_agentgym.algorithms.grpo.multi_agent.PolicyMapping", "by": "role"},
            "policies_to_train": ["x"],
        },
    })
    from rllib_agentgym.env_runners.multi_agent_llm_env_runner import EpisodeInfo

    episode = EpisodeInfo("0", "tictactoe", 0, 0, ["player_1", "player_2"], {"player_1": "X", "player_2": "O"})
    assert [cfg.policy_mapping_fn(a, episode) for a in episode.possible_agents] == ["x", "o"]
    # The fixed player has no module.
    assert sorted(cfg.get_multi_rl_module_spec().rl_module_specs) == ["o", "x"]
    cfg.validate()


def _params(module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.llm.named_parameters()}


def _changed(before: dict, module) -> bool:
    return any(not torch.equal(before[k], v) for k, v in module.llm.named_parameters())


def _train_once(cfg, policy: str) -> tuple[bool, dict]:
    """One iteration of `cfg`'s algorithm: (whether `policy`'s weights moved, the result)."""
    algo = cfg.build_algo()
    try:
        module = algo.learner_group._learner.module[policy]
        before = _params(module)
        result = algo.train()
        return _changed(before, module), result
    finally:
        algo.stop()


def test_shared_policy_trains(ray_local):
    """Self-play (the default mapping) trains "shared"; periodic evaluation plays the random opponent."""
    cfg = (
        _config("tictactoe")
        .training(lr=1e-3, entropy_coeff=0.01, micro_batch_size=8)
        .evaluation(evaluation_interval=1, evaluation_num_tasks=1, evaluation_opponent="random")
    )
    cfg.log_trajectories = 0
    changed, result = _train_once(cfg, "shared")
    assert changed and "shared" in result["learners"]
    assert result["timers"]["learner_update_timer"] > 0 and result["timers"]["synch_weights"] > 0
    stats = result["env_runners"]["policies"]["shared"]
    assert stats["num_agent_episodes"] == 8  # 2 tasks x 2 samples x 2 agents
    assert stats["win_rate"] + stats["draw_rate"] + stats["loss_rate"] + stats["unfinished_rate"] == pytest.approx(1.0)
    evaluation = result["evaluation"]["env_runners"]
    assert evaluation["opponent"] == "random" and evaluation["num_games"] == 2  # 1 task from both seats
    assert evaluation["win_rate"] + evaluation["draw_rate"] + evaluation["loss_rate"] == pytest.approx(1.0)


def test_separate_policies_train_and_frozen_one_stays(ray_local, tmp_path):
    """x (X) trains, o (O) is frozen by policies_to_train; only x's engine gets new weights."""
    from rllib_agentgym.evaluation_multiagent import evaluate_multiagent

    cfg = (
        _config("tictactoe")
        .environment(env_config={"task_ids": [2, 1]})  # train tasks: X moves first in task 2, O in task 1
        .training(lr=1e-3, entropy_coeff=0.01, micro_batch_size=8)
        .multi_agent(policies={"x", "o"}, policy_mapping_fn=PolicyMapping(by="role"), policies_to_train=["x"])
    )
    cfg.log_trajectories = 0
    algo = cfg.build_algo()
    try:
        modules = algo.learner_group._learner.module
        before = {m: _params(modules[m]) for m in ("x", "o")}
        result = algo.train()
        runner = algo.env_runner_group.local_env_runner
        assert sorted(runner._engines) == ["o", "x"]  # one engine per LLM policy
        for name, param in modules["x"].llm.named_parameters():
            assert torch.equal(runner._engines["x"]._model.state_dict()[name], param.detach())
        for name, param in runner._engines["o"]._model.named_parameters():
            assert torch.equal(before["o"][name], param.detach())
        checkpoint = algo.save_to_path(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    assert _changed(before["x"], modules["x"]) and not _changed(before["o"], modules["o"])
    assert "policy_loss" in result["learners"]["x"] and "policy_loss" not in result["learners"].get("o", {})
    assert result["env_runners"]["policies"]["o"]["num_agent_episodes"] == 4

    # The checkpoint's x policy against the heuristic opponent, from both seats.
    report = evaluate_multiagent(checkpoint, policy="x", opponent="heuristic", num_tasks=1, engine="hf",
                                 max_new_tokens=8, progress=False)
    assert report.env == "tictactoe" and report.policy == "x" and report.scores["overall"]["num_games"] == 2


def _rllib_evaluate(tmp_path, capsys, env: str, opponent: str, num_tasks: int) -> tuple[str, dict]:
    """`rllib evaluate embedded --env ENV --opponent OPPONENT` on transformers: (its table, its JSON report)."""
    from rllib_agentgym.cli import main

    out = tmp_path / "eval.json"
    assert main(["evaluate", "embedded", "--env", env, "--opponent", opponent, "--num-tasks", str(num_tasks),
                 "--engine", "hf", "--max-new-tokens", "8", "--no-progress", "--json", str(out)]) == 0
    return capsys.readouterr().out, json.loads(out.read_text())


def test_rllib_evaluate_against_random_opponent(tmp_path, capsys):
    table, report = _rllib_evaluate(tmp_path, capsys, "agentgym/tictactoe", "random", num_tasks=2)
    assert "vs random" in table
    overall = report["overall"]
    assert overall["num_games"] == 4  # 2 tasks x 2 seats
    assert overall["win_rate"] + overall["draw_rate"] + overall["loss_rate"] == pytest.approx(1.0)
    assert sorted(report["roles"]) == ["O", "X"] and {s["role"] for s in report["seats"]} == {"X", "O"}


@pytest.fixture(scope="module")
def move_maker(tmp_path_factory):
    from tests.move_maker import build_move_maker

    return str(build_move_maker(tmp_path_factory.mktemp("move_maker")))


@pytest.mark.slow
def test_grpo_update_moves_each_agent_trajectory_with_its_advantage(ray_local, move_maker, monkeypatch):
    """Real GRPO signal, no entropy bonus: X (the warm start, on vLLM) against the random
    opponent gets different rewards within a group; MultiAgentGRPO.training_step hands the
    learner non-zero advantages, and its update raises the log-likelihood of X's trajectories
    that beat their group and lowers the others'."""
    import numpy as np

    from rllib_agentgym.core.rl_module import token_logprobs_and_entropy

    cfg = (
        _config("tictactoe", model_path=move_maker, inference_engine="vllm", group_size=8, tasks_per_iteration=4,
                max_turns=5, max_new_tokens=24, temperature=1.0)
        .training(lr=5e-5, entropy_coeff=0.0, use_kl_loss=False, micro_batch_size=8)
        .multi_agent(policies={"shared", "random"},
                     policy_mapping_fn=PolicyMapping(by="table", table={"X": "shared", "O": "random"}))
    )
    cfg.log_trajectories = 0
    algo = cfg.build_algo()
    llm = algo.learner_group._learner.module["shared"].unwrapped().llm
    seen = {}

    def sequence_logprobs(batch) -> np.ndarray:
        ids, attn = torch.as_tensor(batch["input_ids"]), torch.as_tensor(batch["attention_mask"])
        with torch.no_grad():
            logprobs = token_logprobs_and_entropy(llm, ids, attn, False)["logprobs"].float().numpy()
        return (logprobs * np.asarray(batch["response_mask"])).sum(1)

    real_update = algo.learner_group.update

    def update_and_measure(*, batch, **kwargs):  # the real update, with log-probs read around it
        seen["batch"] = batch.policy_batches["shared"]
        seen["before"] = sequence_logprobs(seen["batch"])
        out = real_update(batch=batch, **kwargs)
        seen["after"] = sequence_logprobs(seen["batch"])
        return out

    monkeypatch.setattr(algo.learner_group, "update", update_and_measure)
    try:
        result = algo.train()
    finally:
        algo.stop()
    batch = seen["batch"]
    assert "shared" in result["learners"] and "random" not in result["learners"]
    mask = np.asarray(batch["response_mask"])
    seq_advantage = (np.asarray(batch["advantages"]) * mask).sum(1) / mask.sum(1)
    rewards = np.asarray(batch["rewards"])
    assert len(set(rewards.tolist())) > 1, rewards  # wins, losses / forfeits, unfinished games
    better, worse = seq_advantage > 0, seq_advantage < 0
    assert better.any() and worse.any(), "no group with mixed outcomes"
    assert np.all(rewards[better] > rewards[worse].min()) and np.all(rewards[worse] < rewards[better].max())
    change = seen["after"] - seen["before"]
    assert change[better].mean() > 0 > change[worse].mean(), (change[better], change[worse])
    stats = result["env_runners"]["policies"]["shared"]
    assert stats["num_agent_episodes"] == 32 and stats["win_rate"] + stats["loss_rate"] + stats["draw_rate"] + stats["unfinished_rate"] == pytest.approx(1.0)



# -- coverage: Connect Four, the heuristic through the CLI, CoopCraft evaluation -------------------


def test_connect_four_llm_against_the_heuristic_in_the_runner(embedded_model):
    """The LLM plays O; the heuristic X opens task 0 (an empty board) in the center column."""
    cfg = _config("connect_four", max_turns=3).multi_agent(
        policies={"shared", "heuristic"},
        policy_mapping_fn=PolicyMapping(by="table", table={"X": "heuristic", "O": "shared"}),
    )
    result, tokenizer = _sample(cfg, [0])
    assert [ep.policies for ep in result.episodes] == [{"player_0": "heuristic", "player_1": "shared"}] * 2
    for ep, traj in zip(result.episodes, result.trajectories):
        assert (traj.agent, traj.role, traj.env) == ("player_1", "O", "connect_four")
        assert "X played drop 4." in traj.turns[0].observation and "You are playing Connect Four as O" in traj.turns[0].observation
        assert ep.turns == {"player_0": 1, "player_1": 3} and ep.outcomes == {"player_0": "win", "player_1": "loss"}
        _check_own_tokens(traj, tokenizer)


def test_rllib_evaluate_connect_four_against_the_heuristic(tmp_path, capsys):
    table, report = _rllib_evaluate(tmp_path, capsys, "agentgym/connect_four", "heuristic", num_tasks=1)
    assert "**connect_four** vs heuristic" in table
    assert report["opponent"] == "heuristic" and report["overall"]["num_games"] == 2  # 1 task x 2 seats
    # The random-init model never writes a legal move: it forfeits from both seats.
    assert report["overall"]["loss_rate"] == 1.0 and sorted(report["roles"]) == ["O", "X"]


@pytest.mark.parametrize("opponent, seats", [("scripted", 2), ("self", 2)])
def test_evaluate_coop_craft_with_the_scripted_partner_and_in_self_play(opponent, seats):
    """scripted: the LLM takes each seat once beside the scripted player; self: it plays both."""
    from rllib_agentgym.evaluation_multiagent import evaluate_multiagent

    report = evaluate_multiagent("embedded", env="agentgym/coop_craft", opponent=opponent, num_tasks=1, engine="hf",
                                 max_new_tokens=8, max_turns=3, progress=False)
    assert report.env == "coop_craft" and report.opponent == opponent
    assert report.scores["overall"]["num_games"] == seats and sorted(report.scores["roles"]) == ["helper", "leader"]
    assert [s.agent for s in report.seats] == ["alice", "bob"] and all(s.turns == 3 for s in report.seats)
    assert report.scores["overall"]["success_rate"] == 0.0  # the random-init model's replies are unreadable
    assert ("self-play" if opponent == "self" else "vs scripted") in report.markdown()

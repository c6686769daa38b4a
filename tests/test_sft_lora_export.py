"""AgentSFT on expert conversations, LoRA, `rllib export`, and warm-starting GRPO from a checkpoint."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
from rllib_agentgym.algorithms.sft.sft import AgentSFTConfig
from rllib_agentgym.cli import main
from rllib_agentgym.core.chat import ChatFormat
from rllib_agentgym.data.conversations import load_jsonl, tokenize, tokenize_with_observations, write_jsonl
from rllib_agentgym.data.experts import expert_conversations
from rllib_agentgym.env_runners.llm_env_runner import LLMEnvRunner
from rllib_agentgym.export import POLICY_SUBDIR

LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}


def test_expert_conversations_tokenize_with_rl_masks(embedded_model, tmp_path):
    rows = list(expert_conversations("agentgym/textcraft", "train", num=3))
    assert len(rows) == 3 and all(r["success"] for r in rows)
    path = tmp_path / "tc.jsonl"
    assert write_jsonl(path, rows) == 3
    # AgentGym's format loads to the same messages.
    agentgym = [{"conversations": [{"from": {"user": "human", "assistant": "gpt"}[m["role"]], "value": m["content"]}
                                   for m in rows[0]["messages"][1:]]}]
    write_jsonl(tmp_path / "ag.jsonl", agentgym)
    assert [m["content"] for m in load_jsonl(tmp_path / "ag.jsonl")[0]] == [m["content"] for m in rows[0]["messages"][1:]]

    tok = AutoTokenizer.from_pretrained(embedded_model)
    chat = ChatFormat.from_tokenizer(tok)
    ids, mask = tokenize(tok, chat, load_jsonl(path)[0])
    assert len(ids) == len(mask)
    trained = tok.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=True)
    assistant = [m["content"] for m in rows[0]["messages"] if m["role"] == "assistant"]
    assert trained == "".join(assistant)
    # The whole is the chat template's rendering (up to the text after the final eos).
    messages = [{"role": m["role"], "content": m["content"]} for m in rows[0]["messages"]]
    tail = chat.after_assistant[len(chat.eos_text):]
    assert tok.decode(ids) + tail == tok.apply_chat_template(messages, tokenize=False)
    # The observation mask covers every user turn and neither the system prompt nor a response.
    same_ids, same_mask, observation = tokenize_with_observations(tok, chat, load_jsonl(path)[0])
    assert (same_ids, same_mask) == (ids, mask) and len(observation) == len(ids)
    assert not any(m and o for m, o in zip(mask, observation))
    observed = tok.decode([i for i, o in zip(ids, observation) if o], skip_special_tokens=True)
    users = [m["content"] for m in rows[0]["messages"] if m["role"] == "user"]
    assert observed.startswith(users[0]) and all(u in observed for u in users)
    assert rows[0]["messages"][0]["content"][:40] not in observed


def _sft(tmp_path, lora=None, iterations=3):
    cfg = (
        AgentSFTConfig()
        .environment("agentgym/textcraft")
        .training(sft_expert={"num": 8}, sft_batch_size=4, lr=1e-3, micro_batch_size=4, lora=lora)
        .debugging(seed=0)
    )
    algo = cfg.build_algo()
    losses = [algo.train()["learners"]["default_policy"]["sft_loss"] for _ in range(iterations)]
    path = algo.save(str(tmp_path / "ckpt")).checkpoint.path
    algo.stop()
    return losses, path


def test_sft_observation_loss_trains_on_observations_and_keeps_the_response_loss(ray_local, embedded_model):
    def losses(weight):
        cfg = (AgentSFTConfig().environment("agentgym/babyai")
               .training(sft_expert={"num": 4}, sft_batch_size=4, lr=1e-3, micro_batch_size=2,
                         observation_loss_weight=weight)
               .debugging(seed=0))
        algo = cfg.build_algo()
        try:
            return [algo.train()["learners"]["default_policy"] for _ in range(4)]
        finally:
            algo.stop()

    plain, with_observations = losses(0.0), losses(0.5)
    assert "sft_observation_loss" not in plain[0]
    observation = [r["sft_observation_loss"] for r in with_observations]
    assert observation[-1] < observation[0]
    # The response term is its own token mean: the first step (same weights, same batch) reports the same value.
    assert with_observations[0]["sft_loss"] == pytest.approx(plain[0]["sft_loss"], rel=1e-3)
    with pytest.raises(ValueError, match="observation_loss_weight"):
        AgentSFTConfig().environment("agentgym/babyai").training(sft_expert={"num": 1},
                                                                 observation_loss_weight=-1).validate()


def test_expert_options_reach_the_expert_and_unknown_ones_fail_clearly(tmp_path):
    from rllib_agentgym.data.experts import main as experts_main

    steps = next(expert_conversations("agentgym/textcraft", "train", num=1))
    plan = next(expert_conversations("agentgym/textcraft", "train", num=1, expert_options={"thoughts": "plan"}))
    assert plan["messages"][2]["content"].startswith("Thought: The goal is ")
    assert "No command crafts it, so I get it." in steps["messages"][2]["content"]
    with pytest.raises(ValueError, match=r"takes no option \['depth'\]; its options: \['thoughts'\]"):
        next(expert_conversations("agentgym/textcraft", "train", num=1, expert_options={"depth": 2}))
    out = tmp_path / "plan.jsonl"
    experts_main(["--env", "agentgym/textcraft", "--num", "2", "--out", str(out),
                  "--expert-options", '{"thoughts": "plan"}'])
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(written) == 2 and written[0]["messages"][2]["content"] == plan["messages"][2]["content"]
    with pytest.raises(SystemExit, match="JSON object"):
        experts_main(["--env", "agentgym/textcraft", "--out", str(out), "--expert-options", "[1]"])


def test_shuffled_expert_order_is_seeded_and_spreads_over_the_split(tmp_path):
    from rllib_agentgym.data.experts import main as experts_main
    from rllib_agentgym.envs.registry import get_spec

    in_order = [row["data_idx"] for row in expert_conversations("agentgym/textcraft", "train", num=4)]
    shuffled = [row["data_idx"] for row in expert_conversations("agentgym/textcraft", "train", num=4, shuffle_seed=3)]
    again = [row["data_idx"] for row in expert_conversations("agentgym/textcraft", "train", num=4, shuffle_seed=3)]
    train = get_spec("agentgym/textcraft").split_ids("train")
    assert in_order == train[:4]
    assert shuffled == again and shuffled != in_order and set(shuffled) <= set(train)
    assert max(shuffled) > train[10]  # not the first tasks of the split (its shallowest goals)
    out = tmp_path / "shuffled.jsonl"
    experts_main(["--env", "agentgym/textcraft", "--num", "4", "--out", str(out), "--shuffle", "--seed", "3"])
    assert [json.loads(line)["data_idx"] for line in out.read_text().splitlines()] == shuffled


def test_babyai_quote_thoughts_repeat_the_goal_line_verbatim():
    restate = next(expert_conversations("agentgym/babyai", "train", num=1))
    quote = next(expert_conversations("agentgym/babyai", "train", num=1, expert_options={"thoughts": "quote"}))
    goal = quote["messages"][1]["content"].splitlines()[0].removeprefix("Your goal: ")
    assert restate["messages"][2]["content"].startswith(f"Thought: My goal is to {goal}.")
    assert all(m["content"].startswith(f"Thought: My goal: {goal}.") for m in quote["messages"][2::2])
    # Same expert play, only the words of the thoughts differ.
    assert [m["content"].split("Action:")[1] for m in quote["messages"][2::2]] == \
        [m["content"].split("Action:")[1] for m in restate["messages"][2::2]]
    with pytest.raises(ValueError, match="thoughts must be one of"):
        next(expert_conversations("agentgym/babyai", "train", num=1, expert_options={"thoughts": "plan"}))


def test_sft_lowers_loss_and_grpo_warm_starts_from_its_checkpoint(ray_local, tmp_path, embedded_model):
    losses, ckpt = _sft(tmp_path)
    assert losses[-1] < losses[0]

    out = tmp_path / "hf"
    assert main(["export", ckpt, "--to", str(out)]) == 0
    exported = AutoModelForCausalLM.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(embedded_model)
    key = "model.layers.0.mlp.up_proj.weight"
    assert not torch.equal(exported.state_dict()[key], base.state_dict()[key])  # the SFT weights, not the base

    # model_path: <checkpoint> starts GRPO's learner and runner from the SFT policy.
    cfg = GRPOConfig().environment("agentgym/textcraft").llm(model_path=ckpt, inference_engine="hf", group_size=1, max_turns=1,
                                                             max_new_tokens=4)
    runner = LLMEnvRunner(config=cfg, worker_index=0)
    try:
        runner.sample(num_tasks=1)
        engine_weights = runner._engine._model.state_dict()[key]
    finally:
        runner.stop()
    assert torch.equal(engine_weights, exported.state_dict()[key])


def test_sft_lr_schedule_is_keyed_by_conversations_trained(ray_local, embedded_model):
    # RLlib's lr schedule: piecewise linear in the timestep, here the conversations seen before a step.
    cfg = (
        AgentSFTConfig()
        .environment("agentgym/textcraft")
        .training(sft_expert={"num": 8}, sft_batch_size=4, lr=[[0, 1e-3], [8, 1e-4]], micro_batch_size=4)
        .debugging(seed=0)
    )
    algo = cfg.build_algo()
    try:
        lrs = [algo.train()["learners"]["default_policy"]["default_optimizer_learning_rate"] for _ in range(4)]
    finally:
        algo.stop()
    assert lrs == pytest.approx([1e-3, 5.5e-4, 1e-4, 1e-4])


def test_lora_trains_only_the_adapter_and_export_merges_it(ray_local, tmp_path, embedded_model):
    losses, ckpt = _sft(tmp_path, lora=LORA, iterations=2)
    assert losses[-1] < losses[0]
    import pickle

    with open(f"{ckpt}/{POLICY_SUBDIR}/module_state.pkl", "rb") as fh:
        state = pickle.load(fh)
    assert state and all(".lora_" in k for k in state)  # the checkpoint holds only the adapter
    assert sum(v.size for v in state.values()) < 0.05 * sum(
        p.numel() for p in AutoModelForCausalLM.from_pretrained(embedded_model).parameters())

    out = tmp_path / "merged"
    assert main(["export", ckpt, "--to", str(out)]) == 0
    merged = AutoModelForCausalLM.from_pretrained(out)
    from ray.rllib.core.rl_module.rl_module import RLModule

    module = RLModule.from_checkpoint(f"{ckpt}/{POLICY_SUBDIR}")
    ids = torch.tensor([[1, 392, 262, 201, 41, 81, 324]])
    with torch.no_grad():
        assert torch.allclose(module.llm(ids).logits, merged(ids).logits, atol=1e-4)

    # The env runner merges the adapter it receives into its base weights: same model.
    cfg = GRPOConfig().environment("agentgym/textcraft").llm(inference_engine="hf", group_size=1, max_turns=1,
                                                             max_new_tokens=4).training(lora=LORA)
    runner = LLMEnvRunner(config=cfg, worker_index=0)
    try:
        runner.sample(num_tasks=1)
        runner.set_weights(module.get_state(inference_only=True))
        with torch.no_grad():
            assert torch.allclose(runner._engine._model(ids).logits, merged(ids).logits, atol=1e-4)
    finally:
        runner.stop()


def test_expert_conversations_of_chosen_categories_only(tmp_path):
    from rllib_agentgym.data.experts import main as experts_main

    rows = list(expert_conversations("agentgym/textcraft", "train", num=6, shuffle_seed=0, categories=["depth 2"]))
    assert len(rows) == 6 and {row["category"] for row in rows} == {"depth 2"}
    with pytest.raises(ValueError, match="has no category depth 9"):
        next(expert_conversations("agentgym/textcraft", "train", num=1, categories=["depth 9"]))
    out = tmp_path / "shallow.jsonl"
    experts_main(["--env", "agentgym/textcraft", "--num", "3", "--out", str(out), "--categories", "depth 1"])
    assert {json.loads(line)["category"] for line in out.read_text().splitlines()} == {"depth 1"}


def test_expert_conversations_leave_out_held_out_tasks():
    rows = list(expert_conversations("agentgym/textcraft", "train", num=4, categories=["depth 1"],
                                     held_out_task_ids=[1, 3]))
    assert [row["data_idx"] for row in rows] == [2, 4, 6, 7]  # depth 1 of the train split: 1, 2, 3, 4, 6, 7, ...
    with pytest.raises(ValueError, match=r"held-out task ids \[100000\] are not tasks"):
        next(expert_conversations("agentgym/textcraft", "train", num=1, held_out_task_ids=[100000]))

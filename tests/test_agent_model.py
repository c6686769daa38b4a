"""The embedded agent model: shipped in the package, from the current recipe, loadable."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rllib_agentgym.agent_model import (AGENT_RECIPES, AgentRecipe, ExpertData, _key_fields, agent_model_path,
                                        agent_recipe, lr_schedule, shipped_archive, shipped_fingerprint)
from rllib_agentgym.core.embedded import EmbeddedModelConfig, resolve_model_path


@pytest.mark.parametrize("name", sorted(AGENT_RECIPES))
def test_shipped_agent_is_from_the_current_recipe(name):
    # A changed recipe (or tokenizer corpus) must be rebuilt and re-shipped:
    # python scripts/build_agent_model.py --agent NAME --ship
    assert shipped_fingerprint(name) == agent_recipe(name).fingerprint()


@pytest.mark.parametrize("name", sorted(AGENT_RECIPES))
def test_shipped_agents_stay_small(name):
    assert shipped_archive(name).stat().st_size < 20 * 2**20


def test_unknown_agent_names_are_refused_clearly():
    with pytest.raises(ValueError, match=r"unknown agent model 'embedded-agent-chess'; known: \['embedded-agent', "):
        resolve_model_path("embedded-agent-chess")


def test_later_recipe_options_key_the_cache_only_when_used():
    # Models built before an option existed keep their cache key: at its neutral value the option is
    # left out of the key (the first shipped recipe had no warm-up).
    first_shipped = AgentRecipe(model=EmbeddedModelConfig(hidden_size=384, intermediate_size=1024, num_hidden_layers=6,
                                                           num_attention_heads=6, num_key_value_heads=2),
                                iterations=420, batch_size=8, micro_batch_size=2, lr_warmup_iterations=0)
    assert "lr_warmup_iterations" not in _key_fields(dataclasses.asdict(first_shipped))
    recipe = AgentRecipe()
    assert recipe.lr_warmup_iterations and "lr_warmup_iterations" in _key_fields(dataclasses.asdict(recipe))
    assert dataclasses.replace(recipe, lr_warmup_iterations=0).fingerprint() != recipe.fingerprint()
    assert dataclasses.replace(recipe, lr_warmup_iterations=30).fingerprint() != recipe.fingerprint()
    assert dataclasses.replace(recipe, observation_loss_weight=0.5).fingerprint() != recipe.fingerprint()
    assert dataclasses.replace(recipe, induction_steps=0).fingerprint() == recipe.fingerprint()
    assert dataclasses.replace(recipe, induction_steps=300).fingerprint() != recipe.fingerprint()
    assert dataclasses.replace(recipe, copy_conversations=0).fingerprint() == recipe.fingerprint()
    assert dataclasses.replace(recipe, copy_conversations=400).fingerprint() != recipe.fingerprint()
    assert dataclasses.replace(recipe, lr_restart_at=0, lr_restart=1e-4).fingerprint() == recipe.fingerprint()
    assert dataclasses.replace(recipe, lr_restart_at=1100).fingerprint() != recipe.fingerprint()
    quoted = (recipe.data[0], dataclasses.replace(recipe.data[1], expert_options=(("thoughts", "quote"),)))
    assert dataclasses.replace(recipe, data=quoted).fingerprint() != recipe.fingerprint()
    renamed = (dataclasses.replace(recipe.data[0], augmented_copies=1), *recipe.data[1:])
    assert dataclasses.replace(recipe, data=renamed).fingerprint() != recipe.fingerprint()
    spread = (recipe.data[0], dataclasses.replace(recipe.data[1], shuffle_tasks=True))
    assert dataclasses.replace(recipe, data=spread).fingerprint() != recipe.fingerprint()
    shallow = (dataclasses.replace(recipe.data[0], categories=("depth 1",)), *recipe.data[1:])
    assert dataclasses.replace(recipe, data=shallow).fingerprint() != recipe.fingerprint()
    held_out = (dataclasses.replace(recipe.data[0], held_out_task_ids=(1, 4)), *recipe.data[1:])
    assert dataclasses.replace(recipe, data=held_out).fingerprint() != recipe.fingerprint()


def test_build_script_recipe_variants_change_known_fields_only():
    from scripts.build_agent_model import recipe_from_json

    assert recipe_from_json(None) is None
    variant = recipe_from_json('{"observation_loss_weight": 0.5, "iterations": 10}')
    assert (variant.observation_loss_weight, variant.iterations) == (0.5, 10)
    assert variant.data == AgentRecipe().data
    with pytest.raises(SystemExit, match="unknown fields"):
        recipe_from_json('{"layers": 2}')
    larger = recipe_from_json('{"model": {"num_hidden_layers": 6, "hidden_size": 384}}')
    assert (larger.model.num_hidden_layers, larger.model.hidden_size) == (6, 384)
    assert larger.model.vocab_size == AgentRecipe().model.vocab_size
    assert larger.fingerprint() != AgentRecipe().fingerprint()
    items = recipe_from_json('{"model": {"whole_word_lists": ["textcraft_items"]}}')
    assert items.model.whole_word_lists == ("textcraft_items",) and items.fingerprint() != AgentRecipe().fingerprint()
    with pytest.raises(SystemExit, match="unknown whole_word_lists"):
        recipe_from_json('{"model": {"whole_word_lists": ["minecraft"]}}')
    with pytest.raises(SystemExit, match="`model` takes a dict"):
        recipe_from_json('{"model": {"depth": 4}}')
    renamed = recipe_from_json('{"data": [{"env": "agentgym/textcraft", "num": 800, "max_turns": 15, '
                               '"augmented_copies": 1, "expert_options": {"thoughts": "steps"}}]}')
    assert renamed.data == (ExpertData("agentgym/textcraft", 800, 15, augmented_copies=1,
                                       expert_options=(("thoughts", "steps"),)),)
    assert renamed.fingerprint() != AgentRecipe().fingerprint()
    find = recipe_from_json('{"data": [{"env": "agentgym/sciworld", "num": 600, "max_turns": 20, "categories": ["Find"]}]}')
    assert find.data == (ExpertData("agentgym/sciworld", 600, 20, categories=("Find",)),)
    held = recipe_from_json('{"data": [{"env": "agentgym/textcraft", "num": 800, "max_turns": 15, '
                            '"held_out_task_ids": [1, 4]}]}', "embedded-agent-textcraft")
    assert held.data == (ExpertData("agentgym/textcraft", 800, 15, held_out_task_ids=(1, 4)),)
    with pytest.raises(SystemExit, match="each `data` entry needs"):
        recipe_from_json('{"data": [{"env": "agentgym/textcraft", "num": 800}]}')
    with pytest.raises(SystemExit, match="non-empty list"):
        recipe_from_json('{"data": []}')
    # No adapter, written either way, is the recipe's own () and keys the cache alike.
    for no_adapter in ("[]", "{}"):
        full = recipe_from_json(f'{{"lora": {no_adapter}, "lr": 1e-4, "lr_final": 1e-5}}', "embedded-agent-searchqa")
        assert full.lora == () and full.fingerprint() == dataclasses.replace(
            agent_recipe("embedded-agent-searchqa"), lora=(), lr=1e-4, lr_final=1e-5).fingerprint()


def test_build_script_evaluates_known_families_only(capsys):
    from scripts.build_agent_model import EVALS, main

    assert [env for env, *_ in EVALS] == [f"agentgym/{name}" for name in
                                          ("textcraft", "babyai", "searchqa", "webarena", "sciworld")]
    with pytest.raises(SystemExit):
        main(["--envs", "textcraft,deepsearch", "--no-eval"])  # checked before anything is built
    assert "unknown families ['deepsearch']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--agent", "embedded-agent-chess", "--no-eval"])
    assert "unknown agent model 'embedded-agent-chess'" in capsys.readouterr().err


def test_build_script_recipe_variants_start_from_the_chosen_agent():
    from scripts.build_agent_model import recipe_from_json

    longer = recipe_from_json('{"iterations": 150}', "embedded-agent-searchqa")
    assert longer.data == agent_recipe("embedded-agent-searchqa").data and longer.iterations == 150
    assert longer.base_model == "smollm2-135m" and dict(longer.lora)["r"] == 16
    seeded = recipe_from_json('{"model": {"seed": 1}}', "embedded-agent-sciworld")
    assert seeded.model.induction_circuit and seeded.model.seed == 1
    pairs = recipe_from_json('{"model": {"induction_match_tokens": 2}}', "embedded-agent-sciworld")
    assert pairs.model.induction_match_tokens == 2
    assert pairs.fingerprint() != agent_recipe("embedded-agent-sciworld").fingerprint()
    with pytest.raises(SystemExit, match="pretrained"):  # its base is SmolLM2: an embedded shape would do nothing
        recipe_from_json('{"model": {"seed": 1}}', "embedded-agent-searchqa")
    embedded = recipe_from_json('{"base_model": "", "lora": {}, "model": {"induction_circuit": true}}',
                                "embedded-agent-searchqa")
    assert embedded.model.induction_circuit and embedded.fingerprint() != agent_recipe("embedded-agent-searchqa").fingerprint()
    with pytest.raises(SystemExit, match="induction_circuit"):  # the shared agent has no circuit to widen
        recipe_from_json('{"model": {"induction_match_tokens": 2}}')


def test_lr_schedule_warms_up_then_decays():
    recipe = AgentRecipe(iterations=100, batch_size=8, lr=1e-3, lr_final=5e-5, lr_warmup_iterations=0)
    assert lr_schedule(recipe) == [[0, 1e-3], [800, 5e-5]]
    warm = dataclasses.replace(recipe, lr_warmup_iterations=10)
    assert lr_schedule(warm) == [[0, pytest.approx(1e-5)], [80, 1e-3], [800, 5e-5]]


def test_lr_schedule_warm_restart_climbs_back_and_decays_again():
    recipe = AgentRecipe(iterations=100, batch_size=8, lr=1e-3, lr_final=5e-5, lr_warmup_iterations=10,
                         lr_restart_at=60, lr_restart=3e-4)
    assert lr_schedule(recipe) == [[0, pytest.approx(1e-5)], [80, 1e-3], [480, 5e-5], [560, 3e-4], [800, 5e-5]]
    assert dataclasses.replace(recipe, lr_restart_at=0, lr_restart=1e-4).fingerprint() == \
        dataclasses.replace(recipe, lr_restart_at=0).fingerprint()  # no restart: its peak is not part of the key
    assert recipe.fingerprint() != dataclasses.replace(recipe, lr_restart=1e-4).fingerprint()
    for at in (5, 95):  # inside the first warm-up, or too late to climb back
        with pytest.raises(ValueError, match="lr_restart_at"):
            lr_schedule(dataclasses.replace(recipe, lr_restart_at=at))


def test_embedded_agent_unpacks_into_the_cache_and_loads(embedded_model):
    path = resolve_model_path("embedded-agent")  # the test session's own cache: unpacked here
    assert path == str(agent_model_path())
    recipe = json.loads((agent_model_path() / "agent_recipe.json").read_text())
    assert recipe["fingerprint"] == AgentRecipe().fingerprint()

    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.hidden_size == AgentRecipe().model.hidden_size
    assert next(model.parameters()).dtype == torch.bfloat16
    # Same tokenizer as the embedded model, so prompts and chat format are shared.
    agent_tok, base_tok = AutoTokenizer.from_pretrained(path), AutoTokenizer.from_pretrained(embedded_model)
    assert agent_tok.get_vocab() == base_tok.get_vocab()
    assert agent_tok.chat_template == base_tok.chat_template


@pytest.mark.parametrize("family", ["searchqa", "webarena"])
def test_family_agent_on_the_pretrained_base_unpacks_beside_the_shared_one(family):
    """The Deep Search (a LoRA adapter) and WebArena (all weights, shipped as their sign delta) agents
    start from the pretrained base too: a folder of their own, the base's shape and tokenizer, trained
    on their family's expert play alone."""
    name = f"embedded-agent-{family}"
    path = resolve_model_path(name)
    assert path == str(agent_model_path(name=name)) != resolve_model_path("embedded-agent")
    recipe = json.loads((agent_model_path(name=name) / "agent_recipe.json").read_text())
    assert recipe["fingerprint"] == agent_recipe(name).fingerprint() and recipe["base_model"] == "smollm2-135m"
    assert [d["env"] for d in recipe["data"]] == [f"agentgym/{family}"]
    base = resolve_model_path("smollm2-135m")
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.num_hidden_layers == 30
    assert AutoTokenizer.from_pretrained(path).get_vocab() == AutoTokenizer.from_pretrained(base).get_vocab()


def test_textcraft_agent_unpacks_from_its_sign_delta_onto_the_pretrained_base(tmp_path):
    """The shipped TextCraft agent is a full fine-tune's change alone (signs and row scales);
    unpacking converts the pretrained base (core/pretrained.py) and applies it, so the folder
    loads like any model. Unpacked afresh here: a cache may hold a local build instead."""
    from rllib_agentgym.agent_model import SIGN_DELTA_FILE, unpack_shipped

    name = "embedded-agent-textcraft"
    assert resolve_model_path(name) == str(agent_model_path(name=name))
    path = unpack_shipped(tmp_path / name, name)
    recipe = json.loads((path / "agent_recipe.json").read_text())
    assert recipe["fingerprint"] == agent_recipe(name).fingerprint() and recipe["base_model"] == "smollm2-135m"
    assert recipe["lora"] == []  # all weights were trained
    base = resolve_model_path("smollm2-135m")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.config.num_hidden_layers == 30
    assert AutoTokenizer.from_pretrained(path).get_vocab() == AutoTokenizer.from_pretrained(base).get_vocab()
    base_model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    for weight in ("model.layers.0.self_attn.q_proj.weight", "model.embed_tokens.weight", "model.norm.weight"):
        assert not torch.equal(model.get_parameter(weight), base_model.get_parameter(weight)), weight
    change = model.get_parameter("model.layers.0.mlp.down_proj.weight") - base_model.get_parameter(
        "model.layers.0.mlp.down_proj.weight")
    # One magnitude a row: what sign_delta.decompress writes.
    assert torch.allclose(change.abs(), change.abs()[:, :1].expand_as(change), rtol=1e-3, atol=1e-7)
    assert (path / SIGN_DELTA_FILE).exists()
    # vLLM loads every top-level *.safetensors file as weights: the stored change must not be one.
    assert [f.name for f in path.glob("*.safetensors")] == ["model.safetensors"]


def test_a_full_fine_tune_ships_its_sign_delta_and_unpacks_to_base_plus_it(tmp_path):
    """save_sign_delta of a tuned folder, then apply_shipped_sign_delta (what unpacking does), gives
    W_base + diag(alpha) sign(delta): exactly the tuned model where each row changed by one magnitude."""
    from safetensors.torch import load_file, save_file

    from rllib_agentgym.agent_model import SIGN_DELTA_FILE, apply_shipped_sign_delta, save_sign_delta

    recipe = AgentRecipe()  # the embedded model as the base: the same code path as a pretrained one
    base = recipe.base_model_path()
    weights = {}
    for file in base.glob("*.safetensors"):
        weights.update(load_file(file))
    g = torch.Generator().manual_seed(0)
    tuned = {}
    for k, w in weights.items():
        if w.ndim == 2:
            signs = torch.randint(0, 2, w.shape, generator=g).float() * 2 - 1
            tuned[k] = w.float() + 0.01 * torch.rand(w.shape[0], 1, generator=g) * signs
        else:
            tuned[k] = w.float() * 1.1
    (tmp_path / "tuned").mkdir()
    save_file(tuned, tmp_path / "tuned" / "model.safetensors")
    save_sign_delta(tmp_path / "tuned", recipe, tmp_path / "unpacked")
    assert (tmp_path / "unpacked" / SIGN_DELTA_FILE).stat().st_size < sum(w.numel() for w in tuned.values())
    apply_shipped_sign_delta(tmp_path / "unpacked", recipe)
    unpacked = load_file(tmp_path / "unpacked" / "model.safetensors")
    assert unpacked.keys() == tuned.keys()
    for k in tuned:
        assert torch.allclose(unpacked[k], tuned[k], atol=1e-6), k
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "unpacked", dtype=torch.float32)
    assert model.config.num_hidden_layers == recipe.model.num_hidden_layers
    assert AutoTokenizer.from_pretrained(tmp_path / "unpacked").get_vocab() == AutoTokenizer.from_pretrained(base).get_vocab()


def test_embedded_agent_gives_grpo_groups_a_learning_signal(ray_local):
    """What the warm start is for: a random-init model fails every episode, so every
    GRPO group has equal rewards and zero advantages; the agent's groups do not."""
    from rllib_agentgym.algorithms.advantages import grpo_advantages
    from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
    from rllib_agentgym.env_runners.llm_env_runner import LLMEnvRunner

    # GoTo levels: about a third solved greedily by the agent.
    cfg = (GRPOConfig().environment("agentgym/babyai", env_config={"split": "train", "categories": ["GoTo"]})
           .llm(model_path="embedded-agent", model_dtype="bfloat16", inference_engine="vllm", max_model_len=4096,
                group_size=4, max_turns=6, max_new_tokens=64, temperature=1.0)
           .debugging(seed=0))
    runner = LLMEnvRunner(config=cfg, worker_index=0)
    try:
        go_to = runner.task_ids[:4]
        assert {runner.spec.category(i) for i in go_to} == {"GoTo"}
        result = runner.sample(task_ids=go_to)
    finally:
        runner.stop()
    trajectories = result.trajectories
    assert len(trajectories) == 16 and any(t.success for t in trajectories)
    rewards = torch.tensor([t.reward for t in trajectories])
    advantages = grpo_advantages(rewards, torch.tensor([t.group_id for t in trajectories]))
    assert advantages.abs().sum() > 0  # at least one group has mixed outcomes


def test_a_pretrained_base_keys_the_cache_by_its_source_not_the_embedded_shape():
    recipe = AgentRecipe(base_model="smollm2-135m")
    assert "base_model" in _key_fields(dataclasses.asdict(recipe)) and "model" not in _key_fields(dataclasses.asdict(recipe))
    assert recipe.fingerprint() != AgentRecipe().fingerprint()
    other_shape = dataclasses.replace(recipe, model=EmbeddedModelConfig(hidden_size=384))
    assert other_shape.fingerprint() == recipe.fingerprint()  # the embedded shape is not used
    adapter = dataclasses.replace(recipe, lora=(("alpha", 32), ("r", 16)))
    assert adapter.fingerprint() != recipe.fingerprint()
    assert AgentRecipe(lora=()).fingerprint() == AgentRecipe().fingerprint()  # neutral: old keys stand


def test_a_lora_recipe_ships_its_adapter_alone_and_unpacks_to_the_merged_model(tmp_path):
    """The adapter file of a LoRA build, merged into the base at unpack time (merge_shipped_adapter),
    gives the model that peft's own merge gives."""
    from peft import get_peft_model
    from safetensors.torch import save_file

    from rllib_agentgym.agent_model import ADAPTER_FILE, merge_shipped_adapter
    from rllib_agentgym.core import lora as lora_lib

    recipe = AgentRecipe(lora=(("alpha", 32), ("r", 4), ("target_modules", ("q_proj", "v_proj", "down_proj"))))
    base = recipe.base_model_path()  # the embedded model: the same code path as a pretrained base
    peft_model = get_peft_model(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                                lora_lib.lora_config(dict(recipe.lora)))
    torch.manual_seed(0)
    with torch.no_grad():  # a trained adapter: B is no longer zero
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    folder = tmp_path / "unpacked"
    (folder / ADAPTER_FILE).parent.mkdir(parents=True)
    save_file(lora_lib.adapter_state(peft_model), folder / ADAPTER_FILE)
    merge_shipped_adapter(folder, recipe)
    merged = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    expected = peft_model.merge_and_unload().eval()
    ids = torch.randint(0, 4096, (1, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got, want = merged(ids).logits, expected(ids).logits
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
    plain = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    with torch.no_grad():
        assert not torch.allclose(plain(ids).logits, want, atol=1e-3)  # the adapter changed something
    assert AutoTokenizer.from_pretrained(folder).get_vocab() == AutoTokenizer.from_pretrained(base).get_vocab()


def test_a_lora_build_keeps_its_adapter_and_the_adapter_rebuilds_the_model(tmp_path, ray_local):
    """build_agent_model with a LoRA recipe: the exported folder holds the merged weights and the
    adapter; the adapter merged into the base (what unpacking a shipped archive does) gives the
    same model. On the session's Ray cluster (`ray_local`): a build that starts and stops its own
    clears Tune's registry of algorithm names for the tests after it."""
    from safetensors.torch import load_file

    from rllib_agentgym.agent_model import ADAPTER_FILE, build_agent_model, merge_shipped_adapter

    recipe = AgentRecipe(data=(ExpertData("agentgym/textcraft", 4, 15),), iterations=2, batch_size=2,
                         lr=5e-3, lr_warmup_iterations=0,
                         lora=(("alpha", 16), ("r", 4), ("target_modules", ("q_proj", "v_proj", "up_proj"))))
    built = build_agent_model(tmp_path / "built", recipe, log=lambda line: None, work_dir=str(tmp_path))
    adapter = load_file(built / ADAPTER_FILE)
    assert adapter and all(".lora_A." in k or ".lora_B." in k for k in adapter)
    assert any(v.abs().sum() > 0 for k, v in adapter.items() if ".lora_B." in k)  # trained: B left zero
    unpacked = tmp_path / "unpacked"
    (unpacked / ADAPTER_FILE).parent.mkdir(parents=True)
    (unpacked / ADAPTER_FILE).write_bytes((built / ADAPTER_FILE).read_bytes())
    merge_shipped_adapter(unpacked, recipe)
    ids = torch.randint(0, 4096, (1, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = AutoModelForCausalLM.from_pretrained(built, dtype=torch.float32)(ids).logits
        got = AutoModelForCausalLM.from_pretrained(unpacked, dtype=torch.float32)(ids).logits
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()

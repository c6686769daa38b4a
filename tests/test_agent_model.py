"""The embedded agent model: shipped in the package, from the current recipe, loadable."""

from __future__ import annotations

import json

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rllib_agentgym.agent_model import SHIPPED_ARCHIVE, AgentRecipe, agent_model_path, shipped_fingerprint
from rllib_agentgym.core.embedded import resolve_model_path


def test_shipped_agent_is_from_the_current_recipe_and_small():
    # A changed recipe (or tokenizer corpus) must be rebuilt and re-shipped:
    # python scripts/build_agent_model.py --ship
    assert shipped_fingerprint() == AgentRecipe().fingerprint()
    assert SHIPPED_ARCHIVE.stat().st_size < 20 * 2**20


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

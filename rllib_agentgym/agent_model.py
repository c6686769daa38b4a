"""The embedded AGENT model: the embedded Qwen2 warm-started by AgentSFT on expert play.

A randomly initialised model never succeeds, so every GRPO group has equal
rewards and zero advantages: RL from it learns nothing. `model_path:
embedded-agent` names a model that already succeeds sometimes (and fails
often), which is what GRPO needs to improve on:

    python -m rllib_agentgym.prepare --agent      # or scripts/build_agent_model.py

1. the families' scripted experts (`envs/<name>/expert.py`) play train-split
   tasks of TextCraft and BabyAI; their successful episodes become ReAct
   conversations (`rllib_agentgym.data.experts`);
2. a fresh embedded model (a larger `EmbeddedModelConfig` than the test
   model, same tokenizer corpus), first taught to copy by `induction_steps`
   of induction pretraining when set, is trained on them with the `AgentSFT`
   trainable (the RL module, tokenization and loss masks of GRPO);
3. the result is exported as a Hugging Face folder into the cache dir,
   keyed by a hash of the recipe (and of the tokenizer corpus), like the
   embedded model.

`model_path: embedded-agent-searchqa` names a second agent, trained on Deep
Search alone, `embedded-agent-sciworld` a third, trained on SciWorld's Find
tasks, `embedded-agent-textcraft` a fourth, on TextCraft alone, and
`embedded-agent-webarena` a fifth, on WebArena's sites, and
`embedded-agent-babyai` a sixth, on BabyAI (`AGENT_RECIPES` lists the names);
the Deep Search, TextCraft, WebArena and BabyAI ones start from a pretrained LM
instead of the embedded model (Deep Search and BabyAI a LoRA adapter on it, the
other two all its weights). Nothing of the
test splits is trained on. A recipe is deterministic up to floating point on
one machine; numbers measured with it are in docs/learning.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from rllib_agentgym.core.embedded import EMBEDDED_AGENT_NAME as AGENT_NAME
from rllib_agentgym.core.embedded import (EmbeddedModelConfig, _fingerprint, cache_dir, config_key,
                                         embedded_model_path, load_model_weights)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExpertData:
    """`num` successful expert conversations of one family's train split, at most `max_turns` turns,
    each followed by `augmented_copies` variants from the family's augmentation (EnvSpec.augment)."""

    env: str
    num: int
    max_turns: int
    env_options: tuple[tuple[str, object], ...] = ()
    augmented_copies: int = 0
    augment_options: tuple[tuple[str, object], ...] = ()  # the augmentation's options, e.g. names
    expert_options: tuple[tuple[str, object], ...] = ()  # the family ExpertAgent's options, e.g. thoughts
    shuffle_tasks: bool = False  # visit the split in a seeded random order (num < split: a spread of task types)
    categories: tuple[str, ...] = ()  # only the split's tasks of these categories (all when empty)
    # Train-split tasks left out of the data: RL on goals the warm start never saw (docs/learning.md, 3).
    held_out_task_ids: tuple[int, ...] = ()


def _agent_model_config() -> EmbeddedModelConfig:
    # 4 layers x 256 (4.0M parameters): on 2 cores a smaller model takes more optimizer steps in the
    # same time, and step count is what the copy skill TextCraft needs forms with (docs/learning.md, 2).
    return EmbeddedModelConfig(
        hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2
    )


@dataclass(frozen=True)
class AgentRecipe:
    """Everything that defines the agent model (its cache key)."""

    model: EmbeddedModelConfig = field(default_factory=_agent_model_config)
    data: tuple[ExpertData, ...] = (
        ExpertData("agentgym/textcraft", 800, 15),  # the train split has 499 tasks: all of them
        ExpertData("agentgym/babyai", 600, 12),
    )
    iterations: int = 1500  # ~0.7 s each on 2 cores: the build stays under 20 minutes
    batch_size: int = 4  # conversations per optimizer step: more, smaller steps beat fewer, larger ones here
    micro_batch_size: int = 1  # one conversation per forward pass: no padding at all
    lr: float = 1e-3  # decayed linearly to `lr_final` over the run (RLlib lr schedule)
    lr_final: float = 5e-5
    lr_warmup_iterations: int = 60  # linear warm-up from lr / 100 to `lr` first
    # A warm restart (0: none): at this iteration the lr, decayed to `lr_final`, climbs back to
    # `lr_restart` over `RESTART_WARMUP` iterations and decays to `lr_final` again by the end.
    lr_restart_at: int = 0
    lr_restart: float = 3e-4
    observation_loss_weight: float = 0.0  # AgentSFT's LM loss on observation tokens (0: responses only)
    induction_steps: int = 0  # induction pretraining steps before AgentSFT (algorithms/sft/induction.py)
    copy_conversations: int = 0  # random-text copy conversations mixed into the SFT data (same module)
    max_model_len: int = 1536  # longer conversations are cut (their first turns still train)
    model_dtype: str = "bfloat16"  # mixed precision: ~2x faster on CPUs with AVX512-BF16 / AMX (float32 without)
    seed: int = 0
    # A pretrained LM to start from (a name in core/pretrained.PRETRAINED_MODELS) instead of a fresh
    # embedded model of shape `model`; "" for the embedded one.
    base_model: str = ""
    # Train a LoRA adapter only ({r, alpha, target_modules} as items; merged at export); () for all weights.
    lora: tuple[tuple[str, object], ...] = ()

    def fingerprint(self) -> str:
        digest = hashlib.sha256(json.dumps(_key_fields(asdict(self)), sort_keys=True, default=str).encode())
        if self.base_model:  # the pinned package and the conversion define the base
            from rllib_agentgym.core.pretrained import PRETRAINED_MODELS, CONVERTER_VERSION

            digest.update(f"{PRETRAINED_MODELS[self.base_model]}:{CONVERTER_VERSION}".encode())
        else:
            digest.update(_fingerprint(self.model).encode())  # the base model (tokenizer corpus included)
        return digest.hexdigest()[:12]

    def base_model_path(self) -> Path:
        if self.base_model:
            from rllib_agentgym.core.pretrained import pretrained_model_path

            return pretrained_model_path(self.base_model)
        return embedded_model_path(self.model)

    def write_record(self, folder: Path) -> None:
        """`agent_recipe.json` beside the weights: the recipe and its fingerprint."""
        (folder / "agent_recipe.json").write_text(
            json.dumps({"fingerprint": self.fingerprint(), **asdict(self)}, indent=2, default=str))


# Options added after the first shipped recipe; at these values they change nothing, and they stay
# out of the cache key, so adding an option does not invalidate models built before it.
_NEUTRAL_RECIPE = {"lr_warmup_iterations": 0, "observation_loss_weight": 0.0, "induction_steps": 0,
                   "copy_conversations": 0, "lr_restart_at": 0, "base_model": "", "lora": ()}
_NEUTRAL_DATA = {"augmented_copies": 0, "augment_options": (), "expert_options": (), "shuffle_tasks": False,
                 "categories": (), "held_out_task_ids": ()}


def _key_fields(recipe: dict) -> dict:
    key = {k: v for k, v in recipe.items() if _NEUTRAL_RECIPE.get(k, object()) != v}
    if not recipe.get("lr_restart_at"):
        key.pop("lr_restart", None)  # no restart: its peak changes nothing
    key["data"] = [{k: v for k, v in d.items() if _NEUTRAL_DATA.get(k, object()) != v} for d in recipe["data"]]
    key["model"] = config_key(recipe["model"])
    if recipe.get("base_model"):  # the embedded shape is not used
        key.pop("model")
    if key.get("induction_steps"):  # the stage's fixed settings shape the model too
        from rllib_agentgym.algorithms.sft.induction import InductionConfig

        key["induction"] = asdict(InductionConfig())
    return key


RESTART_WARMUP = 10  # iterations of the climb back to `lr_restart`


def lr_schedule(recipe: "AgentRecipe") -> list[list[float]]:
    """RLlib lr schedule keyed by conversations trained on: warm-up to `lr`, then linear decay to `lr_final`."""
    per_iteration, total = recipe.batch_size, recipe.iterations * recipe.batch_size
    if not recipe.lr_warmup_iterations:
        schedule = [[0, recipe.lr], [total, recipe.lr_final]]
    else:
        schedule = [[0, recipe.lr / 100], [recipe.lr_warmup_iterations * per_iteration, recipe.lr],
                    [total, recipe.lr_final]]
    if recipe.lr_restart_at:
        if not recipe.lr_warmup_iterations < recipe.lr_restart_at < recipe.iterations - RESTART_WARMUP:
            raise ValueError(f"lr_restart_at must lie between the warm-up and the last {RESTART_WARMUP} "
                             f"iterations, got {recipe.lr_restart_at}")
        restart = recipe.lr_restart_at * per_iteration
        schedule[-1] = [restart, recipe.lr_final]
        schedule += [[restart + RESTART_WARMUP * per_iteration, recipe.lr_restart], [total, recipe.lr_final]]
    return schedule


def _circuit_model_config() -> EmbeddedModelConfig:
    """The agent's size, started from the hand-set induction circuit (core/induction_circuit.py)."""
    return dataclasses.replace(_agent_model_config(), induction_circuit=True)


LORA_ALL_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _pretrained_adapter_recipe(*data: ExpertData, **fields) -> AgentRecipe:
    """A LoRA adapter (r 16 on every projection) on SmolLM2-135M-Instruct (core/pretrained.py),
    lr warmed up to 5e-4 and decayed to 5e-5: what ships is the adapter, merged into the
    converted base when unpacked."""
    return AgentRecipe(base_model="smollm2-135m", data=data, lr=5e-4, lr_final=5e-5,
                       lora=(("alpha", 32), ("r", 16), ("target_modules", LORA_ALL_PROJECTIONS)), **fields)


def _pretrained_full_recipe(*data: ExpertData, **fields) -> AgentRecipe:
    """All weights of SmolLM2-135M-Instruct (core/pretrained.py) fine-tuned, lr warmed up to 1e-4 and
    decayed to 1e-5: what ships is the change from the base, one bit a weight (core/sign_delta.py),
    added to the converted base when unpacked."""
    return AgentRecipe(base_model="smollm2-135m", data=data, lr=1e-4, lr_final=1e-5, **fields)


def searchqa_agent_recipe() -> AgentRecipe:
    """Deep Search alone, a LoRA adapter on a pretrained LM (SmolLM2-135M-Instruct, core/pretrained.py).

    The answer is a span copied out of a search result, and the query a name
    copied out of the question or a page: a pretrained LM copies from the
    start, where the embedded model needed a hand-set induction circuit and
    then formed the lookup in one seed of three (docs/learning.md, section 2).
    100 steps of 4 of the 4000 train questions' expert play (about 770 tokens
    a conversation, 15 minutes on 2 cores) leave 3600 train questions that
    the agent has never seen for GRPO. The adapter (r 16, every projection)
    is what ships, merged into the converted base when unpacked.
    """
    return _pretrained_adapter_recipe(ExpertData("agentgym/searchqa", 400, 6), iterations=100,
                                      lr_warmup_iterations=10)


def sciworld_agent_recipe() -> AgentRecipe:
    """SciWorld's Find tasks alone, from the hand-set induction circuit.

    Find is the one SciWorld category short enough for the budget (9-16 gold
    steps, about 1,700 tokens) and a quarter of the test split. The expert's
    thoughts restate the task (`thoughts: task`), since what the agents
    trained on the default thoughts get wrong is the box and room the task
    names (docs/learning.md, 2). Built from all 600 Find train tasks, about 4
    passes, in batches of 2: twice the optimizer steps of batches of 4 for
    about the same time, which lifts Find (60 test tasks) from 3% to 25% at
    seed 0; over seeds 0-2 the recipe gets 18 +- 15%.
    """
    return AgentRecipe(model=_circuit_model_config(),
                       data=(ExpertData("agentgym/sciworld", 600, 20, expert_options=(("thoughts", "task"),),
                                        shuffle_tasks=True, categories=("Find",)),),
                       batch_size=2, iterations=1280, lr_warmup_iterations=120, max_model_len=2048)


def textcraft_pretrained_agent_recipe() -> AgentRecipe:
    """TextCraft alone, all weights of a pretrained LM (SmolLM2-135M-Instruct, core/pretrained.py) fine-tuned.

    The embedded agents fail TextCraft's test goals because a model trained
    from scratch on 2 cores does not copy item names and counts out of the
    listed commands (docs/learning.md, section 2); a pretrained LM does. One
    pass over the 499 train conversations (about 9 s per step of 4 on 2
    cores) fits the 20-minute budget. All weights at lr 1e-4 solve twice the
    test tasks of a LoRA adapter (r 16) at 5e-4; the change from the base
    ships as its signs and row scales (core/sign_delta.py; a 16 MB archive), applied
    to the converted base when unpacked.
    """
    return _pretrained_full_recipe(ExpertData("agentgym/textcraft", 800, 15), iterations=125, lr_warmup_iterations=10)


def babyai_pretrained_agent_recipe() -> AgentRecipe:
    """BabyAI alone, a LoRA adapter on the pretrained LM (as the Deep Search agent).

    The shared agent (TextCraft + BabyAI, trained from scratch) solves 22% of
    BabyAI's test split; its GRPO runs lose greedy test tasks whatever the
    estimator, and credit on one seed of a level does not carry to the next
    (docs/learning.md, section 3). A pretrained LM is the other side of that
    question. One pass over the 600 train conversations of the shared recipe
    (about 1000 tokens each), in steps of 4 (about 9.6 s each on 2 cores:
    24 minutes), solves 31.5% of the test split (GoTo+Open 52.5%).
    """
    return _pretrained_adapter_recipe(ExpertData("agentgym/babyai", 600, 12), iterations=150, lr_warmup_iterations=10)


def webarena_agent_recipe() -> AgentRecipe:
    """WebArena's embedded sites alone, all weights of the pretrained LM fine-tuned (as the TextCraft agent).

    Every action names an element id or a search string read off the page's
    accessibility tree, which the embedded agents never copied (0 of 38 test
    tasks). The expert solves 65 of the 155 train tasks with the tree cut at
    256 tokens, as the tuned example cuts it (the cut hides the element it
    needs in the others); two passes over those (about 2000 tokens each) in
    steps of 2 fill 15 minutes on 2 cores. All weights at lr 1e-4 solve 9 of
    the 38 test tasks where a LoRA adapter (r 16) at 5e-4 solved 6.
    """
    webarena = ExpertData("agentgym/webarena", 155, 3, env_options=(("max_obs_tokens", 256), ("max_steps", 3)))
    return _pretrained_full_recipe(webarena, iterations=65, batch_size=2, lr_warmup_iterations=5, max_model_len=4096)


# `model_path` names of the agent models: the shared TextCraft + BabyAI agent, and one per family
# where a family of its own does better than its share of the shared one.
AGENT_RECIPES: dict[str, Callable[[], AgentRecipe]] = {
    AGENT_NAME: AgentRecipe,
    f"{AGENT_NAME}-babyai": babyai_pretrained_agent_recipe,
    f"{AGENT_NAME}-searchqa": searchqa_agent_recipe,
    f"{AGENT_NAME}-sciworld": sciworld_agent_recipe,
    f"{AGENT_NAME}-textcraft": textcraft_pretrained_agent_recipe,
    f"{AGENT_NAME}-webarena": webarena_agent_recipe,
}
ASSETS = Path(__file__).resolve().parent / "assets"


def agent_recipe(name: str = AGENT_NAME) -> AgentRecipe:
    """The recipe of the agent model called `name` (a `model_path`)."""
    if name not in AGENT_RECIPES:
        raise ValueError(f"unknown agent model {name!r}; known: {sorted(AGENT_RECIPES)}")
    return AGENT_RECIPES[name]()


def shipped_archive(name: str = AGENT_NAME) -> Path:
    return ASSETS / f"{name}.tar.xz"


def agent_model_path(recipe: AgentRecipe | None = None, build: bool = False, name: str = AGENT_NAME) -> Path:
    """Folder of the agent model `name` (built from `recipe`, default: the name's own) in the cache dir.

    Found there, or unpacked from the archive shipped in the package (seconds)
    when that was built from this very recipe, or built (about 20 minutes on
    2 cores) when `build`; otherwise FileNotFoundError.
    """
    recipe = recipe or agent_recipe(name)
    # Keyed by the recipe alone: the same recipe under two names is one model.
    path = cache_dir() / "models" / f"{AGENT_NAME}-{recipe.fingerprint()}"
    if (path / "config.json").exists():
        return path
    if shipped_fingerprint(name) == recipe.fingerprint():
        return unpack_shipped(path, name)
    if not build:
        raise FileNotFoundError(
            f"the {name} model is not built yet ({path}) and the shipped one is from another recipe; "
            "build it once with `python -m rllib_agentgym.prepare --agent` (about 20 minutes on 2 CPU cores)"
        )
    return build_agent_model(path, recipe)


def shipped_fingerprint(name: str = AGENT_NAME) -> str | None:
    """Recipe fingerprint of the shipped agent model `name`, None when there is none."""
    archive = shipped_archive(name)
    if not archive.exists():
        return None
    with tarfile.open(archive) as tar:
        member = tar.extractfile(f"{name}/agent_recipe.json")
        return json.load(member).get("fingerprint") if member else None


def unpack_shipped(path: Path, name: str = AGENT_NAME) -> Path:
    """Unpack the shipped model `name` into `path` (atomically: a half-unpacked folder is never seen)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=path.parent))
    try:
        with tarfile.open(shipped_archive(name)) as tar:
            tar.extractall(tmp, filter="data")
        if (tmp / name / ADAPTER_FILE).exists():  # a LoRA recipe ships its adapter alone
            merge_shipped_adapter(tmp / name, agent_recipe(name))
        elif (tmp / name / SIGN_DELTA_FILE).exists():  # a pretrained base's full fine-tune: its 1-bit change
            apply_shipped_sign_delta(tmp / name, agent_recipe(name))
        try:
            (tmp / name).rename(path)
        except OSError:  # unpacked by another process meanwhile
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


# A LoRA recipe's trained adapter, in a subfolder of the merged model's: vLLM loads every
# *.safetensors file at a model folder's top level as weights.
ADAPTER_FILE = Path("lora_adapter") / "adapter_model.safetensors"


def save_adapter(checkpoint: str, folder: Path) -> None:
    """The LoRA adapter of an AgentSFT checkpoint's policy as `folder / ADAPTER_FILE`.

    Read from the module's saved state, which with LoRA holds the adapter
    alone (a module restored from the checkpoint merges it into its weights).
    """
    import pickle

    import torch
    from safetensors.torch import save_file

    from rllib_agentgym.core import lora as lora_lib
    from rllib_agentgym.export import policy_module_dir

    with open(policy_module_dir(checkpoint) / "module_state.pkl", "rb") as f:
        state = pickle.load(f)
    if not lora_lib.is_adapter_state(state):
        raise ValueError(f"{checkpoint}: the policy's state is not a LoRA adapter")
    (folder / ADAPTER_FILE).parent.mkdir(parents=True, exist_ok=True)
    save_file({k: torch.as_tensor(v).contiguous() for k, v in state.items()}, folder / ADAPTER_FILE,
              metadata={"format": "pt"})


def _write_from_base(folder: Path, recipe: AgentRecipe, weights_from_base: Callable[[dict], dict]) -> None:
    """`folder` completed as a model: `weights_from_base(base weights)`, the base's config and tokenizer."""
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoTokenizer

    base = recipe.base_model_path()
    save_file({k: v.contiguous() for k, v in weights_from_base(load_model_weights(base)).items()},
              folder / "model.safetensors",
              metadata={"format": "pt"})
    AutoConfig.from_pretrained(base).save_pretrained(folder)
    AutoTokenizer.from_pretrained(base).save_pretrained(folder)


def merge_shipped_adapter(folder: Path, recipe: AgentRecipe) -> None:
    """Complete an unpacked adapter-only archive: the base model's weights with the adapter merged
    (W + alpha / r * B @ A), its config and tokenizer, written into `folder`."""
    from safetensors.torch import load_file

    from rllib_agentgym.core import lora as lora_lib

    adapter, scaling = load_file(folder / ADAPTER_FILE), lora_lib.lora_scaling(dict(recipe.lora))
    _write_from_base(folder, recipe,
                     lambda weights: {**weights, **lora_lib.merge_adapter_into(weights, adapter, scaling)})


# A full fine-tune of a pretrained base ships as its weight change, one bit a weight
# (core/sign_delta.py), in a subfolder for the same reason as the adapter.
SIGN_DELTA_FILE = Path("sign_delta") / "delta.safetensors"


def save_sign_delta(tuned: Path, recipe: AgentRecipe, folder: Path) -> None:
    """The change of the model in `tuned` from the recipe's base, as `folder / SIGN_DELTA_FILE`."""
    from safetensors.torch import save_file

    from rllib_agentgym.core import sign_delta

    (folder / SIGN_DELTA_FILE).parent.mkdir(parents=True, exist_ok=True)
    save_file(sign_delta.compress(load_model_weights(recipe.base_model_path()), load_model_weights(tuned)),
              folder / SIGN_DELTA_FILE,
              metadata={"format": "pt"})


def apply_shipped_sign_delta(folder: Path, recipe: AgentRecipe) -> None:
    """Complete an unpacked sign-delta archive: W_base + diag(alpha) sign(delta) (core/sign_delta.py),
    the base's config and tokenizer, written into `folder`."""
    from safetensors.torch import load_file

    from rllib_agentgym.core import sign_delta

    stored = load_file(folder / SIGN_DELTA_FILE)
    _write_from_base(folder, recipe, lambda weights: sign_delta.decompress(weights, stored))


def pack_for_shipping(name: str = AGENT_NAME) -> Path:
    """Write the built agent model `name` as its shipped archive: bf16 weights, xz (~6 MB).

    The weights are rounded to bfloat16 (the dtype the CPU examples run in);
    the recipe and its fingerprint go along, so a changed recipe rebuilds. A
    LoRA recipe ships its adapter alone (its base model is converted from the
    package that ships it, and the adapter merged, when it is unpacked); a full
    fine-tune of a pretrained base ships its change as signs and row scales
    (core/sign_delta.py, ~17 MB for SmolLM2-135M), applied to the base when unpacked.
    """
    import torch
    from safetensors.torch import load_file, save_file

    recipe = agent_recipe(name)
    path, archive = agent_model_path(recipe, name=name), shipped_archive(name)
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / name
        if recipe.lora:  # the adapter alone: the base comes from its own package at unpack time
            (staged / ADAPTER_FILE).parent.mkdir(parents=True)
            shutil.copy(path / ADAPTER_FILE, staged / ADAPTER_FILE)
        elif recipe.base_model:  # the change from the base, one bit a weight (its scales stay float32)
            staged.mkdir()
            save_sign_delta(path, recipe, staged)
        else:
            shutil.copytree(path, staged)
        recipe.write_record(staged)
        for weights in staged.rglob("*.safetensors"):
            if weights.relative_to(staged) == SIGN_DELTA_FILE:
                continue
            tensors = load_file(weights)
            save_file({k: v.to(torch.bfloat16).contiguous() for k, v in tensors.items()}, weights,
                      metadata={"format": "pt"})
        if not recipe.lora and not recipe.base_model:
            config = json.loads((staged / "config.json").read_text())
            config["torch_dtype"] = config["dtype"] = "bfloat16"
            (staged / "config.json").write_text(json.dumps(config, indent=2))
        with tarfile.open(archive, "w:xz", preset=9) as tar:
            files = sorted(f for f in staged.rglob("*") if f.is_file())
            for file in files:  # fixed order and metadata: a reproducible archive
                info = tar.gettarinfo(file, arcname=f"{name}/{file.relative_to(staged).as_posix()}")
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                with open(file, "rb") as f:
                    tar.addfile(info, f)
    return archive


def write_expert_data(recipe: AgentRecipe, folder: Path, log: Callable[[str], None] = print) -> list[str]:
    """One JSONL file of expert conversations per `recipe.data` entry."""
    from rllib_agentgym.data.conversations import write_jsonl
    from rllib_agentgym.data.experts import expert_conversations, with_augmented_copies
    from rllib_agentgym.envs.registry import family_name

    paths = []
    for i, item in enumerate(recipe.data):
        rows = expert_conversations(item.env, "train", item.num, max_steps=item.max_turns,
                                    env_options=dict(item.env_options), expert_options=dict(item.expert_options),
                                    shuffle_seed=recipe.seed + i if item.shuffle_tasks else None,
                                    categories=item.categories, held_out_task_ids=item.held_out_task_ids)
        rows = with_augmented_copies(rows, item.env, item.augmented_copies, seed=recipe.seed + i,
                                     options=dict(item.augment_options))
        path = folder / f"{i}-{family_name(item.env)}.jsonl"
        n = write_jsonl(path, rows)
        copies = f", {item.augmented_copies} augmented copies each" if item.augmented_copies else ""
        only = f", categories {', '.join(item.categories)}" if item.categories else ""
        only += f", {len(item.held_out_task_ids)} tasks held out" if item.held_out_task_ids else ""
        log(f"{n} {family_name(item.env)} conversations (<= {item.max_turns} turns{copies}{only}) -> {path}")
        paths.append(str(path))
    if recipe.copy_conversations:
        from transformers import AutoTokenizer

        from rllib_agentgym.algorithms.sft.induction import copy_conversations

        tokenizer = AutoTokenizer.from_pretrained(recipe.base_model_path())
        path = folder / "copy.jsonl"
        n = write_jsonl(path, copy_conversations(tokenizer, recipe.copy_conversations, seed=recipe.seed))
        log(f"{n} random-text copy conversations -> {path}")
        paths.append(str(path))
    return paths


def sft_config(recipe: AgentRecipe, data: list[str], base_model: str):
    from rllib_agentgym.algorithms.sft.sft import AgentSFTConfig

    env = recipe.data[0].env  # AgentSFT needs an env for its (idle) runner; data covers all families
    return (
        AgentSFTConfig()
        .environment(env)
        # A bfloat16 `model_dtype` trains fp32 weights under bf16 autocast (GRPOConfig).
        .llm(model_path=base_model, max_model_len=recipe.max_model_len, model_dtype=recipe.model_dtype)
        .training(sft_data=data, sft_batch_size=recipe.batch_size, micro_batch_size=recipe.micro_batch_size,
                  lr=lr_schedule(recipe), grad_clip=1.0, observation_loss_weight=recipe.observation_loss_weight,
                  lora=dict(recipe.lora) if recipe.lora else None)
        # Entropy is only a diagnostic for SFT: not computing it saves ~10% of a step.
        .rl_module(model_config={"compute_entropy": False})
        .debugging(seed=recipe.seed)
    )


def build_agent_model(path: Path, recipe: AgentRecipe | None = None, log: Callable[[str], None] = print,
                      work_dir: str | None = None) -> Path:
    """Generate expert data, train with AgentSFT, export to `path` (atomically)."""
    import ray

    from rllib_agentgym.export import export_checkpoint

    recipe = recipe or AgentRecipe()
    base = recipe.base_model_path()
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(address="local", num_cpus=max(2, os.cpu_count() or 2), include_dashboard=False,
                 log_to_driver=False, _temp_dir=tempfile.mkdtemp(prefix="ray-agent-"))
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        t0 = time.perf_counter()
        data = write_expert_data(recipe, Path(tmp), log)
        log(f"expert data: {time.perf_counter() - t0:.0f} s")
        if recipe.induction_steps:
            from rllib_agentgym.algorithms.sft.induction import InductionConfig, pretrain_induction

            stats = pretrain_induction(base, Path(tmp) / "induction-base",
                                       InductionConfig(steps=recipe.induction_steps, seed=recipe.seed), log)
            log(f"induction pretraining: {stats}")
            base = Path(tmp) / "induction-base"
        algo = sft_config(recipe, data, str(base)).build_algo()
        try:
            t1 = time.perf_counter()
            for i in range(recipe.iterations):
                result = algo.train()
                if (i + 1) % 10 == 0 or i == 0:
                    learner = result["learners"]["default_policy"]
                    observation = (f" observation loss {learner['sft_observation_loss']:.4f}"
                                   if "sft_observation_loss" in learner else "")
                    log(f"sft iter {i + 1}/{recipe.iterations}: loss {learner['sft_loss']:.4f}{observation} "
                        f"epoch {result.get('sft_epoch', float('nan')):.2f} {time.perf_counter() - t1:.0f} s")
            ckpt = algo.save(str(Path(tmp) / "checkpoint")).checkpoint.path
        finally:
            algo.stop()
            if started_ray:
                ray.shutdown()
        tmp_out = path.with_name(path.name + f".tmp{os.getpid()}")
        export_checkpoint(ckpt, tmp_out)
        if recipe.lora:
            save_adapter(ckpt, tmp_out)
        recipe.write_record(tmp_out)
        try:
            tmp_out.rename(path)
        except OSError:  # built by another process meanwhile
            shutil.rmtree(tmp_out, ignore_errors=True)
    log(f"{AGENT_NAME}: {path} ({time.perf_counter() - t0:.0f} s in all)")
    return path

"""Checkpoints -> Hugging Face model folders (`rllib export`, and warm starts).

An RLlib checkpoint of our algorithms holds the policy RLModule under
`learner_group/learner/rl_module/default_policy`. Exporting rebuilds that
LLMRLModule, merges a LoRA adapter into the base weights where there is one,
and saves an ordinary model folder (config, safetensors, tokenizer) that
transformers and vLLM load. `model_path: <checkpoint dir>` in a config uses
the same export (cached), which is how a GRPO run starts from an AgentSFT run.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

POLICY_SUBDIR = Path("learner_group") / "learner" / "rl_module" / "default_policy"


def policy_module_dir(checkpoint: str | os.PathLike, module_id: str = "default_policy") -> Path | None:
    """The folder of policy module `module_id` of an algorithm checkpoint (or of a module
    checkpoint itself); multi-agent checkpoints hold one module per policy id."""
    path = Path(checkpoint)
    for candidate in (path / POLICY_SUBDIR.parent / module_id, path / "rl_module" / module_id, path):
        if (candidate / "module_state.pkl").exists() and (candidate / "class_and_ctor_args.pkl").exists():
            return candidate
    return None


def is_rllib_checkpoint(path: str | os.PathLike) -> bool:
    return os.path.isdir(path) and policy_module_dir(path) is not None


@contextmanager
def replacing_folder(out_dir: str | os.PathLike) -> Iterator[Path]:
    """A fresh folder next to `out_dir` to write into; it replaces `out_dir` whole when the
    block ends, and is removed if the block raises: a reader never sees half a model."""
    out = Path(out_dir)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)


def export_checkpoint(checkpoint: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Write the checkpoint's policy as a HF model folder at `out_dir` (atomically)."""
    from ray.rllib.core.rl_module.rl_module import RLModule
    from transformers import AutoTokenizer

    from rllib_agentgym.core.embedded import resolve_model_path

    module_dir = policy_module_dir(checkpoint)
    if module_dir is None:
        raise FileNotFoundError(f"{checkpoint}: not an RLlib checkpoint with a policy module")
    module = RLModule.from_checkpoint(str(module_dir))
    base = resolve_model_path(module.model_config.get("model", "embedded"))
    with replacing_folder(out_dir) as tmp:
        module.hf_model().save_pretrained(tmp, safe_serialization=True)
        AutoTokenizer.from_pretrained(base).save_pretrained(tmp)
    return Path(out_dir)


def exported_model_path(checkpoint: str | os.PathLike) -> Path:
    """A cached export of `checkpoint` (rebuilt when the checkpoint's module state changes)."""
    from rllib_agentgym.core.embedded import cache_dir

    module_dir = policy_module_dir(checkpoint)
    if module_dir is None:
        raise FileNotFoundError(f"{checkpoint}: not an RLlib checkpoint with a policy module")
    state = module_dir / "module_state.pkl"
    key = hashlib.sha256(f"{module_dir.resolve()}:{state.stat().st_mtime_ns}:{state.stat().st_size}".encode()).hexdigest()[:16]
    out = cache_dir() / "exports" / key
    if not (out / "config.json").exists():
        try:
            export_checkpoint(checkpoint, out)
        except OSError:
            if not (out / "config.json").exists():  # not another process winning the rename race
                raise
    return out

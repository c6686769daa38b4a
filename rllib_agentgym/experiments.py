"""Loading and checking classic RLlib experiment specs (YAML or flags).

The classic format, as `rllib train file` took it before Ray dropped the CLI:

    experiment_name:
      run: GRPO                # a registered trainable (ours or RLlib's)
      env: agentgym/textcraft  # a registered env or a gymnasium id
      stop: {training_iteration: 10}
      checkpoint_config: {checkpoint_frequency: 1, checkpoint_at_end: true}
      num_samples: 1
      storage_path: ~/ray_results
      config: {lr: 1.0e-6, group_size: {grid_search: [4, 8]}, ...}

Every problem is reported as one `SpecError` line naming the file and key.
"""

from __future__ import annotations

import difflib
import inspect
import json
import os
from typing import Any, Mapping

import yaml


class SpecError(ValueError):
    """A user error in an experiment spec; the CLI prints it as one line."""


# Experiment-level keys (besides run/env/config) that Tune's Experiment takes.
def _experiment_keys() -> set[str]:
    from ray.tune.experiment import Experiment

    params = set(inspect.signature(Experiment.__init__).parameters) - {"self", "name", "run"}
    return params | {"run", "env", "config"}


# Config keys the classic format allows besides AlgorithmConfig attributes.
_SPECIAL_CONFIG_KEYS = {"env", "callbacks", "multiagent", "evaluation_config", "model", "optimizer", "seed"}
# Tune search-space shorthands allowed as a config value.
_SEARCH_SPACES = {"grid_search", "choice", "uniform", "quniform", "loguniform", "randint", "qrandint", "randn"}


def suggest(name: str, candidates) -> str:
    match = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def load_yaml_file(path: str) -> dict[str, Any]:
    if not os.path.exists(path):
        raise SpecError(f"{path}: no such file")
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"{path}: YAML syntax error{where}: {problem}") from None
    if not isinstance(data, dict) or not data:
        raise SpecError(f"{path}: expected a mapping of experiment name -> {{run, env, config, stop}}")
    for name, spec in data.items():
        if not isinstance(spec, dict):
            raise SpecError(f"{path}: experiment {name!r} must be a mapping with at least `run`")
    return data


def parse_json_arg(flag: str, text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{flag}: not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise SpecError(f"{flag}: expected a JSON object")
    return value


def resolve_trainable(run: str):
    """The trainable class for `run`, or SpecError with the nearest known name."""
    import rllib_agentgym
    from ray.rllib.algorithms.registry import ALGORITHMS
    from ray.tune.registry import TRAINABLE_CLASS, _global_registry, get_trainable_cls

    rllib_agentgym.register()  # again if a ray.shutdown() since the import dropped our names

    if not isinstance(run, str):
        raise SpecError(f"`run` must be an algorithm name, got {run!r}")
    if _global_registry.contains(TRAINABLE_CLASS, run) or run in ALGORITHMS:
        return get_trainable_cls(run)
    known = sorted(set(ALGORITHMS) | {"GRPO"})
    raise SpecError(f"unknown algorithm run: {run!r}{suggest(run, known)}")


def check_env(env: Any) -> None:
    import gymnasium as gym
    from ray.tune.registry import ENV_CREATOR, _global_registry

    import rllib_agentgym
    from rllib_agentgym.envs.registry import ENV_PREFIX, FAMILIES

    rllib_agentgym.register()

    if env is None or not isinstance(env, str):
        return  # a class or None (multi-agent configs may set it elsewhere)
    if _global_registry.contains(ENV_CREATOR, env) or env in gym.registry:
        return
    known = [ENV_PREFIX + f for f in FAMILIES] + list(gym.registry.keys())
    raise SpecError(f"unknown env: {env!r}{suggest(env, known)}")


def check_config_keys(trainable, config: Mapping[str, Any], where: str) -> None:
    get_default = getattr(trainable, "get_default_config", None)
    if get_default is None:
        return
    default = get_default()
    valid = {k for k in vars(default) if not k.startswith("_")} | _SPECIAL_CONFIG_KEYS
    valid |= {k for k, v in inspect.getmembers(type(default)) if isinstance(v, property)}
    translate = getattr(default, "_translate_special_keys", None)
    for key in config:
        translated = translate(key, warn_deprecated=False) if translate else key
        if key in valid or translated in valid:
            continue
        raise SpecError(f"{where}: unknown config key {key!r}{suggest(key, valid)}")


def to_search_space(value: Any) -> Any:
    """Turn `{choice: [...]}`-style YAML shorthands into Tune search spaces (recursively)."""
    from ray import tune

    if isinstance(value, dict):
        if len(value) == 1:
            (kind, arg), = value.items()
            if kind == "grid_search":
                return {"grid_search": list(arg)}
            if kind in _SEARCH_SPACES:
                fn = getattr(tune, kind)
                return fn(arg) if kind == "choice" else fn(*arg)
        return {k: to_search_space(v) for k, v in value.items()}
    return value


# Config keys that may name a local file or folder (a model, a checkpoint to start from).
PATH_KEYS = ("model_path", "init_from", "load_checkpoint")


def absolute_local_paths(config: Mapping[str, Any]) -> dict[str, Any]:
    """`config` with each PATH_KEYS value that names an existing local path made absolute.

    Tune runs each trial in its own working directory, so a path relative to where
    `rllib train` was started would not resolve there. Hub ids and names such as
    `embedded` (no such local path) pass through unchanged.
    """
    out = dict(config)
    for key in PATH_KEYS:
        value = out.get(key)
        if isinstance(value, str) and value and os.path.exists(os.path.expanduser(value)):
            out[key] = os.path.abspath(os.path.expanduser(value))
    per_module = out.get("algorithm_config_overrides_per_module")
    if isinstance(per_module, Mapping):  # a multi-agent policy's own model or warm start
        out["algorithm_config_overrides_per_module"] = {
            module: absolute_local_paths(overrides) if isinstance(overrides, Mapping) else overrides
            for module, overrides in per_module.items()
        }
    return out


def prepare_experiments(
    experiments: Mapping[str, Mapping[str, Any]],
    *,
    source: str = "command line",
    config_overrides: Mapping[str, Any] | None = None,
    stop_overrides: Mapping[str, Any] | None = None,
    storage_path: str | None = None,
) -> dict[str, dict[str, Any]]:
    """Validate specs and return them ready for `tune.run_experiments`."""
    allowed = _experiment_keys()
    prepared = {}
    for name, raw in experiments.items():
        spec = dict(raw)
        for key in spec:
            if key not in allowed:
                raise SpecError(f"{source}: experiment {name!r}: unknown key {key!r}{suggest(key, allowed)}")
        if "run" not in spec:
            raise SpecError(f"{source}: experiment {name!r} has no `run` (the algorithm to train)")
        trainable = resolve_trainable(spec["run"])
        config = dict(spec.get("config") or {})
        config.update(config_overrides or {})
        env = spec.pop("env", None) or config.get("env")
        if env is not None:
            config["env"] = env
        check_env(config.get("env"))
        check_config_keys(trainable, config, f"{source}: experiment {name!r}")
        spec["config"] = to_search_space(absolute_local_paths(config))
        spec["stop"] = {**dict(spec.get("stop") or {}), **dict(stop_overrides or {})}
        if storage_path:
            spec["storage_path"] = storage_path
        if spec.get("storage_path"):
            spec["storage_path"] = os.path.abspath(os.path.expanduser(spec["storage_path"]))
        prepared[name] = spec
    return prepared

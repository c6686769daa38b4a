"""Every shipped YAML (experiments/, tuned_examples/) is a valid experiment, and the
experiments/ files carry the AgentGym-RL paper's settings. No training: validation only."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from rllib_agentgym.experiments import load_yaml_file, prepare_experiments

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = sorted((ROOT / "experiments").glob("*.yaml"))
TUNED_EXAMPLES = sorted((ROOT / "tuned_examples").glob("*.yaml"))
# env_config keys the session factory reads (rllib_agentgym/envs/registry.py, module doc).
ENV_CONFIG_KEYS = {"server_url", "launch_server", "env_options", "split", "categories", "task_ids", "client_timeout_s", "client_retries", "client_backoff_s"}

# The paper's settings per family (arXiv 2509.08755): ScalingInter-RL horizons, interval, group size.
PAPER = {
    "textcraft": {"schedule": [10, 20, 30], "interval": 100, "group_size": 8},
    "babyai": {"schedule": [6, 13, 20], "interval": 100, "group_size": 8},
    "sciworld": {"schedule": [10, 20, 30], "interval": 100, "group_size": 8},
    "searchqa": {"schedule": [5, 8, 10], "interval": 100, "group_size": 8},
    "webarena": {"schedule": [8, 12, 15], "interval": 80, "group_size": 4},
}


def _only_experiment(path: Path) -> tuple[str, dict]:
    prepared = prepare_experiments(load_yaml_file(str(path)), source=str(path))
    assert len(prepared) == 1, f"{path.name}: one experiment per file"
    return next(iter(prepared.items()))


def _raw_config(path: Path) -> dict:
    (spec,) = load_yaml_file(str(path)).values()
    return dict(spec.get("config") or {})


@pytest.mark.parametrize("path", EXPERIMENTS + TUNED_EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_yaml_validates(path):
    """run, env and every config key are known; the config builds and validates; the
    checkpoint config is Tune's; env_config keys, the split and env_options fit the family."""
    from ray.tune import CheckpointConfig
    from ray.tune.registry import get_trainable_cls

    name, spec = _only_experiment(path)
    config = _raw_config(path)
    algo_config = get_trainable_cls(spec["run"]).get_default_config().update_from_dict(config)
    algo_config.validate()
    algo_config.get_evaluation_config_object()
    CheckpointConfig(**(spec.get("checkpoint_config") or {}))

    env = spec["config"].get("env", "")
    if not env.startswith("agentgym/"):
        return
    from rllib_agentgym.envs.registry import FAMILIES, get_spec

    family = env.split("/", 1)[1]
    if family not in FAMILIES:  # multi-agent games have their own registry
        return
    env_config = dict(config.get("env_config") or {})
    assert set(env_config) <= ENV_CONFIG_KEYS, f"{path.name}: unknown env_config keys {set(env_config) - ENV_CONFIG_KEYS}"
    family_spec = get_spec(env)
    assert family_spec.split_ids(env_config.get("split", "train")), f"{path.name}: empty split"
    options = dict(env_config.get("env_options") or {})
    params = inspect.signature(family_spec.load_env_class().__init__).parameters
    assert set(options) <= set(params) - {"self"}, f"{path.name}: {family} env has no options {set(options) - set(params)}"


def test_every_family_has_both_configs():
    assert {p.stem for p in EXPERIMENTS} >= set(PAPER)
    assert {p.stem for p in TUNED_EXAMPLES} >= {f"{f}_cpu" for f in PAPER}


@pytest.mark.parametrize("family", sorted(PAPER))
def test_experiment_has_paper_settings(family):
    path = ROOT / "experiments" / f"{family}.yaml"
    _, spec = _only_experiment(path)
    config = _raw_config(path)
    paper = PAPER[family]
    assert spec["config"]["env"] == f"agentgym/{family}"
    assert spec["run"] == "GRPO"
    assert config["scaling_inter"] == {"schedule": paper["schedule"], "interval": paper["interval"]}
    assert config["group_size"] == paper["group_size"]
    assert config["max_turns"] == paper["schedule"][-1]
    assert spec["stop"]["training_iteration"] == paper["interval"] * len(paper["schedule"])
    assert config["lr"] == pytest.approx(1e-6)
    assert config["kl_coef"] == pytest.approx(0.001) and config["kl_estimator"] == "low_var_kl"
    assert config["inference_engine"] == "vllm"
    assert config["model_path"].startswith("Qwen/Qwen2.5-")
    assert config["num_gpus_per_learner"] >= 1 and config["num_gpus_per_env_runner"] >= 1


def test_textcraft_batch_is_32_tasks():
    assert _raw_config(ROOT / "experiments" / "textcraft.yaml")["tasks_per_iteration"] == 32


@pytest.mark.parametrize("family", sorted(PAPER))
def test_tuned_example_runs_on_cpu(family):
    """The CPU examples use an embedded model with vLLM, a local server and a short run;
    those of the families an embedded agent was trained on start from it."""
    path = ROOT / "tuned_examples" / f"{family}_cpu.yaml"
    _, spec = _only_experiment(path)
    config = _raw_config(path)
    expected = {"textcraft": "embedded-agent", "babyai": "embedded-agent",
                "searchqa": "embedded-agent-searchqa", "sciworld": "embedded-agent-sciworld",
                "webarena": "embedded-agent-webarena"}[family]
    assert config["model_path"] == expected and config["inference_engine"] == "vllm"
    assert config.get("num_gpus_per_learner", 0) == 0 and config.get("num_env_runners", 0) == 0
    assert config["env_config"]["launch_server"] is True
    assert spec["stop"]["training_iteration"] <= 4

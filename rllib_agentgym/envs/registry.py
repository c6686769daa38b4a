"""Env family registry: names -> specs, sessions from an env_config, Tune names.

`env_config` keys understood for every family:

    server_url:   URL or list of URLs of running env servers (HTTP mode); with
                  several, sessions are spread over them and fail over to a
                  live one when theirs dies or hangs
    launch_server: start a local server per env runner (HTTP mode): inside a Ray
                  cluster a named `EnvServer` actor that owns and supervises it
                  (see `rllib_agentgym.envs.server_actor`), else a subprocess
    (neither):    in-process mode: the env class is called directly
    env_options:  dict passed to /create (or the env class)
    split:        task split to draw from ("train" by default)
    categories:   only the split's tasks of these categories (e.g. [GoTo, Open]),
                  in training and in periodic evaluation
    task_ids:     train on exactly these tasks of the split (not in evaluation)
    start_states: a JSONL file of replayed starts (`rllib start-states`): training
                  episodes begin after an agent's earlier turns on those tasks
                  (not in evaluation; rllib_agentgym/data/start_states.py)
    start_state_fraction: the share of training groups drawn from start_states
                  (1.0); the others play fresh tasks
    client_timeout_s (60), client_retries (3), client_backoff_s (0.5):
                  HTTP fault tolerance: per-request timeout, retries of a failed
                  reset / step (recreating the session), first backoff (doubled
                  per retry); see `rllib_agentgym.envs.client`
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping

from rllib_agentgym.envs.client import (
    EndpointPool,
    HTTPEnvClient,
    InProcessEnvClient,
    LocalEnvServer,
    RetryPolicy,
)
from rllib_agentgym.envs.server_actor import ActorEnvServer, launch_env_server
from rllib_agentgym.envs.spec import EnvSpec

ENV_PREFIX = "agentgym/"
FAMILIES = ("textcraft", "babyai", "sciworld", "searchqa", "webarena", "bandit")


def available_families() -> list[str]:
    """Families whose spec module imports on this machine."""
    names = []
    for name in FAMILIES:
        try:
            importlib.import_module(f"rllib_agentgym.envs.specs.{name}")
        except ImportError:
            continue
        names.append(name)
    return names


def family_name(env: str) -> str:
    return env[len(ENV_PREFIX) :] if env.startswith(ENV_PREFIX) else env


def get_spec(env: str) -> EnvSpec:
    name = family_name(env)
    if name not in FAMILIES:
        raise KeyError(f"unknown env {env!r}; known: {', '.join(ENV_PREFIX + f for f in FAMILIES)}")
    return importlib.import_module(f"rllib_agentgym.envs.specs.{name}").SPEC


class SessionFactory:
    """Makes env sessions for one runner, per its env_config (see module doc).
    `runner_index` names the server it launches, if any."""

    def __init__(self, spec: EnvSpec, env_config: Mapping[str, Any], runner_index: int | None = None):
        self.spec = spec
        self._options = {**spec.env_options, **dict(env_config.get("env_options") or {})}
        self._retry = RetryPolicy(
            timeout_s=float(env_config.get("client_timeout_s", 60.0)),
            retries=int(env_config.get("client_retries", 3)),
            backoff_s=float(env_config.get("client_backoff_s", 0.5)),
        )
        self._server: LocalEnvServer | ActorEnvServer | None = None
        urls = env_config.get("server_url")
        if isinstance(urls, str):
            urls = [urls]
        if not urls and env_config.get("launch_server"):
            self._server = launch_env_server(spec.server_module, spec.name, runner_index)
            urls = [self._server.url]
        self._pool = (
            EndpointPool(list(urls), probe_timeout_s=min(2.0, self._retry.timeout_s)) if urls else None
        )

    @property
    def mode(self) -> str:
        return "http" if self._pool is not None else "inprocess"

    def make(self):
        if self._pool is not None:
            return HTTPEnvClient(self._pool, self._options, self._retry)
        return InProcessEnvClient(self.spec.load_env_class(), self._options)

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


def env_creator(name: str) -> Callable[[Mapping[str, Any]], Any]:
    def _create(env_config: Mapping[str, Any]):
        from rllib_agentgym.envs.gym_env import AgentGymEnv

        return AgentGymEnv(name, dict(env_config or {}))

    return _create


def register_envs() -> None:
    """Register every family as `agentgym/<name>` with Tune (gymnasium Text spaces)."""
    from ray.tune.registry import register_env

    for name in FAMILIES:
        register_env(ENV_PREFIX + name, env_creator(name))

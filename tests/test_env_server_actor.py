"""Env servers an env runner launches (`launch_server: true`) inside Ray: a named `EnvServer`
actor owns and supervises the real TextCraft server subprocess, and goes with its runner.

The runner here is a real `LLMEnvRunner` Ray actor, made the way RLlib's EnvRunnerGroup makes
remote runners (`ray.remote(LLMEnvRunner).remote(config=..., worker_index=1)`), sampling with
the transformers engine on the embedded model."""

from __future__ import annotations

import time

import httpx
import psutil
import pytest

from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
from rllib_agentgym.env_runners.llm_env_runner import LLMEnvRunner
from rllib_agentgym.envs.server_actor import ACTOR_NAME_PREFIX, EnvServer, env_server_actor_name, in_ray_actor


def _gone(pid: int, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.1)
    return False


def _wait_for(predicate, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    return predicate()


def test_actor_name_is_per_env_runner_and_launch():
    assert env_server_actor_name("textcraft", 2, 0, "ab12cd34") == f"{ACTOR_NAME_PREFIX}/textcraft/2/0-ab12cd34"
    assert env_server_actor_name("babyai", None, 3, "ff") == f"{ACTOR_NAME_PREFIX}/babyai/0/3-ff"


def test_env_server_restarts_its_server_on_the_same_port_and_stops_it():
    owner = EnvServer("envs.textcraft", supervise_interval_s=0.2)
    try:
        first = owner.status()
        assert first["alive"] and first["restarts"] == 0 and first["health"]["status"] == "ok"
        killed = owner.kill_server()  # SIGKILL, as a crash would
        assert killed == first["pid"] and _gone(killed)
        again = _wait_for(lambda: (s := owner.status())["alive"] and s["restarts"] == 1 and s)
        assert again, owner.status()
        assert again["url"] == first["url"] and again["pid"] != killed and again["health"]["status"] == "ok"
        fresh = owner.restart()
        assert fresh["restarts"] == 2 and fresh["url"] == first["url"] and fresh["pid"] != again["pid"]
    finally:
        owner.stop()
    assert not owner.status()["alive"] and _gone(fresh["pid"])


def _named_servers(ray, owner_hex: str) -> list[dict]:
    suffix = "-" + owner_hex[:8]
    return [a for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith(ACTOR_NAME_PREFIX + "/textcraft/1/") and a["name"].endswith(suffix)]


@pytest.fixture
def remote_runner(ray_local, embedded_model):
    ray = ray_local
    config = (
        GRPOConfig()
        .environment("agentgym/textcraft", env_config={"launch_server": True})
        .llm(inference_engine="hf", max_model_len=1024, group_size=1, max_turns=1, max_new_tokens=4)
        .debugging(seed=0)
    )
    runner = ray.remote(num_cpus=1)(LLMEnvRunner).remote(config=config, worker_index=1)
    yield runner
    ray.kill(runner)


def test_remote_runner_owns_a_named_env_server_actor_that_stops_with_it(ray_local, remote_runner):
    ray = ray_local
    assert not in_ray_actor()  # this driver launches subprocesses; runner actors launch EnvServer actors
    result = ray.get(remote_runner.sample.remote(task_ids=[3, 40]), timeout=300)
    assert len(result.trajectories) == 2 and result.num_dropped == 0
    owner = remote_runner._actor_id.hex()
    (named,) = _named_servers(ray, owner)
    assert named["name"] == env_server_actor_name("textcraft", 1, 0, owner[:8])
    server = ray.get_actor(named["name"], namespace=named["namespace"])
    status = ray.get(server.status.remote())
    # The sessions the runner played live on this server (it closes them only when it stops).
    assert status["alive"] and status["health"]["sessions"] == 2
    assert httpx.get(status["url"] + "/health").status_code == 200
    held = ray.get(remote_runner.__ray_call__.remote(lambda self: (type(self._factory._server).__name__, self._factory._server.url)))
    assert held == ("ActorEnvServer", status["url"])

    ray.get(remote_runner.stop.remote())
    assert _wait_for(lambda: not _named_servers(ray, owner)), "the EnvServer actor outlived runner.stop()"
    assert _gone(status["pid"])


def test_env_server_actor_dies_with_a_killed_runner(ray_local, remote_runner):
    ray = ray_local
    ray.get(remote_runner.sample.remote(task_ids=[3]), timeout=300)
    owner = remote_runner._actor_id.hex()
    (named,) = _named_servers(ray, owner)
    pid = ray.get(ray.get_actor(named["name"], namespace=named["namespace"]).status.remote())["pid"]
    ray.kill(remote_runner)  # as a crashed runner: no stop(), no cleanup code runs
    assert _wait_for(lambda: not _named_servers(ray, owner)), "the EnvServer actor outlived its runner"
    assert _gone(pid)

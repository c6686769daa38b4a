"""A training run submitted as a Ray job to a running cluster (`ray start --head`), with
Ray 2.60's token auth, and the actors it shows in the dashboard's state API while it runs:
the trial (GRPO), its learner, its env runner and the runner's named EnvServer actor. Slow:
it starts a whole cluster with its dashboard."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def head_node(tmp_path):
    """`ray start --head --block` with its own temp dir and token; ended by its pid only."""
    token_file = tmp_path / "auth_token"
    token_file.write_text(secrets.token_hex(32))
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file)}
    env.pop("RAY_ADDRESS", None)
    temp_dir = tempfile.mkdtemp(prefix="rj", dir="/tmp")  # short: Ray's unix socket paths
    # Every port of our own: the defaults (dashboard agent 52365, client 10001, ...) may be
    # held by another cluster on this machine.
    ports = {flag: _free_port() for flag in (
        "port", "dashboard-port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port", "metrics-export-port",
        "runtime-env-agent-port", "node-manager-port", "object-manager-port", "ray-client-server-port")}
    dash_port = ports["dashboard-port"]
    ray_bin = str(Path(sys.executable).with_name("ray"))
    proc = subprocess.Popen(
        [ray_bin, "start", "--head", "--block", "--dashboard-host=127.0.0.1", "--num-cpus=4",
         f"--temp-dir={temp_dir}", "--disable-usage-stats", *(f"--{flag}={port}" for flag, port in ports.items())],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    import httpx

    dashboard = f"http://127.0.0.1:{dash_port}"
    headers = {"Authorization": "Bearer " + token_file.read_text()}
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(dashboard + "/api/version", headers=headers, timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(2)
    else:
        proc.send_signal(signal.SIGTERM)
        pytest.fail("ray start --head did not bring up the dashboard")
    try:
        yield dict(env=env, dashboard=dashboard, headers=headers, ray_bin=ray_bin)
    finally:
        proc.send_signal(signal.SIGTERM)  # `ray start --block` stops the processes it started
        proc.wait(timeout=60)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _actors(head_node) -> list[dict]:
    import httpx

    reply = httpx.get(head_node["dashboard"] + "/api/v0/actors", params={"detail": "1", "limit": "1000"},
                      headers=head_node["headers"], timeout=30)
    return reply.json()["data"]["result"]["result"]


def _job_status(head_node, job_id: str) -> str:
    import httpx

    return httpx.get(f"{head_node['dashboard']}/api/jobs/{job_id}", headers=head_node["headers"], timeout=30).json()["status"]


def test_job_submit_trains_and_shows_named_actors(head_node, tmp_path):
    import httpx

    # One remote learner, one remote env runner that launches its own env server.
    spec = {"job-grpo": {
        "run": "GRPO", "env": "agentgym/textcraft", "stop": {"training_iteration": 2},
        "config": {"inference_engine": "hf", "max_model_len": 1024, "max_new_tokens": 8, "max_turns": 1,
                   "group_size": 2, "tasks_per_iteration": 1, "num_env_runners": 1, "num_learners": 1,
                   "env_config": {"launch_server": True}},
    }}
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump(spec))
    out = tmp_path / "results"
    # Without a token the dashboard refuses the request.
    assert httpx.get(head_node["dashboard"] + "/api/jobs/", timeout=10).status_code == 401
    for _ in range(20):  # the job agent registers a little after the dashboard answers
        submit = subprocess.run(
            [head_node["ray_bin"], "job", "submit", "--no-wait", "--address", head_node["dashboard"], "--",
             str(Path(sys.executable).with_name("rllib")), "train", "file", str(exp), "--storage-path", str(out), "-v", "0"],
            env=head_node["env"], capture_output=True, text=True, timeout=300,
        )
        if "No available agent" not in submit.stderr:
            break
        time.sleep(3)
    assert submit.returncode == 0, submit.stdout[-3000:] + submit.stderr[-3000:]
    (job_id,) = set(re.findall(r"raysubmit_\w+", submit.stdout))

    # While the job runs: the trial, its learner, its env runner and the runner's env server,
    # all alive at once (the server from the runner's first sample on).
    seen: dict = {}
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and _job_status(head_node, job_id) in ("PENDING", "RUNNING"):
        alive = [a for a in _actors(head_node) if a["state"] == "ALIVE"]
        learners = [a for a in alive if a["repr_name"] == "GRPOTorchLearner(agentgym/textcraft)"]
        runners = [a for a in alive if a["class_name"] == "LLMEnvRunner"]
        servers = [a for a in alive if a["class_name"] == "EnvServer"]
        trials = [a for a in alive if a["class_name"] == "GRPO"]
        if learners and runners and servers and trials:
            seen = dict(learners=learners, runners=runners, servers=servers, trials=trials)
            break
        time.sleep(1)
    assert seen, [(a["class_name"], a["name"], a["repr_name"], a["state"]) for a in _actors(head_node)]
    assert len(seen["learners"]) == 1 and len(seen["runners"]) == 1 and len(seen["servers"]) == 1
    (runner,), (server,) = seen["runners"], seen["servers"]
    assert runner["repr_name"] == "LLMEnvRunner(agentgym/textcraft, training runner 1)"
    # The env server is a named actor of the job's namespace, owned by the env runner.
    assert server["name"] == f"agentgym-env-server/textcraft/1/0-{runner['actor_id'][:8]}"
    assert server["ray_namespace"] == runner["ray_namespace"]
    assert server["repr_name"].startswith("EnvServer(envs.textcraft at http://127.0.0.1:")

    while time.monotonic() < deadline and _job_status(head_node, job_id) in ("PENDING", "RUNNING"):
        time.sleep(2)
    assert _job_status(head_node, job_id) == "SUCCEEDED"
    (result,) = list(out.glob("job-grpo/GRPO_*/result.json"))
    rows = [json.loads(line) for line in result.read_text().splitlines() if line.strip()]
    assert [r["training_iteration"] for r in rows] == [1, 2]
    assert all(r["env_runners"]["num_episodes"] == 2 for r in rows)
    # After the run every one of them is gone, the env server with its runner.
    ids = {a["actor_id"] for group in seen.values() for a in group}
    states = {a["actor_id"]: a["state"] for a in _actors(head_node) if a["actor_id"] in ids}
    assert set(states.values()) == {"DEAD"}, states

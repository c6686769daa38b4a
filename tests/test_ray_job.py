"""A training run submitted as a Ray job to a running cluster (`ray start --head`), with
Ray 2.60's token auth, and the actors it shows in the dashboard's state API. Slow: it starts
a whole cluster with its dashboard."""

from __future__ import annotations

import json
import os
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


def test_job_submit_trains_and_shows_named_actors(head_node, tmp_path):
    import httpx

    spec = {"job-grpo": {
        "run": "GRPO", "env": "agentgym/textcraft", "stop": {"training_iteration": 1},
        "config": {"inference_engine": "hf", "max_model_len": 1024, "max_new_tokens": 8, "max_turns": 1,
                   "group_size": 2, "tasks_per_iteration": 1, "num_env_runners": 1},
    }}
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump(spec))
    out = tmp_path / "results"
    # Without a token the dashboard refuses the request.
    assert httpx.get(head_node["dashboard"] + "/api/jobs/", timeout=10).status_code == 401
    for _ in range(20):  # the job agent registers a little after the dashboard answers
        submit = subprocess.run(
            [head_node["ray_bin"], "job", "submit", "--address", head_node["dashboard"], "--",
             str(Path(sys.executable).with_name("rllib")), "train", "file", str(exp), "--storage-path", str(out), "-v", "0"],
            env=head_node["env"], capture_output=True, text=True, timeout=900,
        )
        if "No available agent" not in submit.stderr:
            break
        time.sleep(3)
    assert submit.returncode == 0, submit.stdout[-3000:] + submit.stderr[-3000:]
    assert "succeeded" in submit.stdout
    (result,) = list(out.glob("job-grpo/GRPO_*/result.json"))
    assert json.loads(result.read_text().splitlines()[-1])["training_iteration"] == 1

    actors = httpx.get(head_node["dashboard"] + "/api/v0/actors", params={"detail": "1", "limit": "1000"},
                       headers=head_node["headers"], timeout=30).json()["data"]["result"]["result"]
    names = {a["class_name"] for a in actors}
    # The Tune trial (the Algorithm) and the remote env runner, by their class names.
    assert {"GRPO", "LLMEnvRunner"} <= names, names

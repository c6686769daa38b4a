"""Reliability: env servers that die, hang or answer garbage; bad model output;
runner actors that die; resume from a checkpoint; sessions that free what they hold.

Real servers throughout: TextCraft as a subprocess (`python -m envs.textcraft
--port 0`, killed with SIGKILL) or in a thread (uvicorn on loopback), a socket
that accepts and never answers (a hung server), and a small FastAPI app that
answers 500 or garbage. The runner uses the transformers engine on the
embedded model, seeded, so a run with faults can be compared token for token
with a clean in-process run.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Iterator

import httpx
import numpy as np
import psutil
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from loopback import hanging_server, serve_in_thread

from envs.textcraft.env import TextCraftEnv
from envs.textcraft.expert import ExpertAgent
from envs.textcraft.server import create_app as textcraft_app
from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
from rllib_agentgym.env_runners.llm_env_runner import FORMAT_ERROR_KINDS, LLMEnvRunner, check_response
from rllib_agentgym.envs.client import (
    EndpointPool,
    EnvFailure,
    HTTPEnvClient,
    LocalEnvServer,
    RetryPolicy,
    tls_context,
)
from rllib_agentgym.envs.registry import get_spec

ROOT = Path(__file__).resolve().parents[1]
TASKS = [3]  # x group_size 2: one session on each of two servers
FAST_RETRY = {"client_timeout_s": 1.0, "client_retries": 2, "client_backoff_s": 0.05}


# ---- faulty servers (see also loopback.py) ---------------------------------------------

def broken_app(mode: str) -> FastAPI:
    """Answers every route with a 500, a non-JSON page, or JSON of the wrong shape."""
    app = FastAPI()

    @app.api_route("/{path:path}", methods=["GET", "POST"])
    async def anything(request: Request, path: str):
        if mode == "500":
            return JSONResponse(status_code=500, content={"error": "internal error"})
        if mode == "garbage":
            return PlainTextResponse("<html><body>502 Bad Gateway</body></html>\x00\xff")
        return JSONResponse({"id": "not-an-int", "obs": None, "reward": "lots"})

    return app


def flaky_proxy(upstream: str, fail_at: set[int]) -> FastAPI:
    """Forwards to a real server, but the /steps numbered in `fail_at` run upstream and then
    answer 500: the step happened, its reply was lost (the hardest case for a client)."""
    app = FastAPI()
    client = httpx.AsyncClient(base_url=upstream, timeout=10)
    steps = {"n": 0}

    @app.api_route("/{path:path}", methods=["GET", "POST"])
    async def forward(request: Request, path: str):
        reply = await client.request(request.method, "/" + path, content=await request.body(),
                                     params=request.query_params, headers={"content-type": "application/json"})
        if path == "step":
            steps["n"] += 1
            if steps["n"] in fail_at:
                return JSONResponse(status_code=500, content={"error": "injected fault"})
        return JSONResponse(status_code=reply.status_code, content=reply.json())

    return app


def poisoning_proxy(upstream: str, poisoned: set[int]) -> FastAPI:
    """Forwards to a real server, but answers every /step of a session playing a task in
    `poisoned` (a set the test may change) with a non-JSON page. Recreated sessions are reset
    to the same task, so they fail too: those trajectories cannot be completed."""
    app = FastAPI()
    client = httpx.AsyncClient(base_url=upstream, timeout=10)
    task_of: dict[int, int] = {}  # session id -> data_idx of its last /reset

    @app.api_route("/{path:path}", methods=["GET", "POST"])
    async def forward(request: Request, path: str):
        body = await request.body()
        sent = json.loads(body) if body.strip() else {}
        if path == "reset":
            task_of[sent["id"]] = sent["data_idx"]
        if path == "step" and task_of.get(sent.get("id")) in poisoned:
            return PlainTextResponse("<html><body>502 Bad Gateway</body></html>")
        reply = await client.request(request.method, "/" + path, content=body,
                                     params=request.query_params, headers={"content-type": "application/json"})
        return JSONResponse(status_code=reply.status_code, content=reply.json())

    return app


@pytest.fixture(scope="module")
def textcraft_url() -> Iterator[str]:
    with serve_in_thread(textcraft_app()) as url:
        yield url


# ---- runners ---------------------------------------------------------------------------

def make_runner(env_config: dict, **llm) -> LLMEnvRunner:
    settings = dict(inference_engine="hf", max_model_len=1024, group_size=2, max_turns=2, max_new_tokens=4)
    settings.update(llm)
    config = (
        GRPOConfig()
        .environment("agentgym/textcraft", env_config={**FAST_RETRY, **env_config})
        .llm(**settings)
        .debugging(seed=0)
    )
    return LLMEnvRunner(config=config, worker_index=0)


def fingerprint(result) -> list[tuple]:
    """What a rollout produced, exactly: tokens, rewards, and every observation seen."""
    return [
        (t.data_idx, t.group_id, tuple(t.token_ids), t.reward, tuple(turn.observation for turn in t.turns), t.final_observation)
        for t in result.trajectories
    ]


def kill_before_generation(runner: LLMEnvRunner, call: int, kill) -> None:
    """Run `kill()` just before the runner's `call`-th generation (1-based): mid-rollout."""
    runner._ensure_engine()
    generate, calls = runner._engine.generate, {"n": 0}

    def spy(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == call:
            kill()
        return generate(*args, **kwargs)

    runner._engine.generate = spy


@pytest.fixture(scope="module")
def reference(embedded_model):
    """The clean run (in-process env) every faulty run must reproduce."""
    runner = make_runner({})
    try:
        result = runner.sample(task_ids=TASKS)
    finally:
        runner.stop()
    assert len(result.trajectories) == 2 and result.num_dropped == 0
    return result


# ---- bad model output --------------------------------------------------------------------

@pytest.mark.parametrize(
    "text, finished, expected",
    [
        ("Thought: I need logs.\nAction: get 1 oak log", True, ("get 1 oak log", None)),
        ("   \n ", True, ("", "empty")),
        ("Thought: I need logs.\nAction: get 1 oa", False, ("", "truncated")),
        ("I will get an oak log now.", True, ("", "no_action")),
        ("Action: get 1 oak log\nAction: inventory", True, ("", "multiple_actions")),
        ("Thought: two at once\nAction: get 1 oak log\ncraft 4 oak planks using 1 oak log", True, ("", "multiple_actions")),
    ],
)
def test_check_response_sorts_bad_output(text, finished, expected):
    assert check_response(get_spec("textcraft"), text, finished) == expected


def test_bad_output_takes_the_envs_invalid_action_path_and_is_counted(reference):
    # 4 new tokens cannot hold "Thought: ...\nAction: ...": every response is bad (cut by the
    # cap, or ended before any action), so each turn took the env's invalid-action path.
    result = reference
    assert result.num_actions == 4 and result.num_format_errors == 4
    assert sum(result.format_errors.values()) == 4 and set(result.format_errors) <= set(FORMAT_ERROR_KINDS)
    for traj in result.trajectories:
        assert [turn.action for turn in traj.turns] == ["", ""]
        assert not any(turn.valid_format for turn in traj.turns)
        assert all(turn.invalid_action for turn in traj.turns)  # what invalid_action_penalty counts
        assert traj.final_observation.startswith("Invalid action: ''")
        assert traj.reward == 0.0
    # Each kind reaches the env as its invalid-action observation.
    env = TextCraftEnv()
    env.reset(3)
    for text, finished in [("", True), ("no action here", True), ("Action: inventory\nAction: inventory", True)]:
        action, kind = check_response(get_spec("textcraft"), text, finished)
        step = env.step(action)
        assert kind is not None and step.info["invalid_action"] and step.reward == 0.0


# ---- env servers that die ------------------------------------------------------------------

def test_client_fails_over_and_replays_the_episode_when_its_server_is_killed():
    a, b = LocalEnvServer("envs.textcraft"), LocalEnvServer("envs.textcraft")
    try:
        client = HTTPEnvClient(EndpointPool([a.url, b.url]), retry=RetryPolicy(timeout_s=2, retries=2, backoff_s=0.05))
        twin = TextCraftEnv()  # the same episode in-process, for the expected observations
        observation = client.reset(595)
        assert observation == twin.reset(595)
        expert = ExpertAgent(twin)
        first = client.base_url
        done, steps = False, 0
        while not done:
            _, action = expert.act(twin.observation())
            expected = twin.step(action)
            if steps == 2:
                (a if first == a.url else b).kill()  # SIGKILL mid-episode
            got = client.step(action)
            assert (got.observation, got.reward, got.done) == (expected.observation, expected.reward, expected.done)
            done, steps = got.done, steps + 1
        assert got.info["success"] and steps > 3
        assert client.base_url != first  # the session moved to the live server (and was replayed there)
        survivor = b if first == a.url else a
        assert httpx.get(survivor.url + "/health").json()["sessions"] == 1
        client.close()
        assert httpx.get(survivor.url + "/health").json()["sessions"] == 0
    finally:
        a.stop()
        b.stop()


def test_runner_survives_servers_killed_mid_rollout(reference):
    a, b = LocalEnvServer("envs.textcraft"), LocalEnvServer("envs.textcraft")
    try:
        # Two servers, one killed before turn 2: its sessions fail over, replay, and finish.
        runner = make_runner({"server_url": [a.url, b.url]})
        kill_before_generation(runner, 2, a.kill)
        result = runner.sample(task_ids=TASKS)
        runner.stop()
        assert not a.alive() and result.num_dropped == 0
        assert fingerprint(result) == fingerprint(reference)

        # One server, killed before turn 2: every trajectory is dropped and counted, none scored ...
        runner = make_runner({"server_url": b.url})
        kill_before_generation(runner, 2, b.kill)
        start = time.monotonic()
        result = runner.sample(task_ids=TASKS)
        assert result.trajectories == [] and result.num_dropped == 2
        assert time.monotonic() - start < 30
        # ... and once a server is back at that address, sampling goes on (sessions are recreated).
        back = LocalEnvServer("envs.textcraft", port=b.port)
        try:
            again = runner.sample(task_ids=TASKS)
            assert again.num_dropped == 0 and len(again.trajectories) == 2
        finally:
            runner.stop()
            back.stop()
    finally:
        a.stop()
        b.stop()


def test_env_server_dies_with_the_process_that_started_it(tmp_path):
    """A runner killed with SIGKILL must not leave its `launch_server` subprocess behind."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, time\n"
        "from rllib_agentgym.envs.client import LocalEnvServer\n"
        "server = LocalEnvServer('envs.textcraft')\n"
        "print(server.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = psutil.Popen([psutil.Process().exe(), str(script)], stdout=-1, text=True, env=env)
    try:
        server_pid = int(parent.stdout.readline())
        assert psutil.pid_exists(server_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        _, alive = psutil.wait_procs([psutil.Process(server_pid)], timeout=15)
        assert not alive
    finally:
        if parent.poll() is None:
            parent.kill()


# ---- env servers that hang or answer garbage ---------------------------------------------------

def test_hanging_server_times_out_and_sessions_fail_over(reference, textcraft_url):
    with hanging_server() as hung:
        runner = make_runner({"server_url": [hung, textcraft_url]})
        try:
            start = time.monotonic()
            result = runner.sample(task_ids=TASKS)
            assert result.num_dropped == 0 and fingerprint(result) == fingerprint(reference)
            assert time.monotonic() - start < 30
        finally:
            runner.stop()

        runner = make_runner({"server_url": hung})
        try:
            start = time.monotonic()
            result = runner.sample(task_ids=TASKS)
            # timeout 1 s x 3 tries + backoff per session, sessions in parallel: bounded, then dropped.
            assert result.trajectories == [] and result.num_dropped == 2
            assert time.monotonic() - start < 20
        finally:
            stop_start = time.monotonic()
            runner.stop()
            assert time.monotonic() - stop_start < 10  # closing sessions on a hung server is bounded too


@pytest.mark.parametrize("mode", ["500", "garbage", "wrong-shape"])
def test_server_answering_errors_or_garbage(mode, reference, textcraft_url):
    with serve_in_thread(broken_app(mode)) as bad:
        runner = make_runner({"server_url": [bad, textcraft_url]})
        try:
            result = runner.sample(task_ids=TASKS)
            assert result.num_dropped == 0 and fingerprint(result) == fingerprint(reference)
        finally:
            runner.stop()
        runner = make_runner({"server_url": bad})
        try:
            result = runner.sample(task_ids=TASKS)
            assert result.trajectories == [] and result.num_dropped == 2
        finally:
            runner.stop()


def test_lost_step_replies_are_recovered_by_replay(reference, textcraft_url):
    # Three lost replies in all; a session survives up to five in a row (client_retries=5).
    with serve_in_thread(flaky_proxy(textcraft_url, fail_at={2, 5, 7})) as flaky:
        runner = make_runner({"server_url": flaky, "client_retries": 5})
        try:
            result = runner.sample(task_ids=TASKS)
        finally:
            runner.stop()
    assert result.num_dropped == 0 and fingerprint(result) == fingerprint(reference)


def test_client_never_retries_into_a_client_error(textcraft_url):
    client = HTTPEnvClient(textcraft_url, retry=RetryPolicy(timeout_s=2, retries=2, backoff_s=0.05))
    client.reset(3)
    with pytest.raises(EnvFailure, match="longer than"):
        client.step("x" * 70_000)  # 422 from the server: not a fault to retry
    assert client.step("inventory").observation.startswith("Inventory")
    client.close()


def test_sessions_and_probes_share_one_tls_context(textcraft_url, monkeypatch):
    """httpx reads the CA bundle for every client it builds a TLS context for (~40 ms): a runner's
    sessions (one per episode slot) and the pool's health probes must build it once per process."""
    built = []
    real = httpx.create_ssl_context
    monkeypatch.setattr(httpx, "create_ssl_context", lambda *a, **k: built.append(1) or real(*a, **k))
    tls_context.cache_clear()
    try:
        pool = EndpointPool([textcraft_url])
        clients = [HTTPEnvClient(pool) for _ in range(4)]
        assert pool.probe(textcraft_url)
        clients[0].reset(3)
        assert clients[0].step("inventory").observation.startswith("Inventory")
        for client in clients:
            client.close()
    finally:
        tls_context.cache_clear()
    assert len(built) == 1


# ---- sessions free what they hold ------------------------------------------------------------

def test_closed_http_sessions_free_server_fds_threads_and_memory():
    server = LocalEnvServer("envs.textcraft")
    proc = psutil.Process(server.pid)
    me = psutil.Process()
    pool = EndpointPool([server.url])

    def churn(n: int) -> None:
        clients = [HTTPEnvClient(pool, retry=RetryPolicy(timeout_s=5)) for _ in range(n)]
        for i, client in enumerate(clients):
            client.reset(i)
            client.step("inventory")
        for client in clients:
            client.close()

    try:
        churn(20)  # warm-up: thread pool, imports, allocator
        fds, threads, mine = proc.num_fds(), proc.num_threads(), me.num_fds()
        rss = proc.memory_info().rss
        for _ in range(3):
            churn(50)
        time.sleep(0.5)  # let the server see the last connections close
        assert httpx.get(server.url + "/health").json()["sessions"] == 0
        assert proc.num_fds() <= fds + 2
        assert proc.num_threads() <= threads + 2
        assert me.num_fds() <= mine + 2  # the clients closed their sockets too
        assert proc.memory_info().rss < rss * 1.05
    finally:
        server.stop()


# ---- RLlib: a dying env runner actor, and resume -------------------------------------------------

def _tiny_grpo(**env_config) -> GRPOConfig:
    return (
        GRPOConfig()
        .environment("agentgym/textcraft", env_config=env_config)
        .llm(inference_engine="hf", max_model_len=1536, max_new_tokens=8, group_size=2, tasks_per_iteration=1,
             log_trajectories=0, scaling_inter={"schedule": [1, 2, 3], "interval": 1})
        .training(lr=1e-3, micro_batch_size=4, entropy_coeff=0.01)  # rewards are all 0: entropy moves the weights
        .debugging(seed=0)
    )


@pytest.fixture
def no_home_results(tmp_path, monkeypatch):
    """Algorithms built outside Tune write their logdir under tmp_path, not ~/ray_results."""
    import ray.tune.trainable.trainable as trainable

    monkeypatch.setattr(trainable, "DEFAULT_STORAGE_PATH", str(tmp_path / "ray_results"))


# Slow: two runner actor processes start (each imports torch, transformers and RLlib and loads the
# model) around a restart Ray performs; with the tiny hf config that is 75 s at load 8-10 here, and
# no cheaper variant avoids those two starts.
@pytest.mark.slow
def test_killed_env_runner_is_restarted_and_the_iteration_completes(ray_local, embedded_model, no_home_results):
    server = LocalEnvServer("envs.textcraft")
    config = (
        _tiny_grpo(server_url=server.url, **FAST_RETRY)
        .env_runners(num_env_runners=1)
        .fault_tolerance(restart_failed_env_runners=True, delay_between_env_runner_restarts_s=0.0,
                         env_runner_restore_timeout_s=240.0)
    )
    algo = config.build_algo()
    try:
        (old_pid,) = algo.env_runner_group.foreach_env_runner(lambda r: os.getpid(), local_env_runner=False)

        def kill_when_sampling() -> None:
            while httpx.get(server.url + "/health").json()["sessions"] == 0:
                time.sleep(0.05)
            os.kill(old_pid, signal.SIGKILL)

        killer = threading.Thread(target=kill_when_sampling, daemon=True)
        killer.start()
        result = algo.train()
        killer.join(timeout=5)
        assert not killer.is_alive()  # the runner was killed while it sampled ...
        runners = result["env_runners"]
        assert runners["num_episodes"] == 2 and runners["num_dropped_episodes"] == 0  # ... and the iteration is whole
        (new_pid,) = algo.env_runner_group.foreach_env_runner(lambda r: os.getpid(), local_env_runner=False)
        assert new_pid != old_pid
        # The restarted runner got the schedule's horizon for the next iteration.
        assert algo.env_runner_group.foreach_env_runner(lambda r: r.get_max_turns(), local_env_runner=False) == [2]
        assert algo.train()["env_runners"]["num_episodes"] == 2
    finally:
        algo.stop()
        server.stop()


def _capture_rollouts(algo) -> list:
    """Record what the local runner's sample() returns (the algorithm still gets it)."""
    runner, seen = algo.env_runner_group.local_env_runner, []
    sample = runner.sample

    def recording(**kwargs):
        seen.append(sample(**kwargs))
        return seen[-1]

    runner.sample = recording
    return seen


def _weights(algo) -> dict[str, np.ndarray]:
    weights = algo.learner_group.get_weights()
    weights = weights.get("default_policy", weights)
    return {k: np.asarray(v) for k, v in weights.items()}


def _optimizer_tensors(algo) -> list[np.ndarray]:
    state = algo.learner_group.get_state()["learner"]["optimizer"]
    found: list[np.ndarray] = []

    def walk(x) -> None:
        if isinstance(x, dict):
            for key in sorted(x, key=str):
                walk(x[key])
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
        elif hasattr(x, "shape"):
            found.append(np.asarray(x))

    walk(state)
    return found


def _record_learner_batches(algo) -> list[list]:
    """Record the trajectories each iteration hands to the learner (GRPO._build_batch's input)."""
    built, build = [], algo._build_batch

    def recording(trajectories):
        built.append(list(trajectories))
        return build(trajectories)

    algo._build_batch = recording
    return built


def test_training_drops_trajectories_it_cannot_complete_and_goes_on(ray_local, embedded_model, textcraft_url,
                                                                   no_home_results):
    poisoned = {4}  # every session of task 4 gets garbage for its steps, through every retry
    with serve_in_thread(poisoning_proxy(textcraft_url, poisoned)) as proxy:
        algo = _tiny_grpo(server_url=proxy, task_ids=[3, 4], **FAST_RETRY).llm(tasks_per_iteration=2).build_algo()
        try:
            rollouts, batches = _capture_rollouts(algo), _record_learner_batches(algo)
            weights_before = _weights(algo)
            result = algo.train()
            runners = result["env_runners"]
            # Task 4's two trajectories could not be completed: dropped and counted ...
            assert rollouts[0].num_dropped == 2 and runners["num_dropped_episodes"] == 2
            assert runners["num_episodes"] == 2
            # ... and never scored: the learner got task 3's two trajectories and nothing else.
            assert len(batches) == 1 and batches[0] == rollouts[0].trajectories
            assert [t.data_idx for t in batches[0]] == [3, 3]
            assert any(not np.array_equal(w, weights_before[k]) for k, w in _weights(algo).items())

            # Training goes on: the next iteration runs (the server behaves again: all four complete).
            poisoned.clear()
            result = algo.train()
            assert result["training_iteration"] == 2
            assert result["env_runners"]["num_dropped_episodes"] == 0 and result["env_runners"]["num_episodes"] == 4
            assert sorted(t.data_idx for t in batches[1]) == [3, 3, 4, 4]
        finally:
            algo.stop()


def _expected_format_error(text: str, ids: list[int], eos_id: int) -> str | None:
    """The format error of a response of at most two tokens, read off its tokens (what
    check_response should find): blank, cut by the cap, or one token that holds no action."""
    if not text.strip():
        return "empty"
    if ids[-1] != eos_id:
        return "truncated"
    assert get_spec("textcraft").parse_action(text) is None, text
    return "no_action"


def _turn_token_ids(trajectory) -> list[list[int]]:
    """The sampled ids of each turn: the runs of loss_mask 1 (observations lie between them)."""
    runs: list[list[int]] = []
    previous = 0
    for token, sampled in zip(trajectory.token_ids, trajectory.loss_mask):
        if sampled and not previous:
            runs.append([])
        if sampled:
            runs[-1].append(token)
        previous = sampled
    return runs


def test_training_result_reports_format_error_rates_of_the_batch(ray_local, embedded_model, no_home_results):
    from transformers import AutoTokenizer

    # Two new tokens cannot hold "Thought: ...\nAction: ...": every response is bad, and which
    # kind each is follows from its tokens alone.
    config = _tiny_grpo().llm(max_new_tokens=2, tasks_per_iteration=2, scaling_inter=None, max_turns=2)
    algo = config.build_algo()
    try:
        rollouts = _capture_rollouts(algo)
        runners = algo.train()["env_runners"]
    finally:
        algo.stop()
    eos_id = AutoTokenizer.from_pretrained(embedded_model).eos_token_id
    kinds = []
    for trajectory in rollouts[0].trajectories:
        assert len(trajectory.turns) == 2  # nothing ends a TextCraft episode but the horizon here
        for turn, ids in zip(trajectory.turns, _turn_token_ids(trajectory), strict=True):
            assert len(ids) <= 2 and not turn.valid_format and turn.action == ""
            kinds.append(_expected_format_error(turn.response, ids, eos_id))
    assert len(kinds) == 8  # 2 tasks x 2 episodes x 2 turns, all of them actions
    assert runners["format_error_rate"] == 1.0
    # An unparseable reply is an invalid turn too: all 8 of them.
    assert all(turn.invalid_action for t in rollouts[0].trajectories for turn in t.turns)
    assert runners["invalid_action_rate"] == 1.0
    assert set(runners["format_error_rate_by_kind"]) == set(FORMAT_ERROR_KINDS)
    for kind in FORMAT_ERROR_KINDS:
        assert runners["format_error_rate_by_kind"][kind] == kinds.count(kind) / len(kinds), kind


def _save_then_train_once_more(config, iterations: int, checkpoint_dir: Path) -> dict:
    """Train `iterations`, save, and play one more iteration: what an uninterrupted run does next."""
    algo = config.build_algo()
    try:
        for _ in range(iterations):
            algo.train()
        saved = {"checkpoint": algo.save_to_path(str(checkpoint_dir)), "weights": _weights(algo),
                 "optimizer": _optimizer_tensors(algo)}
        seen = _capture_rollouts(algo)
        saved["result"] = algo.train()
        saved["rollout"], saved["next_weights"] = seen[0], _weights(algo)
        return saved
    finally:
        algo.stop()


def _restore_and_train_once(saved: dict, iterations: int):
    """Restore the checkpoint and play the next iteration: (its rollout, weights after it, its result)."""
    from ray.rllib.algorithms.algorithm import Algorithm

    resumed = Algorithm.from_checkpoint(saved["checkpoint"])
    try:
        assert resumed.iteration == iterations
        for a, b in zip(_optimizer_tensors(resumed), saved["optimizer"], strict=True):
            np.testing.assert_array_equal(a, b)
        for name, value in _weights(resumed).items():
            np.testing.assert_array_equal(value, saved["weights"][name], err_msg=name)
        assert resumed.env_runner_group.local_env_runner.get_max_turns() == iterations + 1  # h(it) = it + 1
        seen = _capture_rollouts(resumed)
        result = resumed.train()
        return seen[0], _weights(resumed), result
    finally:
        resumed.stop()


def _assert_same_next_iteration(saved: dict, rollout, weights, result, iterations: int) -> None:
    uninterrupted, expected = saved["result"], saved["rollout"]
    assert result["training_iteration"] == uninterrupted["training_iteration"] == iterations + 1
    assert result["env_runners"]["horizon"] == uninterrupted["env_runners"]["horizon"] == iterations + 1
    # Same tasks, same group ids, same sampled tokens, same rewards ...
    assert rollout.trajectories
    assert [(t.data_idx, t.group_id, t.token_ids, t.reward) for t in rollout.trajectories] == [
        (t.data_idx, t.group_id, t.token_ids, t.reward) for t in expected.trajectories
    ]
    # ... and the same parameters after the update (optimizer state and step count included).
    assert weights.keys() == saved["next_weights"].keys()
    assert any(not np.array_equal(weights[k], saved["weights"][k]) for k in weights)
    for name in weights:
        np.testing.assert_array_equal(weights[name], saved["next_weights"][name], err_msg=name)


def test_resumed_run_continues_exactly_like_an_uninterrupted_one(ray_local, embedded_model, tmp_path, no_home_results):
    saved = _save_then_train_once_more(_tiny_grpo(), 1, tmp_path / "checkpoint")
    assert saved["optimizer"]  # Adam moments exist after one update
    _assert_same_next_iteration(saved, *_restore_and_train_once(saved, 1), iterations=1)


@pytest.mark.slow  # two vLLM engines and five GRPO iterations: ~1-2 min on a loaded 2-core machine
def test_run_resumed_at_a_later_iteration_on_vllm_continues_like_an_uninterrupted_one(
        ray_local, embedded_model, tmp_path, no_home_results):
    """Stopped after iteration 2 and restored, a run on the vLLM engine (the default) plays
    iteration 3 exactly as the uninterrupted run does: the iteration count, the schedule's
    horizon h(2) = 3, the optimizer state, the task draw and group ids, and (vLLM's per-request
    seeds on the same restored weights) the sampled tokens, rewards and updated parameters."""
    config = _tiny_grpo().llm(inference_engine="vllm", tasks_per_iteration=2)
    saved = _save_then_train_once_more(config, 2, tmp_path / "checkpoint")
    rollout, weights, result = _restore_and_train_once(saved, 2)
    assert max(t.num_turns for t in rollout.trajectories) == 3
    _assert_same_next_iteration(saved, rollout, weights, result, iterations=2)

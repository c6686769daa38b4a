"""Per-step latency of the WebArena env (action + observation), in-process and over HTTP; prints JSON.

    python benchmarks/webarena_step_latency.py [--tasks 18] [--mode both|inproc|http]

The scripted expert plays the first tasks of the test split on the embedded
sites; every `step` is timed end to end (parse, Chromium action, waiting for a
navigation it started, accessibility tree, text rendering; over HTTP also the
loopback round trip to `python -m envs.webarena`). Steps are grouped by action
kind (`stop` includes grading). Observation-only cost is timed separately.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envs.webarena import tasks  # noqa: E402
from envs.webarena.env import WebArenaEnv  # noqa: E402
from envs.webarena.expert import ExpertAgent  # noqa: E402


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {
        "n": len(ordered),
        "mean_ms": round(1000 * statistics.fmean(ordered), 1),
        "p50_ms": round(1000 * pick(0.5), 1),
        "p90_ms": round(1000 * pick(0.9), 1),
    }


class _Http:
    """The env over HTTP, with `.task` for the expert."""

    def __init__(self, base: str):
        self.http = httpx.Client(base_url=base, timeout=120)
        self.id = self.http.post("/create", json={}).json()["id"]

    def reset(self, idx: int) -> str:
        obs = self.http.post("/reset", json={"id": self.id, "data_idx": idx}).json()["observation"]
        self.task = self.http.get("/task", params={"id": self.id}).json()
        return obs

    def close(self) -> None:
        self.http.post("/close", json={"id": self.id})


def _play(reset, step, agent_env, ids: list[int], times: dict[str, list[float]]) -> int:
    solved = 0
    for idx in ids:
        obs = reset(idx)
        agent = ExpertAgent(agent_env)
        for _ in range(15):
            _, action = agent.act(obs)
            start = time.perf_counter()
            obs, done, success = step(action)
            times[action.split(" ")[0].split("[")[0]].append(time.perf_counter() - start)
            if done:
                solved += int(success)
                break
    return solved


def run_inproc(ids: list[int]) -> dict[str, Any]:
    env = WebArenaEnv()
    times: dict[str, list[float]] = defaultdict(list)

    def step(action: str):
        r = env.step(action)
        return r.observation, r.done, bool(r.info.get("success"))

    try:
        solved = _play(env.reset, step, env, ids, times)
        env.reset(ids[0])
        observe = []
        for _ in range(20):
            start = time.perf_counter()
            env._render()  # noqa: SLF001 - the observation alone: AX tree + text
            observe.append(time.perf_counter() - start)
    finally:
        env.close()
    every = [t for ts in times.values() for t in ts]
    return {
        "solved": solved,
        "episodes": len(ids),
        "step": _summary(every),
        "by_action": {k: _summary(v) for k, v in sorted(times.items())},
        "observation_only": _summary(observe),
    }


def run_http(ids: list[int]) -> dict[str, Any]:
    server = subprocess.Popen(
        [sys.executable, "-m", "envs.webarena", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    try:
        line = server.stdout.readline()
        base = line.split()[1]
        env = _Http(base)
        times: dict[str, list[float]] = defaultdict(list)

        def step(action: str):
            body = env.http.post("/step", json={"id": env.id, "action": action}).json()
            return body["observation"], body["done"], bool(body["info"].get("success"))

        solved = _play(env.reset, step, env, ids, times)
        env.close()
    finally:
        server.terminate()
        server.wait(10)
    every = [t for ts in times.values() for t in ts]
    return {
        "solved": solved,
        "episodes": len(ids),
        "step": _summary(every),
        "by_action": {k: _summary(v) for k, v in sorted(times.items())},
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=18)
    parser.add_argument("--mode", choices=["both", "inproc", "http"], default="both")
    args = parser.parse_args(argv)
    test = tasks.default_set().split_ids("test", with_judge=False)
    # Spread over the sites: round-robin over the per-site lists.
    per_site: dict[str, list[int]] = defaultdict(list)
    for idx in test:
        per_site[tasks.category(idx)].append(idx)
    ids = [i for group in zip(*per_site.values()) for i in group][: args.tasks]
    report: dict[str, Any] = {"tasks": ids}
    if args.mode in ("both", "inproc"):
        report["inproc"] = run_inproc(ids)
    if args.mode in ("both", "http"):
        report["http"] = run_http(ids)
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()

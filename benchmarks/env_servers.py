"""Env server throughput and step latency, over HTTP and in-process, at 1 and 32 sessions.

    python benchmarks/env_servers.py                      # every family under envs/
    python benchmarks/env_servers.py --families textcraft --steps 600 --out textcraft.json

For each family (textcraft, babyai, sciworld, searchqa, webarena; a missing
or failing one is skipped with a note), the family's ExpertAgent first plays
a few tasks in-process to record valid action scripts. The same scripts are
then replayed through the framework's own clients: `InProcessEnvClient` (the
env class in this process) and `HTTPEnvClient` against a real
`python -m envs.<family> --port 0` server on loopback. Every `step` call is
timed end to end; `reset` is timed apart. With N sessions, N threads each
drive their own session at once; steps/s is the aggregate over the wall
time (resets between episodes included). In-process and HTTP rounds
alternate (3 each), so load that comes and goes falls on both alike.

What HTTP adds per step is measured two ways:
- transport: each HTTP step's client round trip minus the server's own time
  in `env.step` (its `Server-Timing: app;dur=` header), per step, p50 / p99.
  This is HTTP alone (connection, JSON, routing, the server's thread pool),
  free of the engine's own variance; the target (under 2 ms p50 at one
  session, loopback) is judged on it.
- difference: HTTP step p50 minus in-process step p50. For engines whose
  step time varies by itself (ScienceWorld's JVM, WebArena's Chromium), and
  with the engine in another process under load, this mixes engine variance
  into the HTTP cost; it is kept for comparison.

Sessions whose engine is its own process (a JVM, a browser) cost memory:
the in-process and HTTP sessions of one level are open at once, so such a
family's session count is capped to what fits a memory budget
(`--memory-budget-gib`, at most 80% of the memory available at start) by
its measured resident size per session (SESSION_RSS_MIB). The RSS of the
engine processes is recorded per session after each level.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/env_servers.py`

from benchmarks.common import emit, median, meta, percentile, process_tree_rss  # noqa: E402

FAMILIES = ("textcraft", "babyai", "sciworld", "searchqa", "webarena")
# Resident size of one session's engine process, measured: a ScienceWorld JVM through a benchmark
# session's life here (start, 4 resets on different tasks, 3 steps each) grew 128 -> 229 MiB
# (2026-11-25). It keeps growing with steps played (508 MiB after 160 expert steps, 780 MiB after
# 480: the JVM's default heap cap is 1/4 of RAM and it collects lazily), so longer runs cap lower.
SESSION_RSS_MIB = {"sciworld": 256}
MEMORY_BUDGET_GIB = 16.0
# Families whose steps cost tens of ms get fewer steps per measurement.
DEFAULT_STEP_BUDGETS = {"sciworld": 120, "webarena": 120}
HTTP_OVERHEAD_TARGET_MS = 2.0


@dataclass
class Script:
    data_idx: int
    actions: list[str]


def record_scripts(family: str, num_tasks: int, max_steps: int = 40) -> list[Script]:
    """Valid action sequences: the family's expert playing the first tasks of its test split."""
    from rllib_agentgym.envs.registry import get_spec

    spec = get_spec(family)
    expert_cls = spec.load_expert_class()
    try:
        ids = spec.split_ids("test")
    except KeyError:
        ids = spec.split_ids("train")
    env = spec.load_env_class()(**spec.env_options)
    scripts = []
    try:
        for data_idx in ids[: max(num_tasks * 3, num_tasks)]:
            if len(scripts) == num_tasks:
                break
            observation = env.reset(data_idx)
            try:
                agent = expert_cls(env)
            except ValueError:  # the expert does not play this task kind
                continue
            actions = []
            for _ in range(max_steps):
                try:
                    _, action = agent.act(observation)
                except Exception:  # the expert gave up: the recorded prefix is still valid
                    break
                result = env.step(action)
                actions.append(action)
                observation = result.observation
                if result.done:
                    break
            if actions:
                scripts.append(Script(int(data_idx), actions))
    finally:
        env.close()
    if not scripts:
        raise RuntimeError(f"the {family} expert produced no actions")
    return scripts


def memory_session_cap(session_rss_mib: float, budget_gib: float, sides: int = 2) -> int:
    """The most sessions per side such that `sides` sides of them fit in `budget_gib` (at least 1)."""
    return max(1, int(budget_gib * 1024 // (sides * session_rss_mib)))


def engine_rss_mib(root_pid: int, exclude: Sequence[int] = ()) -> float:
    """RSS of the processes under `root_pid` (its engines: JVMs, browsers), minus the `exclude` subtrees."""
    return process_tree_rss(root_pid, exclude, include_root=False) / 2**20


class Driver:
    """`sessions` sessions (each driven by its own thread) that replay the scripts in timed rounds."""

    def __init__(self, make_session: Callable[[], Any], scripts: Sequence[Script], sessions: int):
        self.scripts, self.sessions = scripts, sessions
        self.step_s: list[float] = []
        # Per HTTP step: the server's own env.step time (Server-Timing), and round trip minus it.
        self.server_s: list[float] = []
        self.transport_s: list[float] = []
        self.untimed_steps = 0  # HTTP steps whose reply carried no Server-Timing
        self.reset_s: list[float] = []
        self.wall_s = 0.0
        self._next_script = list(range(sessions))  # sessions start on different tasks

        def open_warm(k: int):
            # A session's first calls pay one-off costs (connection, lazy imports, JIT): not timed.
            client = make_session()
            script = scripts[k % len(scripts)]
            client.reset(script.data_idx)
            client.step(script.actions[0])
            return client

        with ThreadPoolExecutor(max_workers=min(sessions, 16)) as pool:
            self.clients = list(pool.map(open_warm, range(sessions)))

    def run(self, total_steps: int) -> None:
        """One round: every session plays scripts until it has made its share of `total_steps` steps."""
        per_session = max(1, math.ceil(total_steps / self.sessions))
        start = threading.Barrier(self.sessions + 1)
        step_s: list[list[float]] = [[] for _ in range(self.sessions)]
        reset_s: list[list[float]] = [[] for _ in range(self.sessions)]
        server_s: list[list[float | None]] = [[] for _ in range(self.sessions)]

        def worker(k: int) -> None:
            client, steps, resets, servers = self.clients[k], step_s[k], reset_s[k], server_s[k]
            start.wait()
            while len(steps) < per_session:
                script = self.scripts[self._next_script[k] % len(self.scripts)]
                self._next_script[k] += 1
                t0 = time.perf_counter()
                client.reset(script.data_idx)
                resets.append(time.perf_counter() - t0)
                for action in script.actions:
                    if len(steps) >= per_session:
                        break
                    t0 = time.perf_counter()
                    result = client.step(action)
                    steps.append(time.perf_counter() - t0)
                    server_ms = getattr(client, "last_server_ms", None)  # HTTP clients only
                    servers.append(None if server_ms is None else server_ms / 1e3)
                    if result.done:
                        break

        with ThreadPoolExecutor(max_workers=self.sessions) as pool:
            futures = [pool.submit(worker, k) for k in range(self.sessions)]
            start.wait()
            t0 = time.perf_counter()
            for f in futures:
                f.result()
            self.wall_s += time.perf_counter() - t0
        self.step_s += [x for s in step_s for x in s]
        self.reset_s += [x for s in reset_s for x in s]
        for steps, servers in zip(step_s, server_s):
            for round_trip, server in zip(steps, servers):
                if server is None:
                    self.untimed_steps += 1
                else:
                    self.server_s.append(server)
                    self.transport_s.append(round_trip - server)

    def close(self) -> None:
        with ThreadPoolExecutor(max_workers=min(self.sessions, 16)) as pool:
            list(pool.map(lambda c: c.close(), self.clients))

    def summary(self) -> dict[str, Any]:
        """steps/s counts the resets between tasks in the wall time (sessions play episodes back to back)."""
        summary = {
            "sessions": self.sessions,
            "steps": len(self.step_s),
            "wall_s": round(self.wall_s, 4),
            "steps_per_s": round(len(self.step_s) / self.wall_s, 1),
            "step_p50_ms": round(1e3 * median(self.step_s), 3),
            "step_p99_ms": round(1e3 * percentile(self.step_s, 0.99), 3),
            "reset_p50_ms": round(1e3 * median(self.reset_s), 3),
        }
        if self.server_s:  # HTTP against a server that sends Server-Timing
            summary.update({
                "server_step_p50_ms": round(1e3 * median(self.server_s), 3),
                "transport_p50_ms": round(1e3 * median(self.transport_s), 3),
                "transport_p99_ms": round(1e3 * percentile(self.transport_s, 0.99), 3),
                "timed_steps": len(self.server_s),
                "untimed_steps": self.untimed_steps,
            })
        return summary


def run_family(
    family: str,
    sessions: Sequence[int] = (1, 32),
    steps: int | None = None,
    num_tasks: int = 4,
    session_cap: int | None = None,
    rounds: int = 3,
    memory_budget_gib: float = MEMORY_BUDGET_GIB,
) -> dict[str, Any]:
    """In-process and HTTP measurements of one family; raises if the family cannot run here.

    In-process and HTTP rounds alternate, so a change in the machine's load
    during the run falls on both sides alike.
    """
    from rllib_agentgym.envs.client import HTTPEnvClient, InProcessEnvClient, LocalEnvServer
    from rllib_agentgym.envs.registry import get_spec

    spec = get_spec(family)
    steps = int(steps or DEFAULT_STEP_BUDGETS.get(family, 400))
    cap, cap_reason = session_cap, "--session-cap"
    if cap is None and family in SESSION_RSS_MIB:
        import psutil

        budget = min(memory_budget_gib, 0.8 * psutil.virtual_memory().available / 2**30)
        cap = memory_session_cap(SESSION_RSS_MIB[family], budget)
        cap_reason = (f"2 sides x {cap} sessions x {SESSION_RSS_MIB[family]} MiB (one engine process each, "
                      f"measured RSS) fit a {budget:.1f} GiB memory budget")
    levels = sorted({min(n, cap) if cap else n for n in sessions})
    scripts = record_scripts(family, num_tasks)
    env_class = spec.load_env_class()
    out: dict[str, Any] = {
        "scripts": [{"data_idx": s.data_idx, "steps": len(s.actions)} for s in scripts],
        "inprocess": {},
        "http": {},
        "engine_rss_mib_per_session": {},
    }
    if cap and any(n > cap for n in sessions):
        out["note"] = f"sessions capped at {cap} for {family}: {cap_reason}"
    server = LocalEnvServer(spec.server_module)
    try:
        for n in levels:
            drivers = {
                "inprocess": Driver(lambda: InProcessEnvClient(env_class, spec.env_options), scripts, n),
                "http": Driver(lambda: HTTPEnvClient(server.url, spec.env_options), scripts, n),
            }
            try:
                for _ in range(rounds):
                    for driver in drivers.values():
                        driver.run(max(1, steps // rounds))
                # The engines' memory now, per session: the figure the session cap assumes.
                out["engine_rss_mib_per_session"][str(n)] = {
                    "inprocess": round(engine_rss_mib(os.getpid(), exclude=[server.pid]) / n, 1),
                    "http": round(engine_rss_mib(server.pid) / n, 1),
                }
            finally:
                for driver in drivers.values():
                    driver.close()
            for mode, driver in drivers.items():
                out[mode][str(n)] = driver.summary()
    finally:
        server.stop()
    out["http_overhead_p50_ms"] = {
        key: round(out["http"][key]["step_p50_ms"] - out["inprocess"][key]["step_p50_ms"], 3) for key in out["http"]
    }
    out["http_transport_p50_ms"] = {key: out["http"][key].get("transport_p50_ms") for key in out["http"]}
    out["http_transport_p99_ms"] = {key: out["http"][key].get("transport_p99_ms") for key in out["http"]}
    # Judged on the transport alone; on the p50 difference only for a server that sends no Server-Timing.
    single = out["http_transport_p50_ms"][str(levels[0])]
    out["target_measure"] = "transport" if single is not None else "difference"
    if single is None:
        single = out["http_overhead_p50_ms"][str(levels[0])]
    out["target_met"] = single < HTTP_OVERHEAD_TARGET_MS
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma-separated env families")
    parser.add_argument("--sessions", default="1,32", help="concurrent session counts")
    parser.add_argument("--steps", type=int, default=None, help="steps per measurement (default: per family)")
    parser.add_argument("--tasks", type=int, default=4, help="expert scripts recorded per family")
    parser.add_argument("--memory-budget-gib", type=float, default=MEMORY_BUDGET_GIB,
                        help="for families with an engine process per session (sciworld): their sessions must fit "
                             "this (and 80%% of the available memory)")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {
        "benchmark": "env_servers",
        "meta": meta(__file__, argv),
        "target_http_overhead_p50_ms": HTTP_OVERHEAD_TARGET_MS,
        "families": {},
    }
    sessions = [int(x) for x in args.sessions.split(",")]
    for family in [f.strip() for f in args.families.split(",") if f.strip()]:
        try:
            result["families"][family] = run_family(family, sessions, args.steps, args.tasks,
                                                    memory_budget_gib=args.memory_budget_gib)
        except Exception as exc:  # a family missing or failing here is a note, not a crash
            result["families"][family] = {"skipped": f"{type(exc).__name__}: {exc}"[:500]}
    return emit(result, args.out)


if __name__ == "__main__":
    main()

"""End to end: `rllib train file tuned_examples/{babyai,sciworld}_cpu.yaml`, shortened.

The same path a user takes: the CLI loads the classic YAML, Tune runs GRPO,
the env runner launches the family's server (`launch_server: true`) and the
embedded agent model plays through vLLM. Two iterations each, the ScalingInter
interval cut to 1 so both horizons of the file's schedule appear. SciWorld's
env sessions each own a JVM: they and the server must be gone afterwards.
"""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml

from rllib_agentgym.cli import main
from run_files import trial_results

ROOT = Path(__file__).resolve().parents[1]


class DescendantWatch:
    """Records this process's descendants while it runs: pid -> (start time, command lines seen).

    The env servers and their JVMs live in Ray workers for the whole run, so a
    poll every half second sees every one of them. Command lines are read at
    every poll: a child caught between fork and exec still shows its parent's.
    """

    def __init__(self, period_s: float = 0.5):
        self.seen: dict[int, tuple[float, set[str]]] = {}
        self._period_s = period_s
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "DescendantWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stopping.set()
        self._thread.join()

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stopping.is_set():
            for proc in me.children(recursive=True):
                try:
                    start, cmd = proc.create_time(), " ".join(proc.cmdline())
                except psutil.Error:
                    continue  # gone (or hidden) before we looked
                if self.seen.get(proc.pid, (start,))[0] != start:
                    del self.seen[proc.pid]  # the pid was reused: the earlier process is gone
                self.seen.setdefault(proc.pid, (start, set()))[1].add(cmd)
            self._stopping.wait(self._period_s)

    def matching(self, *needles: str) -> dict[int, float]:
        """pid -> start time of the recorded processes with a command line holding every needle."""
        return {
            pid: start
            for pid, (start, cmds) in self.seen.items()
            if any(all(n in cmd for n in needles) for cmd in cmds)
        }


def _still_running(processes: dict[int, float], timeout_s: float = 30.0) -> set[int]:
    """Those of `processes` (pid -> start time) still alive after up to `timeout_s` (a reused pid is gone)."""

    def alive(pid: int, start: float) -> bool:
        try:
            proc = psutil.Process(pid)
            return proc.create_time() == start and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + timeout_s
    running = set(processes)
    while running and time.monotonic() < deadline:
        running = {pid for pid in running if alive(pid, processes[pid])}
        time.sleep(0.1)
    return running


def _train_shortened(example: str, tmp_path: Path, **config) -> tuple[list[dict], Path]:
    """Run tuned_examples/<example>.yaml for 2 iterations with `config` overrides; (results, trial dir)."""
    spec = yaml.safe_load((ROOT / "tuned_examples" / f"{example}.yaml").read_text())
    (name,) = spec
    exp = spec[name]
    exp["stop"] = {"training_iteration": 2}
    exp["checkpoint_config"] = {"checkpoint_frequency": 0, "checkpoint_at_end": False}
    exp["config"].update(config)
    exp["config"]["scaling_inter"]["interval"] = 1
    path = tmp_path / f"{example}.yaml"
    path.write_text(yaml.safe_dump(spec))

    assert main(["train", "file", str(path), "--storage-path", str(tmp_path / "results"), "-v", "0"]) == 0
    (trial,) = list((tmp_path / "results" / name).glob("GRPO_*"))
    results = trial_results(trial)
    assert [r["training_iteration"] for r in results] == [1, 2]
    return results, trial


def _check_rollout_metrics(results: list[dict], trial: Path, spec, horizons: list[int], episodes: int) -> None:
    """Horizon, reward / success and per-category success of each iteration, against its logged episodes."""
    assert [r["env_runners"]["horizon"] for r in results] == horizons
    for result, horizon in zip(results, horizons):
        runners = result["env_runners"]
        assert runners["num_episodes"] == episodes
        logged = [json.loads(line) for line in (trial / "trajectories" / f"iter_{result['training_iteration']:06d}.jsonl")
                  .read_text().splitlines() if line.strip()]
        assert len(logged) == episodes  # log_trajectories (4) >= episodes: every one is there
        assert all(t["num_turns"] <= horizon for t in logged)
        assert all(t["category"] == spec.category(t["data_idx"]) for t in logged)
        assert set(spec.split_ids("train")) >= {t["data_idx"] for t in logged}
        assert runners["episode_return_mean"] == pytest.approx(sum(t["reward"] for t in logged) / episodes)
        assert runners["success_rate"] == pytest.approx(sum(t["success"] for t in logged) / episodes)
        # A category sampled in an earlier iteration only stays in the result as NaN.
        by_category = {c: rate for c, rate in runners["success_rate_by_category"].items() if not math.isnan(rate)}
        assert set(by_category) == {t["category"] for t in logged}
        for category, rate in by_category.items():
            members = [t["success"] for t in logged if t["category"] == category]
            assert rate == pytest.approx(sum(members) / len(members)), category
        assert "policy_loss" in result["learners"]["default_policy"]


@pytest.mark.slow
def test_babyai_cpu_yaml_trains(ray_local, tmp_path):
    from rllib_agentgym.envs.specs.babyai import SPEC

    with DescendantWatch() as watch:
        results, trial = _train_shortened("babyai_cpu", tmp_path, group_size=2, tasks_per_iteration=2)
    _check_rollout_metrics(results, trial, SPEC, horizons=[2, 4], episodes=4)
    servers = watch.matching("-m", "envs.babyai")
    assert len(servers) == 1, watch.seen
    assert not _still_running(servers)


@pytest.mark.slow
def test_sciworld_cpu_yaml_trains_and_leaves_no_jvm(ray_local, tmp_path):
    from rllib_agentgym.envs.specs.sciworld import SPEC

    with DescendantWatch() as watch:
        results, trial = _train_shortened("sciworld_cpu", tmp_path, group_size=2, tasks_per_iteration=1)
    _check_rollout_metrics(results, trial, SPEC, horizons=[12, 16], episodes=2)
    assert {c for r in results for c in r["env_runners"]["success_rate_by_category"]} == {"Find"}
    servers = watch.matching("-m", "envs.sciworld")
    jvms = watch.matching("java", "scienceworld")
    assert len(servers) == 1 and len(jvms) == 2  # one JVM per env session (group of 2), reused across resets
    assert not _still_running(servers) and not _still_running(jvms)

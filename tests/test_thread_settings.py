"""conftest's autouse fixture undoes a benchmark's in-process thread settings after each test.

The two tests run in file order: the first leaves the settings a benchmark's main() leaves
(benchmarks/common.py:limit_cpu_threads, with vLLM's CPU worker having swapped
torch.set_num_threads for a no-op), the second checks that the next test does not see them.
"""

from __future__ import annotations

import os

import pytest
import torch

from benchmarks.common import THREAD_ENV_VARS, limit_cpu_threads

_BEFORE: dict = {}


def test_a_benchmark_limits_threads_in_process(monkeypatch):
    _BEFORE.update(threads=torch.get_num_threads(), env=_thread_env())
    if torch.cuda.is_available() or _BEFORE["threads"] < 2:
        pytest.skip("limit_cpu_threads leaves a GPU machine alone, and one thread is already the least")
    # An earlier test that hosted vLLM's CPU worker in this process has swapped torch.set_num_threads
    # for a no-op; the benchmark must really set the count here for the next test to check.
    monkeypatch.setattr(torch, "set_num_threads", torch._C.set_num_threads)
    limit_cpu_threads(1)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # what vLLM's CPU worker does
    assert torch.get_num_threads() == 1
    assert os.environ["OMP_NUM_THREADS"] == "1"


def test_b_the_next_test_has_the_settings_back():
    if "threads" not in _BEFORE:
        pytest.skip("runs after test_a (file order)")
    assert torch.get_num_threads() == _BEFORE["threads"]
    assert _thread_env() == _BEFORE["env"]


def _thread_env() -> dict:
    return {name: os.environ.get(name) for name in THREAD_ENV_VARS}

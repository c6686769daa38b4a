"""Shared fixtures: a private local Ray cluster and a temp cache for built models."""

from __future__ import annotations

import os
import tempfile

import pytest

# Built models, exports and indexes go to a temp cache of this test session, not the
# user's ~/.cache (set before anything imports the package; Ray workers inherit it).
_OWN_CACHE = None
if "RLLIB_AGENTGYM_CACHE" not in os.environ:
    _OWN_CACHE = os.environ["RLLIB_AGENTGYM_CACHE"] = tempfile.mkdtemp(prefix="rllib_agentgym_test_cache_")


def pytest_sessionfinish(session, exitstatus):
    if _OWN_CACHE:
        import shutil

        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


@pytest.fixture(autouse=True)
def _restore_thread_settings():
    """A benchmark run in-process must not hand its thread settings to later tests: not the
    environment to their subprocesses and Ray actors (Ray keeps an OMP_NUM_THREADS that is
    already set), nor torch's intra-op thread count to the rest of this process."""
    import torch

    from benchmarks.common import THREAD_ENV_VARS

    saved_env = {name: os.environ.get(name) for name in THREAD_ENV_VARS}
    saved_threads = torch.get_num_threads()
    yield
    for name, value in saved_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if torch.get_num_threads() != saved_threads:
        # vLLM's CPU worker swaps torch.set_num_threads for a no-op in the process that hosts
        # it; the C function underneath still sets the count.
        torch._C.set_num_threads(saved_threads)


@pytest.fixture(scope="session")
def ray_local(tmp_path_factory):
    """A local Ray cluster of our own (never a running one), shut down at the end."""
    import ray

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        _temp_dir=str(tmp_path_factory.mktemp("ray")),
        log_to_driver=False,
    )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def embedded_model():
    """Path of the embedded Qwen2 model (built once into the user cache if missing)."""
    from rllib_agentgym.core.embedded import embedded_model_path

    return str(embedded_model_path())

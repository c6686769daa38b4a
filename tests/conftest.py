"""Shared fixtures: a private local Ray cluster and a temp cache for built models."""

from __future__ import annotations

import os

import pytest


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

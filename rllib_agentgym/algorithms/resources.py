"""The CPUs a trial's main process reserves when it trains on CPU itself.

Ray starts an actor with OMP_NUM_THREADS set to the CPUs it reserved, and torch runs
that many threads in it: the local learner's, and the vLLM CPU engine's of a local env
runner (the engine runs in-process). RLlib's `num_cpus_per_learner: "auto"` reserves one
CPU for a local learner, so `rllib train` on a 2-core machine sampled and trained on one
core while the other idled: an iteration of babyai_pretrained_30min_cpu.yaml (16 episodes)
took 208 s, against 138-160 s with 2 CPUs reserved (benchmarks/README.md).
"""

from __future__ import annotations

import math
import os
from typing import Sequence


def uses_local_cpu_learner(config) -> bool:
    """The main process runs the learner on CPU, at RLlib's default size ("auto")."""
    return config.num_learners == 0 and not config.num_gpus_per_learner and config.num_cpus_per_learner == "auto"


def main_process_cpus(requested: float, other_bundle_cpus: Sequence[float], node_cpus: float) -> float:
    """CPUs for the main process's bundle:

        max(requested, floor(node_cpus - sum(other bundles' CPUs)))

    the node's CPUs that the trial's env runners and evaluation runners leave, whole, and
    never fewer than RLlib's own request.
    """
    left = math.floor(node_cpus - sum(other_bundle_cpus) + 1e-9)
    return max(requested, float(left))


def free_node_cpus() -> float:
    """The CPUs a new bundle can get on one node of the running Ray cluster: the biggest
    alive node's, capped at those not held now (an actor left running keeps its own, and a
    request above what is free would wait forever), or this process's usable CPUs when Ray
    is not running. Free when the trial is created: one created while another trial holds
    the node asks for RLlib's size."""
    import ray

    if ray.is_initialized():
        sizes = [n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n.get("Alive")]
        if sizes:
            return float(min(max(sizes), ray.available_resources().get("CPU", 0.0)))
    return float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)

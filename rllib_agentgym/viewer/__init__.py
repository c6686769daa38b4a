"""Trajectory viewer: `rllib view RUN_DIR` serves a local page over a run's
logged trajectories (filterable by task, reward and iteration, each turn's
observation beside the agent's action) and its training curves."""

from rllib_agentgym.viewer.server import serve, view_main

__all__ = ["serve", "view_main"]

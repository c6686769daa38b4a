"""SciWorld (ScienceWorld): elementary-science tasks in a text world.

The engine is the `scienceworld` package (a Scala simulator in a bundled jar,
run on Java 17 through py4j); every env session owns one JVM. Task ids
(`data_idx`) follow AgentGym's SciWorld server: see `tasks.py` for the flat
task list, the engine's train / dev / test splits and the paper's
categories; `env.py` for observations, reward and invalid actions;
`expert.py` for the gold-path expert.
"""

from envs.sciworld.env import SciWorldEnv

__all__ = ["SciWorldEnv"]

"""Multi-agent text environments: several agents act in one episode.

`base` is the contract (turn-based and simultaneous play in one shape);
`tictactoe` and `connect_four` wrap PettingZoo's classic games through their
AEC API, rendered as text, with `opponents` as fixed evaluation opponents;
`coop_craft` is our cooperative crafting task that needs communication;
`pettingzoo_text` wraps any PettingZoo AEC or Parallel env (render function,
move names, legal moves from the action mask);
`conversation` plays an episode with scripted policies into per-agent chats;
`registry` makes envs by name. Server side: nothing here imports
`rllib_agentgym`.
"""

from envs.multiagent.base import MultiAgentTextEnv, MultiStepResult
from envs.multiagent.registry import (
    MULTIAGENT_ENVS,
    category,
    make_env,
    num_tasks,
    split_ids,
)

__all__ = ["MULTIAGENT_ENVS", "MultiAgentTextEnv", "MultiStepResult", "category", "make_env", "num_tasks", "split_ids"]

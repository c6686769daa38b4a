"""CoopCraft: a cooperative two-agent crafting task that needs communication.

`recipes` holds the small recipe set, `tasks` splits each goal's ingredients
and recipe knowledge between alice and bob, `env` plays a task under the
multi-agent text contract, `expert` scripts both players.
"""

from envs.multiagent.coop_craft.env import CoopCraftEnv
from envs.multiagent.coop_craft.expert import ScriptedCoopAgent

__all__ = ["CoopCraftEnv", "ScriptedCoopAgent"]

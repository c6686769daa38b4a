"""TextCraft: craft a Minecraft item from base items through text commands.

A re-implementation of AgentGym's TextCraft (after ADaPT, Prasad et al. 2023)
on the MIT-licensed `minecraft-data` recipes: `recipes` builds the recipe book
and crafting depths, `tasks` the goals, commands and splits, `env` plays a task,
`server` serves it over AgentGym's HTTP routes, `expert` solves it.
"""

from envs.textcraft.env import TextCraftEnv

__all__ = ["TextCraftEnv"]

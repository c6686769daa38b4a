"""Agent side of TextCraft: the instruction prompt and ReAct action parsing."""

from __future__ import annotations

from rllib_agentgym.envs.spec import EnvSpec, parse_react_action

INSTRUCTION = """\
You are crafting items in a text version of Minecraft. Each task gives you a list of crafting commands and a goal item to craft.

A crafting command has the form "craft [count] [item] using [count] [ingredient], [count] [ingredient], ...": it consumes the ingredients and makes the item. Use only the crafting commands listed in the task; some of them are not needed for the goal. An item that no listed command makes is a base item: get it from the environment.

Actions (exactly one per turn):
- get [count] [item]: fetch a base item, e.g. "get 1 oak log".
- craft [count] [item] using [count] [ingredient], ...: apply a listed command, e.g. "craft 4 oak planks using 1 oak log". To make more at once, multiply the item count and every ingredient count by the same number, e.g. "craft 8 oak planks using 2 oak log".
- inventory: list the items you hold.

Write item names exactly as in the commands. The task is solved as soon as the goal item is in your inventory.

Answer every turn in this format, with a short thought:
Thought: what you need next and why
Action: the single action to take"""

SPEC = EnvSpec(
    name="textcraft",
    env_class="envs.textcraft.env:TextCraftEnv",
    server_module="envs.textcraft",
    instruction=INSTRUCTION,
    parse_action=parse_react_action,
    tasks_module="envs.textcraft.tasks",
    default_max_new_tokens=64,
    augment="envs.textcraft.augment:rename_items",
)

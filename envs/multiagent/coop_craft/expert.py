"""Scripted CoopCraft players that talk their way to the goal.

`ScriptedCoopAgent(env, agent)` plays either role from the texts the agent
sees and nothing else: the recipes in its first observation, the inventory
line of every observation, and the partner's messages. It asks for what its
known recipes lack in one message ("please give me 2 fiber and 1 cord"),
hands over what the partner asks for as soon as it holds it, crafts what its
recipes allow, and crafts the goal when it can. Two of them solve every task
in five turns; one of them with a silent partner never can, since the
ingredients are split (see `tasks`).
"""

from __future__ import annotations

import re

_RECIPE = re.compile(r"\s+([a-z ]+) = (.+)")
_PART = re.compile(r"(\d+) ([a-z ]+)")
_GOAL = re.compile(r"must craft one ([a-z ]+) within")
_INVENTORY = re.compile(r"Your inventory: (.+)\.")
_REQUEST = re.compile(r"please give me (.+)")


def _counts(text: str) -> list[tuple[str, int]]:
    """[("fiber", 2), ("cord", 1)] from "2 fiber and 1 cord" / "2 fiber + 1 cord"."""
    return [(m.group(2).strip(), int(m.group(1))) for m in _PART.finditer(re.sub(r" (and|\+) ", ", ", text))]


class ScriptedCoopAgent:
    """A deterministic CoopCraft player; act(observation) -> (thought, action)."""

    def __init__(self, env, agent: str):
        self.agent = agent
        self.partner = env.partner(agent)
        self.recipes: dict[str, list[tuple[str, int]]] = {}
        self.goal: str | None = None
        self.asked = False
        self.requests: list[tuple[str, int]] = []  # what the partner asked for, not yet given
        self._said = re.compile(rf'{re.escape(self.partner)} said: "(.*)"')

    def act(self, observation: str) -> tuple[str, str]:
        self._read(observation)
        inventory = self._inventory(observation)
        if self.goal is not None and self._can_craft(self.goal, inventory):
            return f"I hold everything the {self.goal} needs.", f"craft {self.goal}"
        if not self.asked:
            self.asked = True
            wanted = self._wanted(inventory)
            if wanted:
                listing = " and ".join(f"{n} {item}" for item, n in wanted)
                return f"My recipes need items I lack; I ask {self.partner} for them.", f"say please give me {listing}"
        for item, n in self.requests:
            if inventory.get(item, 0) >= n:
                self.requests.remove((item, n))
                return f"{self.partner} asked for {n} {item} and I have it.", f"give {n} {item}"
        for item in self.recipes:
            if item != self.goal and not inventory.get(item) and self._can_craft(item, inventory):
                return f"I have the ingredients for {item}.", f"craft {item}"
        return "Nothing to do until my partner acts.", "wait"

    def _read(self, observation: str) -> None:
        for line in observation.splitlines():
            if match := _RECIPE.fullmatch(line):
                self.recipes[match.group(1)] = _counts(match.group(2))
            elif match := _GOAL.search(line):
                self.goal = match.group(1)
            elif (match := self._said.fullmatch(line)) and (request := _REQUEST.fullmatch(match.group(1))):
                self.requests.extend(_counts(request.group(1)))

    @staticmethod
    def _inventory(observation: str) -> dict[str, int]:
        match = _INVENTORY.search(observation)
        return {} if match is None else dict(_counts(match.group(1)))

    def _can_craft(self, item: str, inventory: dict[str, int]) -> bool:
        return item in self.recipes and all(inventory.get(i, 0) >= n for i, n in self.recipes[item])

    def _wanted(self, inventory: dict[str, int]) -> list[tuple[str, int]]:
        """What my recipes lack: missing ingredients of the parts I can make, and the parts I cannot."""
        wanted = []
        for item, ingredients in self.recipes.items():
            if item == self.goal:
                wanted += [(i, n) for i, n in ingredients if i not in self.recipes]
            else:
                wanted += [(i, n - inventory.get(i, 0)) for i, n in ingredients if inventory.get(i, 0) < n]
        return wanted

"""CoopCraft: two agents craft one item together, and must talk to do it.

alice and bob act simultaneously (both are in `agents_to_act()` every turn);
each sees only its own inventory and the recipes it was told (see `tasks` for
who knows and holds what). Actions, case-insensitive:

    say <message>       bob / alice reads it at the start of the next turn
    give <n> <item>     hand items to the partner ("... to bob" may be added)
    craft <item>        use the ingredients of the item's recipe (one item;
                        "craft <n> <item>" makes n)
    wait                do nothing this turn

All actions of a turn happen at once against the inventories at its start:
items and messages sent arrive at the end of the turn. An action that cannot
be read or done (unknown item, too few items) changes nothing, costs that
agent the turn and answers what was wrong (info["invalid_action"][agent]).
Failing to craft an item whose recipe the agent was not told does not reveal
the recipe.

The episode ends with reward 1 for both agents as soon as either holds the
goal item, or with reward 0 for both after `max_turns` turns.
"""

from __future__ import annotations

import re
from typing import Any

from envs.multiagent.base import MultiStepResult, check_actions
from envs.multiagent.coop_craft.recipes import ITEMS, RECIPES, Recipe
from envs.multiagent.coop_craft.tasks import AGENTS, ROLES, Task, build_task

ACTION_FORMS = "say <message>, give <n> <item>, craft <item>, wait"

_SAY = re.compile(r"say\s*:?\s+(.+)", re.IGNORECASE | re.DOTALL)
_GIVE = re.compile(r"give\s+(\d{1,6})\s+(.+?)(?:\s+to\s+(\w+))?", re.IGNORECASE)
_CRAFT = re.compile(r"craft\s+(?:(\d{1,6})\s+)?(.+)", re.IGNORECASE)
_SPACES = re.compile(r"\s+")


class ActionFailed(Exception):
    """The action could not be read or done; the message goes to the agent."""


def item_name(text: str) -> str:
    """Normalize an item name: lower case, single spaces, a plural 's' dropped."""
    name = _SPACES.sub(" ", text.strip().strip("\"'").rstrip(".").lower())
    if name not in ITEMS and name.endswith("s") and name[:-1] in ITEMS:
        return name[:-1]
    return name


def inventory_text(inventory: dict[str, int]) -> str:
    if not inventory:
        return "Your inventory is empty."
    return "Your inventory: " + ", ".join(f"{n} {item}" for item, n in sorted(inventory.items())) + "."


class CoopCraftEnv:
    """One CoopCraft session (the multi-agent text contract of `envs.multiagent.base`)."""

    name = "coop_craft"

    def __init__(self, max_turns: int = 8, n_decoys: int = 5, max_message_chars: int = 300):
        if int(max_turns) < 1:
            raise ValueError("max_turns must be at least 1")
        self.max_turns = int(max_turns)
        self.n_decoys = int(n_decoys)
        self.max_message_chars = int(max_message_chars)
        self.possible_agents: list[str] = list(AGENTS)
        self.roles: dict[str, str] = dict(ROLES)
        self._task: Task | None = None
        self._inventories: dict[str, dict[str, int]] = {}
        self._turn = 0
        self._done = False

    # -- contract -----------------------------------------------------------

    def reset(self, data_idx: int) -> dict[str, str]:
        self._task = build_task(int(data_idx), self.n_decoys)
        self._inventories = {a: dict(inv) for a, inv in self._task.inventories.items()}
        self._turn, self._done = 0, False
        return {a: self._intro(a) + f"\nTurn 1 of {self.max_turns}.\n" + inventory_text(self._inventories[a]) for a in AGENTS}

    def agents_to_act(self) -> list[str]:
        return [] if self._done or self._task is None else list(AGENTS)

    def step(self, actions: dict[str, str]) -> MultiStepResult:
        if self._task is None:
            raise RuntimeError("call reset(data_idx) before step()")
        if self._done:
            raise RuntimeError("the episode is over; call reset(data_idx)")
        check_actions(list(AGENTS), actions)
        self._turn += 1
        results: dict[str, str] = {}
        invalid: dict[str, bool] = {}
        arrivals: dict[str, list[str]] = {a: [] for a in AGENTS}
        gifts: list[tuple[str, str, int]] = []  # (receiver, item, n)
        for agent in AGENTS:
            partner = self.partner(agent)
            try:
                results[agent], delivered = self._execute(agent, str(actions[agent]))
                invalid[agent] = False
            except ActionFailed as exc:
                results[agent], delivered = f"{exc} Valid actions: {ACTION_FORMS}.", None
                invalid[agent] = True
            if delivered is not None:
                kind, payload = delivered
                if kind == "say":
                    arrivals[partner].append(f'{agent} said: "{payload}"')
                else:
                    item, n = payload
                    gifts.append((partner, item, n))
                    arrivals[partner].append(f"{agent} gave you {n} {item}.")
        for receiver, item, n in gifts:
            self._inventories[receiver][item] = self._inventories[receiver].get(item, 0) + n
        crafted_by = next((a for a in AGENTS if self._inventories[a].get(self._task.goal, 0) > 0), None)
        success = crafted_by is not None
        self._done = success or self._turn >= self.max_turns
        reward = 1.0 if success else 0.0
        info: dict[str, Any] = {"invalid_action": invalid, "turn": self._turn, "success": success, "crafted_by": crafted_by}
        observations = {}
        for agent in AGENTS:
            lines = [results[agent], *arrivals[agent]]
            if success:
                lines.append(f"The goal {self._task.goal} is crafted: success! The episode is over.")
            elif self._done:
                lines.append(f"The turn limit ({self.max_turns}) is reached without the goal item: failure. The episode is over.")
            else:
                lines.append(f"Turn {self._turn + 1} of {self.max_turns}.")
            lines.append(inventory_text(self._inventories[agent]))
            observations[agent] = "\n".join(lines)
        return MultiStepResult(observations, dict.fromkeys(AGENTS, reward), self._done, info)

    def close(self) -> None:
        self._task = None
        self._inventories = {}

    # -- task facts --------------------------------------------------------

    @property
    def task(self) -> Task:
        if self._task is None:
            raise RuntimeError("no task yet: call reset(data_idx)")
        return self._task

    def partner(self, agent: str) -> str:
        return AGENTS[1 - AGENTS.index(agent)]

    def inventory(self, agent: str) -> dict[str, int]:
        return dict(self._inventories[agent])

    # -- texts and actions ---------------------------------------------------

    def _intro(self, agent: str) -> str:
        partner = self.partner(agent)
        task = self.task
        if self.roles[agent] == "leader":
            head = (
                f"You are {agent}. You and your partner {partner} must craft one {task.goal} within "
                f"{self.max_turns} turns; either of you may craft it."
            )
        else:
            head = (
                f"You are {agent}. Your partner {partner} knows which item the two of you must craft "
                f"within {self.max_turns} turns; help {partner} get it crafted."
            )
        recipes = "\n".join("  " + r.text() for r in task.known[agent])
        return (
            f"{head} You see only your own inventory, and {partner} only theirs.\n"
            f"Recipes you know:\n{recipes}\n{partner} knows recipes that you do not.\n"
            f"Each turn you both act at once. Actions: say <message> ({partner} reads it next turn), "
            f"give <n> <item> (to {partner}; it arrives at the end of the turn), "
            "craft <item> (uses the ingredients of its recipe from your inventory), wait."
        )

    def _execute(self, agent: str, action: str) -> tuple[str, tuple[str, Any] | None]:
        """Do `agent`'s action on its own inventory; (result text, delivery to the partner)."""
        text = _SPACES.sub(" ", action.strip())
        if text.lower().rstrip(".") == "wait":
            return "You waited.", None
        if match := _SAY.fullmatch(text):
            message = match.group(1).strip().strip("\"'")[: self.max_message_chars]
            if not message:
                raise ActionFailed("Your message is empty.")
            return f'You said to {self.partner(agent)}: "{message}"', ("say", message)
        if match := _GIVE.fullmatch(text.rstrip(".")):
            return self._give(agent, int(match.group(1)), item_name(match.group(2)), match.group(3))
        if match := _CRAFT.fullmatch(text.rstrip(".")):
            return self._craft(agent, int(match.group(1) or 1), item_name(match.group(2))), None
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise ActionFailed(f"Could not read the action {shown!r}.")

    def _give(self, agent: str, n: int, item: str, to: str | None) -> tuple[str, tuple[str, Any]]:
        partner = self.partner(agent)
        if to is not None and to.lower() != partner:
            raise ActionFailed(f"You can only give items to your partner {partner}.")
        held = self._inventories[agent].get(item, 0)
        if n < 1:
            raise ActionFailed("Give at least 1 item.")
        if held < n:
            raise ActionFailed(f"You cannot give {n} {item}: you have {held}.")
        self._take(agent, item, n)
        return f"You gave {partner} {n} {item}.", ("give", (item, n))

    def _craft(self, agent: str, n: int, item: str) -> str:
        recipe: Recipe | None = RECIPES.get(item)
        if recipe is None:
            raise ActionFailed(f"You cannot craft {item}: no recipe makes it.")
        if n < 1:
            raise ActionFailed("Craft at least 1 item.")
        inventory = self._inventories[agent]
        missing = [(i, k * n - inventory.get(i, 0)) for i, k in recipe.ingredients if inventory.get(i, 0) < k * n]
        if missing:
            if recipe in self.task.known[agent]:
                need = ", ".join(f"{k} more {i}" for i, k in missing)
                raise ActionFailed(f"You cannot craft {n} {item}: you need {need}.")
            raise ActionFailed(f"You cannot craft {item}: you do not hold the ingredients of its recipe.")
        for i, k in recipe.ingredients:
            self._take(agent, i, k * n)
        inventory[item] = inventory.get(item, 0) + n
        return f"You crafted {n} {item}."

    def _take(self, agent: str, item: str, n: int) -> None:
        inventory = self._inventories[agent]
        inventory[item] -= n
        if not inventory[item]:
            del inventory[item]

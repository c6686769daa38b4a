"""TextCraft: craft a Minecraft item from fetched base items, in text.

Actions (case-insensitive; item names as in the commands, e.g. "oak planks"):

    get N item                       fetch a base item          -> "Got N item"
    craft N item using M a, K b      apply a crafting recipe    -> "Crafted N item"
    inventory                        list what is held          -> "Inventory: [oak planks] (4) ..."

`craft` accepts any Minecraft recipe of the item (not only the listed
commands, as in AgentGym), applied a whole number of times: N must be a
multiple of the recipe's output count and every ingredient count the same
multiple of the recipe's. The episode ends with reward 1 as soon as the goal
item is in the inventory. Anything else costs a step and answers a message
saying what was wrong, with info["invalid_action"] = True. Every step's
info["progress"] is the share of the goal's requirements met so far (`progress`).
"""

from __future__ import annotations

import re

from envs.common.env import StepResult
from envs.textcraft.progress import progress, requirements
from envs.textcraft.recipes import RecipeBook, item_name, load_recipe_book
from envs.textcraft.tasks import Task, build_task

# Counts are capped at 9 digits: Python refuses int() of very long digit strings.
_GET = re.compile(r"get\s+(\d{1,9})\s+(.+)")
_CRAFT = re.compile(r"craft\s+(?:(\d{1,9})\s+)?(.+?)\s+using\s+(.+)")
_COUNTED = re.compile(r"(\d{1,9})\s+(.+)")
_SPACES = re.compile(r"\s+")

VALID_ACTIONS = "get N item, craft N item using M ingredient, K ingredient, inventory"


class ActionFailed(Exception):
    """The action could not be parsed or executed; the message goes to the agent."""


def _normalize(text: str) -> str:
    return _SPACES.sub(" ", item_name(text.strip().lower()))


class TextCraftEnv:
    """One TextCraft session (the env contract of `envs.common.env`)."""

    def __init__(self, max_distractors: int = 10):
        # Bad option values are ValueErrors: the server answers them with 422.
        try:
            self.max_distractors = int(max_distractors)
        except OverflowError:  # int(inf)
            raise ValueError(f"max_distractors must be a whole number, got {max_distractors!r}") from None
        if self.max_distractors < 0:
            raise ValueError(f"max_distractors must be >= 0, got {max_distractors!r}")
        self._book: RecipeBook = load_recipe_book()
        self._task: Task | None = None
        self._inventory: dict[str, int] = {}
        self._obtained: dict[str, int] = {}  # running totals fetched or crafted, for info["progress"]
        self._needs: dict[str, int] = {}
        self._observation = ""
        self._done = False

    # -- contract ---------------------------------------------------------

    def reset(self, data_idx: int) -> str:
        self._task = build_task(int(data_idx), self.max_distractors)
        self._inventory = {}
        self._obtained = {}
        self._done = False
        self._observation = self._task.observation()
        self._needs = requirements(self._observation)
        return self._observation

    def step(self, action: str) -> StepResult:
        if self._task is None:
            raise RuntimeError("call reset(data_idx) before step()")
        if self._done:
            self._observation = f"The goal {self._task.goal} is already crafted; the episode is over."
            return StepResult(self._observation, 0.0, True, {"success": True, "invalid_action": True, "progress": 1.0})
        try:
            self._observation = self._execute(action)
            invalid = False
        except ActionFailed as exc:
            self._observation = str(exc)
            invalid = True
        self._done = self._inventory.get(self._task.goal, 0) > 0
        reward = 1.0 if self._done else 0.0
        reached = 1.0 if self._done else progress(self._needs, self._obtained)
        return StepResult(self._observation, reward, self._done,
                          {"success": self._done, "invalid_action": invalid, "progress": reached})

    def observation(self) -> str:
        return self._observation

    def close(self) -> None:
        self._task = None
        self._inventory = {}
        self._obtained = {}

    # -- task facts (the /commands and /goal routes) -----------------------

    @property
    def task(self) -> Task:
        if self._task is None:
            raise RuntimeError("no task yet: call reset(data_idx)")
        return self._task

    @property
    def goal(self) -> str:
        return self.task.goal

    @property
    def commands(self) -> str:
        """The task's crafting commands, one per line (AgentGym's /commands)."""
        return "\n".join(self.task.commands)

    @property
    def inventory(self) -> dict[str, int]:
        return dict(self._inventory)

    # -- actions ------------------------------------------------------------

    def _execute(self, action: str) -> str:
        text = _SPACES.sub(" ", action.strip()).rstrip(".").strip()
        lowered = text.lower()
        if lowered == "inventory":
            return self._show_inventory()
        if match := _GET.fullmatch(lowered):
            return self._get(int(match.group(1)), _normalize(match.group(2)))
        if match := _CRAFT.fullmatch(lowered):
            count = int(match.group(1) or 1)
            return self._craft(text, count, _normalize(match.group(2)), match.group(3))
        raise ActionFailed(f"Invalid action: {text!r}. Valid actions: {VALID_ACTIONS}.")

    def _show_inventory(self) -> str:
        if not self._inventory:
            return "Inventory: You are not carrying anything."
        return "Inventory: " + " ".join(f"[{item}] ({n})" for item, n in self._inventory.items())

    def _get(self, count: int, item: str) -> str:
        if count < 1:
            raise ActionFailed(f"Could not get {count} {item}: the count must be at least 1.")
        if item not in self._book.base:
            if item in self._book.recipes:
                raise ActionFailed(f"Could not find {item}. It cannot be fetched; craft it instead.")
            raise ActionFailed(f"Could not find {item}. There is no such base item.")
        self._inventory[item] = self._inventory.get(item, 0) + count
        self._obtained[item] = self._obtained.get(item, 0) + count
        return f"Got {count} {item}"

    def _craft(self, text: str, count: int, target: str, using: str) -> str:
        failed = f"Could not execute {text}"
        given: dict[str, int] = {}
        for part in using.split(","):
            match = _COUNTED.fullmatch(part.strip().lower())
            if match is None:
                raise ActionFailed(f"{failed}: wrong ingredient format {part.strip()!r}; write 'N item', e.g. '2 oak planks'.")
            item = _normalize(match.group(2))
            given[item] = given.get(item, 0) + int(match.group(1))
        recipes = self._book.recipes.get(target)
        if not recipes:
            raise ActionFailed(f"{failed}: {target} is not an item that can be crafted.")
        if count < 1:
            raise ActionFailed(f"{failed}: the count must be at least 1.")
        matching = [r for r in recipes if {i for i, _ in r.ingredients} == given.keys()]
        if not matching:
            raise ActionFailed(f"{failed}: no recipe makes {target} from exactly these ingredients.")
        for recipe in matching:
            times, rest = divmod(count, recipe.count)
            if rest == 0 and all(given[i] == n * times for i, n in recipe.ingredients):
                break
        else:
            sizes = " or ".join(sorted({str(r.count) for r in matching}))
            raise ActionFailed(
                f"{failed}: wrong quantities. A recipe makes {target} in batches of {sizes}; "
                "craft a multiple of that with every ingredient scaled by the same factor."
            )
        missing = [f"{n - self._inventory.get(i, 0)} more {i}" for i, n in given.items() if self._inventory.get(i, 0) < n]
        if missing:
            raise ActionFailed(f"Could not find enough items to craft {count} {target}: you need {', '.join(missing)}.")
        for item, n in given.items():
            left = self._inventory[item] - n
            if left:
                self._inventory[item] = left
            else:
                del self._inventory[item]
        self._inventory[target] = self._inventory.get(target, 0) + count
        self._obtained[target] = self._obtained.get(target, 0) + count
        return f"Crafted {count} {target}"

"""A planner that solves TextCraft from the listed crafting commands alone.

It reads only the task text (the "Crafting commands:" block and the goal), as
an LLM agent would; it never looks at the hidden recipe book. An item that
some listed command produces is crafted with that command; any other item is
fetched with `get`. The plan walks the recipe tree depth first, crafting each
item a whole number of batches and reusing leftovers, while it tracks the
inventory it expects; ingredients gathered for one craft are reserved so that
a sibling branch (sticks made from the planks meant for the table) cannot
spend them. Built on an in-process env mid-episode, it plans from what the
inventory already holds (so it can finish an agent's episode: recovery
conversations, rllib_agentgym/data/recovery.py).

Two thought styles (`ExpertAgent(env, thoughts=...)`):

* ``"steps"`` (default): each turn explains its own step ("I need 4 oak log
  for oak planks. No command crafts it, so I get it.").
* ``"plan"``: the first turn writes the whole plan as a scratchpad -- the
  listed command of every item on the way from the goal down to base items,
  then the actions in order -- and each later turn continues it ("Next in my
  plan after get 4 oak log; craft 16 oak planks using 4 oak log"). Every
  token of the plan is one short lookup in the task text or in the plan
  itself (copying) instead of the multi-hop search a "steps" first turn hides
  in one token. It needs a model that copies from its context: the first (11M)
  embedded agent trained on it did worse than on "steps" (docs/learning.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_COMMAND = re.compile(r"craft (\d+) (.+?) using (.+)")
_GOAL = re.compile(r"Goal: craft (.+)\.")


@dataclass(frozen=True)
class Command:
    output: str
    count: int
    ingredients: tuple[tuple[str, int], ...]

    def text(self, times: int) -> str:
        using = ", ".join(f"{n * times} {item}" for item, n in self.ingredients)
        return f"craft {self.count * times} {self.output} using {using}"


def parse_task(text: str) -> tuple[dict[str, Command], str]:
    """(first listed command per output item, goal item) from a task observation."""
    commands: dict[str, Command] = {}
    for line in text.splitlines():
        match = _COMMAND.fullmatch(line.strip())
        if match is None:
            continue
        parts = [p.strip().split(" ", 1) for p in match.group(3).split(",")]
        command = Command(match.group(2), int(match.group(1)), tuple((item, int(n)) for n, item in parts))
        commands.setdefault(command.output, command)
    goal = _GOAL.search(text)
    if goal is None:
        raise ValueError("the observation names no goal ('Goal: craft X.')")
    return commands, goal.group(1)


def _ingredient_list(command: Command) -> str:
    names = [item for item, _ in command.ingredients]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


THOUGHT_STYLES = ("steps", "plan")


class ExpertAgent:
    """Deterministic TextCraft expert: `act(observation) -> (thought, action)`."""

    def __init__(self, env, thoughts: str = "steps"):
        if thoughts not in THOUGHT_STYLES:
            raise ValueError(f"thoughts must be one of {THOUGHT_STYLES}, not {thoughts!r}")
        self.thoughts = thoughts
        if hasattr(env, "inventory"):
            # In process, plan from the env's state: an expert that takes over an
            # agent's episode midway (rllib_agentgym/data/recovery.py)
            # starts from what the agent already holds.
            self._steps = self._plan(env.task.observation(), held=env.inventory)
        else:  # a client that sees only observations: a fresh task
            self._steps = self._plan(env.observation())

    def act(self, observation: str) -> tuple[str, str]:
        if "Crafting commands:" in observation:  # a new task: plan it afresh
            self._steps = self._plan(observation)
        if self._steps:
            return self._steps.pop(0)
        return "The plan is done but the goal is not in my inventory yet; let me check what I hold.", "inventory"

    def _plan(self, task_text: str, held: dict[str, int] | None = None) -> list[tuple[str, str]]:
        commands, goal = parse_task(task_text)
        steps = self._search(commands, goal, held)
        if self.thoughts == "steps":
            return steps
        return plan_thoughts(commands, goal, [action for _, action in steps])

    @staticmethod
    def _search(commands: dict[str, Command], goal: str, inventory: dict[str, int] | None = None) -> list[tuple[str, str]]:
        held: dict[str, int] = dict(inventory or {})
        steps: list[tuple[str, str]] = []

        def obtain(item: str, need: int, parent: str | None, visiting: frozenset[str]) -> None:
            short = need - held.get(item, 0)
            if short <= 0:
                return
            command = commands.get(item)
            if command is None or item in visiting:
                reason = f" for {parent}" if parent else ""
                steps.append((f"I need {short} {item}{reason}. No command crafts it, so I get it.", f"get {short} {item}"))
                held[item] = held.get(item, 0) + short
                return
            times = -(-short // command.count)
            for ingredient, n in command.ingredients:
                obtain(ingredient, n * times, item, visiting | {item})
                held[ingredient] -= n * times  # reserve it, so later steps do not spend it
            if item == goal:
                thought = f"I have all the ingredients, so I craft the goal, {item}."
            else:
                thought = f"I need {short} {item}, which I can craft from {_ingredient_list(command)}."
            steps.append((thought, command.text(times)))
            held[item] = held.get(item, 0) + command.count * times

        obtain(goal, 1, None, frozenset())
        return steps


def expert_actions(task_text: str) -> list[str]:
    """The expert's actions for a fresh task, in order (its plan without the thoughts)."""
    commands, goal = parse_task(task_text)
    return [action for _, action in ExpertAgent._search(commands, goal)]


def _recipe_tree(commands: dict[str, Command], goal: str) -> list[str]:
    """"item: <its listed command>" / "item: base" for each item under `goal`, depth first, once each."""
    lines: list[str] = []
    seen: set[str] = set()

    def visit(item: str, visiting: frozenset[str]) -> None:
        if item in seen:
            return
        seen.add(item)
        command = commands.get(item)
        if command is None or item in visiting:
            lines.append(f"{item}: base")
            return
        lines.append(f"{item}: {command.text(1)}")
        for ingredient, _ in command.ingredients:
            visit(ingredient, visiting | {item})

    visit(goal, frozenset())
    return lines


def plan_thoughts(commands: dict[str, Command], goal: str, actions: list[str]) -> list[tuple[str, str]]:
    """The "plan" thought style: (thought, action) per action of the expert's plan."""
    tree = ". ".join(_recipe_tree(commands, goal))
    first = f"The goal is {goal}. {tree}. Plan: {'; '.join(actions)}."
    return [(first, actions[0])] + [
        (f"Next in my plan after {before}; {action}", action) for before, action in zip(actions, actions[1:])
    ]

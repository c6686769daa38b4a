"""Minecraft crafting recipes, loaded once per process from `minecraft-data`.

The data is the MIT-licensed `minecraft-data` package (PyPI `minecraft-data`,
import name `minecraft_data`), Java edition 1.17: its `recipes.json` holds the
crafting-table recipes only (shaped ones as an `inShape` grid, shapeless ones as
an `ingredients` list; no smelting), with Minecraft's item tags already
expanded into one recipe per variant (a stick from oak planks, one from birch
planks, ...). Item names are Minecraft's ids with spaces: `oak_planks` is
"oak planks".

Base items and depth
--------------------
Base items are the items `get N item` can fetch:

* items that no crafting recipe produces (oak log, string, stone, ...);
* raw materials: items that crafting only reaches through a cycle. Minecraft
  lets you pack 9 iron ingots into an iron block and unpack it again, and turn
  an ingot into 9 nuggets and back, so no recipe chain starts from uncraftable
  items. Each such cycle gets one raw material, the member used by the most
  recipes of items outside the cycle (iron ingot, coal, wheat, slime ball...);
  ties go to the member the cycle's own recipes consume in the largest
  quantity (the unpacked unit: 9 diamonds make a block), then to the name.

The crafting depth of an item is 0 for a base item and otherwise
``1 + min over its recipes of (max depth of the recipe's ingredients)``: the
fewest crafting levels from fetchable items (oak planks 1, crafting table 2).
Goals are all non-base items, i.e. depth >= 1.
"""

from __future__ import annotations

import functools
import json
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

MINECRAFT_VERSION = "1.17"


@dataclass(frozen=True)
class Recipe:
    """One crafting recipe: `ingredients` (name, count) in grid order make `count` x `output`."""

    output: str
    count: int
    ingredients: tuple[tuple[str, int], ...]

    def command(self) -> str:
        """The crafting command shown to the agent, e.g. ``craft 4 stick using 2 oak planks``."""
        using = ", ".join(f"{n} {item}" for item, n in self.ingredients)
        return f"craft {self.count} {self.output} using {using}"


@dataclass(frozen=True)
class RecipeBook:
    """All crafting recipes of one Minecraft version plus the derived task facts."""

    recipes: Mapping[str, tuple[Recipe, ...]]  # output item -> its distinct recipes
    items: frozenset[str]  # every item name of the version
    base: frozenset[str]  # items `get` can fetch
    depth: Mapping[str, int]  # item -> crafting depth (0 for base items)
    goals: tuple[str, ...]  # non-base items sorted by (depth, name)

    def min_depth_recipes(self, item: str) -> list[Recipe]:
        """The recipes of `item` that reach its (minimum) crafting depth."""
        want = self.depth[item] - 1
        return [r for r in self.recipes[item] if max(self.depth[i] for i, _ in r.ingredients) == want]


def item_name(minecraft_id: str) -> str:
    """``minecraft:oak_planks`` or ``oak_planks`` -> ``oak planks``."""
    return minecraft_id.removeprefix("minecraft:").replace("_", " ")


def _read_version_files(version: str) -> tuple[list[dict], dict]:
    root = resources.files("minecraft_data") / "data" / "data"
    paths = json.loads((root / "dataPaths.json").read_text())["pc"][version]
    items = json.loads((root / paths["items"] / "items.json").read_text())
    recipes = json.loads((root / paths["recipes"] / "recipes.json").read_text())
    return items, recipes


def _parse_recipes(items: list[dict], raw: dict) -> dict[str, tuple[Recipe, ...]]:
    names = {item["id"]: item_name(item["name"]) for item in items}
    parsed: dict[str, tuple[Recipe, ...]] = {}
    for result_id, variants in raw.items():
        output = names[int(result_id)]
        seen: dict[tuple, Recipe] = {}
        for variant in variants:
            cells = [c for row in variant.get("inShape", ()) for c in row if c is not None]
            cells += variant.get("ingredients", [])
            counts = Counter(names[c] for c in cells)  # insertion order = grid order
            recipe = Recipe(output, int(variant["result"]["count"]), tuple(counts.items()))
            # Mirrored shapes collapse to the same ingredient multiset.
            seen.setdefault((recipe.count, tuple(sorted(recipe.ingredients))), recipe)
        parsed[output] = tuple(seen.values())
    return parsed


def _depths(recipes: Mapping[str, tuple[Recipe, ...]], items: frozenset[str], base: set[str]) -> dict[str, float]:
    """Least fixed point of the depth equation (math.inf where no acyclic chain exists)."""
    depth: dict[str, float] = {i: (0 if i in base or i not in recipes else math.inf) for i in items}
    changed = True
    while changed:
        changed = False
        for item, options in recipes.items():
            if item in base:
                continue
            best = min(1 + max(depth[i] for i, _ in r.ingredients) for r in options)
            if best < depth[item]:
                depth[item] = best
                changed = True
    return depth


def _raw_materials(recipes: Mapping[str, tuple[Recipe, ...]], unresolved: set[str]) -> set[str]:
    """Pick one raw material in every crafting cycle that depends on no other unresolved item."""
    edges = {x: {i for r in recipes[x] for i, _ in r.ingredients if i in unresolved} for x in unresolved}

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        stack = list(edges[start])
        while stack:
            x = stack.pop()
            if x not in seen:
                seen.add(x)
                stack.extend(edges[x])
        return seen

    reachable = {x: reach(x) for x in unresolved}
    picked: set[str] = set()
    for x in sorted(unresolved):
        cycle = {y for y in reachable[x] if x in reachable[y]}
        if x not in cycle or reachable[x] != cycle or cycle & picked:
            continue  # not on a cycle, or the cycle waits on another unresolved item
        outside_users = {
            m: sum(1 for out, rs in recipes.items() if out not in cycle and any(m == i for r in rs for i, _ in r.ingredients))
            for m in cycle
        }
        consumed = {m: max((n for c in cycle for r in recipes[c] for i, n in r.ingredients if i == m), default=0) for m in cycle}
        picked.add(min(cycle, key=lambda m: (-outside_users[m], -consumed[m], m)))
    return picked


@functools.cache
def load_recipe_book(version: str = MINECRAFT_VERSION) -> RecipeBook:
    """Build (once per process) the recipe book of a Java-edition version."""
    raw_items, raw_recipes = _read_version_files(version)
    items = frozenset(item_name(i["name"]) for i in raw_items)
    recipes = _parse_recipes(raw_items, raw_recipes)
    base = {i for i in items if i not in recipes}
    while True:
        depth = _depths(recipes, items, base)
        unresolved = {i for i, d in depth.items() if d == math.inf}
        if not unresolved:
            break
        raw = _raw_materials(recipes, unresolved)
        assert raw, "a crafting cycle without a raw material"  # a finite DAG always has a sink cycle
        base |= raw
    final = {i: int(d) for i, d in depth.items()}
    goals = tuple(sorted((i for i in items if final[i] >= 1), key=lambda i: (final[i], i)))
    return RecipeBook(recipes=recipes, items=items, base=frozenset(base), depth=final, goals=goals)

"""CoopCraft's small, self-contained recipe set.

Every intermediate item is made from two different base items; every goal
from two intermediates whose base ingredients are four different items, so
a goal's recipe tree always has exactly four base ingredients and the rest of
the base items can serve as decoys. Every recipe makes one item.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Recipe:
    output: str
    ingredients: tuple[tuple[str, int], ...]

    def text(self) -> str:
        return f"{self.output} = " + " + ".join(f"{n} {item}" for item, n in self.ingredients)


def _recipe(output: str, *parts: tuple[int, str]) -> Recipe:
    return Recipe(output, tuple((item, n) for n, item in parts))


BASE_ITEMS: tuple[str, ...] = (
    "wood", "resin", "iron ore", "coal", "fiber", "wax", "sand", "copper ore", "tin", "clay",
    "stone", "wool", "dye", "flint", "feather", "glue", "leather", "buckle", "bone", "salt",
)

INTERMEDIATES: dict[str, Recipe] = {
    r.output: r
    for r in (
        _recipe("handle", (1, "wood"), (1, "resin")),
        _recipe("blade", (1, "iron ore"), (1, "coal")),
        _recipe("cord", (2, "fiber"), (1, "wax")),
        _recipe("glass", (2, "sand"), (1, "coal")),
        _recipe("wire", (2, "copper ore"), (1, "tin")),
        _recipe("brick", (2, "clay"), (1, "stone")),
        _recipe("cloth", (2, "wool"), (1, "dye")),
        _recipe("arrowhead", (1, "flint"), (1, "stone")),
        _recipe("fletching", (2, "feather"), (1, "glue")),
        _recipe("strap", (1, "leather"), (1, "buckle")),
    )
}

GOALS: dict[str, Recipe] = {
    r.output: r
    for r in (
        _recipe("knife", (1, "blade"), (1, "handle")),
        _recipe("bow", (1, "handle"), (1, "cord")),
        _recipe("lantern", (1, "glass"), (1, "wire")),
        _recipe("arrow", (1, "arrowhead"), (1, "fletching")),
        _recipe("banner", (1, "cloth"), (1, "handle")),
        _recipe("oven", (1, "brick"), (1, "glass")),
        _recipe("sling", (1, "strap"), (1, "cord")),
        _recipe("shield", (1, "cloth"), (1, "strap")),
        _recipe("spear", (1, "blade"), (1, "cord")),
        _recipe("furnace", (1, "brick"), (1, "wire")),
    )
}

RECIPES: dict[str, Recipe] = {**INTERMEDIATES, **GOALS}
ITEMS: frozenset[str] = frozenset(BASE_ITEMS) | frozenset(RECIPES)

"""A scripted searcher for the generated world: one search per hop.

It knows the relation chain of the question (from the env's task) but not
the world: it searches the entity the question names, finds that entity's
page among the results, reads the next entity's name off the prose
(world.extract inverts the page templates), searches that name, and so on;
after the last hop it answers the value it read. If a page is not among the
top-k it retries once with the entity kind added to the query.

`act()` returns (thought, action). The env reads the model's raw text, so
the action is a whole model turn, "<think>thought</think>\\n<search>q</search>";
the thought is the same reasoning as plain text.

Two thought styles (`ExpertAgent(env, thoughts=...)`) for what was read:

* ``"paraphrase"`` (default): "The page of Mesherk says its country is
  Venoueth." The name comes after words the page does not contain, so a
  model must find where it starts by content alone.
* ``"quote"``: "The page of Mesherk says: Mesherk is a city in Venoueth."
  The page's own sentence up to the value, so each token follows one it also
  follows on the page: a chain of short copies (induction) instead of one
  lookup for the name's first token.

    python -m envs.searchqa.expert --split test     # success rate per hop count
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from typing import Any

from envs.searchqa.actions import parse_information
from envs.searchqa.env import SearchQAEnv
from envs.searchqa.world import extract, extract_quote

_LABELS = {
    "birth_city": "birth city",
    "alma_mater": "university",
    "employer": "employer",
    "birth_year": "birth year",
    "country": "country",
    "river": "river",
    "founding_year": "founding year",
    "capital": "capital",
    "leader": "leader",
    "independence_year": "year of independence",
    "founder": "founder",
    "headquarters": "headquarters",
    "maker": "maker",
    "launch_year": "launch year",
    "location": "location",
    "source_country": "source country",
    "length_km": "length in kilometres",
}


THOUGHT_STYLES = ("paraphrase", "quote")


class ExpertAgent:
    def __init__(self, env: SearchQAEnv, thoughts: str = "paraphrase"):
        if thoughts not in THOUGHT_STYLES:
            raise ValueError(f"thoughts must be one of {THOUGHT_STYLES}, not {thoughts!r}")
        self._quote = thoughts == "quote"
        question = env.task.world_question if env.task is not None else None
        if question is None:
            raise ValueError("the scripted expert only plays generated-world questions (reset the env to one first)")
        self._path = question.path
        self._hop = 0
        self._subject = question.start
        self._query: str | None = None
        self._final: str | None = None

    def act(self, observation: str) -> tuple[str, str]:
        if self._final is not None:
            return self._answer(self._final, f"My answer stays {self._final}.")
        kind, field = self._path[self._hop]
        if self._query is None:
            hops = len(self._path)
            plan = f"This question takes {hops} lookups. " if hops > 1 else ""
            return self._search(self._subject, f"{plan}First I need the {_LABELS[field]} of {self._subject}, so I will search for it.")
        page = next((text for title, text in parse_information(observation) if title == self._subject), None)
        if page is None:
            if self._query == self._subject:
                return self._search(f"{self._subject} {kind}", f"No result is the page of {self._subject}; I will search again, naming it as a {kind}.")
            return self._answer("unknown", f"I could not find the page of {self._subject}.")
        value = extract(kind, field, page)
        if value is None:
            return self._answer("unknown", f"The page of {self._subject} does not state its {_LABELS[field]}.")
        if self._quote:
            fact = f"The page of {self._subject} says: {extract_quote(kind, field, page)}."
        else:
            fact = f"The page of {self._subject} says its {_LABELS[field]} is {value}."
        self._hop += 1
        if self._hop == len(self._path):
            self._final = value
            return self._answer(value, f"{fact} That answers the question.")
        self._subject = value
        next_field = self._path[self._hop][1]
        return self._search(value, f"{fact} Next I need the {_LABELS[next_field]} of {value}.")

    def _search(self, query: str, thought: str) -> tuple[str, str]:
        self._query = query
        return thought, f"<think>{thought}</think>\n<search>{query}</search>"

    @staticmethod
    def _answer(answer: str, thought: str) -> tuple[str, str]:
        return thought, f"<think>{thought}</think>\n<answer>{answer}</answer>"


def evaluate(split: str = "test", per_category: int | None = None, max_turns: int = 12, **env_options: Any) -> dict[str, dict[str, float]]:
    """Expert success rate (and mean searches) per category of `split`, in-process."""
    env = SearchQAEnv(**env_options)
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # episodes, successes, searches
    for data_idx in env.tasks.split_ids(split):
        category = env.tasks[data_idx].category
        if per_category is not None and counts[category][0] >= per_category:
            continue
        obs = env.reset(data_idx)
        agent = ExpertAgent(env)
        result = None
        for _ in range(max_turns):
            result = env.step(agent.act(obs)[1])
            obs = result.observation
            if result.done:
                break
        counts[category][0] += 1
        counts[category][1] += int(bool(result and result.info.get("success")))
        counts[category][2] += result.info["searches"] if result else 0
    env.close()
    return {
        cat: {"episodes": n, "success_rate": ok / n, "mean_searches": s / n}
        for cat, (n, ok, s) in sorted(counts.items())
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m envs.searchqa.expert", description="Run the scripted searcher on the generated world.")
    parser.add_argument("--split", default="test")
    parser.add_argument("--per-category", type=int, default=None, help="episodes per hop count (default: all)")
    parser.add_argument("--topk", type=int, default=3)
    parser.add_argument("--world-seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(evaluate(args.split, args.per_category, topk=args.topk, world_seed=args.world_seed), indent=2))


if __name__ == "__main__":
    main()

"""What the client side knows about one environment family.

An `EnvSpec` ties an env family's server (module `envs.<name>`) to the agent
side: the instruction prompt the LLM sees first, how its action is pulled out
of a generated text, task splits, and the category of each task for
per-category metrics.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

_REACT_ACTION = re.compile(r"Action:\s*(.*)", re.DOTALL)


def _import_ref(ref: str) -> Any:
    """The object a "module:name" reference names."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def check_task_pool(name: str, split: str, split_ids: Sequence[int], pool: Sequence[int]) -> None:
    """A clear error unless `pool` (env_config `task_ids`) is a non-empty set of the split's ids."""
    in_split = set(split_ids)
    missing = [int(i) for i in pool if int(i) not in in_split]
    if missing or not pool:
        raise ValueError(f"{name} split {split!r} has no task ids {missing or '[]'} "
                         f"(its ids run from {min(split_ids)} to {max(split_ids)})")


def parse_react_action(text: str) -> str | None:
    """Pull the action out of AgentGym's ReAct format ``Thought: ...\\nAction: ...``.

    Returns the first non-empty line after the last ``Action:`` marker, or None
    when the text has no such marker (the env then answers its invalid-action
    observation).
    """
    idx = text.rfind("Action:")
    if idx < 0:
        return None
    rest = text[idx + len("Action:") :].strip()
    for line in rest.splitlines():
        line = line.strip()
        if line:
            return line
    return None


def format_react(thought: str, action: str) -> str:
    """An expert step as the model should write it: ``Thought: ...\nAction: ...``."""
    return f"Thought: {thought}\nAction: {action}"


@dataclass(frozen=True)
class EnvSpec:
    """Agent-side description of an env family.

    name:          short name; registered with Tune as ``agentgym/<name>``.
    env_class:     "module:Class" of the server-side env (in-process adapter).
    server_module: module runnable as ``python -m <server_module> --port N``.
    instruction:   the task instruction, sent as the system message.
    parse_action:  model text -> bare action for the server, or None when the
                   text holds no action (counted as a format error).
    tasks_module:  module with ``split_ids(split) -> list[int]`` and
                   ``category(data_idx) -> str``.
    default_max_new_tokens: generation cap per turn a config may override.
    send_raw_text: the server parses the model text itself (Deep Search's tags).
    accept_truncated: a response cut by max_new_tokens is still acted on (the
                   default treats it as a format error: its action may be cut off).
    format_response: (thought, action) of an expert step -> the model turn that
                   expresses it (expert trajectories for SFT use it).
    augment:       "module:function" (conversation, random.Random) -> a new training
                   conversation made from an expert one (e.g. TextCraft's item renaming),
                   or "" when the family has none.
    graded_at_horizon: an episode the runner's horizon (or context cap) cuts is still graded:
                   the runner asks the session's `evaluate()` for its final reward (WebArena
                   grades an agent that never sends `stop`, as WebArena itself does).
    split_options: env_options keys that change which tasks a split holds; they are passed
                   to the tasks module's ``split_ids(split, **options)`` (WebArena's
                   judge_url: judge-graded tasks count only when a judge is set).
    """

    name: str
    env_class: str
    server_module: str
    instruction: str
    parse_action: Callable[[str], str | None] = parse_react_action
    tasks_module: str = ""
    default_max_new_tokens: int = 128
    send_raw_text: bool = False
    accept_truncated: bool = False
    format_response: Callable[[str, str], str] = format_react
    env_options: dict[str, Any] = field(default_factory=dict)
    augment: str = ""
    graded_at_horizon: bool = False
    split_options: tuple[str, ...] = ()

    def load_env_class(self) -> type:
        return _import_ref(self.env_class)

    def load_expert_class(self) -> type:
        """The family's scripted expert, `<server_module>.expert:ExpertAgent`."""
        return _import_ref(f"{self.server_module}.expert:ExpertAgent")

    def load_augment(self) -> Callable:
        if not self.augment:
            raise ValueError(f"{self.name} has no data augmentation for expert conversations")
        return _import_ref(self.augment)

    def _tasks(self):
        return importlib.import_module(self.tasks_module or self.server_module + ".tasks")

    def split_ids(self, split: str, env_options: Mapping[str, Any] | None = None) -> list[int]:
        """The split's task ids; `env_options` matter only through `split_options`."""
        given = {k: env_options[k] for k in self.split_options if env_options and env_options.get(k) is not None}
        return list(self._tasks().split_ids(split, **given))

    def category(self, data_idx: int) -> str:
        return str(self._tasks().category(data_idx))

    def category_order(self) -> list[str]:
        """Columns of a per-category table as the family declares them (its tasks module's
        optional ``category_order()``, e.g. Deep Search's datasets in the paper's order); []
        leaves the order natural ("depth 2" before "depth 10")."""
        declared = getattr(self._tasks(), "category_order", None)
        return [str(c) for c in declared()] if declared is not None else []

    def task_ids(self, split: str, categories: Sequence[str] | None = None,
                 only: Sequence[int] | None = None, env_options: Mapping[str, Any] | None = None) -> list[int]:
        """The split's task ids, or only those of `categories` (env_config `categories`:
        train and evaluate on a subset of levels, e.g. a curriculum's first stage), or
        only those in `only` (env_config `task_ids`: a fixed pool of tasks, kept in order).
        `env_options`: the env_config's, for families with `split_options`."""
        ids = self.split_ids(split, env_options)
        if only is not None:
            check_task_pool(self.name, split, ids, only)
        if categories:
            wanted = {str(c) for c in categories}
            by_category = {i: self.category(i) for i in ids}
            unknown = wanted - set(by_category.values())
            if unknown:
                known = ", ".join(sorted(set(by_category.values())))
                raise ValueError(f"{self.name} split {split!r} has no category {', '.join(sorted(unknown))}; "
                                 f"its categories: {known}")
            ids = [i for i in ids if by_category[i] in wanted]
        if only is not None:
            kept = set(ids)
            ids = [int(i) for i in only if int(i) in kept]
            if not ids:
                raise ValueError(f"{self.name}: none of task ids {list(only)} is in categories {list(categories or [])}")
        return ids

    def action_for_server(self, text: str) -> tuple[str, bool]:
        """(action to send, whether the text was well-formed)."""
        if self.send_raw_text:
            return text, True
        action = self.parse_action(text)
        if action is None:
            return text.strip(), False
        return action, True

"""Start states: training episodes that begin where the agent once went wrong.

    rllib evaluate MODEL --env agentgym/textcraft --split train --k 4 --temperature 0.7 \
        --episodes agent.jsonl.gz
    rllib start-states agent.jsonl.gz --after "wrong quantities" --out starts.jsonl
    env_config: {start_states: starts.jsonl}

From a fresh task, a group's episodes mostly repeat one mistake, and the few
that recover from it differ from the rest in one turn among many: the episode
advantage reaches that turn diluted by everything else. A start state is an
episode of the agent replayed up to its first refused action whose answer
matches a pattern (TextCraft's "wrong quantities"). A training group played
from it shares that history, so its episodes differ only in what they do after
the refusal (restarts from states the agent visits, as in reverse-curriculum
RL). The replayed turns are context: the learner never trains on their tokens.

A start-states file is JSON lines, one state each:
`{"data_idx": 7, "category": "depth 1", "prefix": [{"response": ..., "action": ...}, ...]}`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from rllib_agentgym.run_logs import read_jsonl, write_jsonl


@dataclass(frozen=True)
class StartState:
    data_idx: int
    prefix: tuple[tuple[str, str], ...]  # (response, action) of each replayed turn
    category: str = ""

    def record(self) -> dict[str, Any]:
        return {"data_idx": self.data_idx, "category": self.category,
                "prefix": [{"response": r, "action": a} for r, a in self.prefix]}


def _answer_to(episode: dict[str, Any], turn: int) -> str:
    """The env's answer to turn `turn`: the next turn's observation, or the final one."""
    turns = episode["turns"]
    return turns[turn + 1]["observation"] if turn + 1 < len(turns) else episode.get("final_observation", "")


def start_states_from_episodes(episodes: Iterable[dict[str, Any]], after: str) -> list[StartState]:
    """One start state per episode (a `Trajectory.summary()`) that has a refused action whose
    answer matches the regex `after`: its turns up to and including the first such action.
    An episode the env ended on that turn has no state left to play from and is skipped."""
    pattern = re.compile(after)
    states: list[StartState] = []
    for episode in episodes:
        turns = episode["turns"]
        for i, turn in enumerate(turns):
            if not (turn["invalid_action"] and pattern.search(_answer_to(episode, i))):
                continue
            if not (i == len(turns) - 1 and episode.get("done")):
                prefix = tuple((t["response"], t["action"]) for t in turns[: i + 1])
                states.append(StartState(int(episode["data_idx"]), prefix, str(episode.get("category", ""))))
            break
    return states


def _numbered_records(path: str | Path) -> Iterator[tuple[int, Any]]:
    """(line number, record) of a JSON-lines file; unlike `run_logs.read_jsonl`, a bad line is an error."""
    with (gzip.open(path, "rt") if str(path).endswith(".gz") else open(path)) as f:
        for number, line in enumerate(f, start=1):
            if line.strip():
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}, line {number}: not JSON ({exc.msg})") from None


def load_start_states(path: str | Path) -> list[StartState]:
    """The start states of a JSON-lines file (gzipped if it ends in .gz), checked."""
    if not Path(path).is_file():
        raise ValueError(f"start_states: no file {str(path)!r}")
    states: list[StartState] = []
    for number, record in _numbered_records(path):
        where = f"{path}, line {number}"
        if not isinstance(record, dict) or not isinstance(record.get("data_idx"), int):
            raise ValueError(f"{where}: a start state needs an integer 'data_idx'")
        prefix = record.get("prefix")
        if not isinstance(prefix, list) or not prefix:
            raise ValueError(f"{where}: 'prefix' must be a non-empty list of turns")
        turns = []
        for turn in prefix:
            if not (isinstance(turn, dict) and isinstance(turn.get("response"), str)
                    and isinstance(turn.get("action"), str)):
                raise ValueError(f"{where}: each prefix turn needs string 'response' and 'action'")
            turns.append((turn["response"], turn["action"]))
        states.append(StartState(record["data_idx"], tuple(turns), str(record.get("category", ""))))
    if not states:
        raise ValueError(f"start_states: {path} holds no start state")
    return states


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of `rllib start-states`."""
    parser.add_argument("episodes", nargs="+", help="episode JSONL(.gz) files (rllib evaluate --episodes)")
    parser.add_argument("--after", required=True,
                        help="regex on the env's answer: cut each episode after its first refused action "
                             "answered so (e.g. 'wrong quantities')")
    parser.add_argument("--out", required=True, help="start-states JSONL to write")
    return parser


def run(args: argparse.Namespace) -> int:
    episodes = [record for path in args.episodes for record in read_jsonl(path)]
    states = start_states_from_episodes(episodes, args.after)
    write_jsonl(args.out, (state.record() for state in states))
    tasks = len({s.data_idx for s in states})
    print(f"{len(states)} start states on {tasks} tasks, from {len(episodes)} episodes -> {args.out}")
    return 0

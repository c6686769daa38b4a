"""SearchQAEnv: answer a question by searching a corpus (the Deep Search family).

One episode is one question. The model's raw text goes to `step()` (the
server parses the tags itself, see actions.py): a <search> returns the top-k
documents in <information>, an <answer> is scored by normalized exact match
against every gold answer. A correct answer ends the episode with reward 1.
A wrong one scores 0 and, unless `end_on_wrong_answer` is set, tells the
model so and lets it keep searching; the client's turn limit bounds it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from envs.common.env import StepResult
from envs.searchqa.actions import (
    FORMAT_HELP,
    ActionFormatError,
    format_information,
    parse_action,
)
from envs.searchqa.normalize import exact_match
from envs.searchqa.retrieval import Retriever, remote_retriever, shared_retriever
from envs.searchqa.tasks import Task, TaskSet, load_tasks, resolve_world_seed

ENV_CORPUS = "RLLIB_AGENTGYM_SEARCHQA_CORPUS"
ENV_RETRIEVER_URL = "RLLIB_AGENTGYM_SEARCHQA_RETRIEVER_URL"
MAX_TOPK = 50


class SearchQAEnv:
    """One Deep Search session.

    Options (the /create body; each falls back to an environment variable
    where one is named):

        topk                  documents per search (default 3)
        end_on_wrong_answer   a wrong <answer> ends the episode (default False)
        retriever_url         a retriever service (RLLIB_AGENTGYM_SEARCHQA_RETRIEVER_URL); for generated
                              questions it must serve the same world (its --world-seed);
                              otherwise search runs in-process, one shared index per process
        corpus                wiki-18 JSONL for the in-process index (RLLIB_AGENTGYM_SEARCHQA_CORPUS);
                              default: the generated world's pages
        retrieval             "bm25" (default) or "dense"
        bm25_backend          "numpy" (default, instant start) or "numba" (faster search, 10-20 s start)
        encoder               local embedding model path (dense)
        dense_index           prebuilt FAISS index of the corpus (dense, optional)
        index_dir             where the corpus index is kept (default: the cache dir)
        qa_dir, qa_files      FlashRAG QA data (see tasks.py); default: the generated world's questions
        world_seed            seed of the generated world (default 0)
    """

    def __init__(
        self,
        *,
        topk: int = 3,
        end_on_wrong_answer: bool = False,
        retriever_url: str | None = None,
        corpus: str | None = None,
        retrieval: str = "bm25",
        bm25_backend: str = "numpy",
        encoder: str | None = None,
        dense_index: str | None = None,
        index_dir: str | None = None,
        qa_dir: str | None = None,
        qa_files: str | Mapping[str, str] | None = None,
        world_seed: int | None = None,
    ):
        # Bad option values are TypeErrors: the server answers them with 422.
        if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK:
            raise TypeError(f"topk must be an integer from 1 to {MAX_TOPK}, got {topk!r}")
        self.topk = topk
        self.end_on_wrong_answer = bool(end_on_wrong_answer)
        retriever_url = retriever_url or os.environ.get(ENV_RETRIEVER_URL) or None
        corpus = corpus or os.environ.get(ENV_CORPUS) or None
        try:
            self.tasks: TaskSet = load_tasks(qa_dir, qa_files, world_seed)
            if self.tasks.uses_world and corpus:
                raise ValueError("a corpus was given but no QA data (qa_dir / qa_files): the generated questions need the generated world")
            if not self.tasks.uses_world and not (corpus or retriever_url):
                raise ValueError("QA data needs a corpus to search: give corpus=<wiki-18 jsonl> or retriever_url=<service>")
            if retriever_url:
                self.retriever: Retriever = remote_retriever(retriever_url)
            else:
                self.retriever = shared_retriever(
                    corpus, retrieval, index_dir, encoder, dense_index, resolve_world_seed(world_seed), bm25_backend
                )
        except (ValueError, OSError) as exc:
            raise TypeError(str(exc)) from exc
        self.task: Task | None = None
        self._observation = ""
        self._done = False
        self._searches = 0

    def reset(self, data_idx: int) -> str:
        self.task = self.tasks[data_idx]
        self._done = False
        self._searches = 0
        self._observation = f"Question: {self.task.question}"
        return self._observation

    def step(self, action: str) -> StepResult:
        if self.task is None:
            raise RuntimeError("call reset(data_idx) before step()")
        if self._done:
            return self._reply("The episode is over: reset to get a new question.", done=True, invalid_action=True)
        try:
            parsed = parse_action(action)
        except ActionFormatError as exc:
            return self._reply(f"Invalid action: {exc} {FORMAT_HELP}", invalid_action=True)
        if parsed.kind == "search":
            self._searches += 1
            hits = self.retriever.retrieve([parsed.content], self.topk)[0]
            return self._reply(format_information(hits), action="search", query=parsed.content)
        if exact_match(parsed.content, self.task.answers):
            self._done = True
            return self._reply("Your answer is correct.", reward=1.0, done=True, action="answer", success=True)
        if self.end_on_wrong_answer:
            self._done = True
            return self._reply("Your answer is incorrect.", done=True, action="answer", success=False)
        return self._reply(
            f"Your answer {parsed.content!r} is incorrect. Search for more information or answer again.",
            action="answer",
        )

    def _reply(self, observation: str, reward: float = 0.0, done: bool = False, **info: Any) -> StepResult:
        self._observation = observation
        info.setdefault("invalid_action", False)
        info["searches"] = self._searches
        if done:
            info.setdefault("success", False)
        return StepResult(observation, reward, done, info)

    def observation(self) -> str:
        return self._observation

    def close(self) -> None:
        self.task = None

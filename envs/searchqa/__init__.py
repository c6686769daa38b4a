"""Deep Search (Search-R1 style multi-hop QA with a search engine).

The model reasons in <think>, searches with <search>query</search> and
answers with <answer>text</answer>; reward is SQuAD-normalized exact match.
Search is BM25 (bm25s) or dense (e5-style encoder) over a wiki-18 JSONL
corpus, in-process or through the shared retriever service
(`python -m envs.searchqa.retriever`). Without user data, a generated
multi-hop world (world.py) supplies the corpus and 1-4 hop questions.
"""

from envs.searchqa.env import SearchQAEnv

__all__ = ["SearchQAEnv"]

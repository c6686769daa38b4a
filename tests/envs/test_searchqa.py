"""Deep Search: normalization, tag parsing, the generated world, BM25 / dense
retrieval, the retriever service, the env over HTTP and in-process, the expert."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Sequence

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from envs.searchqa import tasks
from envs.searchqa.actions import (
    ActionFormatError,
    format_information,
    parse_action,
    parse_information,
)
from envs.searchqa.data import Doc, write_wiki_jsonl
from envs.searchqa.env import SearchQAEnv
from envs.searchqa.expert import ExpertAgent, evaluate
from envs.searchqa.normalize import exact_match, normalize_answer
from envs.searchqa.retrieval import (
    BatchingRetriever,
    LocalRetriever,
    build_retriever,
    shared_retriever,
)
from envs.searchqa.retriever import create_retriever_app
from envs.searchqa.server import create_app
from envs.searchqa.world import FIELDS, extract, extract_quote, generate_world, get_world
from loopback import serve_module


def _test_ids(category: str, n: int) -> list[int]:
    return [i for i in tasks.split_ids("test") if tasks.category(i) == category][:n]


def _play(step, agent: ExpertAgent, observation: str, max_turns: int = 10) -> dict:
    """Run the expert until done; returns the last step's reply as a dict."""
    for _ in range(max_turns):
        reply = step(agent.act(observation)[1])
        assert not reply["info"]["invalid_action"], reply
        observation = reply["observation"]
        if reply["done"]:
            return reply
    raise AssertionError("the expert did not finish")


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app()) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory) -> tuple[str, list[Doc]]:
    """A wiki-18 JSONL file: 300 world pages plus a page with a quoted title."""
    docs = get_world(0).docs()[:300] + [Doc("x1", 'Ada "Countess" Lovelace', "Ada Lovelace wrote the first published algorithm.")]
    path = tmp_path_factory.mktemp("corpus") / "wiki.jsonl"
    write_wiki_jsonl(docs, path)
    return str(path), docs


# -- exact match -------------------------------------------------------------


@pytest.mark.parametrize(
    "prediction, golds, expected",
    [
        ("Paris", ["paris"], True),
        ("  The   Eiffel Tower. ", ["Eiffel Tower"], True),
        ("an apple", ["Apple"], True),
        ("U.S.A.", ["USA"], True),
        ("1,204", ["1204"], True),
        ("Rome", ["Paris", "rome"], True),  # any of several gold answers
        ("Paris, France", ["Paris"], False),
        ("theatre", ["atre"], False),  # articles are whole words only
        ("", ["Paris"], False),
    ],
)
def test_exact_match(prediction, golds, expected):
    assert exact_match(prediction, golds) is expected


def test_normalize_answer():
    assert normalize_answer("The Quick, Brown  FOX!") == "quick brown fox"


# -- the turn format ---------------------------------------------------------


def test_parse_action_reads_one_search_or_answer():
    assert parse_action("<think>I should look.</think>\n<search> Velmora  capital </search>") == parse_action("<search>Velmora capital</search>")
    action = parse_action("<think>a <search>not this</search></think><answer>Lisbon</answer>")
    assert (action.kind, action.content) == ("answer", "Lisbon")


@pytest.mark.parametrize(
    "text, message",
    [
        ("I think the answer is Paris.", "no <search> or <answer> tag"),
        ("<search>a</search><answer>b</answer>", "both"),
        ("<search>  </search>", "query inside <search></search> is empty"),
        ("<answer></answer>", "answer inside"),
        ("<search>a</search><search>b</search>", "2 <search> tags"),
        ("<think>x</think><search>unclosed", "not closed"),
    ],
)
def test_parse_action_rejects_malformed_text(text, message):
    with pytest.raises(ActionFormatError, match=message):
        parse_action(text)


def test_information_block_round_trips():
    hits = [{"title": "A", "text": "first."}, {"title": "B b", "text": "second (x)."}]
    block = format_information(hits)
    assert block == "<information>Doc 1(Title: A) first.\nDoc 2(Title: B b) second (x).</information>"
    assert parse_information(block) == [("A", "first."), ("B b", "second (x).")]


# -- the generated world -----------------------------------------------------


def test_world_is_deterministic_and_well_formed():
    world = get_world(0)
    again = generate_world(0)
    assert [e.text for e in again.entities] == [e.text for e in world.entities]
    assert again.questions == world.questions
    assert generate_world(1).entities[0].name != world.entities[0].name
    assert len(world.entities) >= 2000
    names = [e.name for e in world.entities]
    assert len(set(names)) == len(names)
    counts = Counter((q.split, q.hops) for q in world.questions)
    assert set(counts) == {(s, h) for s in ("train", "test") for h in (1, 2, 3, 4)}
    assert len({q.text for q in world.questions}) == len(world.questions)


def test_every_fact_is_stated_once_and_readable():
    """Each page's prose states each of its facts so that it reads back exactly."""
    for entity in get_world(0).entities:
        for (kind, name) in FIELDS:
            if kind == entity.kind:
                assert extract(kind, name, entity.text) == entity.values[name], (entity.name, name, entity.text)


def test_regions_are_disjoint_so_test_answers_are_unseen():
    world = get_world(0)
    for entity in world.entities:
        assert all(world.entities[i].region == entity.region for i in entity.links.values())
    train_words = re.findall(r"\w+", " ".join(q.text + " " + " ".join(q.answers) for q in world.questions if q.split == "train").lower())
    train_phrases = {" ".join(train_words[i : i + n]) for n in (1, 2, 3, 4) for i in range(len(train_words))}
    test_names = [q.answers[0] for q in world.questions if q.split == "test" and not q.answers[0].isdigit()]
    assert len(test_names) > 300
    assert not [name for name in test_names if " ".join(re.findall(r"\w+", name.lower())) in train_phrases]


def test_answers_are_hard_to_guess():
    answers = Counter(q.answers[0] for q in get_world(0).questions if q.split == "test")
    top_share = answers.most_common(1)[0][1] / sum(answers.values())
    assert len(answers) > 300 and top_share < 0.03


def test_world_questions_follow_their_chain():
    """Following a question's path through the pages gives its answer."""
    world = get_world(0)
    by_name = {e.name: e for e in world.entities}
    for q in world.questions[:400]:
        name = q.start
        for kind, field in q.path:
            entity = by_name[name]
            assert entity.kind == kind
            name = extract(kind, field, entity.text)
        assert name == q.answers[0]


# -- retrieval ---------------------------------------------------------------


def test_bm25_returns_each_page_for_its_own_title():
    retriever = shared_retriever()
    docs = get_world(0).docs()
    results = retriever.retrieve([d.title for d in docs], 3)
    assert all(hits[0]["title"] == d.title for d, hits in zip(docs, results))
    assert set(results[0][0]) == {"id", "title", "text", "score"}


def test_bm25_over_a_user_corpus_is_saved_and_loaded_memory_mapped(small_corpus, tmp_path):
    path, docs = small_corpus
    index_dir = tmp_path / "index"
    first = build_retriever(path, index_dir=str(index_dir))
    assert (index_dir / "bm25" / "params.index.json").is_file() and (index_dir / "offsets.npy").is_file()
    again = build_retriever(path, index_dir=str(index_dir))
    assert isinstance(again.index._model.scores["data"], np.memmap)
    for doc in (docs[0], docs[150], docs[-1]):
        hits = again.retrieve([doc.title], 3)[0]
        assert (hits[0]["id"], hits[0]["title"], hits[0]["text"]) == (doc.id, doc.title, doc.text)
    assert first.retrieve(["Lovelace algorithm"], 1) == again.retrieve(["Lovelace algorithm"], 1)
    assert again.retrieve(["", "the of and"], 3) == [[], []]  # nothing to match: no hits


@pytest.mark.slow
def test_numba_backend_matches_numpy(small_corpus, tmp_path):
    """numba compiles for 10-20 s, hence slow; it must score like numpy (ties may reorder)."""
    path, docs = small_corpus
    numpy_r = build_retriever(path, index_dir=str(tmp_path / "ix"))
    numba_r = build_retriever(path, index_dir=str(tmp_path / "ix"), bm25_backend="numba")
    titles = [d.title for d in docs[::7]]
    queries = titles + ["published algorithm", "river kilometres long"]
    fast, ref = numba_r.retrieve(queries, 5), numpy_r.retrieve(queries, 5)
    assert [hits[0]["title"] for hits in fast[: len(titles)]] == titles
    for fast_hits, ref_hits in zip(fast, ref):
        np.testing.assert_allclose([h["score"] for h in fast_hits], [h["score"] for h in ref_hits], rtol=1e-5)


def test_a_changed_corpus_is_reindexed(tmp_path):
    path = tmp_path / "c.jsonl"
    write_wiki_jsonl([Doc("1", "Alpha", "first page"), Doc("2", "Beta", "second page")], path)
    assert len(build_retriever(str(path), index_dir=str(tmp_path / "ix")).corpus) == 2
    write_wiki_jsonl([Doc("1", "Alpha", "first page"), Doc("2", "Beta", "second"), Doc("3", "Gamma", "third page")], path)
    retriever = build_retriever(str(path), index_dir=str(tmp_path / "ix"))
    assert len(retriever.corpus) == 3 and retriever.retrieve(["Gamma"], 1)[0][0]["id"] == "3"


@pytest.fixture(scope="module")
def tiny_encoder_path(tmp_path_factory, small_corpus) -> str:
    """A randomly initialized 2-layer BERT with a vocabulary of the corpus words."""
    from transformers import BertConfig, BertModel, BertTokenizer

    _, docs = small_corpus
    words = sorted({w for d in docs for w in re.findall(r"\w+", d.contents.lower())})
    folder = tmp_path_factory.mktemp("tiny-e5")
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "query", "passage", ":"] + words) + "\n")
    BertTokenizer(str(vocab)).save_pretrained(folder)
    config = BertConfig(vocab_size=len(words) + 8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, max_position_embeddings=256)
    BertModel(config).save_pretrained(folder)
    return str(folder)


def test_dense_encoder_and_numpy_index(tiny_encoder_path, small_corpus):
    from envs.searchqa.dense import DenseIndex, Encoder

    _, docs = small_corpus
    encoder = Encoder(tiny_encoder_path, device="cpu", batch_size=16)
    vectors = DenseIndex.encode_corpus(encoder, (d.contents for d in docs), len(docs))
    assert vectors.shape == (len(docs), 32) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    queries = encoder.encode(["Ada Lovelace", "x"], query=True)
    assert queries.shape == (2, 32)
    assert not np.allclose(encoder.encode(["Ada"], query=True), encoder.encode(["Ada"], query=False))  # e5 prefixes
    index = DenseIndex(encoder, vectors, use_faiss=False)
    ids, scores = index.search_vectors(vectors[[3, 77, 250]], 4)
    assert ids.shape == (3, 4) and list(ids[:, 0]) == [3, 77, 250]
    np.testing.assert_allclose(scores[:, 0], 1.0, rtol=1e-5)
    assert np.all(np.diff(scores, axis=1) <= 1e-6)


def test_dense_index_round_trips_through_the_index_dir(tiny_encoder_path, small_corpus, tmp_path):
    path, docs = small_corpus
    retriever = build_retriever(path, method="dense", encoder=tiny_encoder_path, index_dir=str(tmp_path / "ix"))
    emb_files = list((tmp_path / "ix").glob("dense-*/embeddings.npy"))
    assert len(emb_files) == 1 and np.load(emb_files[0], mmap_mode="r").shape == (len(docs), 32)
    again = build_retriever(path, method="dense", encoder=tiny_encoder_path, index_dir=str(tmp_path / "ix"))
    queries = [docs[5].title, docs[120].text]
    assert retriever.retrieve(queries, 3) == again.retrieve(queries, 3)
    assert len(again.retrieve(queries, 3)[0]) == 3


def test_dense_faiss_and_numpy_agree(tiny_encoder_path, small_corpus, tmp_path):
    import faiss  # pinned in requirements.txt: the paper's index, so never skipped

    from envs.searchqa.dense import DenseIndex, Encoder

    path, docs = small_corpus
    encoder = Encoder(tiny_encoder_path, device="cpu")
    vectors = DenseIndex.encode_corpus(encoder, (d.contents for d in docs), len(docs))
    queries = vectors[[0, 42, 99]]
    np_ids, np_scores = DenseIndex(encoder, vectors, use_faiss=False).search_vectors(queries, 5)
    fs_ids, fs_scores = DenseIndex(encoder, vectors, use_faiss=True).search_vectors(queries, 5)
    assert list(fs_ids[:, 0]) == [0, 42, 99] and list(np_ids[:, 0]) == [0, 42, 99]
    np.testing.assert_allclose(np_scores, fs_scores, rtol=1e-4, atol=1e-5)

    # A prebuilt FAISS index file (as Search-R1 ships e5_Flat.index) instead of encoding the corpus.
    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(vectors)
    faiss.write_index(flat, str(tmp_path / "flat.index"))
    prebuilt = build_retriever(path, method="dense", encoder=tiny_encoder_path, dense_index=str(tmp_path / "flat.index"), index_dir=str(tmp_path / "ix"))
    assert prebuilt.index._faiss is not None and prebuilt.index._vectors is None  # searched through the file, nothing encoded
    queries = [docs[7].title, docs[300].text]
    hits = prebuilt.retrieve(queries, 2)
    assert [len(h) for h in hits] == [2, 2] and all(set(h[0]) == {"id", "title", "text", "score"} for h in hits)
    by_numpy = LocalRetriever(DenseIndex(encoder, vectors, use_faiss=False), prebuilt.corpus, "dense").retrieve(queries, 2)
    assert [[h["id"] for h in q] for q in hits] == [[h["id"] for h in q] for q in by_numpy]
    np.testing.assert_allclose([h["score"] for q in hits for h in q], [h["score"] for q in by_numpy for h in q], rtol=1e-4, atol=1e-5)


def _answer_in_hits(answers: Sequence[str], hits: list[dict]) -> bool:
    """Any gold answer, normalized, as whole words in a hit's title or text."""
    pages = [f" {normalize_answer(h['title'] + ' ' + h['text'])} " for h in hits]
    return any(f" {normalize_answer(a)} " in page for a in answers for page in pages)


def test_one_search_with_the_whole_question_answers_only_one_hop_questions():
    """BM25 over the question text (top 3) shows the answer for 1-hop questions, almost never
    for 2-4 hops: their answers sit on pages the question does not name."""
    questions = [q for q in get_world(0).questions if q.split == "test"]
    results = shared_retriever().retrieve([q.text for q in questions], 3)
    found: dict[int, list[bool]] = {}
    for q, hits in zip(questions, results):
        found.setdefault(q.hops, []).append(_answer_in_hits(q.answers, hits))
    assert sorted(found) == [1, 2, 3, 4] and all(len(v) >= 100 for v in found.values())
    assert np.mean(found[1]) >= 0.98
    for hops in (2, 3, 4):
        assert np.mean(found[hops]) < 0.05, (hops, np.mean(found[hops]))


# -- the retriever service ---------------------------------------------------


def test_retriever_service_answers_batched_queries():
    docs = get_world(0).docs()
    with TestClient(create_retriever_app(shared_retriever())) as service:
        assert service.get("/health").json()["num_docs"] == len(docs)
        reply = service.post("/retrieve", json={"queries": [docs[0].title, docs[9].title, "", docs[2000].title], "topk": 2})
        assert reply.status_code == 200
        results = reply.json()["results"]
        assert [len(r) for r in results] == [2, 2, 0, 2]
        assert [r[0]["title"] for r in results if r] == [docs[0].title, docs[9].title, docs[2000].title]
        assert service.post("/retrieve", json={"queries": [docs[0].title]}).json()["results"][0].__len__() == 3
        bad = service.post("/retrieve", json={"queries": ["x"], "topk": 0})
        assert bad.status_code == 422 and "topk" in bad.json()["error"]
        assert service.post("/retrieve", json={"topk": 2}).status_code == 422


def test_concurrent_searches_are_merged_into_batches():
    class Gated:
        """The real retriever, holding its first call until every caller has queued."""

        def __init__(self, inner: LocalRetriever):
            self.inner, self.sizes, self.gate = inner, [], threading.Event()

        def retrieve(self, queries, topk):
            self.sizes.append(len(queries))
            assert self.gate.wait(timeout=30)
            return self.inner.retrieve(queries, topk)

        def describe(self):
            return self.inner.describe()

    gated = Gated(shared_retriever().inner)
    batched = BatchingRetriever(gated)
    titles = [d.title for d in get_world(0).docs()[:40]]
    results: dict[int, list] = {}
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, batched.retrieve([titles[i]], 1 + i % 3))) for i in range(40)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while sum(gated.sizes) + batched._queue.qsize() < 40 and time.monotonic() < deadline:
        time.sleep(0.01)  # until the first batch is running and every other caller has queued
    gated.gate.set()
    for t in threads:
        t.join()
    assert len(gated.sizes) <= 2 and sum(gated.sizes) == 40  # 40 callers, at most 2 engine calls
    assert all(results[i][0][0]["title"] == titles[i] and len(results[i][0]) == 1 + i % 3 for i in range(40))


def test_retriever_cli_serves_and_env_uses_it_by_url():
    with serve_module("envs.searchqa.retriever", "--bm25-backend", "numpy") as (url, _):
        env = SearchQAEnv(retriever_url=url)
        for data_idx in _test_ids("gen-2hop", 3):
            obs = env.reset(data_idx)
            reply = _play(lambda a: vars(env.step(a)), ExpertAgent(env), obs)
            assert reply["reward"] == 1.0 and reply["info"]["success"]


# -- the env over HTTP ---------------------------------------------------------

def test_module_serves_on_a_free_port():
    """`python -m envs.searchqa --port 0`: create, reset, search, answer, close over real HTTP."""
    data_idx = _test_ids("gen-1hop", 1)[0]
    question = tasks.load_tasks()[data_idx].world_question
    (kind, field), = question.path
    with serve_module("envs.searchqa") as (url, _), httpx.Client(base_url=url, timeout=60) as http:
        assert http.get("/health").json()["env"] == "searchqa"
        env_id = http.post("/create", json={}).json()["id"]
        reset = http.post("/reset", json={"id": env_id, "data_idx": data_idx}).json()
        assert reset["observation"] == f"Question: {question.text}" and reset["done"] is False

        searched = http.post("/step", json={"id": env_id, "action": f"<think>find it</think><search>{question.start}</search>"}).json()
        assert (searched["reward"], searched["done"], searched["info"]["action"]) == (0, False, "search")
        pages = dict(parse_information(searched["observation"]))
        assert len(pages) == 3 and question.start in pages  # the default top-k
        answer = extract(kind, field, pages[question.start])  # read off the page the server returned

        answered = http.post("/step", json={"id": env_id, "action": f"<answer>{answer}</answer>"}).json()
        assert (answered["reward"], answered["done"], answered["info"]["success"]) == (1.0, True, True)
        assert http.get("/observation", params={"id": env_id}).json() == "Your answer is correct."
        assert http.post("/close", json={"id": env_id}).json() is True
        assert http.post("/step", json={"id": env_id, "action": "<answer>x</answer>"}).status_code == 404


def test_expert_answers_two_hop_questions_through_the_server(client):
    ids = _test_ids("gen-2hop", 8)
    assert len(ids) == 8
    for data_idx in ids:
        created = client.post("/create", json={"data_idx": data_idx}).json()
        env_id = created["id"]
        assert created["observation"].startswith("Question: ")
        env = client.app.state.sessions.get(env_id).env

        def step(action: str, env_id: int = env_id) -> dict:
            reply = client.post("/step", json={"id": env_id, "action": action})
            assert reply.status_code == 200, reply.text
            return reply.json()

        reply = _play(step, ExpertAgent(env), created["observation"])
        assert reply["reward"] == 1.0 and reply["info"]["success"] is True and reply["info"]["searches"] == 2
        assert client.post("/close", json={"id": env_id}).json() is True


def test_server_errors_are_clean(client):
    assert client.post("/step", json={"id": 987654, "action": "<search>x</search>"}).status_code == 404
    assert "error" in client.post("/reset", json={"id": 987654, "data_idx": 0}).json()
    env_id = client.post("/create", json={"data_idx": 0}).json()["id"]
    reply = client.post("/step", json={"id": env_id, "action": "<think>hmm</think><search> </search>"})
    body = reply.json()
    assert reply.status_code == 200 and body["info"]["invalid_action"] is True and body["done"] is False
    assert "empty" in body["observation"] and "<search>" in body["observation"]
    body = client.post("/step", json={"id": env_id, "action": "Paris"}).json()
    assert body["info"]["invalid_action"] and "no <search> or <answer> tag" in body["observation"]
    assert client.post("/reset", json={"id": env_id, "data_idx": 10**9}).status_code == 422
    assert client.post("/create", json={"topk": 0}).status_code == 422
    assert client.post("/create", json={"retrieval": "magic"}).status_code == 422
    client.post("/close", json={"id": env_id})
    assert client.post("/step", json={"id": env_id, "action": "<answer>x</answer>"}).status_code == 404


def test_tasks_route_lists_splits(client):
    test_ids = client.get("/tasks", params={"split": "test"}).json()["ids"]
    assert test_ids == tasks.split_ids("test") and len(test_ids) == 1000
    assert client.get("/tasks", params={"split": "nope"}).status_code == 404


# -- the env in-process ------------------------------------------------------


def test_search_then_wrong_then_right_answer():
    env = SearchQAEnv(topk=2)
    data_idx = _test_ids("gen-1hop", 1)[0]
    env.reset(data_idx)
    question = env.task.world_question
    result = env.step(f"<think>look it up</think><search>{question.start}</search>")
    assert result.reward == 0 and not result.done and result.info["action"] == "search"
    assert result.observation.startswith("<information>Doc 1(Title: ") and result.observation.count("(Title: ") == 2
    assert env.observation() == result.observation
    result = env.step("<answer>Nowhere Special</answer>")
    assert (result.reward, result.done, result.info["invalid_action"]) == (0.0, False, False)
    assert "incorrect" in result.observation
    result = env.step(f"<answer>  {question.answers[0].upper()}. </answer>")
    assert (result.reward, result.done, result.info["success"]) == (1.0, True, True)
    assert env.step("<answer>again</answer>").info["invalid_action"]


def test_default_topk_is_three():
    env = SearchQAEnv()
    assert env.topk == 3
    env.reset(_test_ids("gen-2hop", 1)[0])
    result = env.step(f"<search>{env.task.world_question.start}</search>")
    assert len(parse_information(result.observation)) == 3


def test_end_on_wrong_answer_option():
    env = SearchQAEnv(end_on_wrong_answer=True)
    env.reset(_test_ids("gen-3hop", 1)[0])
    result = env.step("<answer>1900</answer>")
    assert (result.reward, result.done, result.info["success"]) == (0.0, True, False)


def test_expert_success_rate_by_hop_count():
    rates = evaluate("test", per_category=25)
    assert set(rates) == {"gen-1hop", "gen-2hop", "gen-3hop", "gen-4hop"}
    for hops in (1, 2, 3, 4):
        assert rates[f"gen-{hops}hop"]["success_rate"] == 1.0
        assert rates[f"gen-{hops}hop"]["mean_searches"] == hops


def test_expert_quote_thoughts_copy_the_page_they_read():
    """`thoughts="quote"` answers as the default style does, and every quoted fact is the page's own
    words, ending in the name searched next (or answered)."""
    env = SearchQAEnv()
    for data_idx in _test_ids("gen-3hop", 4):
        observation = env.reset(data_idx)
        agent, quotes = ExpertAgent(env, thoughts="quote"), 0
        for _ in range(8):
            thought, action = agent.act(observation)
            if "says: " in thought:
                quote = thought.split("says: ", 1)[1].split(". ", 1)[0].rstrip(".")
                assert quote in observation
                named = re.search(r"<(?:search|answer)>(.*?)</", action).group(1)
                assert quote.endswith(named)
                quotes += 1
            result = env.step(action)
            observation = result.observation
            if result.done:
                break
        assert result.info["success"] and quotes == 3
    with pytest.raises(ValueError, match="thoughts must be one of"):
        ExpertAgent(env, thoughts="verbose")


def test_extract_quote_is_the_sentence_through_the_value():
    page = "Mesherk is a city in Venoueth with a population of 774,979. It was founded in 1245."
    assert extract_quote("city", "country", page) == "Mesherk is a city in Venoueth"
    assert extract_quote("city", "founding_year", page) == "It was founded in 1245"
    assert extract_quote("city", "river", page) is None


def test_expert_refuses_user_questions(small_corpus, tmp_path):
    path, _ = small_corpus
    qa = tmp_path / "nq.jsonl"
    qa.write_text(json.dumps({"question": "who wrote the first published algorithm", "golden_answers": ["Ada Lovelace"]}) + "\n")
    env = SearchQAEnv(corpus=path, index_dir=str(tmp_path / "ix"), qa_files={"nq/test": str(qa)})
    env.reset(0)
    with pytest.raises(ValueError, match="generated"):
        ExpertAgent(env)


# -- user QA data --------------------------------------------------------------


def _write_qa(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_flashrag_qa_data_with_a_user_corpus(small_corpus, tmp_path, monkeypatch):
    path, _ = small_corpus
    qa_dir = tmp_path / "qa"
    _write_qa(qa_dir / "hotpotqa" / "dev.jsonl", [{"id": "h0", "question": "who wrote the first published algorithm?", "golden_answers": ["Ada Lovelace", "Lovelace"]}])
    _write_qa(qa_dir / "nq" / "train.jsonl", [{"question": f"train q{i}", "golden_answers": ["x"]} for i in range(3)])
    _write_qa(qa_dir / "nq" / "test.jsonl", [{"question": "nq test q", "golden_answers": "y"}])
    _write_qa(qa_dir / "bamboogle" / "test.jsonl", [{"question": "b q", "golden_answers": ["z"]}])

    monkeypatch.setenv("RLLIB_AGENTGYM_SEARCHQA_QA_DIR", str(qa_dir))
    assert tasks.num_tasks() == 6
    assert [tasks.category(i) for i in range(6)] == ["NQ", "NQ", "NQ", "NQ", "HotpotQA", "Bamboogle"]
    assert tasks.split_ids("train") == [0, 1, 2]
    assert tasks.split_ids("test") == [3, 4, 5]  # HotpotQA has no test file: its dev file stands in
    assert tasks.split_ids("dev") == [4]
    with pytest.raises(KeyError):
        tasks.split_ids("validation")

    with pytest.raises(TypeError, match="needs a corpus"):
        SearchQAEnv()
    monkeypatch.setenv("RLLIB_AGENTGYM_CACHE", str(tmp_path / "cache"))
    env = SearchQAEnv(corpus=path)  # indexed under $RLLIB_AGENTGYM_CACHE/searchqa
    assert list((tmp_path / "cache" / "searchqa").glob("*/bm25"))
    assert env.reset(4) == "Question: who wrote the first published algorithm?"
    info = env.step("<search>first published algorithm</search>").observation
    assert parse_information(info)[0][0] == 'Ada "Countess" Lovelace'
    assert env.step("<answer>lovelace</answer>").reward == 1.0


def test_qa_files_given_one_by_one(tmp_path):
    nq = tmp_path / "my_nq.jsonl"
    _write_qa(nq, [{"question": "q1", "golden_answers": ["a"]}, {"question": "q2", "golden_answers": ["b"]}])
    task_set = tasks.load_tasks(qa_files=f"nq/test={nq}")
    assert [t.category for t in task_set.tasks] == ["NQ", "NQ"] and task_set.split_ids("test") == [0, 1]
    with pytest.raises(ValueError, match="dataset"):
        tasks.load_tasks(qa_files=f"nq={nq}")


# -- the agent-side spec -------------------------------------------------------


def test_spec_sends_raw_text():
    from rllib_agentgym.envs.specs.searchqa import SPEC

    assert SPEC.send_raw_text and SPEC.load_env_class() is SearchQAEnv
    text = "<think>x</think><search>q</search><information>made up</information>"
    assert SPEC.action_for_server(text) == (text, True)
    assert SPEC.parse_action(text) == "<think>x</think><search>q</search>"
    assert SPEC.parse_action("no tags") is None
    assert "<search>" in SPEC.instruction and "<answer>" in SPEC.instruction and "<think>" in SPEC.instruction
    assert SPEC.category(SPEC.split_ids("test")[0]).startswith("gen-")

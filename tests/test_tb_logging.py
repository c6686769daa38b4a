"""TensorBoard extras read back with TensorBoard's own EventAccumulator; the trajectory JSONL round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest
from synthetic_run import iteration_summaries
from tensorboard.backend.event_processing.event_accumulator import (
    HISTOGRAMS,
    TENSORS,
    EventAccumulator,
)

from rllib_agentgym.run_logs import read_jsonl, trajectory_files, trajectory_path
from rllib_agentgym.tb_logging import (
    EXTRAS_DIR,
    log_iteration_extras,
    trajectory_markdown,
    write_trajectories,
)


def test_text_and_histograms_are_readable_by_tensorboard(tmp_path):
    for it in (1, 2):
        assert log_iteration_extras(tmp_path, it, iteration_summaries(it), num_text_samples=3) == tmp_path / EXTRAS_DIR
    events = EventAccumulator(str(tmp_path / EXTRAS_DIR), size_guidance={TENSORS: 0, HISTOGRAMS: 0})
    events.Reload()
    tags = events.Tags()
    assert {"trajectories/num_turns", "trajectories/reward", "trajectories/num_generated_tokens"} <= set(tags[HISTOGRAMS])
    # torch.utils.tensorboard stores text under "<tag>/text_summary" (plugin "text").
    assert {f"trajectories/sample_{k}/text_summary" for k in range(3)} <= set(tags[TENSORS])

    turns = events.Histograms("trajectories/num_turns")
    assert [h.step for h in turns] == [1, 2]
    for h in turns:
        summaries = iteration_summaries(h.step)
        assert h.histogram_value.num == len(summaries)
        assert h.histogram_value.sum == pytest.approx(sum(s["num_turns"] for s in summaries))
        assert h.histogram_value.max == max(s["num_turns"] for s in summaries)
    rewards = events.Histograms("trajectories/reward")[0].histogram_value
    assert rewards.sum == pytest.approx(sum(s["reward"] for s in iteration_summaries(1)))

    best = events.Tensors("trajectories/sample_0/text_summary")
    assert [t.step for t in best] == [1, 2]
    text = best[0].tensor_proto.string_val[0].decode()
    top = max(iteration_summaries(1), key=lambda s: s["reward"])
    assert "#### Turn 1" in text and f"reward {top['reward']}" in text
    worst = events.Tensors("trajectories/sample_2/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "reward 0.0" in worst or "reward 0.25" in worst


def test_markdown_fences_survive_backticks_and_clip_long_text():
    summary = iteration_summaries(1)[0]
    summary["turns"][0]["observation"] = "```\n" + "x" * 5000
    text = trajectory_markdown(summary)
    assert "````\n```\n" in text  # a longer fence around text that contains one
    assert "more characters]" in text and len(text) < 5000


def test_no_summaries_writes_nothing(tmp_path):
    assert log_iteration_extras(tmp_path, 1, []) is None
    assert not (tmp_path / EXTRAS_DIR).exists()


def test_write_trajectories_round_trip(tmp_path):
    summaries = iteration_summaries(2)
    summaries[0]["reward"] = np.float32(0.5)  # numpy scalars from the runner serialize as numbers
    path = write_trajectories(tmp_path, 2, summaries)
    assert path == trajectory_path(tmp_path, 2) == tmp_path / "trajectories" / "iter_000002.jsonl"
    records = read_jsonl(path)
    assert len(records) == len(summaries) and all(r["iteration"] == 2 for r in records)
    assert records[0]["reward"] == 0.5 and records[1]["turns"] == summaries[1]["turns"]
    assert next(iter(records[1])) == "iteration"
    write_trajectories(tmp_path, 2, summaries[:1])  # a restored run rewrites the iteration
    assert len(read_jsonl(path)) == 1
    write_trajectories(tmp_path, 10, summaries)
    assert [it for it, _ in trajectory_files(tmp_path)] == [2, 10]
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp_")]
    json.loads(path.read_text().splitlines()[0])


def test_write_jsonl_compresses_a_gz_name_as_read_jsonl_reads_it(tmp_path):
    import gzip

    from rllib_agentgym.run_logs import write_jsonl

    records = [{"success": True, "turns": [{"action": "get 1 oak log"}]}, {"success": False, "turns": []}]
    packed, plain = write_jsonl(tmp_path / "episodes.jsonl.gz", records), write_jsonl(tmp_path / "episodes.jsonl", records)
    with gzip.open(packed, "rt", encoding="utf-8") as f:  # `rllib evaluate --episodes X.jsonl.gz`: a real gzip file
        assert [json.loads(line) for line in f] == records
    assert read_jsonl(packed) == read_jsonl(plain) == records
    assert plain.read_text(encoding="utf-8").startswith('{"success": true')
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp_")]

"""The env-server benchmark runs end to end (tiny counts) and writes the JSON shape run_all reads;
the learning diagnostics classify what they claim to."""

from __future__ import annotations

import json

import pytest

from benchmarks.common import cpu_generation, machine
from benchmarks.env_servers import main
from benchmarks.run_all import ROWS


def test_env_server_benchmark_textcraft_json_shape(tmp_path):
    out = tmp_path / "env_servers.json"
    main(["--families", "textcraft", "--sessions", "1,2", "--steps", "9", "--tasks", "2", "--out", str(out)])
    result = json.loads(out.read_text())

    assert result["benchmark"] == "env_servers"
    assert result["meta"]["machine"]["cpu_count"] >= 1
    assert {"ray", "torch", "transformers"} <= set(result["meta"]["versions"])
    assert "env_servers" in result["meta"]["command"]
    family = result["families"]["textcraft"]
    assert "skipped" not in family
    assert len(family["scripts"]) == 2 and all(s["steps"] >= 1 for s in family["scripts"])
    for mode in ("inprocess", "http"):
        assert sorted(family[mode]) == ["1", "2"]
        for sessions, row in family[mode].items():
            assert row["sessions"] == int(sessions)
            assert row["steps"] >= 9
            assert row["steps_per_s"] > 0
            assert 0 < row["step_p50_ms"] <= row["step_p99_ms"]
    assert set(family["http_overhead_p50_ms"]) == {"1", "2"}
    # HTTP alone: each step's round trip minus the server's Server-Timing of its env.step.
    for sessions, row in family["http"].items():
        assert row["timed_steps"] == row["steps"] and row["untimed_steps"] == 0
        assert 0 <= row["server_step_p50_ms"] <= row["step_p50_ms"]
        assert 0 <= row["transport_p50_ms"] <= row["step_p50_ms"] and row["transport_p50_ms"] <= row["transport_p99_ms"]
        assert family["http_transport_p50_ms"][sessions] == row["transport_p50_ms"]
    assert all("transport_p50_ms" not in row for row in family["inprocess"].values())
    assert family["target_measure"] == "transport"
    assert family["target_met"] == (family["http_transport_p50_ms"]["1"] < result["target_http_overhead_p50_ms"])
    assert set(family["engine_rss_mib_per_session"]) == {"1", "2"}  # TextCraft runs in the server process: 0
    rows = ROWS["env_servers"](result)
    assert [r[1].split(",")[1].strip().split(" ")[0] for r in rows] == ["1", "2"]
    assert rows[0][4].startswith(f"transport {family['http_transport_p50_ms']['1']:.2f}/")
    assert rows[0][5].startswith("< 2.0 ms (transport): ")

    # run_all rebuilds its table and run_all.json from the JSON in a results folder.
    from benchmarks.run_all import main as run_all

    assert run_all(["--from-results", "--only", "env_servers", "--out-dir", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "run_all.json").read_text())
    assert summary["results"]["env_servers"] == result and summary["ran"] == []
    assert [tuple(r.values()) for r in summary["table"]] == rows
    assert (tmp_path / "table.md").read_text().count("| env_servers |") == len(rows)


def test_run_all_keeps_quick_runs_out_of_the_committed_results(tmp_path):
    """Only a run at default sizes writes benchmarks/results/latest (kept in git); --quick gets a temp dir."""
    import tempfile
    from pathlib import Path

    import pytest

    from benchmarks.run_all import LATEST, default_out_dir, main as run_all

    assert LATEST == Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "latest"
    assert default_out_dir(quick=False) == LATEST
    quick = default_out_dir(quick=True)
    try:
        assert quick.is_dir() and quick.is_relative_to(tempfile.gettempdir()) and not quick.is_relative_to(LATEST)
    finally:
        quick.rmdir()
    with pytest.raises(SystemExit):
        run_all(["--only", "rollout,no_such_benchmark", "--out-dir", str(tmp_path)])
    assert list(tmp_path.iterdir()) == []


def test_machine_record_tells_cpu_generations_apart_where_the_model_name_does_not():
    zen4 = {"model name": "AMD EPYC", "cpu family": "25", "model": "17", "flags": "fpu avx2 avx512f avx512_bf16"}
    zen5 = {**zen4, "cpu family": "26", "model": "2"}
    assert cpu_generation(zen4) == {"cpu_family": 25, "cpu_model_number": 17,
                                    "cpu_matmul_flags": ["avx2", "avx512f", "avx512_bf16"]}
    assert cpu_generation(zen5)["cpu_family"] == 26
    assert cpu_generation({}) == {"cpu_family": None, "cpu_model_number": None, "cpu_matmul_flags": []}
    assert {"cpu_model", "cpu_family", "cpu_model_number", "cpu_matmul_flags"} <= set(machine())


def test_env_server_session_cap_fits_the_memory_budget():
    from benchmarks.env_servers import SESSION_RSS_MIB, memory_session_cap

    assert memory_session_cap(SESSION_RSS_MIB["sciworld"], 16.0) == 32  # in-process + HTTP: 64 JVMs
    assert memory_session_cap(256, 1.0) == 2 and memory_session_cap(780, 16.0) == 10
    assert memory_session_cap(10_000, 1.0) == 1  # always at least one session


def test_learner_benchmark_limits_per_mode(tmp_path):
    """Tiny learner benchmark: each mode's GRPO update against its limits (the KL mode's judged
    limit includes the reference forward), and run_all's rows for them."""
    from benchmarks.learner import main as learner
    from benchmarks.learner import mode_limits

    out = tmp_path / "learner.json"
    learner(["--tasks", "1", "--group-size", "2", "--max-turns", "2", "--repeats", "1", "--micro-batch-size", "1",
             "--modes", "no_kl,kl", "--profile", str(tmp_path / "profiles"), "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["meta"]["command"].startswith("python benchmarks/learner.py")
    for mode, m in result["modes"].items():  # --profile: each side once more, under torch.profiler
        assert m["shared_prefix"] is True  # on a CPU `auto` shares
        assert list(m["profile"]) == ["grpo", *mode_limits(mode, m["shared_prefix"])]
        assert all(side["wall_s"] > 0 and side["host_ops"] > 100 for side in m["profile"].values())
        tables = (tmp_path / "profiles" / f"profile_{mode}.txt").read_text()
        assert tables.count("=== ") == len(m["profile"]) and "aten::mm" in tables
    assert list(result["modes"]) == ["no_kl", "kl"]
    assert result["modes"]["no_kl"]["judged_limit"] == "bare" and result["modes"]["kl"]["judged_limit"] == "bare_plus_ref"
    for mode, m in result["modes"].items():
        assert list(m["limits"]) == list(mode_limits(mode, m["shared_prefix"]))
        assert m["ratio"] == m["limits"][m["judged_limit"]]["ratio"] and m["grpo_tokens_per_s"] > 0
        assert all(len(limit["step_cpu_s"]) == 1 and limit["tokens_per_s"] > 0 for limit in m["limits"].values())
        assert all(limit["ratio_of_medians"] == limit["ratio"] for limit in m["limits"].values())  # one repeat
    rows = ROWS["learner"](result)
    limits = [(r[1].split("(")[1].split(":")[0].split(")")[0], r[3].split("(", 1)[1].rstrip(")")) for r in rows[:-1]]
    assert limits == [("no KL", "bare f+b+step"), ("no KL", "bare f+b+step, LM head on all positions"),
                      ("no KL", "bare f+b+step, prompt run per row"),
                      ("KL to the reference", "bare f+b+step + ref fwd"), ("KL to the reference", "bare f+b+step")]
    assert [r[5].startswith(">= 0.9") for r in rows[:-1]] == [True, False, False, True, False]


def test_learner_benchmark_skip_mode_trains_the_rows_with_advantage(tmp_path):
    """no_kl_skip: half the groups fail whole; the update, its bare step over the other rows
    (judged) and over all rows, and run_all's rows for them."""
    from benchmarks.learner import main as learner

    out = tmp_path / "learner.json"
    # 8 turns: seed 0's second group is one finished and one cut episode (rewards 1, 0).
    learner(["--tasks", "2", "--group-size", "2", "--max-turns", "8", "--repeats", "1", "--micro-batch-size", "1",
             "--modes", "no_kl_skip", "--out", str(out)])
    m = json.loads(out.read_text())["modes"]["no_kl_skip"]
    assert (m["rows"], m["trained_rows"]) == (4, 2)  # the failing group's 2 rows are left out
    assert m["judged_limit"] == "bare_signal_rows" and list(m["limits"]) == ["bare_signal_rows", "bare"]
    assert m["limits"]["bare"]["step_s"][0] > 0 and m["limits"]["bare_signal_rows"]["step_s"][0] > 0
    rows = ROWS["learner"](json.loads(out.read_text()))
    assert [r[3].split("(", 1)[1].rstrip(")") for r in rows[:-1]] == ["bare f+b+step over the rows with advantage",
                                                                       "bare f+b+step"]
    assert [r[5].startswith(">= 0.9") for r in rows[:-1]] == [True, False]


def test_learner_bare_step_reads_logits_where_the_loss_does(embedded_model):
    """The bare limit's LM head on the response-predicting positions only gives the full-head loss."""
    import numpy as np
    import torch

    from benchmarks.learner import BareStep, expert_trajectories

    trajectories = expert_trajectories(embedded_model, 1, 3, 3, seed=0)
    width = max(len(t.token_ids) for t in trajectories)
    arrays = {k: np.zeros((len(trajectories), width), dtype=np.int64) for k in ("input_ids", "attention_mask", "response_mask")}
    for i, t in enumerate(trajectories):
        arrays["input_ids"][i, : len(t.token_ids)] = t.token_ids
        arrays["attention_mask"][i, : len(t.token_ids)] = 1
        arrays["response_mask"][i, : len(t.token_ids)] = t.loss_mask
    bare = BareStep(_bare_args(embedded_model), arrays, with_reference=True, model_config={"dtype": "float32"})
    assert sum(len(ids) for ids, *_ in bare.micro) == len(trajectories)
    with torch.no_grad():
        for ids, mask, response, positions, cached in bare.micro:
            assert 0 < len(positions[0]) < (ids.shape[1] - 1) * ids.shape[0]  # fewer positions than the tokens
            full = (bare._token_logprobs(bare.model, ids, mask, None) * response[:, 1:]).sum()
            kept = (bare._token_logprobs(bare.model, ids, mask, positions) * response[:, 1:][positions]).sum()
            torch.testing.assert_close(kept, full, rtol=1e-5, atol=1e-4)
            if ids.shape[0] > 1:  # one task's group: its rows share the whole prompt, run once
                assert cached > 0
                shared = bare._token_logprobs(bare.model, ids, mask, positions, cached)
                torch.testing.assert_close((shared * response[:, 1:][positions]).sum(), full,
                                           rtol=1e-5, atol=1e-4)
    before = [p.detach().clone() for p in bare.model.parameters()]
    bare.step(reference=True)
    assert any(not torch.equal(a, b) for a, b in zip(before, bare.model.parameters()))  # one AdamW step applied


def test_learner_bare_step_trains_in_the_learners_precision(embedded_model, tmp_path):
    """With `--dtype bfloat16` the learner keeps float32 master weights and autocasts; the bare limit
    does the same (bf16 weights would be a cheaper step than the one it is compared with). The model
    is a random one of a published shape's layout, written by benchmarks/shaped_model.py."""
    import torch

    from benchmarks.learner import BareStep, grpo_config
    from benchmarks.shaped_model import SHAPES, build
    from rllib_agentgym.core.precision import autocast_dtype

    count = build(tmp_path / "tiny", "tiny", tokenizer=embedded_model)
    config = json.loads((tmp_path / "tiny" / "config.json").read_text())
    assert config["num_hidden_layers"] == SHAPES["tiny"]["num_hidden_layers"] and count > 0
    args = _bare_args(str(tmp_path / "tiny"), dtype="bfloat16")
    model_config = grpo_config(args, use_kl=False).get_default_rl_module_spec().model_config
    assert model_config["dtype"] == "float32" and model_config["autocast"] == "bfloat16"
    arrays = {k: torch.ones((2, 8), dtype=torch.int64).numpy() for k in ("input_ids", "attention_mask", "response_mask")}
    bare = BareStep(args, arrays, with_reference=False, model_config=model_config)
    assert {p.dtype for p in bare.model.parameters()} == {torch.float32}
    with bare.autocast():  # the learner's own rule: bf16 autocast unless this CPU only emulates it
        assert torch.is_autocast_enabled("cpu") == (autocast_dtype("cpu", torch.bfloat16) is not None)
    bare.step()


def test_shaped_model_refuses_a_tokenizer_larger_than_its_vocabulary(embedded_model, tmp_path, monkeypatch):
    from benchmarks import shaped_model

    monkeypatch.setitem(shaped_model.SHAPES, "tiny", {**shaped_model.SHAPES["tiny"], "vocab_size": 8})
    with pytest.raises(ValueError, match="more than shape 'tiny'"):
        shaped_model.build(tmp_path / "m", "tiny", tokenizer=embedded_model)


def _bare_args(model: str, dtype: str = "float32"):
    """The arguments BareStep and grpo_config read, as the learner benchmark's parser gives them."""
    import types

    return types.SimpleNamespace(model=model, dtype=dtype, micro_batch_size=2, max_model_len=1024)


def test_searchqa_retrieval_benchmark_json_shape_and_rows(tmp_path):
    """Tiny counts through the real service process; run_all turns the JSON into table rows."""
    from benchmarks import searchqa_retrieval
    from benchmarks.run_all import ROWS

    out = tmp_path / "searchqa_retrieval.json"
    searchqa_retrieval.main(["--scale", "0.1", "--max-queries", "16", "--bm25-backends", "numpy", "--clients", "4",
                             "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["num_docs"] > 200 and result["num_queries"] == 16 and "searchqa_retrieval" in result["meta"]["command"]
    assert {"bm25s", "faiss-cpu"} <= set(result["retrieval_versions"])
    bm25 = result["bm25_numpy"]
    assert bm25["build_docs_per_s"] > 0 and sorted(bm25["queries_per_s"]) == ["batch_1", "batch_256", "batch_64", "batch_8"]
    assert set(bm25["service_queries_per_s"]) == {"http_4_clients_single_query", "http_batch_64"}
    assert all(v > 0 for v in [*bm25["queries_per_s"].values(), *bm25["service_queries_per_s"].values()])
    rows = ROWS["searchqa_retrieval"](result)
    assert [r[1].split(":")[1].strip().split(",")[0] for r in rows] == ["index build", "in-process queries/s", "HTTP service queries/s"]


def test_first_action_credit_classifies_context_and_action():
    from types import SimpleNamespace

    from benchmarks.first_action_credit import credit_by_context, first_action_kind, goal_in_view

    in_view = ("Your goal: go to the red ball\nThere is a red ball 1 2 steps in front of you.\n"
               'Available actions: ["turn left", "turn right", "move forward", "go to red ball 1"]')
    out_of_view = ("Your goal: go to the red ball\nThere is a grey key 1 right in front of you.\n"
                   'Available actions: ["turn left", "turn right", "move forward", "go to grey key 1"]')
    assert goal_in_view(in_view) and not goal_in_view(out_of_view)
    assert first_action_kind("Thought: I will explore.\nAction: turn right") == "explore"
    assert first_action_kind("Thought: go.\nAction: go to red ball 1") == "go to"
    assert first_action_kind("Action: pickup grey key 1") == "other"

    def traj(obs, response, success, turns):
        return SimpleNamespace(success=success, turns=[SimpleNamespace(observation=obs, response=response)] * turns)

    cells = credit_by_context(
        [traj(in_view, "Action: go to red ball 1", True, 1), traj(in_view, "Action: turn left", False, 12),
         traj(out_of_view, "Action: turn left", True, 3)],
        [0.5, -0.5, 0.0],
    )
    assert cells["goal in view / first action go to"] == {"episodes": 1, "success": 1.0, "mean_advantage": 0.5, "mean_turns": 1.0}
    assert cells["goal in view / first action explore"]["mean_advantage"] == -0.5
    assert cells["goal not in view / first action explore"]["mean_turns"] == 3.0


def test_scaling_inter_ablation_resume_keeps_runs_of_the_same_config_only(tmp_path):
    import pytest

    from benchmarks.scaling_inter_ablation import arms, resumable_runs

    arm_overrides = arms(4, 12, 10)
    run = {"seed": 0, "eval": [{"iteration": 0, "success_rate": 0.5}], "train": []}
    earlier = {"config_file": "tuned_examples/babyai_warmstart_cpu.yaml", "iterations": 10, "overrides": {},
               "arms": {name: {"overrides": json.loads(json.dumps(o)), "runs": [run]}
                        for name, o in arm_overrides.items()}}
    path = tmp_path / "ablation.json"
    path.write_text(json.dumps(earlier))

    kept = resumable_runs(str(path), earlier["config_file"], 10, {}, arm_overrides)
    assert kept == {name: {0: run} for name in arm_overrides}
    with pytest.raises(SystemExit, match="made with"):
        resumable_runs(str(path), earlier["config_file"], 30, {}, arm_overrides)
    with pytest.raises(SystemExit, match="not one of this ablation's arms"):
        resumable_runs(str(path), earlier["config_file"], 10, {}, arms(4, 15, 10))


def test_scaling_inter_training_pool_draws_across_levels_and_parses_ids():
    import argparse

    import pytest

    from benchmarks.learning_curves import pool_arg, training_pool
    from rllib_agentgym.envs.registry import get_spec

    config = {"env": "agentgym/babyai", "env_config": {"split": "train", "categories": ["GoTo", "Open"]}}
    spec = get_spec("agentgym/babyai")
    pool = training_pool(config, 16)
    assert len(pool) == len(set(pool)) == 16 and pool == sorted(pool)
    assert set(pool) <= set(spec.task_ids("train", ["GoTo", "Open"]))
    assert {spec.category(i) for i in pool} == {"GoTo", "Open"}
    # BabyAI's task i is level i % 40 + 1: evenly spaced ids fall on two levels, a draw does not.
    assert len({i % 40 for i in pool}) >= 8
    assert training_pool(config, 16) == pool  # the same pool for every arm and seed
    with pytest.raises(ValueError, match="has 720 tasks"):
        training_pool(config, 721)
    assert pool_arg("16") == 16 and pool_arg("0,120,935") == [0, 120, 935]
    for bad in ("sixteen", "", ","):
        with pytest.raises(argparse.ArgumentTypeError, match="comma-separated task ids"):
            pool_arg(bad)


def test_learning_curves_summary_pairs_sampled_success_per_seed():
    import pytest

    from benchmarks.learning_curves import summarize

    def run(greedy, sampled):
        return {"eval": [{"iteration": i, "success_rate": x} for i, x in zip((0, 10), greedy)],
                "sampled_eval": [{"iteration": i, "k": 4, "success_rate": x} for i, x in zip((0, 10), sampled)]}

    summary = summarize([run((0.4, 0.5), (0.30, 0.40)), run((0.4, 0.3), (0.30, 0.36))])
    assert summary["gain"]["values"] == pytest.approx([0.1, -0.1])
    assert summary["sampled"]["gain"]["values"] == pytest.approx([0.10, 0.06])
    assert summary["sampled"]["gain"]["mean"] == pytest.approx(0.08)
    assert "sampled" not in summarize([{"eval": run((0.4, 0.5), (0.3, 0.4))["eval"]}])


def test_teacher_forced_errors_finds_responses_and_actions():
    from transformers import AutoTokenizer

    from benchmarks.teacher_forced_errors import action_start, response_spans
    from rllib_agentgym.core.embedded import embedded_model_path

    assert response_spans([0, 1, 1, 0, 0, 1, 0, 1]) == [(1, 3), (5, 6), (7, 8)]
    assert response_spans([]) == [] and response_spans([0, 0]) == []
    tokenizer = AutoTokenizer.from_pretrained(embedded_model_path())
    prompt = tokenizer("Goal: craft bricks.\n")["input_ids"]
    response = tokenizer("Thought: I craft the goal.\nAction: craft 1 bricks using 4 brick")["input_ids"]
    ids = prompt + response
    span = (len(prompt), len(ids))
    start = action_start(tokenizer, ids, span)
    assert tokenizer.decode(ids[span[0]:start]).endswith("Action:")
    assert tokenizer.decode(ids[start:]).strip() == "craft 1 bricks using 4 brick"
    assert action_start(tokenizer, ids, (0, len(prompt))) is None


def test_sft_step_cost_batches_and_times_a_step(embedded_model):
    import torch

    from benchmarks.sft_step_cost import padded_batch, step_seconds
    from rllib_agentgym.core.rl_module import load_causal_lm

    examples = [([5, 6, 7, 8, 9], [0, 0, 1, 1, 1], [0] * 5), ([5, 6, 7], [0, 1, 1], [0] * 3)]
    batch = padded_batch(examples, pad_id=0)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert batch["response_mask"].tolist() == [[0, 0, 1, 1, 1], [0, 1, 1, 0, 0]]
    llm = load_causal_lm(embedded_model)
    for micro in (1, 2):
        for trained_only in (False, True):
            assert step_seconds(llm, batch, micro, trained_only) > 0
            assert all(p.grad is None for p in llm.parameters())  # each step leaves no gradient behind
    assert torch.is_grad_enabled()


def test_textcraft_first_thoughts_compares_with_the_expert_and_the_task_text(tmp_path):
    import gzip

    from benchmarks.textcraft_first_thoughts import first_thought_stats, main
    from rllib_agentgym.run_logs import read_jsonl

    task = ("Crafting commands:\ncraft 3 birch wood using 4 birch log\ncraft 4 oak planks using 1 oak log\n\n"
            "Goal: craft birch wood.")

    def episode(thought: str, action: str, success: bool) -> dict:
        return {"success": success, "turns": [{"observation": task, "action": action,
                                               "response": f"Thought: {thought}\nAction: {action}"}]}

    episodes = [
        episode("I need 4 birch log for birch wood. No command crafts it, so I get it.", "get 4 birch log", True),
        episode("I need 1 oak log for birch wood. No command crafts it, so I get it.", "get 1 oak log", False),
        episode("I need 4 blackstone for stone slab. No command crafts it, so I get it.", "get 4 blackstone", False),
    ]
    stats = first_thought_stats(episodes)
    assert stats == {"episodes": 3, "same_as_expert": 1, "same_target_as_expert": 2, "target_not_in_task": 1,
                     "same_first_action": 1, "successes": 1}

    path = tmp_path / "episodes.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(e) + "\n" for e in episodes)
    assert read_jsonl(path) == episodes  # gzip-compressed episodes read as plain ones
    main([str(path), "--json", str(tmp_path / "out.json")])
    assert json.loads((tmp_path / "out.json").read_text())[str(path)] == stats


def test_textcraft_failure_stages_sort_episodes_by_the_plan_stage_they_reach(tmp_path):
    from benchmarks.textcraft_failure_stages import goal_craft_refusal, main, stage_counts
    from envs.textcraft import tasks
    from envs.textcraft.env import TextCraftEnv

    def play(actions: list[str]) -> dict:
        """An episode record as `rllib evaluate --episodes` writes it, played on the real env."""
        env = TextCraftEnv()
        observation, turns, success = env.reset(tasks.goal_index("crafting table")), [], False
        for action in actions:
            step = env.step(action)
            turns.append({"observation": observation, "action": action, "progress": step.info["progress"]})
            observation, success = step.observation, step.info["success"]
        return {"success": success, "turns": turns, "final_observation": observation}

    ingredients = ["get 1 stripped dark oak log", "craft 4 dark oak planks using 1 stripped dark oak log"]
    episodes = [
        play(ingredients + ["craft 1 crafting table using 4 dark oak planks"]),  # solved
        play(ingredients + ["craft 1 dark oak door using 4 dark oak planks"]),  # every ingredient, then another item
        play(ingredients + ["craft 2 crafting table using 4 dark oak planks"]),  # tried the goal, wrong count
        play(ingredients[:1] + ["craft 1 crafting table using 4 dark oak planks", "get 1 oak log"]),  # part
        play(["get 1 oak log", "craft 1 crafting table using 4 oak log", "inventory"]),  # nothing the plan needs
    ]
    counts = stage_counts(episodes)
    assert counts == {"episodes": 5, "solved": 1, "all but the goal": 2, "part": 1, "none": 1,
                      "all but the goal, tried the goal's craft": 1,
                      "failed, the last goal craft refused for": {"wrong quantities": 1, "wrong ingredients": 1,
                                                                   "ingredients not held": 1, "other": 0}}
    assert goal_craft_refusal(episodes[0]) is None and goal_craft_refusal(episodes[1]) is None
    path = tmp_path / "episodes.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in episodes))
    main([str(path), "--json", str(tmp_path / "out.json")])
    assert json.loads((tmp_path / "out.json").read_text())[str(path)] == counts

    for episode, category in zip(episodes, ["depth 1", "depth 2", "depth 2", "depth 1", "depth 2"]):
        episode["category"] = category
    by_category = stage_counts(episodes)["by_category"]
    assert by_category["depth 1"] == {"episodes": 2, "solved": 1, "all but the goal": 0, "part": 1, "none": 0,
                                      "all but the goal, tried the goal's craft": 0,
                                      "failed, the last goal craft refused for": {
                                          "wrong quantities": 0, "wrong ingredients": 0, "ingredients not held": 1,
                                          "other": 0}}
    assert by_category["depth 2"]["all but the goal, tried the goal's craft"] == 1
    assert by_category["depth 2"]["failed, the last goal craft refused for"]["wrong ingredients"] == 1
    episodes[0]["turns"][0]["progress"] = None  # recorded before the env reported progress
    with pytest.raises(ValueError, match="progress"):
        stage_counts(episodes)


def test_webarena_step_latency_benchmark_runs_the_expert_in_chromium():
    """Two test tasks in-process (the expert solves them); every action kind's steps are timed."""
    # No capsys here: Playwright's driver started while pytest's capsys holds sys.stderr
    # leaves that capture closed for the rest of the session (seen when this test ran second).
    from benchmarks.webarena_step_latency import main as webarena_latency

    report = webarena_latency(["--tasks", "2", "--mode", "inproc"])
    inproc = report["inproc"]
    assert len(report["tasks"]) == 2 and inproc["episodes"] == 2 and inproc["solved"] == 2
    assert "stop" in inproc["by_action"] and inproc["step"]["n"] == sum(a["n"] for a in inproc["by_action"].values())
    assert 0 < inproc["step"]["p50_ms"] <= inproc["step"]["p90_ms"] and inproc["observation_only"]["n"] == 20


@pytest.mark.slow  # its own Ray cluster, a runner actor with vLLM, 3 GRPO iterations: ~90 s on a loaded 2-core machine
def test_soak_benchmark_json_shape_and_rows(tmp_path):
    """benchmarks/soak.py end to end at tiny counts, in its own process (it starts and stops its
    own Ray); run_all turns its JSON into one table row per process."""
    import subprocess
    import sys
    from pathlib import Path

    from benchmarks.run_all import BENCHMARKS, ROWS

    assert BENCHMARKS["soak"][0] == "soak.py"
    out = tmp_path / "soak.json"
    subprocess.run([sys.executable, "benchmarks/soak.py", "--iterations", "3", "--warmup", "1", "--window", "1",
                    "--env-runners", "1", "--tasks", "1", "--group-size", "2", "--max-turns", "1",
                    "--max-new-tokens", "4", "--max-model-len", "1024", "--out", str(out)],
                   cwd=Path(__file__).resolve().parents[1], check=True, stdout=subprocess.DEVNULL, timeout=600)
    result = json.loads(out.read_text())
    assert result["benchmark"] == "soak" and result["settings"]["engine"] == "vllm"  # the default, as in training
    assert [s["iteration"] for s in result["samples"]] == [1, 2, 3]
    assert all(s["episodes"] == 2 and s["dropped"] == 0 for s in result["samples"])
    processes = set(result["growth_after_warmup_pct"])
    assert {"driver", "runner_1"} <= processes and any(p.startswith("server_") for p in processes), processes
    assert set(result["growth_second_half_pct"]) == processes
    parts = result["samples"][-1]["rss_parts_mb"]["runner_1"]  # the runner's pages by kind add up to its RSS
    assert set(parts) == {"anon", "file", "shmem"}
    assert sum(parts.values()) == pytest.approx(result["samples"][-1]["rss_mb"]["runner_1"], abs=1.0)
    assert result["meta"]["command"].startswith("python benchmarks/soak.py")
    rows = ROWS["soak"](result)
    assert [r[0] for r in rows] == ["soak"] * len(result["growth_after_warmup_pct"])
    assert all(r[5].startswith("< 5%: ") for r in rows)


def test_precision_benchmark_times_both_and_reports_the_frameworks_pick(tmp_path):
    """benchmarks/precision.py at a tiny size: both precisions timed, the pick is what
    core/precision.py chooses on this CPU, and run_all makes its row."""
    import torch

    from benchmarks.precision import main as precision
    from rllib_agentgym.core.precision import cpu_has_native

    out = tmp_path / "precision.json"
    result = precision(["--model", "embedded", "--batch", "1", "--seq-len", "32", "--repeats", "1", "--out", str(out)])
    assert json.loads(out.read_text()) == result
    assert set(result["tokens_per_s"]) == {"float32", "bfloat16_autocast"} and all(v > 0 for v in result["tokens_per_s"].values())
    assert result["cpu_native_bfloat16"] == cpu_has_native(torch.bfloat16)
    assert result["picked"] == ("bfloat16_autocast" if result["cpu_native_bfloat16"] else "float32")
    (row,) = ROWS["precision"](result)
    assert row[0] == "precision" and row[5].startswith("picked not slower: ")


def test_precision_benchmark_times_the_engine_in_both_dtypes():
    """--generation: vLLM generates the same batch in float32 and bfloat16, and the pick is the
    engine dtype the framework uses for model_dtype bfloat16 on this CPU."""
    from benchmarks.precision import main as precision
    from rllib_agentgym.core.precision import cpu_engine_dtype

    result = precision(["--model", "embedded", "--batch", "1", "--seq-len", "16", "--repeats", "1", "--generation",
                        "--gen-prompts", "2", "--gen-prompt-tokens", "16", "--gen-tokens", "4"])
    generation = result["generation"]
    assert set(generation["tokens_per_s"]) == {"float32", "bfloat16"} and all(v > 0 for v in generation["tokens_per_s"].values())
    assert generation["picked"] == cpu_engine_dtype("bfloat16")
    assert [row[0] for row in ROWS["precision"](result)] == ["precision", "precision"]


def test_lowrank_delta_factorizes_each_matrix_change_and_ties_the_head():
    import torch

    from benchmarks.lowrank_delta import factorized_delta

    g = torch.Generator().manual_seed(0)
    base = {"model.embed_tokens.weight": torch.randn(12, 4, generator=g), "model.layers.0.q_proj.weight": torch.randn(6, 4, generator=g),
            "model.layers.0.norm.weight": torch.ones(4)}
    base["lm_head.weight"] = base["model.embed_tokens.weight"]
    rank1 = torch.randn(6, 1, generator=g) @ torch.randn(1, 4, generator=g)
    tuned = {"model.embed_tokens.weight": base["model.embed_tokens.weight"] + torch.randn(12, 4, generator=g),
             "model.layers.0.q_proj.weight": base["model.layers.0.q_proj.weight"] + rank1,
             "model.layers.0.norm.weight": torch.full((4,), 2.0)}
    tuned["lm_head.weight"] = tuned["model.embed_tokens.weight"]
    out, entries = factorized_delta(base, tuned, rank=1, embedding_rank=0)
    # A rank-1 change survives rank 1 exactly; rank 0 keeps the base; 1-D tensors travel whole.
    assert torch.allclose(out["model.layers.0.q_proj.weight"], tuned["model.layers.0.q_proj.weight"], atol=1e-5)
    assert torch.equal(out["model.embed_tokens.weight"], base["model.embed_tokens.weight"])
    assert out["lm_head.weight"] is out["model.embed_tokens.weight"] and torch.equal(out["model.layers.0.norm.weight"], tuned["model.layers.0.norm.weight"])
    assert entries == 1 * (6 + 4)
    out, entries = factorized_delta(base, tuned, rank=1, embedding_rank=4)  # full rank: the tuned embedding
    assert torch.allclose(out["lm_head.weight"], tuned["model.embed_tokens.weight"], atol=1e-5) and entries == 10 + 4 * 16
    # An untied head is a matrix of its own, at the embedding's rank.
    base["lm_head.weight"], tuned["lm_head.weight"] = torch.zeros(12, 4), torch.randn(12, 4, generator=g)
    out, entries = factorized_delta(base, tuned, rank=1, embedding_rank=0)
    assert torch.equal(out["lm_head.weight"], base["lm_head.weight"]) and out["lm_head.weight"] is not out["model.embed_tokens.weight"]
    out, entries = factorized_delta(base, tuned, rank=1, embedding_rank=4)
    assert torch.allclose(out["lm_head.weight"], tuned["lm_head.weight"], atol=1e-5) and entries == 10 + 2 * 4 * 16


def test_lowrank_delta_scores_the_sign_delta_against_the_full_fine_tune(tmp_path):
    """A change of one magnitude a row is what the sign delta stores exactly: no KL from the
    tuned model, every argmax the same; a rank-1 factorization of a random change is further off."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from benchmarks.lowrank_delta import main as lowrank_delta
    from rllib_agentgym.core.embedded import resolve_model_path
    from rllib_agentgym.data.conversations import write_jsonl
    from rllib_agentgym.data.experts import expert_conversations

    base = resolve_model_path("embedded")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if weight.ndim == 2:
                signs = torch.randint(0, 2, weight.shape, generator=g).float() * 2 - 1
                weight += 0.05 * torch.rand(weight.shape[0], 1, generator=g) * signs
    model.save_pretrained(tmp_path / "tuned")
    AutoTokenizer.from_pretrained(base).save_pretrained(tmp_path / "tuned")
    write_jsonl(tmp_path / "held_out.jsonl", expert_conversations("agentgym/textcraft", "test", 2, max_steps=15))
    out = tmp_path / "lowrank.json"
    result = lowrank_delta(["--base", "embedded", "--tuned", str(tmp_path / "tuned"), "--conversations",
                            str(tmp_path / "held_out.jsonl"), "--num", "2", "--ranks", "1:0", "--sign-delta",
                            "--out", str(out)])
    assert json.loads(out.read_text()) == result
    sign = result["sign_delta"]
    assert sign["loss"] == pytest.approx(result["loss"]["tuned"], rel=1e-3) and sign["kl_from_tuned"] < 1e-4
    assert sign["argmax_agreement"] == 1.0
    (factorized,) = result["factorized"]
    assert factorized["kl_from_tuned"] > 100 * max(sign["kl_from_tuned"], 1e-6)


def test_learning_curves_records_each_iterations_rollout_learner_and_sync_seconds(ray_local):
    """run_curve's per-iteration record splits time_s into its parts, from the result's timers."""
    from benchmarks.learning_curves import run_curve
    from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig

    config = (
        GRPOConfig()
        .environment("agentgym/bandit")
        .llm(group_size=4, tasks_per_iteration=2, max_turns=1, max_new_tokens=1, inference_engine="hf")
        .training(lr=1e-3, micro_batch_size=8)
        .debugging(seed=0)
    )
    config.evaluation_num_tasks = 2
    run = run_curve(config.to_dict(), iterations=2, eval_every=2, log=lambda *_: None)
    assert [point["iteration"] for point in run["eval"]] == [0, 2]
    for row in run["train"]:
        assert row["learner_s"] > 0 and row["sync_s"] > 0 and row["rollout_s"] > 0
        assert row["rollout_s"] + row["learner_s"] + row["sync_s"] <= row["time_s"]
        assert "dynamic_sampling_rounds" not in row  # only with dynamic_sampling


def test_learning_curves_records_dynamic_samplings_refill_rounds_and_groups_kept(ray_local):
    """With DAPO's dynamic sampling each iteration's record says how many refill rounds ran and
    how many informative groups the batch kept, within the configured caps."""
    from benchmarks.learning_curves import run_curve
    from bandit_configs import mixed_bandit_config

    tasks, max_rounds = 2, 2
    config = mixed_bandit_config(dynamic_sampling=True, dynamic_sampling_max_rounds=max_rounds).llm(
        tasks_per_iteration=tasks)
    config.evaluation_num_tasks = 2
    run = run_curve(config.to_dict(), iterations=2, eval_every=2, log=lambda *_: None)
    for row in run["train"]:
        assert row["dynamic_sampling_rounds"] in range(max_rounds + 1)
        assert row["dynamic_sampling_groups_kept"] in range(tasks + 1)
        # Fewer groups than asked only when the refill rounds ran out.
        assert row["dynamic_sampling_groups_kept"] == tasks or row["dynamic_sampling_rounds"] == max_rounds


def test_kv_cache_benchmark_plays_the_same_turns_on_both_sizes(tmp_path):
    """Tiny counts on the embedded model: both engines see the same prompts and token counts;
    its short contexts fit in 1 GiB, so both sizes prefill the same tokens."""
    from benchmarks import kv_cache

    out = tmp_path / "kv_cache.json"
    kv_cache.main(["--model", "embedded", "--episodes", "3", "--turns", "2", "--first-prompt-tokens", "150",
                   "--observation-tokens", "10", "--response-tokens", "4", "--max-model-len", "512",
                   "--out", str(out)])
    result = json.loads(out.read_text())
    sized, fixed = result["sizes"]["sized"], result["sizes"]["fixed_1gib"]
    assert sized["kv_cache_gib"] == fixed["kv_cache_gib"] == 1.0
    assert sized["generated_tokens"] == fixed["generated_tokens"] == 3 * 2 * 4
    # Turn 2's prompts are turn 1's (150) + a response (4) + an observation (10).
    assert sized["prompt_tokens"] == fixed["prompt_tokens"] == 3 * (150 + 164) and sized["final_context_tokens"] == 178
    # Turn 2 finds turn 1's first full cache block (CPU blocks hold 128 tokens).
    assert sized["prefilled_tokens"] == fixed["prefilled_tokens"] < sized["prompt_tokens"]
    assert result["speedup"] > 0 and result["prefill_ratio"] == 1.0


def test_allocator_benchmark_times_both_allocators_in_fresh_processes(tmp_path):
    """benchmarks/allocator.py at a tiny size: each side runs in its own child process, tcmalloc
    is in the preloaded children's address space and in no other, and both parts are timed."""
    from benchmarks.allocator import main as allocator

    out = tmp_path / "allocator.json"
    result = allocator(["--model", "embedded", "--prompts", "2", "--prompt-tokens", "16", "--new-tokens", "4",
                        "--rows", "1", "--seq-len", "16", "--calls", "1", "--repeats", "1", "--out", str(out)])
    assert json.loads(out.read_text()) == result
    assert result["tcmalloc_mapped"] == {"default": [False], "tcmalloc": [True]}
    for part in ("generation", "train_step"):
        timing = result[part]
        assert timing["default_s"] > 0 and timing["tcmalloc_s"] > 0
        assert timing["ratio"] == pytest.approx(timing["default_s"] / timing["tcmalloc_s"])


def test_pool_transfer_splits_pool_and_other_goals_paired_with_the_warm_start(tmp_path):
    from benchmarks.pool_transfer import main as pool_transfer

    def report(successes: dict[int, list[bool]]) -> dict:
        return {"k": 2, "tasks": [{"data_idx": i, "successes": s} for i, s in successes.items()]}

    base = report({1: [True, False], 2: [False, False], 3: [True, True], 4: [False, True]})
    trained = report({1: [True, True], 2: [True, False], 3: [False, False], 4: [False, True]})
    paths = {}
    for name, data in (("base", base), ("trained", trained), ("short", report({1: [True, True]}))):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(data))
    out = tmp_path / "transfer.json"
    rows = pool_transfer(["--pool", "1", "--baseline", str(paths["base"]), f"grpo={paths['trained']}", "--out", str(out)])
    assert rows["baseline"]["pool"] == {"successes": 1, "episodes": 2, "goals": 1}
    assert rows["baseline"]["others"] == {"successes": 3, "episodes": 6, "goals": 3, "goals_solved": 2}
    grpo = rows["grpo"]
    assert grpo["pool"]["successes"] == 2 and grpo["others"]["successes"] == 2
    assert grpo["others_vs_baseline"] == {"up": 1, "down": 1, "level": 1, "net_episodes": -1}
    assert grpo["pool_vs_baseline"] == {"up": 1, "down": 0, "level": 0, "net_episodes": 1}
    assert json.loads(out.read_text())["pool"] == [1]
    split = pool_transfer(["--pool", "1", "--held-out", "1,2", "--baseline", str(paths["base"]), f"grpo={paths['trained']}"])
    assert split["baseline"]["others_held_out"] == {"successes": 0, "episodes": 2, "goals": 1}
    assert split["baseline"]["others_seen"] == {"successes": 3, "episodes": 4, "goals": 2}
    assert split["grpo"]["others_held_out_vs_baseline"] == {"up": 1, "down": 0, "level": 0, "net_episodes": 1}
    assert split["grpo"]["others_seen_vs_baseline"] == {"up": 0, "down": 1, "level": 1, "net_episodes": -2}
    assert "others_held_out" not in rows["grpo"]
    # An empty pool: reports of goals outside it (the test split), compared goal by goal.
    test_goals = pool_transfer(["--pool", "", "--baseline", str(paths["base"]), f"grpo={paths['trained']}"])
    assert test_goals["grpo"]["pool"] == {"successes": 0, "episodes": 0, "goals": 0}
    assert test_goals["grpo"]["others_vs_baseline"] == {"up": 2, "down": 1, "level": 1, "net_episodes": 0}
    with pytest.raises(ValueError, match="not scored on the baseline's tasks"):
        pool_transfer(["--pool", "1", "--baseline", str(paths["base"]), f"x={paths['short']}"])
    with pytest.raises(ValueError, match=r"pool goals \[9\]"):
        pool_transfer(["--pool", "9", "--baseline", str(paths["base"]), f"x={paths['trained']}"])


def test_matched_sgd_lr_lowers_a_linear_loss_as_much_as_adams_first_step():
    """On L(w) = g.w, one torch Adam step at lr_adam and one SGD step at the matched lr
    lower L by the same amount (lr_adam * |g|_1), SGD with a shorter step."""
    import torch

    from benchmarks.sgd_lr_calibration import matched_sgd_lr

    g = torch.tensor([3.0, -0.01, 0.2, -1.5, 0.0004])
    adam_lr = 1e-2
    lr = matched_sgd_lr(adam_lr, float(g.abs().sum()), float(g.norm()))
    assert lr == pytest.approx(adam_lr * float(g.abs().sum()) / float(g.norm()) ** 2)
    steps = {}
    for name, make in {"adam": lambda p: torch.optim.Adam([p], lr=adam_lr, eps=1e-12),
                       "sgd": lambda p: torch.optim.SGD([p], lr=lr)}.items():
        w = torch.zeros(5, requires_grad=True)
        optimizer = make(w)
        (g @ w).backward()
        optimizer.step()
        steps[name] = w.detach()
    decrease = {name: -float(g @ step) for name, step in steps.items()}
    assert decrease["adam"] == pytest.approx(adam_lr * float(g.abs().sum()), rel=1e-5)
    assert decrease["sgd"] == pytest.approx(decrease["adam"], rel=1e-5)
    assert steps["sgd"].norm() < steps["adam"].norm()


def test_sgd_lr_calibration_records_each_adam_steps_gradient_norms(ray_local):
    from bandit_configs import mixed_bandit_config
    from benchmarks.sgd_lr_calibration import calibrate, matched_sgd_lr

    # 4 tasks x 4 samples in minibatches of 8: two optimizer steps (groups mixed, so gradients).
    config = mixed_bandit_config(minibatch_size=8, grad_clip=1e-3, skip_zero_advantage_rows=False).llm(
        tasks_per_iteration=4)
    result = calibrate(config.to_dict(), adam_lr=1e-3)
    steps = result["steps"]
    assert len(steps) == 2
    for step in steps:
        assert 0 < step["l2"] <= 1e-3 * (1 + 1e-4)  # what the optimizer got: after grad_clip
        assert step["l1"] >= step["l2"] and step["num_weights"] > 0
        assert step["matched_sgd_lr"] == matched_sgd_lr(1e-3, step["l1"], step["l2"])
    assert min(s["matched_sgd_lr"] for s in steps) <= result["matched_sgd_lr_median"] <= max(
        s["matched_sgd_lr"] for s in steps)


def test_learner_benchmark_times_the_other_prefix_setting_beside_the_learners():
    """Where the learner shares the prompt prefix (`auto` on a CPU) `no_kl` also times the unshared bare
    step; where it does not (`auto` on a GPU) the shared one; the judged `bare` is the learner's own work."""
    from benchmarks.learner import MODE_LIMITS, mode_limits

    assert mode_limits("no_kl", True) == MODE_LIMITS["no_kl"]
    assert mode_limits("no_kl", False) == {"bare": {}, "bare_full_lm_head": {"full_lm_head": True},
                                           "bare_shared": {"share_prefix": True}}
    assert mode_limits("kl", False) == MODE_LIMITS["kl"] and "bare_unshared" in MODE_LIMITS["no_kl"]


def test_start_state_recovery_plays_every_state_k_times_with_paired_seeds(tmp_path):
    from benchmarks.start_state_recovery import main as recovery_main
    from envs.textcraft.env import TextCraftEnv
    from envs.textcraft.expert import parse_task
    from rllib_agentgym.envs.registry import get_spec

    env, states = TextCraftEnv(), []
    for data_idx in get_spec("agentgym/textcraft").task_ids("test", ["depth 1"])[:3]:
        commands, goal = parse_task(env.reset(data_idx))
        (item, n), *_ = commands[goal].ingredients
        states.append({"data_idx": data_idx, "prefix": [{"response": f"Action: get {n} {item}", "action": f"get {n} {item}"}]})
    starts = tmp_path / "starts.jsonl"
    starts.write_text("".join(json.dumps(s) + "\n" for s in states))
    result = recovery_main(["a=embedded", "b=embedded", "--starts", str(starts), "--categories", "depth 1",
                            "--k", "2", "--max-turns", "1", "--max-new-tokens", "16", "--max-model-len", "1024",
                            "--dtype", "float32", "--engine", "hf", "--out", str(tmp_path / "r.json")])
    a, b = result["rows"]["a"], result["rows"]["b"]
    assert a["episodes"] == b["episodes"] == 6 and a["states"] == 3
    assert sum(c["episodes"] for c in a["by_category"].values()) == 6
    # The same policy with the same generation seeds recovers in the same episodes.
    assert b["by_state"] == a["by_state"] and b["vs_baseline"] == {"up": 0, "down": 0, "level": 3, "net_episodes": 0}
    assert json.loads((tmp_path / "r.json").read_text())["settings"]["k"] == 2

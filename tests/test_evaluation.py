"""Evaluation: Avg@k / Pass@k (pure), `rllib evaluate` on a checkpoint, periodic evaluation
in the Tune result (`evaluation_interval`), and the ray.util.metrics export."""

from __future__ import annotations

import json
import math
import pickle
import time
from pathlib import Path

import numpy as np
import pytest

from rllib_agentgym import run_logs
from rllib_agentgym.evaluation import (
    EvalReport,
    TaskOutcome,
    avg_at_k,
    evaluation_split,
    evaluation_task_ids,
    load_policy,
    outcomes_from_trajectories,
    pass_at_k,
    score,
    select_tasks,
)

# ---- pure functions ---------------------------------------------------------------


def test_avg_and_pass_at_k_hand_computed():
    # 3 tasks, k = 4: successes 2/4, 0/4, 4/4.
    s = [[1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]]
    assert avg_at_k(s) == pytest.approx((0.5 + 0.0 + 1.0) / 3)  # = 6 / 12 samples
    assert pass_at_k(s) == pytest.approx(2 / 3)
    # k = 1: both are the plain success rate.
    assert avg_at_k([[1], [0], [0], [1]]) == pass_at_k([[1], [0], [0], [1]]) == 0.5
    # A task whose samples were all dropped does not count; no task at all is NaN.
    assert avg_at_k([[1, 1], []]) == 1.0 and pass_at_k([[0, 0], []]) == 0.0
    assert math.isnan(avg_at_k([])) and math.isnan(pass_at_k([[]]))


def test_score_per_category_and_report():
    outcomes = [
        TaskOutcome(0, "depth 1", [True, False], [1.0, 0.0], [2, 3]),
        TaskOutcome(5, "depth 1", [False, False], [0.0, 0.0], [3, 3]),
        TaskOutcome(9, "depth 10", [True, True], [1.0, 1.0], [1, 1]),
        TaskOutcome(7, "depth 2", [False, True], [0.0, 1.0], [3, 2]),
    ]
    s = score(outcomes)
    assert list(s["categories"]) == ["depth 1", "depth 2", "depth 10"]  # natural order
    d1 = s["categories"]["depth 1"]
    assert d1["avg_at_k"] == pytest.approx(0.25) and d1["pass_at_k"] == pytest.approx(0.5)
    assert d1["num_tasks"] == 2 and d1["num_episodes"] == 4
    assert s["overall"]["avg_at_k"] == pytest.approx(4 / 8) and s["overall"]["pass_at_k"] == pytest.approx(3 / 4)
    assert s["overall"]["turns_mean"] == pytest.approx(18 / 8)

    report = EvalReport(model="m", env="textcraft", split="test", k=2, temperature=1.0, max_turns=3, scores=s,
                        tasks=outcomes)
    table = report.markdown().splitlines()
    assert table[2] == "| Model | Metric | depth 1 (n=2) | depth 2 (n=1) | depth 10 (n=1) | Overall (n=4) |"
    assert table[4] == "| m | Avg@2 | 25.00 | 50.00 | 100.00 | 50.00 |"
    assert table[5] == "| m | Pass@2 | 50.00 | 100.00 | 100.00 | 75.00 |"
    data = report.to_json()
    assert data["overall"]["pass_at_k"] == 0.75 and data["tasks"][0]["successes"] == [True, False]
    json.dumps(data, allow_nan=False)


def test_deep_search_report_lists_flashrag_datasets_in_the_papers_order(tmp_path, monkeypatch):
    """Categories are the env's declared order (`EnvSpec.category_order()`), not alphabetical:
    the paper's Deep Search table reads NQ, TriviaQA, PopQA, HotpotQA, 2Wiki, Musique, Bamboogle."""
    from rllib_agentgym.envs.registry import get_spec

    qa_dir = tmp_path / "qa"
    # FlashRAG directory names, one test (or dev) file each, plus a dataset the paper does not list.
    for i, (dataset, split) in enumerate([("musique", "dev"), ("bamboogle", "test"), ("2wikimultihopqa", "dev"),
                                          ("triviaqa", "test"), ("nq", "test"), ("popqa", "test"),
                                          ("hotpotqa", "dev"), ("aaa_custom", "test")]):
        (qa_dir / dataset).mkdir(parents=True)
        rows = [{"question": f"{dataset} q{j}", "golden_answers": [f"a{i}{j}"]} for j in range(2)]
        (qa_dir / dataset / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setenv("RLLIB_AGENTGYM_SEARCHQA_QA_DIR", str(qa_dir))
    spec = get_spec("agentgym/searchqa")
    ids = spec.split_ids("test")
    assert len(ids) == 16
    # Outcomes arrive in any order (here: reversed); one success per task.
    outcomes = [TaskOutcome(i, spec.category(i), [n % 2 == 0], [float(n % 2 == 0)], [2]) for n, i in enumerate(reversed(ids))]
    report = EvalReport(model="m", env="searchqa", split="test", k=1, temperature=0.0, max_turns=5,
                        scores=score(outcomes, spec.category_order()), tasks=outcomes)
    header = report.markdown().splitlines()[2]
    columns = [cell.split(" (n=")[0] for cell in header.strip("| ").split(" | ")[2:]]
    assert columns == ["NQ", "TriviaQA", "PopQA", "HotpotQA", "2Wiki", "Musique", "Bamboogle", "aaa_custom", "Overall"]
    assert "| NQ (n=2) |" in header and "| Overall (n=16) |" in header
    assert list(score(outcomes)["categories"])[:2] == ["2Wiki", "aaa_custom"]  # what the natural order gave
    assert get_spec("agentgym/textcraft").category_order() == []  # undeclared: natural order, as above


def test_outcomes_group_trajectories_by_task():
    class T:
        def __init__(self, idx, success):
            self.data_idx, self.category, self.success, self.reward, self.num_turns = idx, "c", success, float(success), 1

    outcomes = outcomes_from_trajectories([T(3, True), T(1, False), T(3, False)])
    assert [(o.data_idx, o.successes) for o in outcomes] == [(3, [True, False]), (1, [False])]


def test_select_tasks_spreads_over_the_split():
    ids = list(range(100, 110))
    assert select_tasks(ids, None) == ids and select_tasks(ids, 50) == ids
    assert select_tasks(ids, 3) == [100, 104, 109]
    assert select_tasks(ids, 1) == [100]


def test_evaluation_split_rule():
    from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig

    assert evaluation_split(GRPOConfig()) == "test"
    cfg = GRPOConfig().evaluation(evaluation_config={"env_config": {"split": "dev"}})
    assert evaluation_split(cfg) == "dev"


def test_categories_restrict_the_split_for_training_and_evaluation():
    from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
    from rllib_agentgym.envs.registry import get_spec

    spec = get_spec("agentgym/babyai")
    test_ids = spec.task_ids("test")
    goto_open = spec.task_ids("test", ["GoTo", "Open"])
    assert goto_open and set(goto_open) < set(test_ids)
    assert {spec.category(i) for i in goto_open} == {"GoTo", "Open"}
    assert len(goto_open) == sum(spec.category(i) in ("GoTo", "Open") for i in test_ids)
    with pytest.raises(ValueError, match="no category Goto.*its categories: .*GoTo"):
        spec.task_ids("test", ["Goto"])
    # Periodic evaluation: the evaluation config's categories, else the training config's.
    cfg = GRPOConfig().environment("agentgym/babyai", env_config={"split": "train", "categories": ["GoTo", "Open"]})
    assert evaluation_task_ids(cfg) == goto_open
    cfg.evaluation(evaluation_config={"env_config": {"split": "test", "categories": ["Open"]}})
    assert evaluation_task_ids(cfg) == spec.task_ids("test", ["Open"])


def test_task_ids_pin_a_pool_of_the_split():
    from rllib_agentgym.envs.registry import get_spec

    spec = get_spec("agentgym/babyai")
    train = spec.task_ids("train")
    pool = [train[5], train[0], train[77]]
    assert spec.task_ids("train", only=pool) == pool  # in the order given
    goto = [i for i in pool if spec.category(i) == "GoTo"]
    assert spec.task_ids("train", ["GoTo"], only=pool) == goto
    test_id = spec.task_ids("test")[0]
    with pytest.raises(ValueError, match=f"split 'train' has no task ids \\[{test_id}\\]"):
        spec.task_ids("train", only=[train[0], test_id])
    with pytest.raises(ValueError, match="no task ids"):
        spec.task_ids("train", only=[])
    not_goto = [i for i in pool if spec.category(i) != "GoTo"]
    with pytest.raises(ValueError, match="none of task ids .* is in categories \\['GoTo'\\]"):
        spec.task_ids("train", ["GoTo"], only=not_goto)


def test_runner_pool_of_task_ids_and_evaluation_keeps_its_split():
    from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
    from rllib_agentgym.env_runners.llm_env_runner import LLMEnvRunner
    from rllib_agentgym.envs.registry import get_spec

    spec = get_spec("agentgym/babyai")
    train = spec.task_ids("train")
    cfg = GRPOConfig().environment("agentgym/babyai", env_config={"split": "train", "task_ids": train[:3]})
    runner = LLMEnvRunner(config=cfg, worker_index=0)  # lazy: no engine, no env server yet
    try:
        assert runner.task_ids == train[:3]
        runner.set_task_ids([train[7]])
        assert runner.task_ids == [train[7]]
        with pytest.raises(ValueError, match="no task ids"):
            runner.set_task_ids([spec.task_ids("test")[0]])
    finally:
        runner.stop()
    # The evaluation runners play their own split: the training pool does not follow them.
    eval_cfg = cfg.copy(copy_frozen=False)
    eval_cfg.env_config = {"split": "test", "task_ids": train[:3]}
    eval_cfg.in_evaluation = True
    eval_runner = LLMEnvRunner(config=eval_cfg, worker_index=0)
    try:
        assert eval_runner.task_ids == spec.task_ids("test")
    finally:
        eval_runner.stop()


def test_evaluate_does_not_inherit_a_checkpoints_training_pool():
    """`rllib evaluate` of a checkpoint trained on a pinned pool (`task_ids`) plays the whole
    split it is asked for, not the pool's ids; `task_ids` on the command line still restricts it."""
    from rllib_agentgym.envs.registry import get_spec
    from rllib_agentgym.evaluation import PolicySource, build_runner

    spec = get_spec("agentgym/babyai")
    train = spec.task_ids("train")
    policy = PolicySource(name="pool-trained", model_path="embedded", algo_config={
        "env": "agentgym/babyai", "env_config": {"split": "train", "task_ids": train[:3], "categories": ["GoTo"]}})
    expected = {
        ("test", None): spec.task_ids("test", ["GoTo"]),
        ("train", None): spec.task_ids("train", ["GoTo"]),
        ("train", "given"): spec.task_ids("train", ["GoTo"])[:2],
    }
    for (split, given), ids in expected.items():
        env_config = {"task_ids": ids} if given else None
        runner = build_runner(policy, env=None, split=split, temperature=0.0, max_turns=1, engine="hf",
                              env_config=env_config, seed=0)  # lazy: no engine, no env server yet
        try:
            assert runner.task_ids == ids, (split, given)
        finally:
            runner.stop()
    assert len(expected[("train", None)]) > 3  # the pool's 3 ids would have been a visible mistake


def test_load_policy_model_path_and_missing_dir(tmp_path):
    assert load_policy("embedded").model_path == "embedded" and load_policy("embedded").weights is None
    with pytest.raises(FileNotFoundError):
        load_policy(str(tmp_path / "nope"))


def test_evaluate_cli_on_a_model_folder_with_a_progress_bar(embedded_model, tmp_path, capsys):
    """`rllib evaluate MODEL_DIR` (no checkpoint): greedy, so the folder and `embedded` (the same
    model) play the same responses; the progress bar shows unless --no-progress."""
    from rllib_agentgym.cli import main

    flags = ["--env", "agentgym/textcraft", "--engine", "hf", "--k", "2", "--num-tasks", "2", "--max-turns", "1",
             "--max-new-tokens", "8"]
    runs = {}
    for source, extra in ((embedded_model, []), ("embedded", ["--no-progress"])):
        out = tmp_path / f"{len(runs)}"
        assert main(["evaluate", source, *flags, "--json", f"{out}.json", "--episodes", f"{out}.jsonl", *extra]) == 0
        captured = capsys.readouterr()
        runs[source] = (json.loads(Path(f"{out}.json").read_text()), run_logs.read_jsonl(f"{out}.jsonl"), captured)
    (folder, folder_episodes, folder_io), (hub, hub_episodes, hub_io) = runs[embedded_model], runs["embedded"]
    assert folder["model"] != hub["model"] and folder["k"] == 2 and folder["overall"]["num_episodes"] == 4
    assert folder["tasks"] == hub["tasks"]
    assert [e["turns"][0]["response"] for e in folder_episodes] == [e["turns"][0]["response"] for e in hub_episodes]
    # tqdm on stderr: "<env>/<split>", tasks done of total, the running Avg@k / Pass@k.
    assert "textcraft/test" in folder_io.err and "2/2" in folder_io.err and "Avg@2=" in folder_io.err
    assert "textcraft/test" not in hub_io.err
    assert "| Avg@2 |" in folder_io.out
    assert folder["model_dtype"] == "float32"  # a model dir's default


def test_evaluate_cli_dtype_and_context_flags(embedded_model, tmp_path):
    """`--dtype` and `--max-model-len` set the engine as a training run's config would."""
    from rllib_agentgym.cli import main

    out = tmp_path / "bf16.json"
    assert main(["evaluate", embedded_model, "--env", "agentgym/textcraft", "--engine", "hf", "--num-tasks", "1",
                 "--max-turns", "1", "--max-new-tokens", "8", "--dtype", "bfloat16", "--max-model-len", "1024",
                 "--no-progress", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    # The dtype the engine ran in: float32 on a CPU that only emulates bf16 (core/precision.py).
    from rllib_agentgym.core.precision import engine_dtype

    assert report["model_dtype"] == engine_dtype("bfloat16") and report["overall"]["num_episodes"] == 1
    assert report["overall"]["turns_mean"] == 1
    # A context shorter than the prompt plus one reply: the episode ends before its first turn.
    short = tmp_path / "short.json"
    assert main(["evaluate", embedded_model, "--env", "agentgym/textcraft", "--engine", "hf", "--num-tasks", "1",
                 "--max-turns", "1", "--max-new-tokens", "8", "--max-model-len", "16", "--no-progress",
                 "--json", str(short)]) == 0
    assert json.loads(short.read_text())["overall"]["turns_mean"] == 0
    with pytest.raises(SystemExit):  # argparse refuses a dtype the engines do not take
        main(["evaluate", embedded_model, "--env", "agentgym/textcraft", "--dtype", "int4"])


# ---- one real training iteration: periodic evaluation, dashboard metrics, checkpoint ------

BUDGET = dict(inference_engine="hf", max_model_len=1024, max_new_tokens=8, max_turns=1)


@pytest.fixture(scope="module")
def trained(ray_local, tmp_path_factory):
    """GRPO on TextCraft, 1 iteration with evaluation_interval=1 (2 test tasks, 2 turns)."""
    from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig

    config = (
        GRPOConfig()
        .environment("agentgym/textcraft")
        .llm(**BUDGET)
        .training(group_size=2, tasks_per_iteration=1, lr=1e-3)
        .evaluation(evaluation_interval=1, evaluation_config={"max_turns": 2}, evaluation_num_tasks=2)
        .debugging(seed=0)
    )
    config.log_trajectories = 0
    algo = config.build_algo()
    try:
        assert algo.eval_env_runner_group is None  # evaluation reuses the training runner's engine
        result = algo.train()
        # Mark the learner's weights so a checkpoint's weights are told apart from the base model's.
        algo.learner_group.foreach_learner(
            lambda learner: learner.module["default_policy"].llm.model.layers[0].self_attn.q_proj.weight.data.mul_(0.5)
        )
        checkpoint = algo.save_to_path(str(tmp_path_factory.mktemp("ckpt") / "checkpoint"))
        module_state = algo.learner_group.get_state()["learner"]["rl_module"]["default_policy"]
        horizon_after = algo.env_runner_group.local_env_runner.get_max_turns()
    finally:
        algo.stop()
    return dict(result=result, checkpoint=checkpoint, module_state=module_state, horizon_after=horizon_after)


def test_periodic_evaluation_is_in_the_tune_result(trained):
    result = trained["result"]
    ev = result["evaluation"]["env_runners"]
    assert ev["num_tasks"] == 2 and ev["num_episodes"] == 2 and ev["horizon"] == 2
    assert 0.0 <= ev["success_rate"] <= 1.0 and 1 <= ev["num_turns_mean"] <= 2
    from rllib_agentgym.envs.registry import get_spec

    spec = get_spec("textcraft")
    tasks = select_tasks(spec.split_ids("test"), 2)
    assert set(ev["success_rate_by_category"]) == {spec.category(i) for i in tasks}
    assert 0.0 <= ev["repeated_refusal_rate"] <= ev["invalid_action_rate"] <= 1.0
    assert 0.0 <= ev["progress_mean"] <= 1.0  # TextCraft reports progress
    # Training kept its own horizon and its own episodes.
    assert result["env_runners"]["horizon"] == 1 and trained["horizon_after"] == 1
    assert result["env_runners"]["num_episodes"] == 2


def test_ray_metrics_reach_the_prometheus_export(trained):
    """The run recorded ray.util.metrics objects; the node's metrics agent exports them."""
    import httpx
    import ray

    from rllib_agentgym.metrics import PREFIX, run_metrics

    assert run_metrics().rollout_tokens_per_s is not None
    port = ray._private.worker.global_worker.node.metrics_export_port
    wanted = {f"ray_{PREFIX}{n}" for n in ("rollout_tokens_per_s", "env_step_latency_ms_count", "horizon",
                                           "success_rate", "eval_success_rate", "generated_tokens_total")}

    def exported() -> tuple[set, list[str]]:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        names = {line.split("{")[0] for line in text.splitlines() if line.startswith(f"ray_{PREFIX}")}
        # This run's series: the shared test cluster may also hold other runs' (other envs), which
        # can export every name before this run's series arrive, so wait for this run's too.
        horizon = [line for line in text.splitlines()
                   if line.startswith(f"ray_{PREFIX}horizon{{") and 'env="textcraft"' in line]
        return names & wanted, horizon

    found, horizon = exported()
    deadline = time.monotonic() + 60  # the agent exports every ~10 s
    while time.monotonic() < deadline and (found != wanted or not horizon):
        time.sleep(2)
        found, horizon = exported()
    assert found == wanted
    assert len(horizon) == 1 and horizon[0].endswith(" 1.0")


def test_evaluate_cli_on_the_checkpoint(trained, tmp_path, capsys):
    from rllib_agentgym.cli import main

    ckpt = trained["checkpoint"]
    policy = load_policy(ckpt)
    # The learner's weights, read straight from the checkpoint's RLModule folder.
    assert policy.model_path == "embedded" and policy.algo_config["env"] == "agentgym/textcraft"
    assert set(policy.weights) == set(trained["module_state"])
    for name, value in trained["module_state"].items():
        np.testing.assert_array_equal(policy.weights[name], value)
    # A Tune trial dir stands for its latest checkpoint.
    trial = tmp_path / "trial"
    trial.mkdir()
    (trial / "checkpoint_000001").symlink_to(ckpt)
    assert load_policy(str(trial)).weights.keys() == policy.weights.keys()

    out_json, out_md, out_episodes = tmp_path / "eval.json", tmp_path / "eval.md", tmp_path / "episodes.jsonl"
    code = main(["evaluate", ckpt, "--engine", "hf", "--k", "2", "--temperature", "1.0", "--num-tasks", "2",
                 "--max-turns", "1", "--max-new-tokens", "8", "--json", str(out_json), "--markdown", str(out_md),
                 "--episodes", str(out_episodes), "--no-progress"])
    assert code == 0
    data = json.loads(out_json.read_text())
    assert data["env"] == "textcraft" and data["split"] == "test" and data["k"] == 2
    assert data["overall"]["num_tasks"] == 2 and data["overall"]["num_episodes"] == 4
    assert [len(t["successes"]) for t in data["tasks"]] == [2, 2]
    assert "episodes" not in data
    # --episodes: every episode's dialogue, in the records the trajectory viewer shows.
    episodes = run_logs.read_jsonl(out_episodes)
    assert sorted(e["data_idx"] for e in episodes) == sorted(t["data_idx"] for t in data["tasks"] for _ in range(2))
    by_task = {t["data_idx"]: t["successes"] for t in data["tasks"]}
    for e in episodes:
        assert e["env"] == "textcraft" and e["num_turns"] == len(e["turns"]) == 1
        turn = e["turns"][0]
        assert turn["observation"].startswith("Crafting commands:") and turn["response"]
        assert e["success"] in by_task[e["data_idx"]]
    table = out_md.read_text()
    assert "| checkpoint | Avg@2 |" in table and "| checkpoint | Pass@2 |" in table and "Overall (n=2)" in table
    assert table in capsys.readouterr().out


def test_checkpoint_weights_reach_the_engine(trained):
    """`rllib evaluate` generates with the trained weights, not the base model's."""
    import torch

    from rllib_agentgym.evaluation import build_runner

    policy = load_policy(trained["checkpoint"])
    runner = build_runner(policy, env=None, split="test", temperature=0.0, max_turns=1, engine="hf",
                          env_config=None, seed=0, max_new_tokens=8)
    try:
        runner._ensure_engine()
        engine_state = runner._engine._model.state_dict()
        name = "model.layers.0.self_attn.q_proj.weight"
        assert torch.equal(engine_state[name], torch.as_tensor(policy.weights[name]))
        from rllib_agentgym.core.rl_module import load_causal_lm

        assert not torch.equal(engine_state[name], load_causal_lm("embedded").state_dict()[name])
    finally:
        runner.stop()
    with open(f"{trained['checkpoint']}/class_and_ctor_args.pkl", "rb") as fh:
        assert pickle.load(fh)["ctor_args_and_kwargs"][0][0]["model_path"] == "embedded"


def test_evaluate_episodes_flag_is_refused_for_multiagent_envs(tmp_path, capsys):
    from rllib_agentgym.cli import main

    out = tmp_path / "episodes.jsonl"
    code = main(["evaluate", "embedded", "--env", "agentgym/tictactoe", "--episodes", str(out), "--no-progress"])
    assert code != 0 and not out.exists()
    assert "--episodes is for single-agent envs" in capsys.readouterr().err
    code = main(["evaluate", "embedded", "--env", "agentgym/tictactoe", "--dtype", "bfloat16", "--no-progress"])
    assert code != 0 and "--dtype and --max-model-len are for single-agent envs" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("evaluation_num_env_runners", [0, 1], ids=["training-runners", "evaluation-group"])
def test_periodic_evaluation_on_remote_runners_in_a_tune_trial(ray_local, tmp_path, evaluation_num_env_runners):
    """Through Tune (`rllib train file`), with a remote env runner: evaluation plays on it (0) or
    on a separate evaluation runner group (1); either way it lands in the trial's result.json."""
    import yaml

    from rllib_agentgym.cli import main

    spec = {"eval-remote": {
        "run": "GRPO", "env": "agentgym/textcraft", "stop": {"training_iteration": 1},
        "config": {**BUDGET, "group_size": 2, "tasks_per_iteration": 1, "log_trajectories": 0, "seed": 0,
                   # Half a CPU each: the trial, its runner and its evaluation runner fit the 2-CPU test cluster.
                   "num_env_runners": 1, "num_cpus_per_env_runner": 0.5,
                   "evaluation_interval": 1, "evaluation_num_env_runners": evaluation_num_env_runners,
                   "evaluation_num_tasks": 3, "evaluation_config": {"max_turns": 2}},
    }}
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["train", "file", str(path), "--storage-path", str(tmp_path / "out"), "-v", "0"]) == 0
    (result_file,) = list((tmp_path / "out" / "eval-remote").glob("GRPO_*/result.json"))
    (row,) = [json.loads(line) for line in result_file.read_text().splitlines() if line.strip()]
    ev = row["evaluation"]["env_runners"]
    assert ev["num_tasks"] == 3 and ev["num_episodes"] == 3 and ev["horizon"] == 2
    assert ev["num_dropped_episodes"] == 0 and 0.0 <= ev["success_rate"] <= 1.0
    assert row["env_runners"]["horizon"] == 1 and row["env_runners"]["num_episodes"] == 2
    assert row["config"]["evaluation_num_env_runners"] == evaluation_num_env_runners
    # RLlib reports the evaluation group's health only when there is a separate group.
    assert row["evaluation"].get("num_healthy_workers") == (1 if evaluation_num_env_runners else None)

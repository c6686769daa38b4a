"""`rllib train`: the classic YAML and flags, and its one-line errors; `rllib plot` and `rllib view`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from pathlib import Path

import yaml

from rllib_agentgym.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _run(argv, capsys):
    code = main(argv)
    return code, capsys.readouterr().err.strip()


def _write(tmp_path, spec) -> str:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def test_missing_file(capsys, tmp_path):
    code, err = _run(["train", "file", str(tmp_path / "nope.yaml")], capsys)
    assert code == 2 and err == f"rllib: error: {tmp_path / 'nope.yaml'}: no such file"


def test_yaml_syntax_error_names_the_line(capsys, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("exp:\n  run: GRPO\n  config: {lr: [1, 2\n")
    code, err = _run(["train", "file", str(path)], capsys)
    assert code == 2
    assert err.startswith(f"rllib: error: {path}: YAML syntax error at line") and "\n" not in err


def test_unknown_run_suggests_nearest(capsys, tmp_path):
    code, err = _run(["train", "file", _write(tmp_path, {"e": {"run": "GRPPO", "env": "agentgym/textcraft"}})], capsys)
    assert code == 2 and "unknown algorithm run: 'GRPPO'" in err and "did you mean 'GRPO'" in err


def test_unknown_env_suggests_nearest(capsys):
    code, err = _run(["train", "--algo", "GRPO", "--env", "agentgym/textcraf"], capsys)
    assert code == 2 and "unknown env: 'agentgym/textcraf'" in err and "'agentgym/textcraft'" in err


def test_unknown_config_key_names_key_and_suggestion(capsys, tmp_path):
    spec = {"e": {"run": "GRPO", "env": "agentgym/textcraft", "config": {"group_sise": 4}}}
    code, err = _run(["train", "file", _write(tmp_path, spec)], capsys)
    assert code == 2 and "unknown config key 'group_sise'" in err and "did you mean 'group_size'" in err


def test_unknown_config_key_from_flags(capsys):
    code, err = _run(["train", "--algo", "PPO", "--env", "CartPole-v1", "--config", json.dumps({"lrr": 0.1})], capsys)
    assert code == 2 and "unknown config key 'lrr'" in err and "'lr'" in err


def test_bad_json_flag(capsys):
    code, err = _run(["train", "--algo", "PPO", "--env", "CartPole-v1", "--stop", "{nope"], capsys)
    assert code == 2 and err.startswith("rllib: error: --stop: not valid JSON")


def test_grid_search_and_overrides_are_prepared(tmp_path):
    from rllib_agentgym.cli import _train_parser  # noqa: F401
    from rllib_agentgym.experiments import prepare_experiments

    spec = {
        "e": {
            "run": "GRPO",
            "env": "agentgym/textcraft",
            "config": {"lr": {"grid_search": [1e-5, 1e-6]}, "kl_coef": {"loguniform": [1e-4, 1e-2]}},
            "stop": {"training_iteration": 5},
        }
    }
    prepared = prepare_experiments(spec, config_overrides={"group_size": 2}, stop_overrides={"training_iteration": 1},
                                   storage_path=str(tmp_path))
    exp = prepared["e"]
    assert exp["config"]["lr"] == {"grid_search": [1e-5, 1e-6]}
    assert type(exp["config"]["kl_coef"]).__name__ == "Float"  # a Tune search space
    assert exp["config"]["group_size"] == 2 and exp["config"]["env"] == "agentgym/textcraft"
    assert exp["stop"] == {"training_iteration": 1} and exp["storage_path"] == str(tmp_path)


def test_names_dropped_from_tunes_registry_are_registered_again():
    """A `ray.shutdown()` drops every name registered with Tune before it (a library caller that
    built an agent model, then prepares an experiment): looking a name up registers ours again."""
    from ray.tune.registry import ENV_CREATOR, TRAINABLE_CLASS, _global_registry

    from rllib_agentgym.experiments import check_env, resolve_trainable

    _global_registry.unregister(TRAINABLE_CLASS, "GRPO")
    _global_registry.unregister(ENV_CREATOR, "agentgym/textcraft")
    assert not _global_registry.contains(TRAINABLE_CLASS, "GRPO")
    assert resolve_trainable("GRPO").__name__ == "GRPO"
    check_env("agentgym/textcraft")
    assert _global_registry.contains(ENV_CREATOR, "agentgym/textcraft")


def test_local_model_and_checkpoint_paths_are_made_absolute(tmp_path, monkeypatch):
    """Tune runs trials in their own directories: a relative local path must not depend on the cwd."""
    from rllib_agentgym.experiments import prepare_experiments

    (tmp_path / "ckpt").mkdir()
    monkeypatch.chdir(tmp_path)
    spec = {"e": {"run": "GRPO", "env": "agentgym/textcraft",
                  "config": {"init_from": "ckpt", "model_path": "Qwen/Qwen2.5-7B-Instruct"}}}
    config = prepare_experiments(spec)["e"]["config"]
    assert config["init_from"] == str(tmp_path / "ckpt")
    assert config["model_path"] == "Qwen/Qwen2.5-7B-Instruct"  # a hub id, no such local path: unchanged
    spec["e"]["config"] = {"model_path": "embedded"}
    assert prepare_experiments(spec)["e"]["config"]["model_path"] == "embedded"


def test_classic_cartpole_ppo_yaml_runs_unchanged(ray_local, tmp_path):
    code = main(["train", "file", str(ROOT / "tuned_examples" / "cartpole-ppo.yaml"), "--storage-path", str(tmp_path),
                 "--stop", json.dumps({"training_iteration": 1}), "-v", "0"])
    assert code == 0
    results = list(tmp_path.glob("cartpole-ppo/PPO_CartPole-v1_*/result.json"))
    assert len(results) == 1
    last = json.loads(results[0].read_text().strip().splitlines()[-1])
    assert last["training_iteration"] == 1
    assert last["env_runners"]["episode_return_mean"] > 0


def test_installed_rllib_command_trains_grpo_from_flags(embedded_model, tmp_path):
    """The console script `pip install` put on PATH, in a process of its own: flags only, no file."""
    rllib = shutil.which("rllib")
    assert rllib, "no `rllib` on PATH: `pip install -e .` installs the console script"
    name = f"cli-flags-{uuid.uuid4().hex[:8]}"
    config = {"inference_engine": "hf", "max_model_len": 1024, "max_new_tokens": 8, "max_turns": 1,
              "group_size": 2, "tasks_per_iteration": 1}
    ray_tmp = tempfile.mkdtemp(prefix="rc", dir="/tmp")  # short: Ray's unix socket paths
    # A cluster of its own (`--ray-address local`, never one `ray start` left running), its
    # session files in our temp dir; the built embedded model comes through RLLIB_AGENTGYM_CACHE.
    # A user's shell without RAY_ADDRESS or OMP_NUM_THREADS (Ray keeps a set one, which the threads
    # check below would read instead of what the trial reserved).
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "OMP_NUM_THREADS")}
    env["RAY_TMPDIR"] = ray_tmp
    argv = [rllib, "train", "--algo", "GRPO", "--env", "agentgym/textcraft", "--name", name,
            "--config", json.dumps(config), "--stop", json.dumps({"training_iteration": 1}),
            "--storage-path", str(tmp_path), "--ray-address", "local", "--num-cpus", "2", "-v", "0"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the command and the Ray processes it started
        out, _ = proc.communicate()
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 0, out[-4000:]
    (result,) = list(tmp_path.glob(f"{name}/GRPO_agentgym_textcraft_*/result.json"))
    last = json.loads(result.read_text().strip().splitlines()[-1])
    assert last["training_iteration"] == 1
    assert last["env_runners"]["num_episodes"] == 2  # one task, a group of two
    assert last["main_process_threads"] == 2  # the trial reserved both CPUs (GRPO.default_resource_request)
    assert not (Path.home() / "ray_results" / name).exists()  # --storage-path, not ~/ray_results


# ---- `rllib plot` and `rllib view` on a run directory -------------------------------------

def test_rllib_plot_writes_the_curves_as_png(tmp_path, capsys):
    from PIL import Image
    from synthetic_run import make_run_dir

    from rllib_agentgym.plotting import COMBINED_NAME
    from rllib_agentgym.run_logs import CURVES

    trial = make_run_dir(tmp_path / "run" / "GRPO_textcraft_00000", num_iterations=3)
    assert main(["plot", str(tmp_path / "run")]) == 0
    expected = [trial.parent / "plots" / f"{name}.png" for name in CURVES] + [trial.parent / "plots" / COMBINED_NAME]
    assert capsys.readouterr().out.split() == [str(p) for p in expected]  # default out: RUN_DIR/plots
    for path in expected:
        image = Image.open(path)
        assert image.format == "PNG" and image.width > 300 and image.height > 200
    assert main(["plot", str(tmp_path / "missing")]) == 2  # a one-line error, no traceback
    assert "rllib: error:" in capsys.readouterr().err


def test_rllib_view_serves_the_page_and_api_in_its_own_process(tmp_path):
    """`rllib view RUN_DIR --port 0` in a subprocess: it prints its URL, serves the page and the
    JSON API over the run's files, and stops on Ctrl-C (SIGINT)."""
    import sys
    import urllib.request

    from synthetic_run import iteration_summaries, make_run_dir

    make_run_dir(tmp_path / "run" / "GRPO_textcraft_00000", num_iterations=2)
    proc = subprocess.Popen([sys.executable, "-m", "rllib_agentgym.cli", "view", str(tmp_path / "run"), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        line = proc.stdout.readline()
        assert line.startswith("Trajectory viewer for ") and " at http://127.0.0.1:" in line, line
        url = line.split(" at ", 1)[1].split()[0]

        with urllib.request.urlopen(url, timeout=10) as page:
            html = page.read().decode()
        assert page.status == 200 and "<html" in html.lower() and 'id="trajectories"' in html

        def api(path: str):
            with urllib.request.urlopen(url + "api/" + path, timeout=10) as reply:
                return json.load(reply)

        assert [t["name"] for t in api("trials")] == ["GRPO_textcraft_00000"]
        listed = api("trajectories?iteration=2")
        assert listed["total"] == len(iteration_summaries(2))
        assert sorted(r["data_idx"] for r in listed["trajectories"]) == sorted(s["data_idx"] for s in iteration_summaries(2))
        assert api("metrics")["series"]["training_iteration"] == [1, 2]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0

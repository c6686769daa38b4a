"""The `rllib` command (Ray 2.60 no longer ships it; this one is compatible).

    rllib train file FILE.yaml [--config JSON] [--stop JSON] [--storage-path DIR]
    rllib train --algo GRPO --env agentgym/textcraft --config JSON --stop JSON
    rllib view RUN_DIR        the trajectory viewer (a local web page)
    rllib plot RUN_DIR        PNG training curves
    rllib evaluate CHECKPOINT_OR_MODEL --env agentgym/textcraft [--k 4 --temperature 1.0 --json OUT --markdown OUT]
    rllib experts --env agentgym/textcraft --split train --num 200 --out tc.jsonl   expert conversations for SFT
    rllib start-states EPISODES.jsonl.gz --after "wrong quantities" --out starts.jsonl   training starts
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from rllib_agentgym.experiments import SpecError, load_yaml_file, parse_json_arg, prepare_experiments


def _train_parser(sub) -> None:
    p = sub.add_parser("train", help="train an algorithm (classic RLlib CLI)")
    p.add_argument("mode", nargs="?", choices=["file"], help="`file` to read an experiment YAML")
    p.add_argument("file", nargs="?", help="the experiment YAML (with `file`)")
    p.add_argument("-f", "--config-file", dest="config_file", help="same as `train file FILE`")
    p.add_argument("--algo", "--run", dest="algo", help="algorithm, e.g. GRPO or PPO")
    p.add_argument("--env", help="env name, e.g. agentgym/textcraft or CartPole-v1")
    p.add_argument("--config", help="JSON config, applied on top of the file's")
    p.add_argument("--stop", help="JSON stop criteria, applied on top of the file's")
    p.add_argument("--name", default=None, help="experiment name (flag mode)")
    p.add_argument("--num-samples", type=int, default=None)
    p.add_argument("--storage-path", default=None, help="results dir (default ~/ray_results)")
    p.add_argument("--checkpoint-freq", type=int, default=None)
    p.add_argument("--checkpoint-at-end", action="store_true")
    p.add_argument("--resume", action="store_true", help="resume the experiment from its storage dir")
    p.add_argument("--ray-address", default=None, help="Ray cluster address ('local' starts a new one)")
    p.add_argument("--num-cpus", type=int, default=None)
    p.add_argument("-v", "--verbose", type=int, default=1)


def build_experiments(args) -> dict:
    config = parse_json_arg("--config", args.config)
    stop = parse_json_arg("--stop", args.stop)
    path = args.file or args.config_file
    if args.mode == "file" and not path:
        raise SpecError("train file: give the experiment YAML path")
    if path:
        experiments = load_yaml_file(path)
        source = path
        if args.algo or args.env:
            for spec in experiments.values():
                if args.algo:
                    spec["run"] = args.algo
                if args.env:
                    spec["env"] = args.env
    else:
        if not args.algo:
            raise SpecError("train: give `file FILE.yaml` or --algo (and --env)")
        name = args.name or f"{args.algo.lower()}-{(args.env or 'env').replace('/', '-')}"
        experiments = {name: {"run": args.algo, "env": args.env}}
        source = "command line"
    for spec in experiments.values():
        if args.num_samples is not None:
            spec["num_samples"] = args.num_samples
        if args.checkpoint_freq is not None or args.checkpoint_at_end:
            ckpt = dict(spec.get("checkpoint_config") or {})
            if args.checkpoint_freq is not None:
                ckpt["checkpoint_frequency"] = args.checkpoint_freq
            if args.checkpoint_at_end:
                ckpt["checkpoint_at_end"] = True
            spec["checkpoint_config"] = ckpt
    return prepare_experiments(
        experiments, source=source, config_overrides=config, stop_overrides=stop, storage_path=args.storage_path
    )


def run_train(args) -> int:
    experiments = build_experiments(args)
    import ray
    from ray import tune

    if not ray.is_initialized():
        ray.init(address=args.ray_address, num_cpus=args.num_cpus)
    tune.run_experiments(experiments, verbose=args.verbose, resume=True if args.resume else None)
    return 0


def _view_parser(sub) -> None:
    p = sub.add_parser("view", help="serve the trajectory viewer for a run dir")
    p.add_argument("run_dir")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=6007)
    p.add_argument("--open", action="store_true", help="open a browser")


def _plot_parser(sub) -> None:
    p = sub.add_parser("plot", help="write PNG training curves of a run dir")
    p.add_argument("run_dir")
    p.add_argument("--out", default=None, help="output dir (default RUN_DIR/plots)")


def _evaluate_parser(sub) -> None:
    p = sub.add_parser("evaluate", help="Avg@k / Pass@k of a checkpoint or model, per task category")
    p.add_argument("source", help="an Algorithm checkpoint dir, a trial dir (its latest checkpoint), a model dir, a hub id, or `embedded`")
    p.add_argument("--env", default=None, help="e.g. agentgym/textcraft (default: the checkpoint's)")
    p.add_argument("--split", default="test")
    p.add_argument("--k", type=int, default=1, help="samples per task")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    p.add_argument("--max-turns", type=int, default=None, help="horizon (default: the checkpoint's max_turns, or 10)")
    p.add_argument("--num-tasks", type=int, default=None, help="tasks spread over the split (default: all)")
    p.add_argument("--engine", choices=["vllm", "hf", "auto"], default=None, help="inference engine")
    p.add_argument("--env-config", default=None, help="JSON env_config, e.g. '{\"server_url\": \"http://...\"}'")
    p.add_argument("--max-new-tokens", type=int, default=None)
    p.add_argument("--max-model-len", type=int, default=None,
                   help="context limit in tokens (default: the checkpoint's, or 4096); an episode ends at it")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                   help="engine weights' dtype (default: the checkpoint's, or float32 for a model dir)")
    p.add_argument("--batch-episodes", type=int, default=32, help="episodes per generation batch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--opponent", default="auto", choices=["auto", "self", "random", "heuristic", "scripted"],
                   help="multi-agent envs: who plays the other seat (auto: random for games, self-play for coop_craft)")
    p.add_argument("--policy", default=None, help="multi-agent checkpoints: the policy id to evaluate (default: the only one, or shared)")
    p.add_argument("--json", default=None, help="write the full report (per task too) as JSON")
    p.add_argument("--markdown", default=None, help="write the table as Markdown")
    p.add_argument("--episodes", default=None,
                   help="write every episode (task, outcome, and each turn's observation, response and action) as JSONL")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _export_parser(sub) -> None:
    p = sub.add_parser("export", help="write a checkpoint's policy as a Hugging Face model folder")
    p.add_argument("checkpoint")
    p.add_argument("--to", required=True, dest="out", help="output folder")


def _interpolate_parser(sub) -> None:
    from rllib_agentgym.interpolate import add_arguments

    add_arguments(sub.add_parser("interpolate", help="write the model at alpha on the line between two models "
                                                     "(WiSE-FT: a warm start and its RL checkpoint)"))


def _experts_parser(sub) -> None:
    from rllib_agentgym.data.experts import add_arguments

    add_arguments(sub.add_parser("experts", help="write expert conversations (JSONL) of an env split, for SFT"))


def _start_states_parser(sub) -> None:
    from rllib_agentgym.data.start_states import add_arguments

    add_arguments(sub.add_parser("start-states", help="cut an agent's episodes after a refusal: "
                                                      "start states to train from (env_config start_states)"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rllib", description="rllib-agentgym: train LLM agents with RLlib")
    sub = parser.add_subparsers(dest="command", required=True)
    _train_parser(sub)
    _view_parser(sub)
    _plot_parser(sub)
    _evaluate_parser(sub)
    _export_parser(sub)
    _interpolate_parser(sub)
    _experts_parser(sub)
    _start_states_parser(sub)
    args = parser.parse_args(argv)
    try:
        if args.command == "train":
            return run_train(args)
        if args.command == "view":
            from rllib_agentgym.viewer import view_main

            view_main(args.run_dir, host=args.host, port=args.port, open_browser=args.open)
            return 0
        if args.command == "export":
            from rllib_agentgym.export import export_checkpoint

            print(export_checkpoint(args.checkpoint, args.out))
            return 0
        if args.command == "interpolate":
            from rllib_agentgym.interpolate import run

            return run(args)
        if args.command == "plot":
            from rllib_agentgym.plotting import plot_main

            plot_main(args.run_dir, args.out)
            return 0
        if args.command == "experts":
            from rllib_agentgym.data.experts import run

            return run(args)
        if args.command == "start-states":
            from rllib_agentgym.data.start_states import run

            return run(args)
        if args.command == "evaluate":
            from rllib_agentgym.evaluation import evaluate_main

            return evaluate_main(args)
    except SpecError as exc:
        print(f"rllib: error: {exc}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as exc:
        if args.command == "train":
            raise  # only SpecError is a user error there; anything else is a bug to see whole
        print(f"rllib: error: {exc}", file=sys.stderr)
        return 2
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())

"""Build an agent model (`embedded-agent`, or another `--agent` name) and measure it with `rllib evaluate`.

    python scripts/build_agent_model.py                        # build (cached) + evaluate
    python scripts/build_agent_model.py --no-eval              # = python -m rllib_agentgym.prepare --agent
    python scripts/build_agent_model.py --report-dir docs/results/agent
    python scripts/build_agent_model.py --no-eval --ship       # + rllib_agentgym/assets/embedded-agent.tar.xz
    python scripts/build_agent_model.py --agent embedded-agent-searchqa --envs searchqa --num-tasks 200
    python scripts/build_agent_model.py --recipe '{"observation_loss_weight": 0.5}'   # a variant, cached by its own key
    python scripts/build_agent_model.py --recipe '{"model": {"num_hidden_layers": 6, "hidden_size": 384,
        "intermediate_size": 1024, "num_attention_heads": 6}, "micro_batch_size": 2, "batch_size": 8,
        "iterations": 420, "lr_warmup_iterations": 0}'        # the first shipped agent (docs/learning.md)
    python scripts/build_agent_model.py --recipe '{"data": [{"env": "agentgym/textcraft", "num": 800,
        "max_turns": 15, "augmented_copies": 1}, {"env": "agentgym/babyai", "num": 600, "max_turns": 12}]}'

Building: expert conversations of the TextCraft and BabyAI train splits, then
AgentSFT on a fresh embedded Qwen2 (see rllib_agentgym/agent_model.py); the
result is cached like the embedded model and named `model_path: embedded-agent`.
`--agent embedded-agent-searchqa` builds the Deep Search agent instead (its
recipe: `searchqa_agent_recipe` there); `--recipe` changes the chosen agent's.
The build's wall time and CPU seconds are printed (CPU seconds count the work
on a machine shared with other jobs).

Evaluating: greedy Avg@1 / Pass@1 per category on the test splits of the
five families (TextCraft: all 125 tasks, 15 turns; BabyAI: all 200 tasks, 12
turns, the horizons of the warm-start tuned examples; Deep Search: 200 of 1000
tasks, 6 turns; WebArena: all 38 tasks, 3 turns, the tree cut at 256 tokens as
in its tuned example; SciWorld: 100 of 1171 tasks, 30 turns), written as JSON
and Markdown to --report-dir. `--envs textcraft,babyai` evaluates some only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# (env, evaluation horizon, tasks: None = the whole test split, env_config)
EVALS = (
    ("agentgym/textcraft", 15, None, None),
    ("agentgym/babyai", 12, None, None),
    ("agentgym/searchqa", 6, 200, None),
    ("agentgym/webarena", 3, None, {"env_options": {"max_obs_tokens": 256, "max_steps": 3}}),
    ("agentgym/sciworld", 30, 100, None),
)


def cpu_seconds() -> float:
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def evaluate_agent(model: str, report_dir: Path | None, engine: str, num_tasks: int | None,
                   envs: list[str] | None = None) -> dict:
    from rllib_agentgym.envs.registry import family_name
    from rllib_agentgym.evaluation import evaluate

    reports = {}
    for env, horizon, tasks, env_config in EVALS:
        name = family_name(env)
        if envs and name not in envs:
            continue
        report = evaluate(model, env=env, split="test", max_turns=horizon, num_tasks=num_tasks or tasks,
                          engine=engine, env_config=env_config, max_model_len=4096, progress=False)
        print(report.markdown())
        reports[name] = report.to_json()
        if report_dir is not None:
            report_dir.mkdir(parents=True, exist_ok=True)
            (report_dir / f"{name}.json").write_text(json.dumps(reports[name], indent=1))
            (report_dir / f"{name}.md").write_text(report.markdown())
    return reports


def recipe_from_json(text: str | None, name: str = "embedded-agent"):
    """The recipe of agent model `name` with the given fields changed; None for no changes."""
    if not text:
        return None
    import dataclasses

    from rllib_agentgym.agent_model import agent_recipe
    from rllib_agentgym.core.embedded import EmbeddedModelConfig
    from rllib_agentgym.experiments import parse_json_arg

    base = agent_recipe(name)
    changes = parse_json_arg("--recipe", text)
    known = {f.name for f in dataclasses.fields(base)}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise SystemExit(f"--recipe: unknown fields {unknown}; known: {sorted(known)}")
    if "model" in changes:  # a dict of model-size fields changed on the recipe's model
        pretrained = changes.get("base_model", base.base_model)
        if pretrained:  # the embedded shape is not used (nor in the cache key): the change would vanish
            raise SystemExit(f"--recipe: `model` shapes the embedded model, and {name} starts from the pretrained "
                             f"{pretrained!r}; add \"base_model\": \"\" to start from the embedded one")
        sizes = changes["model"]
        fields = {f.name for f in dataclasses.fields(EmbeddedModelConfig)}
        if not isinstance(sizes, dict) or set(sizes) - fields:
            raise SystemExit(f"--recipe: `model` takes a dict of {sorted(fields)}, got {sizes!r}")
        try:
            changes["model"] = dataclasses.replace(base.model, **sizes)
        except ValueError as error:  # e.g. an unknown whole_word_lists name
            raise SystemExit(f"--recipe: {error}") from None
    if "data" in changes:
        changes["data"] = data_from_json(changes["data"])
    if "lora" in changes and not changes["lora"]:  # [] or {}: all weights, the recipe's neutral ()
        changes["lora"] = ()
    if isinstance(changes.get("lora"), dict):  # the recipe keeps it as sorted (key, value) items
        changes["lora"] = tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                                       for k, v in changes["lora"].items()))
    return dataclasses.replace(base, **changes)


def data_from_json(entries) -> tuple:
    """`data`: a list of ExpertData fields per family, e.g. [{"env": "agentgym/textcraft", "num": 800,
    "max_turns": 15, "augmented_copies": 1}, ...]; option dicts become the recipe's (key, value) tuples."""
    import dataclasses

    from rllib_agentgym.agent_model import ExpertData

    fields = {f.name for f in dataclasses.fields(ExpertData)}
    required = {"env", "num", "max_turns"}
    if not isinstance(entries, list) or not entries:
        raise SystemExit(f"--recipe: `data` takes a non-empty list of {sorted(fields)} dicts, got {entries!r}")
    data = []
    for entry in entries:
        if not isinstance(entry, dict) or set(entry) - fields or required - set(entry):
            raise SystemExit(f"--recipe: each `data` entry needs {sorted(required)} and may set "
                             f"{sorted(fields - required)}, got {entry!r}")
        options = {k: tuple(sorted(v.items())) for k, v in entry.items() if isinstance(v, dict)}
        lists = {k: tuple(v) for k, v in entry.items() if isinstance(v, list)}  # e.g. categories
        data.append(ExpertData(**{**entry, **options, **lists}))
    return tuple(data)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="build and evaluate the embedded agent model")
    parser.add_argument("--no-eval", action="store_true")
    parser.add_argument("--report-dir", default=None, help="write the evaluation tables (JSON + Markdown) here")
    parser.add_argument("--engine", default="vllm", choices=["vllm", "hf", "auto"])
    parser.add_argument("--num-tasks", type=int, default=None, help="evaluate on N tasks per env (default: whole splits)")
    parser.add_argument("--agent", default="embedded-agent",
                        help="which agent model: embedded-agent (TextCraft + BabyAI) or embedded-agent-searchqa")
    parser.add_argument("--ship", action="store_true",
                        help="also write the shipped archive (rllib_agentgym/assets/<agent>.tar.xz)")
    parser.add_argument("--envs", type=lambda text: text.split(","), default=None,
                        help="evaluate these families only, e.g. textcraft,babyai (default: all five)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--recipe", default=None,
                        help="JSON of AgentRecipe fields to change (an experiment: evaluated, never shipped)")
    args = parser.parse_args(argv)
    from rllib_agentgym.envs.registry import family_name

    known = [family_name(env) for env, *_ in EVALS]
    if args.envs and set(args.envs) - set(known):
        parser.error(f"--envs: unknown families {sorted(set(args.envs) - set(known))}; known: {known}")
    from rllib_agentgym.agent_model import agent_recipe

    try:
        agent_recipe(args.agent)  # checked before anything is built
    except ValueError as error:
        parser.error(f"--agent: {error}")
    recipe = recipe_from_json(args.recipe, args.agent)
    if args.ship and recipe is not None:
        parser.error("--ship ships the agent's own recipe; change it in agent_model.py to ship a variant")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from rllib_agentgym.agent_model import agent_model_path

    t0, c0 = time.perf_counter(), cpu_seconds()
    path = agent_model_path(recipe, build=True, name=args.agent)
    print(f"{args.agent}: {path} ({time.perf_counter() - t0:.0f} s wall, {cpu_seconds() - c0:.0f} CPU s)")
    if args.ship:
        from rllib_agentgym.agent_model import pack_for_shipping

        archive = pack_for_shipping(args.agent)
        print(f"shipped archive: {archive} ({archive.stat().st_size / 2**20:.1f} MiB)")
    if not args.no_eval:
        evaluate_agent(args.agent if recipe is None else str(path), Path(args.report_dir) if args.report_dir else None, args.engine, args.num_tasks,
                       args.envs)


if __name__ == "__main__":
    main()

"""Expert trajectories from each env family's scripted expert, as conversations.

    python -m rllib_agentgym.data.experts --env agentgym/textcraft --split train --num 200 --out tc.jsonl
    rllib experts --env agentgym/babyai --split test --num 50 --out babyai_test.jsonl     (the same)

Each family's `envs/<name>/expert.py` has an `ExpertAgent(env, **expert_options)`
whose `act(observation) -> (thought, action)` plays the task in-process (TextCraft's
takes `thoughts="steps"|"plan"`: `--expert-options '{"thoughts": "plan"}'`); the
family's spec turns a step into the model turn (`EnvSpec.format_response`,
e.g. ReAct "Thought: ...\\nAction: ..."). Only successful episodes are kept.
`--augmented-copies N` adds N variants of each from the family's augmentation
(`EnvSpec.augment`; TextCraft renames the items, `envs/textcraft/augment.py`),
with `--augment-options` as its keyword arguments (TextCraft: `{"names":
"compositional"}` for made-up names). `--from-episodes E.jsonl.gz` writes recovery
conversations from an agent's failed episodes instead (data/recovery.py).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import random
from typing import Any, Callable, Iterable, Iterator, Sequence

from rllib_agentgym.envs.registry import family_name, get_spec

logger = logging.getLogger(__name__)


def play_expert(spec, expert, env, observation: str, messages: list[dict[str, Any]],
                max_steps: int) -> tuple[float, bool]:
    """Let `expert` act from `observation` until the episode ends or `max_steps` actions, appending its
    turns and the env's answers to `messages`; (summed reward, success)."""
    reward, success = 0.0, False
    for _ in range(max_steps):
        thought, action = expert.act(observation)
        messages.append({"role": "assistant", "content": spec.format_response(thought, action)})
        step = env.step(action)
        reward += float(step.reward)
        success = success or bool(step.info.get("success", False))
        if step.done:
            break
        observation = step.observation
        messages.append({"role": "user", "content": observation})
    return reward, success


def expert_episode(spec, env, data_idx: int, max_steps: int = 100,
                   expert_options: dict | None = None) -> dict[str, Any] | None:
    """Play one task with the family's expert; the conversation if it succeeded, else None."""
    expert_cls = spec.load_expert_class()
    observation = env.reset(int(data_idx))
    messages = [{"role": "system", "content": spec.instruction}, {"role": "user", "content": observation}]
    try:
        reward, success = play_expert(spec, expert_cls(env, **(expert_options or {})), env, observation, messages,
                                      max_steps)
    except Exception as exc:  # an expert that gives up (e.g. BabyAI's bot guard) loses this task only
        logger.info("expert gave up on %s task %d: %s", spec.name, data_idx, exc)
        return None
    return successful_record(spec, data_idx, reward, success, messages)


def successful_record(spec, data_idx: int, reward: float, success: bool, messages: list[dict[str, Any]],
                      item_suffix: str = "", **extra: Any) -> dict[str, Any] | None:
    """The JSONL row of a conversation the expert finished (None if it did not succeed)."""
    if not success:
        return None
    return {"item_id": f"{spec.name}_{data_idx}{item_suffix}", "env": spec.name, "data_idx": int(data_idx),
            "category": spec.category(data_idx), "reward": reward, "success": True, **extra, "messages": messages}


def expert_conversations(env: str, split: str = "train", num: int = 100, max_steps: int = 100,
                         env_options: dict | None = None, expert_options: dict | None = None,
                         shuffle_seed: int | None = None,
                         categories: Sequence[str] | None = None,
                         held_out_task_ids: Sequence[int] = ()) -> Iterator[dict[str, Any]]:
    """Up to `num` successful expert conversations, over the split's tasks in order, or in an order
    shuffled with `shuffle_seed` (so that a `num` below the split's size spreads over its task types:
    SciWorld's split is grouped by task type); only tasks of `categories` when given (an unknown
    category is a ValueError, as in env_config `categories`), never those of `held_out_task_ids`
    (an id outside the split is a ValueError: a typo would silently hold out nothing)."""
    spec = get_spec(env)
    check_expert_options(spec, expert_options)
    task_ids = spec.task_ids(split, categories or None)
    if held_out_task_ids:
        unknown = sorted(set(held_out_task_ids) - set(spec.task_ids(split, None)))
        if unknown:
            raise ValueError(f"held-out task ids {unknown} are not tasks of {env}'s {split} split")
        held_out = set(held_out_task_ids)
        task_ids = [t for t in task_ids if t not in held_out]
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(task_ids)
    instance = spec.load_env_class()(**{**spec.env_options, **(env_options or {})})
    produced = 0
    try:
        for data_idx in task_ids:
            if produced >= num:
                break
            episode = expert_episode(spec, instance, data_idx, max_steps, expert_options)
            if episode is not None:
                produced += 1
                yield episode
    finally:
        instance.close()


def with_augmented_copies(rows: Iterable[dict], env: str, copies: int, seed: int = 0,
                          options: dict | None = None) -> Iterator[dict]:
    """Each row, then `copies` variants of it from the env family's augmentation (`EnvSpec.augment`,
    seeded, called with the keyword `options`), e.g. TextCraft's item renaming; the rows as they are
    for 0 copies. A family without an augmentation, or options it does not take, is a ValueError,
    raised here (before any row is generated)."""
    if copies < 0:
        raise ValueError(f"augmented copies must be >= 0, got {copies}")
    augment = get_spec(env).load_augment() if copies else None
    if augment is not None and options:
        unknown, known = keyword_check(augment, options, positional=2)  # after (conversation, rng)
        if unknown:
            raise ValueError(f"augment options {unknown} unknown; {augment.__name__} takes {known or 'none'}")
        augment = functools.partial(augment, **options)

    def rows_and_copies() -> Iterator[dict]:
        rng = random.Random(seed)
        for row in rows:
            yield row
            for _ in range(copies):
                yield augment(row, rng)

    return rows_and_copies()


def keyword_check(fn: Callable, options: dict, positional: int) -> tuple[list[str], list[str]]:
    """(unknown, known): the keys of `options` that `fn` has no parameter for, and the parameters
    it has after its first `positional` ones."""
    import inspect

    known = list(inspect.signature(fn).parameters)[positional:]
    return sorted(set(options) - set(known)), known


def check_expert_options(spec, expert_options: dict | None) -> None:
    """A clear error for options the family's ExpertAgent does not take (before any env starts)."""
    import inspect

    if not expert_options:
        return
    expert_cls = spec.load_expert_class()
    unknown, known = keyword_check(expert_cls, expert_options, positional=1)  # after env
    if unknown:
        raise ValueError(f"the {spec.name} expert takes no option {unknown}; its options: {known or 'none'}")
    # Checked here: the expert is built inside each episode's guard, where a bad value would only
    # make every task "give up" and the output silently empty.
    styles = getattr(inspect.getmodule(expert_cls), "THOUGHT_STYLES", None)
    if "thoughts" in expert_options and styles is not None and expert_options["thoughts"] not in styles:
        raise ValueError(f"the {spec.name} expert's thoughts must be one of {list(styles)}, "
                         f"not {expert_options['thoughts']!r}")


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of this command (also `rllib experts`)."""
    parser.add_argument("--env", required=True, help="e.g. agentgym/textcraft")
    parser.add_argument("--split", default="train")
    parser.add_argument("--num", type=int, default=100, help="successful conversations to write (at most)")
    parser.add_argument("--max-steps", type=int, default=100, help="expert turns per episode (longer ones are dropped)")
    parser.add_argument("--out", required=True, help="the JSONL file to write")
    parser.add_argument("--expert-options", type=json.loads, default=None,
                        help='JSON keyword arguments of the family\'s ExpertAgent, e.g. \'{"thoughts": "plan"}\'')
    parser.add_argument("--augmented-copies", type=int, default=0,
                        help="after each conversation, this many variants from the family's augmentation "
                             "(TextCraft: items renamed)")
    parser.add_argument("--augment-options", type=json.loads, default=None,
                        help='JSON keyword arguments of the augmentation, e.g. TextCraft\'s \'{"names": "compositional"}\'')
    parser.add_argument("--seed", type=int, default=0, help="seed of the augmentation (and of --shuffle)")
    parser.add_argument("--shuffle", action="store_true",
                        help="visit the split's tasks in a seeded random order instead of in order")
    parser.add_argument("--categories", type=lambda text: [c.strip() for c in text.split(",") if c.strip()],
                        default=None, help="only tasks of these categories, e.g. Find or 'depth 1,depth 2'")
    parser.add_argument("--from-episodes", default=None, metavar="EPISODES",
                        help="instead of whole expert episodes, recovery conversations from an agent's failed "
                             "episodes (`rllib evaluate --episodes` JSONL, .gz too): each cut at its first action "
                             "the expert would not take, then finished by the expert (data/recovery.py)")
    return parser


def run(args: argparse.Namespace) -> int:
    from rllib_agentgym.data.conversations import write_jsonl

    for name in ("expert_options", "augment_options"):
        if getattr(args, name) is not None and not isinstance(getattr(args, name), dict):
            raise SystemExit(f"--{name.replace('_', '-')} must be a JSON object")
    try:
        if args.from_episodes:
            from rllib_agentgym.data.recovery import recovery_conversations
            from rllib_agentgym.run_logs import read_jsonl

            rows = recovery_conversations(args.env, read_jsonl(args.from_episodes), args.max_steps,
                                          expert_options=args.expert_options)
        else:
            rows = expert_conversations(args.env, args.split, args.num, args.max_steps,
                                        expert_options=args.expert_options,
                                        shuffle_seed=args.seed if args.shuffle else None, categories=args.categories)
        rows = with_augmented_copies(rows, args.env, args.augmented_copies, args.seed, args.augment_options)
        n = write_jsonl(args.out, rows)
    except (ValueError, FileNotFoundError) as exc:  # bad options, a family without augmentation, no episodes file
        raise SystemExit(str(exc)) from None
    copies = f" ({args.augmented_copies} augmented copies each)" if args.augmented_copies else ""
    print(f"wrote {n} {family_name(args.env)} conversations{copies} to {args.out}")
    return 0


def main(argv=None) -> None:
    run(add_arguments(argparse.ArgumentParser(description="write expert conversations (JSONL) for SFT")).parse_args(argv))


if __name__ == "__main__":
    main()

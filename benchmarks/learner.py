"""Learner efficiency: tokens/s of one GRPO update over a bare forward + backward + optimizer step.

    python benchmarks/learner.py                                   # embedded model, CPU
    python benchmarks/learner.py --model /models/Qwen2.5-1.5B --dtype bfloat16 --micro-batch-size 2
    python benchmarks/learner.py --profile /tmp/prof                # + where each side's time goes

The batch holds real-length TextCraft trajectories: the project's expert
plays tasks of the train split in-process, and each GRPO group of one task
holds the expert's whole episode plus episodes cut after a random number of
turns (an agent that ran out of horizon), tokenized exactly as the rollout
does (chat template prompt, responses ending in the eos token, observation
turns in between). The batch goes through GRPO's own batch builder
(advantages) and one `LearnerGroup.update` (num_learners=0: the
GRPOTorchLearner in this process).

The limit is a bare loop on a second copy of the same model: the same
trajectories in micro-batches of the same size (formed by length, each
trimmed to its longest row, so padding is minimal), forward with the LM head
only on each row's positions that predict one of its response tokens
(gathered from the decoder's hidden states, as the learner does: the loss
reads nothing else), log-softmax of the next
tokens (gather - logsumexp), a masked mean loss, backward, one AdamW step;
on a GPU machine both sides run on the GPU. Tokens/s counts real
(non-padding) tokens on both sides. Each mode times the GRPO update against
its limits, alternating (the median ratio of wall times is reported, and of
this process's CPU times, which other load on a small machine does not
stretch; one thread by default on CPU):

- `no_kl`: the update without the KL term, the same work as the bare step.
  Limits: `bare` (judged) and `bare_full_lm_head` (the LM head on every
  position, as a plain causal-LM step computes it; what the gather saves).
- `kl`: the default config, whose update also runs the frozen reference
  model's no-grad forward. Limits: `bare` (the issue's bare step, which omits
  that required work) and `bare_plus_ref` (judged: the bare step plus one
  no-grad reference forward of the same tokens, LM head on the response
  positions, the limit of an update with a KL term).
- `no_kl_in_order`: micro-batches cut in batch order (the learner before it
  formed them by length), against `bare`.
- `no_kl_unshared`: `share_prompt_prefix` off, every row's prompt run in full
  (the learner before it shared the prefix), against `bare_unshared` (the
  bare step doing the same) and `bare_shared`; `no_kl` reports the other
  setting's bare step as well (`bare_unshared` where the learner shares,
  `bare_shared` where it does not), so the two show what sharing saves.

- `no_kl_skip`: the batch's first half of the groups fail whole (their rewards
  set to 0: GRPO's advantages are 0 there), and the learner leaves those rows
  out (`skip_zero_advantage_rows`; the other modes keep every row, so that
  they do the bare step's work). Limits: `bare_signal_rows` (judged: the
  bare step over the rows with advantage alone) and `bare` (every row: what
  leaving the rows out saves).

The bare step shares the prompt prefix where the learner does (the tokens all
rows of a micro-batch start with and none trains on run once, their KV cache
repeated over the rows; `share_prompt_prefix: auto`, the default, shares on a
CPU and not on a GPU), so `bare` stays the limit of the same work; each mode
records the learner's choice as `shared_prefix`.

Padding waste = padded tokens computed / real tokens, for micro-batches cut
in batch order and for micro-batches formed by length (what the learner
does); mode `no_kl_in_order` times the learner with batch-order micro-batches.
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
import time
import types
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/learner.py`

from benchmarks.common import emit, limit_cpu_threads, median, meta, model_path, quiet_logs  # noqa: E402

TARGET = 0.9


def expert_trajectories(model: str, num_tasks: int, group_size: int, max_turns: int, seed: int):
    """GRPO groups of real-length TextCraft trajectories (see the module doc)."""
    from transformers import AutoTokenizer

    from envs.textcraft.expert import ExpertAgent
    from rllib_agentgym.core.chat import ChatFormat
    from rllib_agentgym.core.embedded import resolve_model_path
    from rllib_agentgym.core.trajectory import Trajectory
    from rllib_agentgym.envs.registry import get_spec

    spec = get_spec("textcraft")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(model))
    chat = ChatFormat.from_tokenizer(tokenizer)
    env = spec.load_env_class()(**spec.env_options)
    rng = random.Random(seed)
    task_ids = spec.split_ids("train")
    trajectories = []
    for group, data_idx in enumerate(rng.sample(task_ids, num_tasks)):
        first = env.reset(data_idx)
        agent, observation, steps = ExpertAgent(env), first, []
        for _ in range(max_turns):
            thought, action = agent.act(observation)
            result = env.step(action)
            steps.append((f"Thought: {thought}\nAction: {action}", result))
            observation = result.observation
            if result.done:
                break
        prompt = chat.prompt_ids(tokenizer, spec.instruction, first)
        for member in range(group_size):
            turns = len(steps) if member == 0 else rng.randint(1, len(steps))
            traj = Trajectory(env="textcraft", data_idx=data_idx, group_id=group, category=spec.category(data_idx))
            traj.append(prompt, generated=False)
            traj.prompt_len = len(prompt)
            for i, (response, result) in enumerate(steps[:turns]):
                ids = list(tokenizer(response, add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]
                traj.append(ids, generated=True, logprobs=[-1.0] * len(ids))
                traj.reward += float(result.reward)
                traj.success = traj.success or bool(result.info.get("success", False))
                if i < turns - 1:
                    traj.append(chat.observation_ids(tokenizer, result.observation, True), generated=False)
            trajectories.append(traj)
    env.close()
    return trajectories


def in_batch_order(lengths, micro: int) -> list:
    """Micro-batch row indices in batch order (the learner's grouping before it sorted by length)."""
    import numpy as np

    micro = max(1, int(micro or len(lengths)))
    return [np.arange(i, min(i + micro, len(lengths))) for i in range(0, len(lengths), micro)]


def padding_waste(lengths: Sequence[int], micro: int, by_length: bool) -> float:
    """Padded tokens / real tokens when micro-batches of `micro` rows are each trimmed to their longest."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i]) if by_length else list(range(len(lengths)))
    padded = 0
    for start in range(0, len(order), micro):
        rows = [lengths[i] for i in order[start : start + micro]]
        padded += len(rows) * max(rows) - sum(rows)
    return padded / sum(lengths)


def free_memory() -> None:
    """Collect cyclic garbage now and return the freed GPU blocks, so one mode's models do not
    crowd the next one's."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def grpo_config(args, use_kl: bool, share_prefix: bool | str = "auto", skip_zero_rows: bool = False):
    from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig

    return (
        GRPOConfig()
        .environment("agentgym/textcraft")
        .llm(model_path=args.model, model_dtype=args.dtype, max_model_len=args.max_model_len)
        .training(micro_batch_size=args.micro_batch_size, use_kl_loss=use_kl, lr=1e-6,
                  share_prompt_prefix=share_prefix, skip_zero_advantage_rows=skip_zero_rows)
        .learners(num_learners=0, num_gpus_per_learner=1 if _cuda() else 0)
    )


def build_learner_group(config):
    from rllib_agentgym.envs.gym_env import text_space

    spec = config.get_default_rl_module_spec()
    spec.observation_space, spec.action_space = text_space(), text_space()
    return config.build_learner_group(rl_module_spec=spec)


def failing_half(trajectories) -> list:
    """Copies of `trajectories` in which the first half of the groups fail whole (reward 0)."""
    groups = sorted({t.group_id for t in trajectories})
    failed = set(groups[: max(1, len(groups) // 2)])
    out = []
    for t in trajectories:
        t = copy.copy(t)
        if t.group_id in failed:
            t.reward, t.success = 0.0, False
        out.append(t)
    return out


def signal_rows(arrays: dict) -> dict:
    """The rows of a built batch the learner trains (its `rows_with_signal`), as the arrays BareStep reads."""
    import numpy as np
    import torch

    from rllib_agentgym.algorithms.grpo.torch.grpo_torch_learner import rows_with_signal

    keep = rows_with_signal(torch.as_tensor(arrays["advantages"]), torch.as_tensor(arrays["response_mask"])).numpy()
    return {k: np.asarray(arrays[k])[keep] for k in ("input_ids", "attention_mask", "response_mask")}


def build_batch(config, trajectories):
    """GRPO's own batch builder (padding, advantages), called outside an Algorithm."""
    from rllib_agentgym.algorithms.grpo.grpo import GRPO

    return GRPO._build_batch(types.SimpleNamespace(config=config), trajectories)


class BareStep:
    """Forward + backward + AdamW on a second copy of the model, micro-batches formed by length.

    `step(full_lm_head=False, reference=False)`: the LM head on the positions that predict a
    response token only (or on all), with one no-grad forward of the reference copy first or not.
    Precision is the learner's own (`model_config` of GRPO's module spec): weights in its `dtype`
    (float32 master weights) and forwards under its `autocast` (the `--dtype` bfloat16 / float16),
    so both sides do the same arithmetic; bare bf16 weights would be a cheaper, different step.
    """

    def __init__(self, args, arrays: dict, with_reference: bool, model_config: dict):
        import torch

        from rllib_agentgym.core.precision import autocast
        from rllib_agentgym.core.rl_module import (
            cached_prefix_length, load_causal_lm, predicting_positions, prefix_sharing_on,
        )

        self.torch = torch
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        autocast_dtype = model_config.get("autocast")
        self.autocast = lambda: autocast(self.device.type, getattr(torch, autocast_dtype) if autocast_dtype else None)
        # The learner's own choice ("auto": shared on a CPU only), so `bare` does the same work.
        self.share_prefix = prefix_sharing_on(model_config.get("share_prefix", "auto"), self.device)
        weights_dtype = model_config.get("dtype", "float32")
        self.model = load_causal_lm(args.model, weights_dtype).to(self.device).train()
        self.reference = load_causal_lm(args.model, weights_dtype).to(self.device).eval() if with_reference else None
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-6, weight_decay=0.0)
        ids = torch.as_tensor(arrays["input_ids"])
        mask = torch.as_tensor(arrays["attention_mask"])
        response = torch.as_tensor(arrays["response_mask"])
        order = torch.argsort(mask.sum(1), descending=True)
        self.micro = []
        for start in range(0, len(order), args.micro_batch_size):
            rows = order[start : start + args.micro_batch_size]
            width = int(mask[rows].sum(1).max())
            m_ids, m_mask, m_response = (t[rows, :width].to(self.device) for t in (ids, mask, response))
            # (row, p) of the logits that predict a response token (token p + 1) of that row.
            self.micro.append((m_ids, m_mask, m_response, predicting_positions(m_response),
                               cached_prefix_length(m_ids, m_mask, m_response)))
        self.count = float(response.sum())

    def _token_logprobs(self, model, ids, mask, positions, cached: int = 0):
        """log p(token p+1 | ..p) at `positions` (row, p) pairs (None: at every position of every row);
        the first `cached` tokens, which every row shares, run once for the micro-batch (as the
        learner's `share_prompt_prefix`)."""
        from rllib_agentgym.core.rl_module import decoder_hidden_states

        with self.autocast():
            if positions is None:
                logits, labels = model(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, :-1], ids[:, 1:]
            else:
                rows, cols = positions
                hidden = decoder_hidden_states(model, ids, mask, cached)
                logits = model.get_output_embeddings()(hidden[rows, cols - cached])
                labels = ids[rows, cols + 1]
        logits = logits.float()
        return logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - logits.logsumexp(-1)

    def step(self, full_lm_head: bool = False, reference: bool = False, share_prefix: bool | None = None) -> None:
        torch = self.torch
        share_prefix = self.share_prefix if share_prefix is None else share_prefix
        if reference:
            with torch.no_grad():
                for ids, mask, _, positions, cached in self.micro:
                    self._token_logprobs(self.reference, ids, mask, positions, cached if share_prefix else 0)
        for ids, mask, response, positions, cached in self.micro:
            keep = None if full_lm_head else positions
            weights = response[:, 1:] if keep is None else response[:, 1:][keep]
            logprobs = self._token_logprobs(self.model, ids, mask, keep, cached if share_prefix and keep is not None else 0)
            loss = -(logprobs * weights).sum() / self.count
            loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize()


def profile_sides(sides: dict[str, Any], table_path: Path, row_limit: int = 30) -> dict[str, Any]:
    """Each side once under torch.profiler (already warm): where its time goes.

    Per side: wall seconds; on a GPU the busy device time (the sum of kernel
    times, one stream) and its share of the wall time, whose gap is the device
    waiting on the host; the number of device kernels and of host-side ops.
    The top ops of each side by self device time (CPU: self CPU time) are
    written to `table_path`.
    """
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sort_by = "self_device_time_total" if cuda else "self_cpu_time_total"
    table_path.parent.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {}
    with table_path.open("w") as tables:
        for side, fn in sides.items():
            with profile(activities=activities) as prof:
                start = time.perf_counter()
                fn()
                wall = time.perf_counter() - start
            events = prof.events()
            kernels = [e for e in events if e.device_type == DeviceType.CUDA]
            busy = sum(e.device_time for e in kernels) / 1e6  # microseconds -> s
            summary[side] = {"wall_s": round(wall, 4), "device_busy_s": round(busy, 4),
                             "device_busy_share": round(busy / wall, 3) if cuda else None,
                             "device_kernels": len(kernels),
                             "host_ops": sum(1 for e in events if e.device_type == DeviceType.CPU)}
            tables.write(f"=== {side}: {summary[side]}\n")
            tables.write(prof.key_averages().table(sort_by=sort_by, row_limit=row_limit, max_name_column_width=70))
            tables.write("\n\n")
    return summary


# mode -> its limits as BareStep.step options; the first one is the mode's judged limit.
MODE_LIMITS: dict[str, dict[str, dict[str, bool]]] = {
    "no_kl": {"bare": {}, "bare_full_lm_head": {"full_lm_head": True}, "bare_unshared": {"share_prefix": False}},
    "kl": {"bare_plus_ref": {"reference": True}, "bare": {}},
    "no_kl_in_order": {"bare": {}},
    "no_kl_unshared": {"bare_unshared": {"share_prefix": False}, "bare_shared": {"share_prefix": True}},
    # `signal_rows`: the bare step over the rows with advantage only.
    "no_kl_skip": {"bare_signal_rows": {"signal_rows": True}, "bare": {}},
}


def mode_limits(mode: str, learner_shares_prefix: bool) -> dict[str, dict[str, bool]]:
    """MODE_LIMITS[mode]; where the learner runs every row in full (`share_prompt_prefix: auto` on a
    GPU), `no_kl` times the shared-prefix step as its alternative in place of `bare_unshared`."""
    limits = dict(MODE_LIMITS[mode])
    if mode == "no_kl" and not learner_shares_prefix:
        del limits["bare_unshared"]
        limits["bare_shared"] = {"share_prefix": True}
    return limits


def timed_sides(learner_group, batch, bare: BareStep, limits: dict[str, dict[str, bool]],
                signal_bare: BareStep | None = None) -> dict[str, Any]:
    """side name -> a call that runs it to completion: "grpo" (one `LearnerGroup.update`) and each limit
    (a limit with `signal_rows` runs `signal_bare`, the bare step over the rows with advantage)."""
    import torch

    def update():
        learner_group.update(batch=batch, minibatch_size=None, num_epochs=1, shuffle_batch_per_epoch=False,
                             timesteps={"num_env_steps_sampled_lifetime": 0})
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def limit(options: dict[str, bool]):
        options = dict(options)
        step = (signal_bare if options.pop("signal_rows", False) else bare).step
        return lambda: step(**options)

    return {"grpo": update, **{name: limit(options) for name, options in limits.items()}}


def measure(sides: dict[str, Any], limits: dict[str, dict[str, bool]], real_tokens: int,
            repeats: int) -> dict[str, Any]:
    """The update against each limit, alternating; top-level ratio fields are the first limit's."""
    for fn in sides.values():
        fn()  # warm-up: allocator, optimizer state
    wall: dict[str, list[float]] = {side: [] for side in sides}
    cpu: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(repeats):
        for side, fn in sides.items():
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall[side].append(time.perf_counter() - w0)
            cpu[side].append(time.process_time() - c0)
    out: dict[str, Any] = {"grpo_tokens_per_s": round(real_tokens / median(wall["grpo"]), 1),
                           "grpo_update_s": [round(x, 4) for x in wall["grpo"]],
                           "grpo_update_cpu_s": [round(x, 4) for x in cpu["grpo"]],
                           "limits": {}}
    for name in limits:
        out["limits"][name] = {
            "ratio": round(median([b / g for g, b in zip(wall["grpo"], wall[name])]), 4),
            # Where the limit's own repeats spread (a host-bound GPU), the pairs' median reads that spread.
            "ratio_of_medians": round(median(wall[name]) / median(wall["grpo"]), 4),
            # CPU time of this process: what the machine's other load cannot stretch (CPU runs).
            "ratio_cpu_time": round(median([b / g for g, b in zip(cpu["grpo"], cpu[name])]), 4),
            "tokens_per_s": round(real_tokens / median(wall[name]), 1),
            "step_s": [round(x, 4) for x in wall[name]],
            "step_cpu_s": [round(x, 4) for x in cpu[name]],
        }
    judged = next(iter(limits))
    out.update(judged_limit=judged, ratio=out["limits"][judged]["ratio"],
               ratio_cpu_time=out["limits"][judged]["ratio_cpu_time"],
               bare_tokens_per_s=out["limits"][judged]["tokens_per_s"])
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded",
                        help="model path or hub id; 'embedded' / 'embedded-25m': the project's own Qwen2s")
    parser.add_argument("--dtype", default="float32",
                        help="model_dtype: the learner autocasts to it (bfloat16 / float16) over float32 weights")
    parser.add_argument("--tasks", type=int, default=4, help="GRPO groups (TextCraft tasks) in the batch")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=12)
    parser.add_argument("--micro-batch-size", type=int, default=4)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--modes", default="no_kl,kl,no_kl_in_order,no_kl_unshared,no_kl_skip",
                        help="no_kl: same work as the bare step; kl: the default config (limits: bare + reference "
                             "forward, and bare alone); no_kl_in_order: micro-batches in batch order (the learner "
                             "before length sorting); no_kl_unshared: share_prompt_prefix off, every row's "
                             "prompt run in full (limits: the bare step doing the same, and the sharing one); no_kl_skip: half "
                             "the groups fail whole and the learner leaves their rows out (limits: the bare step "
                             "over the other rows, and over all)")
    parser.add_argument("--cpu-threads", type=int, default=1, help="CPU only: torch threads (0: torch's default)")
    parser.add_argument("--profile", default=None, metavar="DIR",
                        help="after timing, run each side once under torch.profiler: busy device time, kernel and "
                             "op counts per side in the JSON, and each side's top ops in DIR/profile_<mode>.txt")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODE_LIMITS]
    if unknown:
        parser.error(f"unknown mode(s) {', '.join(unknown)}: choose from {', '.join(MODE_LIMITS)}")
    quiet_logs()
    threads = limit_cpu_threads(args.cpu_threads)
    args.model = model_path(args.model)

    trajectories = expert_trajectories(args.model, args.tasks, args.group_size, args.max_turns, args.seed)
    lengths = [len(t.token_ids) for t in trajectories]
    real_tokens = sum(lengths)
    result: dict[str, Any] = {
        "benchmark": "learner",
        "meta": meta(__file__, argv),
        "target_ratio": TARGET,
        "settings": {**{k: v for k, v in vars(args).items() if k != "out"}, **threads},
        "batch": {
            "trajectories": len(trajectories),
            "real_tokens": real_tokens,
            "generated_tokens": sum(t.num_generated_tokens for t in trajectories),
            "min_len": min(lengths),
            "max_len": max(lengths),
            "padding_waste_full_batch": round(len(lengths) * max(lengths) / real_tokens - 1, 4),
            "padding_waste_micro_in_order": round(padding_waste(lengths, args.micro_batch_size, False), 4),
            "padding_waste_micro_by_length": round(padding_waste(lengths, args.micro_batch_size, True), 4),
        },
        "modes": {},
    }
    from rllib_agentgym.algorithms.grpo.torch import grpo_torch_learner

    by_length = grpo_torch_learner.micro_batches_by_length
    for mode in modes:
        use_kl = mode == "kl"
        # no_kl_in_order: the learner's micro-batches cut in batch order, as before they were formed by length.
        grpo_torch_learner.micro_batches_by_length = in_batch_order if mode == "no_kl_in_order" else by_length
        try:
            skip = mode == "no_kl_skip"
            config = grpo_config(args, use_kl, share_prefix=False if mode == "no_kl_unshared" else "auto",
                                 skip_zero_rows=skip)
            learner_group = build_learner_group(config)
            batch = build_batch(config, failing_half(trajectories) if skip else trajectories)
            arrays = batch.policy_batches["default_policy"]
            model_config = config.get_default_rl_module_spec().model_config
            bare = BareStep(args, arrays, with_reference=use_kl, model_config=model_config)
            signal_bare, rows = None, {}
            if skip:
                kept = signal_rows(arrays)
                if not len(kept["input_ids"]):
                    raise ValueError("no_kl_skip: no group of the other half has mixed rewards; more --max-turns "
                                     "let the expert finish more episodes")
                signal_bare = BareStep(args, kept, False, model_config)
                rows = {"rows": len(arrays["input_ids"]), "trained_rows": len(kept["input_ids"])}
            limits = mode_limits(mode, bare.share_prefix)
            sides = timed_sides(learner_group, batch, bare, limits, signal_bare)
            result["modes"][mode] = {**rows, "shared_prefix": bare.share_prefix,
                                     **measure(sides, limits, real_tokens, args.repeats)}
            if args.profile:
                result["modes"][mode]["profile"] = profile_sides(sides, Path(args.profile) / f"profile_{mode}.txt")
            del sides
            if _cuda():  # both sides at once: the learner's model and optimizer, and the bare copy's
                import torch

                result["modes"][mode]["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
                torch.cuda.reset_peak_memory_stats()
            learner_group.shutdown()
        finally:
            grpo_torch_learner.micro_batches_by_length = by_length
        # Both sides' weights, gradients and optimizer states go before the next mode builds its own:
        # the learner sits in reference cycles that only the collector frees (on a GPU, 2 x 24 GB at 1.5B).
        del learner_group, batch, bare, signal_bare
        free_memory()
    result["ratio"] = result["modes"].get("no_kl", next(iter(result["modes"].values())))["ratio"]
    result["target_met"] = result["ratio"] >= TARGET
    return emit(result, args.out)


if __name__ == "__main__":
    main()

"""TensorBoard extras for a training iteration: sample trajectories and histograms.

Tune already writes every scalar of the result dict to TensorBoard; this adds
what scalars cannot show: a few trajectories as Markdown text (TensorBoard's
Text tab) and histograms of turns, rewards and generated tokens. It writes to
`<logdir>/extras`, which TensorBoard lists as its own run next to the trial.

Each call opens a writer, writes and closes it: one small event file per
iteration, and no handle to keep alive across Ray actor restarts or restores.
The trajectory JSONL log lives in `run_logs`; `write_trajectories` is
re-exported here so the training loop imports both from one place.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rllib_agentgym.run_logs import write_trajectories

__all__ = ["EXTRAS_DIR", "log_iteration_extras", "trajectory_markdown", "write_trajectories"]

EXTRAS_DIR = "extras"
_MAX_FIELD_CHARS = 2000  # per observation / response in the text samples


def _clip(text: str, limit: int = _MAX_FIELD_CHARS) -> str:
    text = str(text or "")
    return text if len(text) <= limit else text[:limit] + f"\n… [{len(text) - limit} more characters]"


def _fence(text: str) -> str:
    """A fenced code block that the text itself cannot close."""
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}\n{text}\n{fence}"


def trajectory_markdown(summary: Mapping[str, Any]) -> str:
    """Markdown of one trajectory summary: a header line, then each turn's observation, response and action."""
    outcome = "success" if summary.get("success") else ("truncated" if summary.get("truncated") else "failure")
    header = (
        f"**{summary.get('env', 'env')} task {summary.get('data_idx')}** "
        f"({summary.get('category') or 'no category'}): {outcome}, reward {summary.get('reward')}, "
        f"{summary.get('num_turns', len(summary.get('turns', [])))} turns, "
        f"{summary.get('num_generated_tokens', '?')} generated tokens"
    )
    lines = [header, ""]
    for i, turn in enumerate(summary.get("turns", []), start=1):
        flag = "" if turn.get("valid_format", True) else " (unparseable)"
        lines += [
            f"#### Turn {i}: action `{_clip(turn.get('action', ''), 200)}`{flag}, reward {turn.get('reward', 0)}",
            "Observation:",
            _fence(_clip(turn.get("observation", ""))),
            "Response:",
            _fence(_clip(turn.get("response", ""))),
            "",
        ]
    if summary.get("final_observation"):
        lines += ["Final observation:", _fence(_clip(summary["final_observation"]))]
    return "\n".join(lines)


def _pick_samples(summaries: Sequence[Mapping[str, Any]], count: int) -> list[Mapping[str, Any]]:
    """`count` trajectories spread evenly from the best reward to the worst (deterministic)."""
    ranked = sorted(summaries, key=lambda s: (-float(s.get("reward", 0.0)), s.get("data_idx", 0), s.get("group_id", 0)))
    if len(ranked) <= count:
        return ranked
    if count == 1:
        return ranked[:1]
    step = (len(ranked) - 1) / (count - 1)
    return [ranked[round(i * step)] for i in range(count)]


def log_iteration_extras(logdir: str | os.PathLike, iteration: int, trajectories_summaries: Sequence[Mapping[str, Any]],
                         num_text_samples: int = 4) -> Path | None:
    """Write sample trajectories (text) and histograms of one iteration to `<logdir>/extras`.

    Tags: "trajectories/sample_<k>" (k = 0 is the best reward, the last the
    worst), "trajectories/num_turns", "trajectories/reward",
    "trajectories/num_generated_tokens". Returns the extras dir, or None when
    there was nothing to log.
    """
    if not trajectories_summaries:
        return None
    # torch is heavy: imported only when there is something to log.
    from torch.utils.tensorboard import SummaryWriter

    out = Path(logdir) / EXTRAS_DIR
    writer = SummaryWriter(log_dir=str(out))
    try:
        for k, summary in enumerate(_pick_samples(trajectories_summaries, num_text_samples)):
            writer.add_text(f"trajectories/sample_{k}", trajectory_markdown(summary), global_step=iteration)
        histograms = {
            "num_turns": [s.get("num_turns", len(s.get("turns", []))) for s in trajectories_summaries],
            "reward": [s.get("reward", 0.0) for s in trajectories_summaries],
            "num_generated_tokens": [s.get("num_generated_tokens", 0) for s in trajectories_summaries],
        }
        for name, values in histograms.items():
            writer.add_histogram(f"trajectories/{name}", np.asarray(values, dtype=np.float64), global_step=iteration)
    finally:
        writer.close()
    return out

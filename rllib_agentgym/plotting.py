"""`rllib plot RUN_DIR`: PNG training curves for reports.

One PNG per curve (reward, success, horizon, KL) and `curves.png` with all
four. A run directory with several trials (a Tune search) gets one line per
trial on the same axes. Uses matplotlib's Agg backend: no display needed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from rllib_agentgym import run_logs

COMBINED_NAME = "curves.png"
_DPI = 120


def _trial_series(trials: dict[str, Path]) -> dict[str, dict[str, tuple[list[float], list[float]]]]:
    """curve -> trial name -> (iterations, values), only where the trial has the curve."""
    out: dict[str, dict[str, tuple[list[float], list[float]]]] = {curve: {} for curve in run_logs.CURVES}
    for name, trial_dir in trials.items():
        rows = run_logs.load_results(trial_dir)
        columns = run_logs.columns_of(rows)
        for curve in run_logs.CURVES:
            key = run_logs.curve_key(columns, curve)
            if key is not None:
                xs, ys = run_logs.series(rows, key)
                if xs:
                    out[curve][name] = (xs, ys)
    return out


def _draw(ax, curve: str, lines: dict[str, tuple[list[float], list[float]]]) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if curve == "horizon":
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(run_logs.CURVE_TITLES[curve], fontsize=11)
    ax.set_xlabel("training iteration")
    ax.grid(True, alpha=0.3)
    if not lines:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="gray")
        return
    for name, (xs, ys) in lines.items():
        marker = "o" if len(xs) <= 30 else None
        drawstyle = "steps-post" if curve == "horizon" else "default"
        ax.plot(xs, ys, marker=marker, markersize=3, linewidth=1.5, drawstyle=drawstyle, label=name)
    if curve == "success":
        ax.set_ylim(-0.02, 1.02)
    if len(lines) > 1:
        ax.legend(fontsize=7, loc="best")


def plot_run(run_dir: str | os.PathLike, out_dir: str | os.PathLike) -> list[Path]:
    """Write `<curve>.png` for each curve the run has, and `curves.png`; returns the paths.

    Raises FileNotFoundError when `run_dir` holds no trial, ValueError when
    its trials have none of the curves (e.g. no iteration finished yet).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trials = run_logs.find_trials(run_dir)
    if not trials:
        raise FileNotFoundError(f"no trial (result.json / progress.csv) under {run_dir}")
    data = _trial_series(trials)
    if not any(data.values()):
        raise ValueError(f"no training curves ({', '.join(run_logs.CURVES)}) in the results under {run_dir}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for curve, lines in data.items():
        if not lines:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=_DPI)
        _draw(ax, curve, lines)
        fig.tight_layout()
        path = out / f"{curve}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), dpi=_DPI)
    for ax, (curve, lines) in zip(axes.flat, data.items()):
        _draw(ax, curve, lines)
    fig.suptitle(Path(run_dir).resolve().name, fontsize=12)
    fig.tight_layout()
    path = out / COMBINED_NAME
    fig.savefig(path)
    plt.close(fig)
    written.append(path)
    return written


def plot_main(run_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None) -> Sequence[Path]:
    """Entry point for `rllib plot`: plots into `out_dir` (default `<run_dir>/plots`) and prints the files."""
    paths = plot_run(run_dir, out_dir if out_dir is not None else Path(run_dir) / "plots")
    for path in paths:
        print(path)
    return paths

"""Reading what a training run writes (Tune's result.json, TensorBoard event files) and
writing a tuned example with a test-sized budget."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def trial_results(trial: Path) -> list[dict]:
    """The rows of a trial's result.json, one per reported iteration."""
    return [json.loads(line) for line in (trial / "result.json").read_text().splitlines() if line.strip()]


def tensorboard_scalars(path: Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} of the event files in `path`, read by TensorBoard's EventAccumulator."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    out: dict[str, list[tuple[int, float]]] = {}
    for events_file in sorted(path.glob("events.out.tfevents.*")):
        events = EventAccumulator(str(events_file), size_guidance={SCALARS: 0})
        events.Reload()
        for tag in events.Tags()[SCALARS]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in events.Scalars(tag))
    return out


def shortened_example(file: str, tmp_path: Path, iterations: int, checkpoint_frequency: int = 0,
                      checkpoint_at_end: bool = False, **config) -> tuple[Path, str, dict]:
    """tuned_examples/FILE stopped after `iterations`, with `config` overrides, written under
    tmp_path: (its path, the experiment name, its config as written)."""
    spec = yaml.safe_load((ROOT / "tuned_examples" / file).read_text())
    (name,) = spec
    exp = spec[name]
    exp["stop"] = {"training_iteration": iterations}
    exp["checkpoint_config"] = {"checkpoint_frequency": checkpoint_frequency, "checkpoint_at_end": checkpoint_at_end}
    exp["config"].update(config)
    path = tmp_path / file
    path.write_text(yaml.safe_dump(spec))
    return path, name, exp["config"]

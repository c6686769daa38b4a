"""Recovery conversations: an agent's own mistakes, then the expert's way out (DAgger-style data).

    rllib evaluate MODEL --env agentgym/textcraft --split train --episodes agent.jsonl.gz
    rllib experts --env agentgym/textcraft --from-episodes agent.jsonl.gz --out recovery.jsonl

Expert conversations only show states the expert reaches, so a model trained on
them has never seen its own wrong action followed by the env's complaint, and
repeats or drifts after its first slip (the compounding error of behaviour
cloning; DAgger, Ross et al. 2011, trains on the states the learner visits,
labelled by the expert). Here each failed episode of the agent is replayed in a
fresh env up to its first action that the expert, started from the same state,
would not take. The conversation keeps the agent's turns up to and including
that action, without loss (they are context, not targets), and the env's answer
to it; from the state it left, a new expert plays to the end, and its turns are
trained on. Only conversations whose expert part succeeds are kept.

The family's `ExpertAgent(env, **options)` must plan from the env's current
state when built mid-episode (BabyAI's bot and TextCraft's planner do).
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Iterator

from rllib_agentgym.data.experts import check_expert_options, play_expert, successful_record
from rllib_agentgym.envs.registry import get_spec

logger = logging.getLogger(__name__)


def recovery_conversation(spec, env, episode: dict[str, Any], max_steps: int = 100,
                          expert_options: dict | None = None) -> dict[str, Any] | None:
    """The agent's `episode` (a `Trajectory.summary()`) up to its first action off the expert's
    way, then the expert from there; None if the agent never leaves that way, the replay does
    not reproduce the episode's observations, or the expert does not succeed."""
    expert_cls = spec.load_expert_class()
    options = expert_options or {}
    data_idx = int(episode["data_idx"])
    observation = env.reset(data_idx)
    messages = [{"role": "system", "content": spec.instruction}, {"role": "user", "content": observation}]
    try:
        for agent_turns, turn in enumerate(episode["turns"], start=1):
            if turn["observation"] != observation:
                logger.info("replay of %s task %d diverged from the episode", spec.name, data_idx)
                return None
            _, expert_action = expert_cls(env, **options).act(observation)
            messages.append({"role": "assistant", "content": turn["response"], "loss": False})
            step = env.step(turn["action"])
            if step.done:  # the agent finished (or ended) the episode on its own
                return None
            observation = step.observation
            messages.append({"role": "user", "content": observation})
            if turn["action"].strip().lower() != expert_action.strip().lower():
                break
        else:
            return None  # every action was the expert's: nothing to recover from
        reward, success = play_expert(spec, expert_cls(env, **options), env, observation, messages, max_steps)
    except Exception as exc:  # an expert that gives up (e.g. BabyAI's bot guard) loses this episode only
        logger.info("expert gave up recovering %s task %d: %s", spec.name, data_idx, exc)
        return None
    return successful_record(spec, data_idx, reward, success, messages, "_recovery", agent_turns=agent_turns)


def recovery_conversations(env: str, episodes: Iterable[dict[str, Any]], max_steps: int = 100,
                           env_options: dict | None = None,
                           expert_options: dict | None = None) -> Iterator[dict[str, Any]]:
    """A recovery conversation for each failed episode of `episodes` where one can be made."""
    spec = get_spec(env)
    check_expert_options(spec, expert_options)
    instance = spec.load_env_class()(**{**spec.env_options, **(env_options or {})})
    try:
        for episode in episodes:
            if episode.get("success") or episode.get("env") not in (None, spec.name, env):
                continue
            row = recovery_conversation(spec, instance, episode, max_steps, expert_options)
            if row is not None:
                yield row
    finally:
        instance.close()

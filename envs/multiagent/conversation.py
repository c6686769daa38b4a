"""Playing an episode with scripted policies, recorded as per-agent chats.

A policy is any object with ``act(observation) -> (thought, action)`` (the
CoopCraft `ScriptedCoopAgent`, a board-game `OpponentAgent`, an LLM wrapper).
`play_episode` runs one episode of a multi-agent text env to its end and
returns a `Transcript`: every turn in order, and for each agent the chat it
took part in (`messages(agent)`): the observation as a "user" message and
the agent's reply in AgentGym's ReAct form ``Thought: ...\\nAction: ...`` as
an "assistant" message, the format expert trajectories for SFT come in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from envs.multiagent.base import MultiAgentTextEnv


class Policy(Protocol):
    def act(self, observation: str) -> tuple[str, str]: ...


@dataclass
class Turn:
    step: int  # env step the action went into (0-based)
    agent: str
    observation: str
    thought: str
    action: str
    invalid_action: bool = False  # the env refused the action
    reward: float = 0.0  # the agent's reward from that step


@dataclass
class Transcript:
    data_idx: int
    turns: list[Turn] = field(default_factory=list)
    final_observations: dict[str, str] = field(default_factory=dict)
    returns: dict[str, float] = field(default_factory=dict)  # summed rewards per agent
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)  # the last step's info

    def messages(self, agent: str) -> list[dict[str, str]]:
        chat = []
        for turn in self.turns:
            if turn.agent == agent:
                chat.append({"role": "user", "content": turn.observation})
                chat.append({"role": "assistant", "content": f"Thought: {turn.thought}\nAction: {turn.action}"})
        if agent in self.final_observations:
            chat.append({"role": "user", "content": self.final_observations[agent]})
        return chat

    def to_text(self) -> str:
        """The whole episode as readable text, one block per agent turn."""
        blocks = [f"[step {t.step}] {t.agent} sees:\n{t.observation}\n{t.agent}: Thought: {t.thought}\nAction: {t.action}" for t in self.turns]
        blocks += [f"[end] {agent} sees:\n{text}" for agent, text in self.final_observations.items()]
        return "\n\n".join(blocks)


def play_episode(env: MultiAgentTextEnv, policies: Mapping[str, Policy], data_idx: int, max_steps: int = 200) -> Transcript:
    """Reset `env` to `data_idx` and play it with `policies` (one per agent) until done or `max_steps`.

    Policies keep per-episode state (the scripted ones do): give fresh ones
    for every episode.
    """
    observations = env.reset(data_idx)
    transcript = Transcript(data_idx, returns=dict.fromkeys(env.possible_agents, 0.0))
    for step in range(max_steps):
        actions, turns = {}, []
        for agent in env.agents_to_act():
            thought, action = policies[agent].act(observations[agent])
            turns.append(Turn(step, agent, observations[agent], thought, action))
            actions[agent] = action
        result = env.step(actions)
        for turn in turns:
            turn.invalid_action = bool(result.info["invalid_action"].get(turn.agent, False))
            turn.reward = float(result.rewards.get(turn.agent, 0.0))
        transcript.turns += turns
        for agent, reward in result.rewards.items():
            transcript.returns[agent] += reward
        transcript.info = result.info
        observations = result.observations
        if result.done:
            transcript.done = True
            transcript.final_observations = dict(observations)
            break
    return transcript

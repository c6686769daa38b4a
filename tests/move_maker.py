"""A Tic-Tac-Toe warm start for tests: the embedded model taught the move FORMAT, not the game.

GRPO needs groups whose rewards differ. The random-init embedded model never
writes a readable move, so it always forfeits (equal rewards, zero
advantages). `build_move_maker` fine-tunes it for a few steps on X's side of
games in which X answers ``Thought: ...\\nAction: place N`` with N drawn
uniformly from 1-9 (legal or not: the env's refusals are in the chats) and O
plays random legal moves. The result writes readable moves about N-blind,
so against the random opponent it wins, draws, loses and forfeits: mixed
outcomes within a group. The chats are tokenized exactly as SFT does
(`rllib_agentgym.data.conversations.tokenize`).
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

from envs.multiagent.conversation import play_episode
from envs.multiagent.opponents import OpponentAgent
from envs.multiagent.tictactoe import TicTacToeEnv
from rllib_agentgym.core.chat import ChatFormat
from rllib_agentgym.core.embedded import EmbeddedModelConfig, embedded_model_path
from rllib_agentgym.data.conversations import tokenize
from rllib_agentgym.envs.multiagent_env import INSTRUCTIONS

THOUGHT = "I pick a cell."
# A small Qwen2 (0.35M parameters; head_dim 32 suits vLLM's CPU attention): the format is
# learnt in tens of steps, and rollouts are cheap.
TINY = EmbeddedModelConfig(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=2,
                           num_key_value_heads=1, head_dim=32)


class _AnyCell:
    """X's scripted policy: any cell number, uniformly (so some moves are illegal)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def act(self, observation: str) -> tuple[str, str]:
        return THOUGHT, f"place {self.rng.randint(1, 9)}"


def move_format_chats(num: int, max_turns: int = 3, seed: int = 0) -> list[list[dict]]:
    """X's chats (system instruction first) from `num` games on train tasks, at most `max_turns` X turns each."""
    chats = []
    for k in range(num):
        env = TicTacToeEnv()
        data_idx = 1 + 5 * k // 4  # train ids (not multiples of 5)
        data_idx += data_idx % 5 == 0
        players = {"player_1": _AnyCell(seed * 1000 + k), "player_2": OpponentAgent(env, "player_2", "random", seed=k)}
        transcript = play_episode(env, players, data_idx, max_steps=2 * max_turns)
        chats.append([{"role": "system", "content": INSTRUCTIONS["tictactoe"]}] + transcript.messages("player_1"))
    return chats


def build_move_maker(out: Path, steps: int = 150, lr: float = 1e-2, seed: int = 0) -> Path:
    """Fine-tune a fresh `TINY` embedded model on first-turn `move_format_chats`, one chat a
    step, and save it (HF folder) to `out`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    base = embedded_model_path(TINY)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    chat = ChatFormat.from_tokenizer(tokenizer)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for messages in move_format_chats(steps, max_turns=1, seed=seed):
        ids, mask = tokenize(tokenizer, chat, messages[:3])  # system, X's first observation, its reply
        reply = len(mask) - mask.index(1)  # the reply (and eos) ends the sequence
        # Logits only where they predict the reply: the prompt needs none.
        logits = model(input_ids=torch.tensor([ids]), logits_to_keep=reply + 1).logits[0, :-1]
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(ids[-reply:]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out

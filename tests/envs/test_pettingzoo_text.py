"""The PettingZoo adapter on real PettingZoo envs: an AEC classic game, a Parallel env, a game
with no preset; through the text contract, the registry, TextMultiAgentEnv and RLlib's checker."""

from __future__ import annotations

import random

import numpy as np
import pytest
from pettingzoo.classic import connect_four_v3, go_v5, rps_v2, tictactoe_v3

from envs.multiagent import registry
from envs.multiagent.base import MultiAgentTextEnv
from envs.multiagent.pettingzoo_text import (
    AECTextEnv,
    ParallelTextEnv,
    RandomLegalPlayer,
    make_pettingzoo_env,
    outcome_by_returns,
    pettingzoo_text_env,
)
from envs.multiagent.tictactoe import TicTacToeEnv

RPS = {"factory": "pettingzoo.classic.rps_v2:parallel_env", "env_kwargs": {"max_cycles": 3}}


def _legal(text: str) -> list[str]:
    return text.rsplit("Legal moves: ", 1)[1].split(", ")


def render_connect_four_columns(observation, agent, env) -> str:
    """A user-supplied render: the column heights only (module-level: importable by name)."""
    pieces = observation["observation"].sum(axis=2)
    return "Pieces per column: " + " ".join(str(int(n)) for n in pieces.sum(axis=0))


# -- AEC: a classic turn-based game -------------------------------------------------------


def test_aec_tictactoe_plays_the_same_games_as_the_hand_built_env():
    """Random games through the generic adapter and through TicTacToeEnv (both over
    tictactoe_v3, move names "place N"): same turns, legal moves, rewards and outcomes."""
    rng = random.Random(0)
    generic, built = pettingzoo_text_env(tictactoe_v3.env()), TicTacToeEnv()
    assert isinstance(generic, AECTextEnv) and isinstance(generic, MultiAgentTextEnv)
    assert generic.possible_agents == built.possible_agents == ["player_1", "player_2"]
    outcomes = set()
    for game in range(30):
        obs = generic.reset(game)
        built.reset(0)  # no opening moves
        assert list(obs) == built.agents_to_act()
        while True:
            (agent,) = generic.agents_to_act()
            assert [agent] == built.agents_to_act()
            assert sorted(_legal(obs[agent])) == sorted(built.legal_moves())
            move = rng.choice(built.legal_moves())
            mine, theirs = generic.step({agent: move}), built.step({agent: move})
            assert mine.rewards == theirs.rewards and mine.done == theirs.done
            obs = mine.observations
            if mine.done:
                assert mine.info["outcome"] == theirs.info["outcome"] and mine.info["winner"] == theirs.info["winner"]
                assert set(obs) == {"player_1", "player_2"} and generic.agents_to_act() == []
                outcomes.add(mine.info["outcome"]["player_1"])
                break
    assert outcomes == {"win", "loss", "draw"}


def test_aec_texts_list_legal_moves_and_refuse_illegal_ones_until_forfeit():
    env = pettingzoo_text_env(tictactoe_v3.env(), max_illegal_moves=3)
    obs = env.reset(0)
    text = obs["player_1"]
    assert text.startswith("You are player_1 in tictactoe_v3.\nYou play X.") and ". . .\n. . .\n. . ." in text
    assert sorted(_legal(text), key=lambda m: int(m.split()[1])) == [f"place {n}" for n in range(1, 10)]
    result = env.step({"player_1": "Place 3."})  # case and a trailing period are fine
    text = result.observations["player_2"]
    assert "player_1 played place 3." in text and ". . X\n. . .\n. . ." in text and "place 3" not in _legal(text)
    answers = [("place 3", "'place 3' is not legal now"), ("place 10", "could not read 'place 10'"),
               ("I think so", "could not read 'I think so'")]
    for k, (action, reason) in enumerate(answers):
        result = env.step({"player_2": action})
        assert result.info["invalid_action"] == {"player_2": True} and reason in result.observations["player_2"]
        if k < 2:
            assert not result.done and env.agents_to_act() == ["player_2"]
            assert "more illegal move" in result.observations["player_2"] and "Legal moves: place 1" in result.observations["player_2"]
    assert result.done and result.rewards == {"player_1": 1.0, "player_2": -1.0}
    assert result.info["forfeit"] == "player_2" and result.info["outcome"] == {"player_1": "win", "player_2": "loss"}
    assert "You won." in result.observations["player_1"] and "forfeit" in result.observations["player_2"]
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step({"player_2": "place 1"})


def test_aec_user_render_and_move_names_by_name_through_the_registry():
    env = registry.make_env(
        "pettingzoo", factory="pettingzoo.classic.connect_four_v3:env",
        render="tests.envs.test_pettingzoo_text:render_connect_four_columns",
        action_names=[f"column {c}" for c in "ABCDEFG"], title="Connect Four", roles={"player_0": "red", "player_1": "yellow"},
    )
    assert isinstance(env, AECTextEnv) and env.roles == {"player_0": "red", "player_1": "yellow"}
    obs = env.reset(1)
    assert obs["player_0"].startswith("You are red in Connect Four.\nPieces per column: 0 0 0 0 0 0 0")
    for _ in range(6):
        (agent,) = env.agents_to_act()
        result = env.step({agent: "column D"})
    text = result.observations["player_0"]
    assert "Pieces per column: 0 0 0 6 0 0 0" in text and "column D" not in _legal(text)
    result = env.step({"player_0": "column d"})
    assert result.info["invalid_action"] == {"player_0": True} and "'column D' is not legal now" in result.observations["player_0"]


def test_game_without_preset_gets_the_generic_text_and_its_mask():
    env = pettingzoo_text_env(go_v5.env(board_size=5))
    obs = env.reset(0)["black_0"]
    assert "Observation:\n[[[0 0" in obs and len(_legal(obs)) == 26  # 25 points and pass, named by index
    env.step({"black_0": "12"})
    result = env.step({"white_0": "12"})  # the point is taken: masked out
    assert result.info["invalid_action"] == {"white_0": True} and "'12' is not legal now" in result.observations["white_0"]
    assert "12" not in _legal(result.observations["white_0"])


# -- Parallel: simultaneous moves ---------------------------------------------------------------


def test_parallel_rps_rounds_rewards_and_truncation():
    env = make_pettingzoo_env(**RPS)
    assert isinstance(env, ParallelTextEnv) and "act at the same time" in env.description
    obs = env.reset(4)
    assert set(obs) == {"player_0", "player_1"} == set(env.agents_to_act())
    assert _legal(obs["player_0"]) == ["rock", "paper", "scissors"] and "last move: none yet" in obs["player_0"]
    result = env.step({"player_0": "rock", "player_1": "PAPER"})
    assert result.rewards == {"player_0": -1.0, "player_1": 1.0} and not result.done
    assert "player_1 played paper.\nYour reward: -1." in result.observations["player_0"]
    assert "opponent's last move: rock" in result.observations["player_1"]
    result = env.step({"player_0": "scissors", "player_1": "paper"})
    assert result.rewards == {"player_0": 1.0, "player_1": -1.0}
    result = env.step({"player_0": "rock", "player_1": "rock"})  # max_cycles 3: PettingZoo truncates
    assert result.done and env.agents_to_act() == [] and set(result.observations) == {"player_0", "player_1"}
    assert result.info["outcome"] == {"player_0": "draw", "player_1": "draw"} and result.info["winner"] is None
    assert result.observations["player_0"].endswith("Episode over: It is a draw. Your return: 0.")


def test_parallel_refusal_replays_the_step_and_repeated_refusals_forfeit():
    env = make_pettingzoo_env(**RPS, max_illegal_moves=2)
    env.reset(0)
    result = env.step({"player_0": "rock", "player_1": "dynamite"})
    assert result.info["invalid_action"] == {"player_0": False, "player_1": True} and not result.done
    assert result.rewards == {"player_0": 0.0, "player_1": 0.0}
    assert "No move of the last step was played (player_1: refused)" in result.observations["player_0"]
    assert "could not read 'dynamite'" in result.observations["player_1"] and "1 more illegal move" in result.observations["player_1"]
    assert "played" not in result.observations["player_1"].split("Illegal")[0]  # nothing happened
    result = env.step({"player_0": "paper", "player_1": "dynamite"})
    assert result.done and result.info["forfeit"] == "player_1"
    assert result.rewards == {"player_0": 1.0, "player_1": -1.0}
    assert result.info["outcome"] == {"player_0": "win", "player_1": "loss"}


def test_outcomes_rank_returns_and_bad_input_is_refused_clearly():
    assert outcome_by_returns({"a": 1, "b": -1}) == {"a": "win", "b": "loss"}
    assert outcome_by_returns({"a": 0, "b": 0, "c": 0}) == dict.fromkeys("abc", "draw")
    with pytest.raises(ValueError, match="needs env_options.factory"):
        make_pettingzoo_env()
    with pytest.raises(ValueError, match="expected 'package.module:attribute'"):
        make_pettingzoo_env(factory="rps_v2")
    with pytest.raises(ValueError, match="2 action names for agent 'player_0', whose action space has 3"):
        pettingzoo_text_env(rps_v2.parallel_env(), action_names=["rock", "paper"])
    with pytest.raises(ValueError, match="not distinct"):
        pettingzoo_text_env(rps_v2.parallel_env(), action_names=["rock", "Rock", "x"])
    with pytest.raises(TypeError, match="neither a PettingZoo AECEnv nor a ParallelEnv"):
        pettingzoo_text_env(TicTacToeEnv())


def test_random_legal_player_plays_only_legal_moves():
    env = pettingzoo_text_env(connect_four_v3.env())
    env.reset(0)
    players = {a: RandomLegalPlayer(env, a, seed=k) for k, a in enumerate(env.possible_agents)}
    for _ in range(42):
        (agent,) = env.agents_to_act()
        result = env.step({agent: players[agent].act("")[1]})
        assert not any(result.info["invalid_action"].values())
        if result.done:
            break
    assert result.done


# -- the RLlib side: TextMultiAgentEnv and the env checker ---------------------------------------


@pytest.mark.parametrize("options", [RPS, {"factory": "pettingzoo.classic.tictactoe_v3:env"}], ids=["parallel", "aec"])
def test_rllib_wrapper_and_env_checker_on_pettingzoo(options):
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
    from ray.rllib.utils.pre_checks.env import check_multiagent_environments

    from rllib_agentgym.envs.multiagent_env import TextMultiAgentEnv

    env = TextMultiAgentEnv({"env": "agentgym/pettingzoo", "env_options": options, "split": "test"})
    check_multiagent_environments(env)
    assert "PettingZoo environment" in env.instruction and "Action: one of your legal moves" in env.instruction
    obs, infos = env.reset(seed=3)
    assert env.data_idx % 5 == 0  # a test-split seed
    episode = MultiAgentEpisode(observation_space=env.observation_spaces, action_space=env.action_spaces)
    episode.add_env_reset(observations=obs, infos=infos)
    rng = np.random.default_rng(0)
    for _ in range(50):
        actions = {a: f"Thought: my move.\nAction: {rng.choice(_legal(text))}" for a, text in obs.items()}
        obs, rewards, terminateds, truncateds, infos = env.step(actions)
        assert set(rewards) == set(env.possible_agents) and truncateds == {"__all__": False}
        assert all(not infos[a]["invalid_action"] and infos[a]["well_formed"] for a in actions if a in infos)
        episode.add_env_step(observations=obs, actions=actions, rewards=rewards, infos=infos,
                             terminateds=terminateds, truncateds=truncateds)
        if terminateds["__all__"]:
            break
    assert terminateds["__all__"] and set(obs) == set(env.possible_agents)
    outcome = infos[env.possible_agents[0]]["outcome"]
    returns = {a: e.get_return() for a, e in episode.agent_episodes.items()}
    assert set(outcome.values()) <= {"win", "loss", "draw"} and (max(returns.values()) > min(returns.values())) == (
        "win" in outcome.values())

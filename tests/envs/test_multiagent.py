"""Multi-agent text envs: PettingZoo board games, opponents, CoopCraft, the RLlib wrapper."""

from __future__ import annotations

import itertools
import random

import pytest

from envs.multiagent import registry
from envs.multiagent.base import MultiAgentTextEnv
from envs.multiagent.board_game import opening_count
from envs.multiagent.connect_four import ConnectFourEnv
from envs.multiagent.conversation import play_episode
from envs.multiagent.coop_craft import CoopCraftEnv, ScriptedCoopAgent, tasks
from envs.multiagent.coop_craft.recipes import RECIPES
from envs.multiagent.opponents import OpponentAgent, opponent_action
from envs.multiagent.tictactoe import TicTacToeEnv

EMPTY_TTT = ". . .\n. . .\n. . ."
# Options of the envs that need some: "pettingzoo" wraps whichever PettingZoo env it is given.
ENV_OPTIONS = {"pettingzoo": {"factory": "pettingzoo.classic.rps_v2:parallel_env"}}


def _move(env, action: str):
    (agent,) = env.agents_to_act()
    return agent, env.step({agent: action})


# -- board games: rendering and parsing ----------------------------------------


def test_envs_follow_the_contract():
    for name in registry.MULTIAGENT_ENVS:
        env = registry.make_env(name, **ENV_OPTIONS.get(name, {}))
        assert isinstance(env, MultiAgentTextEnv)
        assert set(env.roles) == set(env.possible_agents)


def test_tictactoe_renders_board_turn_and_legal_moves():
    env = TicTacToeEnv()
    obs = env.reset(0)  # data_idx 0: no opening moves
    assert list(obs) == ["player_1"] == env.agents_to_act()
    text = obs["player_1"]
    assert "You are playing Tic-Tac-Toe as X" in text and EMPTY_TTT in text
    assert "it is your turn" in text
    assert text.endswith("Legal moves: " + ", ".join(f"place {n}" for n in range(1, 10)))

    agent, result = _move(env, "place 3")  # top right (PettingZoo's index 6)
    assert agent == "player_1" and not result.done and not result.info["invalid_action"]["player_1"]
    assert list(result.observations) == ["player_2"] == env.agents_to_act()
    text = result.observations["player_2"]
    assert "as O" in text and "X played place 3." in text and ". . X\n. . .\n. . ." in text
    assert "place 3" not in text.split("Legal moves:")[1]
    assert result.rewards == {"player_1": 0.0, "player_2": 0.0}

    # Bare numbers, capitals and a trailing period are read as moves too.
    _move(env, "7")
    _, result = _move(env, "Place 5.")
    assert env.grid() == [[".", ".", "X"], [".", "X", "."], ["O", ".", "."]]
    assert "X played place 5." in result.observations["player_2"]


def test_connect_four_drops_pieces_and_reports_full_columns():
    env = ConnectFourEnv()
    obs = env.reset(0)
    assert list(obs) == ["player_0"]
    assert "1 2 3 4 5 6 7\n" + "\n".join([". . . . . . ."] * 6) in obs["player_0"]
    for _ in range(6):
        _, result = _move(env, "drop 4")
    assert [row[3] for row in env.grid()] == ["O", "X", "O", "X", "O", "X"]
    text = result.observations["player_0"]
    assert "drop 4" not in text.split("Legal moves:")[1]
    agent, result = _move(env, "drop 4")
    assert result.info["invalid_action"] == {agent: True}
    assert "column 4 is full" in result.observations[agent]
    assert env.agents_to_act() == [agent]


# -- board games: illegal moves, endings, tasks ------------------------------------


def test_illegal_moves_are_answered_and_repeated_ones_forfeit():
    env = TicTacToeEnv(max_illegal_moves=3)
    env.reset(0)
    _move(env, "place 5")
    board = env.grid()
    answers = {"place 5": "cell 5 is already taken", "place 10": "there is no cell 10", "let me think": "could not read"}
    for action, reason in answers.items():
        agent, result = _move(env, action)
        text = result.observations[agent]
        assert agent == "player_2" and reason in text and result.info["invalid_action"] == {"player_2": True}
        assert env.grid() == board
        if action != "let me think":
            assert not result.done and "more illegal move" in text and "Legal moves: place 1, place 2" in text
            assert result.rewards == {"player_1": 0.0, "player_2": 0.0}
    assert result.done and env.agents_to_act() == []
    assert result.rewards == {"player_1": 1.0, "player_2": -1.0}
    assert result.info["forfeit"] == "player_2" and result.info["winner"] == "player_1"
    assert result.info["outcome"] == {"player_1": "win", "player_2": "loss"}
    assert "You won." in result.observations["player_1"] and "forfeit the game" in result.observations["player_2"]


def test_a_legal_move_resets_the_illegal_streak():
    env = TicTacToeEnv(max_illegal_moves=2)
    env.reset(0)
    for action in ("place 0", "place 5", "place 1", "place 5"):  # X: illegal, legal; O: legal; X: illegal
        _, result = _move(env, action)
    assert result.info["invalid_action"] == {"player_1": True} and not result.done


def test_tictactoe_win_gives_pettingzoo_rewards_and_final_texts():
    env = TicTacToeEnv()
    env.reset(0)
    for action in ("place 1", "place 4", "place 2", "place 5"):
        _move(env, action)
    _, result = _move(env, "place 3")
    assert result.done and result.rewards == {"player_1": 1.0, "player_2": -1.0}
    assert result.info["winner"] == "player_1" and result.info["forfeit"] is None
    assert set(result.observations) == {"player_1", "player_2"}
    assert result.observations["player_1"].endswith("Game over: You won.")
    assert result.observations["player_2"].startswith("X played place 3.")
    with pytest.raises(RuntimeError):
        env.step({"player_2": "place 9"})


def test_step_checks_which_agents_act():
    env = TicTacToeEnv()
    with pytest.raises(RuntimeError):
        env.step({"player_1": "place 1"})
    env.reset(0)
    with pytest.raises(ValueError):
        env.step({"player_2": "place 1"})
    with pytest.raises(ValueError):
        env.step({"player_1": "place 1", "player_2": "place 2"})


@pytest.mark.parametrize("cls", [TicTacToeEnv, ConnectFourEnv])
def test_openings_are_deterministic_and_vary_who_starts(cls):
    env = cls()
    firsts = []
    for data_idx in range(40):
        obs = env.reset(data_idx)
        assert len(env.openings) == opening_count(data_idx)
        assert env.reset(data_idx) == obs
        firsts.append(next(iter(obs)))
    assert firsts.count(env.possible_agents[1]) == 20
    assert len({str(cls().reset(i)) for i in range(3, 40, 4)}) > 5  # three random openings differ by id


def test_splits_and_categories():
    for name in registry.MULTIAGENT_ENVS:
        train, test = registry.split_ids(name, "train"), registry.split_ids(name, "test")
        assert not set(train) & set(test) and sorted(train + test) == list(range(registry.num_tasks(name)))
        assert {registry.category(name, i) for i in test} == {registry.category(name, i) for i in train}
        with pytest.raises(KeyError):
            registry.split_ids(name, "dev")


# -- opponents ------------------------------------------------------------------------


def test_heuristic_takes_wins_and_blocks():
    env = TicTacToeEnv()
    env.reset(0)
    for action in ("place 1", "place 4", "place 2"):
        _move(env, action)
    assert opponent_action(env, "player_2", "heuristic") == "place 3"  # block X's top row
    _move(env, "place 5")
    assert opponent_action(env, "player_1", "heuristic") == "place 3"  # X completes its row
    c4 = ConnectFourEnv()
    c4.reset(0)
    for action in ("drop 1", "drop 7", "drop 1", "drop 7", "drop 1"):
        _move(c4, action)
    assert opponent_action(c4, "player_1", "heuristic") == "drop 1"
    with pytest.raises(ValueError):
        opponent_action(c4, "player_0", "heuristic")


@pytest.mark.parametrize("cls", [TicTacToeEnv, ConnectFourEnv])
def test_heuristic_beats_random_most_of_the_time(cls):
    env = cls()
    wins = 0
    for game in range(50):
        hero, other = env.possible_agents[game % 2], env.possible_agents[1 - game % 2]
        policies = {hero: OpponentAgent(env, hero, "heuristic", seed=game), other: OpponentAgent(env, other, "random", seed=game)}
        transcript = play_episode(env, policies, data_idx=game)
        assert transcript.done and not any(t for t in transcript.info["invalid_action"].values())
        wins += transcript.info["outcome"][hero] == "win"
    assert wins > 30, f"heuristic won {wins}/50"


# -- CoopCraft ----------------------------------------------------------------------


def _scripted_pair(env) -> dict:
    return {a: ScriptedCoopAgent(env, a) for a in env.possible_agents}


class _Silent:
    def act(self, observation: str) -> tuple[str, str]:
        return "I do nothing.", "wait"


class _Mute:
    """A scripted player whose messages never get sent: it waits instead of talking."""

    def __init__(self, inner: ScriptedCoopAgent):
        self.inner = inner

    def act(self, observation: str) -> tuple[str, str]:
        thought, action = self.inner.act(observation)
        return (thought, "wait") if action.startswith("say") else (thought, action)


def test_coop_craft_scripted_pair_succeeds_on_every_test_task():
    env = CoopCraftEnv()
    for data_idx in tasks.split_ids("test"):
        transcript = play_episode(env, _scripted_pair(env), data_idx)
        assert transcript.info["success"] and transcript.info["turn"] == 5, transcript.to_text()
        assert transcript.returns == {"alice": 1.0, "bob": 1.0}
        assert not any(t.invalid_action for t in transcript.turns)


def test_coop_craft_needs_both_agents_and_their_messages():
    env = CoopCraftEnv()
    for data_idx in range(0, tasks.NUM_TASKS, 7):
        task = tasks.build_task(data_idx)
        goal = RECIPES[task.goal]
        tree = [goal] + [RECIPES[part] for part, _ in goal.ingredients]
        for inventory in task.inventories.values():  # the ingredients are split: nobody can craft a part alone
            assert not any(all(inventory.get(i, 0) >= n for i, n in r.ingredients) for r in tree)
    for data_idx in range(10):
        alone = {"alice": ScriptedCoopAgent(env, "alice"), "bob": _Silent()}
        transcript = play_episode(env, alone, data_idx)
        assert transcript.done and not transcript.info["success"] and transcript.info["turn"] == env.max_turns
        assert transcript.returns == {"alice": 0.0, "bob": 0.0}
        helper_alone = {"alice": _Silent(), "bob": ScriptedCoopAgent(env, "bob")}
        assert not play_episode(env, helper_alone, data_idx).info["success"]
        mute = {a: _Mute(p) for a, p in _scripted_pair(env).items()}
        assert not play_episode(env, mute, data_idx).info["success"]


def test_coop_craft_observations_and_invalid_actions():
    env = CoopCraftEnv()
    obs = env.reset(1)
    task = env.task
    assert set(obs) == {"alice", "bob"} == set(env.agents_to_act())
    assert f"must craft one {task.goal}" in obs["alice"] and task.goal not in obs["bob"]
    assert all(r.text() in obs[a] for a in obs for r in task.known[a])
    bob_recipe = task.known["bob"][0]
    assert bob_recipe.text() not in obs["alice"]
    alice_item = next(iter(task.inventories["alice"]))
    result = env.step({"alice": f"craft {bob_recipe.output}", "bob": "dance"})
    assert result.info["invalid_action"] == {"alice": True, "bob": True} and not result.done
    assert "do not hold the ingredients" in result.observations["alice"]
    assert not any(item in result.observations["alice"].split("\n")[0] for item, _ in bob_recipe.ingredients)
    assert "Could not read the action 'dance'" in result.observations["bob"] and "Valid actions: say" in result.observations["bob"]
    result = env.step({"alice": "give 99 " + alice_item, "bob": "say hello there, alice"})
    assert "you have" in result.observations["alice"] and 'bob said: "hello there, alice"' in result.observations["alice"]
    assert result.info["invalid_action"] == {"alice": True, "bob": False} and "Turn 3 of 8." in result.observations["bob"]
    n = task.inventories["alice"][alice_item]
    result = env.step({"alice": f"give {n} {alice_item} to bob", "bob": "wait"})
    assert f"alice gave you {n} {alice_item}." in result.observations["bob"]
    assert env.inventory("bob")[alice_item] == n + task.inventories["bob"].get(alice_item, 0)
    assert alice_item not in env.inventory("alice")


def test_coop_craft_items_arrive_at_the_end_of_the_turn():
    env = CoopCraftEnv()
    env.reset(2)
    task = env.task
    part = task.known["alice"][1]  # alice's intermediate: she holds one ingredient, bob the other
    (missing, n), = [(i, k) for i, k in part.ingredients if i not in task.inventories["alice"]]
    result = env.step({"alice": f"craft {part.output}", "bob": f"give {n} {missing}"})
    assert result.info["invalid_action"] == {"alice": True, "bob": False}
    assert f"you need {n} more {missing}" in result.observations["alice"]
    result = env.step({"alice": f"craft {part.output}", "bob": "wait"})
    assert not result.info["invalid_action"]["alice"] and env.inventory("alice")[part.output] == 1


def test_transcript_is_a_chat_per_agent():
    env = CoopCraftEnv()
    transcript = play_episode(env, _scripted_pair(env), data_idx=3)
    chat = transcript.messages("bob")
    assert [m["role"] for m in chat] == ["user", "assistant"] * 5 + ["user"]
    assert chat[0]["content"].startswith("You are bob.") and chat[1]["content"].startswith("Thought: ")
    assert "\nAction: say please give me" in chat[1]["content"]
    assert "success" in chat[-1]["content"] and "[end] alice sees:" in transcript.to_text()


# -- the RLlib MultiAgentEnv wrapper ----------------------------------------------


def _run_rllib_episode(env, options, choose):
    """Step `env` to its end, feeding RLlib's own MultiAgentEpisode; returns it with the steps seen."""
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    episode = MultiAgentEpisode(observation_space=env.observation_spaces, action_space=env.action_spaces)
    obs, infos = env.reset(options=options)
    episode.add_env_reset(observations=obs, infos=infos)
    steps = []
    while True:
        actions = {agent: choose(agent, text) for agent, text in obs.items()}
        obs, rewards, terminateds, truncateds, infos = env.step(actions)
        steps.append((actions, obs, rewards, terminateds, truncateds, infos))
        episode.add_env_step(observations=obs, actions=actions, rewards=rewards, infos=infos, terminateds=terminateds, truncateds=truncateds)
        if terminateds["__all__"]:
            return episode, steps


def test_rllib_wrapper_plays_tictactoe():
    from gymnasium.spaces import Text

    from rllib_agentgym.envs.multiagent_env import TextMultiAgentEnv

    env = TextMultiAgentEnv({"env": "agentgym/tictactoe", "split": "test"})
    assert env.possible_agents == ["player_1", "player_2"] and env.roles == {"player_1": "X", "player_2": "O"}
    assert all(isinstance(env.get_observation_space(a), Text) and isinstance(env.get_action_space(a), Text) for a in env.possible_agents)
    kinds = {"player_1": "heuristic", "player_2": "random"}
    turn_order = []

    def choose(agent, text):
        assert agent in env.agents_to_act() and "Legal moves:" in text
        turn_order.append(agent)
        return f"Thought: I pick a move.\nAction: {opponent_action(env.env, agent, kinds[agent])}"

    episode, steps = _run_rllib_episode(env, {"data_idx": 0}, choose)
    assert turn_order[:2] == ["player_1", "player_2"]  # no openings at id 0: X first, then alternating
    assert all(a != b for a, b in itertools.pairwise(turn_order))
    for actions, obs, rewards, terminateds, truncateds, infos in steps:
        assert set(rewards) == {"player_1", "player_2"} and truncateds == {"__all__": False}
        assert set(infos) == set(obs) and all(infos[a]["well_formed"] for a in actions if a in infos)
    actions, obs, rewards, terminateds, _, infos = steps[-1]
    assert terminateds == {"__all__": True, "player_1": True, "player_2": True} and set(obs) == {"player_1", "player_2"}
    winner = infos["player_1"]["winner"]
    assert sum(rewards.values()) == 0.0 and (winner is None or rewards[winner] == 1.0)
    returns = {a: e.get_return() for a, e in episode.agent_episodes.items()}
    assert returns == rewards and env.agents == []

    # A reply without "Action:" is sent as is, flagged malformed, and answered as an illegal move.
    env.reset(options={"data_idx": 0})
    obs, rewards, terminateds, _, infos = env.step({"player_1": "I am not sure"})
    assert list(obs) == ["player_1"] and infos["player_1"]["well_formed"] is False and infos["player_1"]["invalid_action"]
    assert "could not read 'I am not sure'" in obs["player_1"]


def test_rllib_wrapper_plays_coop_craft_and_registers_envs():
    from ray.tune.registry import ENV_CREATOR, _global_registry

    from rllib_agentgym.envs.multiagent_env import (
        TextMultiAgentEnv,
        env_creator,
        register_multiagent_envs,
    )

    env = env_creator("coop_craft")({"env_options": {"max_turns": 6}, "split": "test"})
    assert isinstance(env, TextMultiAgentEnv) and env.env.max_turns == 6 and "say <message>" in env.instruction
    obs, infos = env.reset(seed=0)
    assert env.data_idx in tasks.split_ids("test") and set(obs) == {"alice", "bob"}
    assert infos["alice"]["role"] == "leader" and infos["bob"]["role"] == "helper"
    players = _scripted_pair(env.env)
    episode, steps = _run_rllib_episode(env, {"data_idx": env.data_idx}, lambda a, text: "Thought: ok\nAction: " + players[a].act(text)[1])
    assert len(steps) == 5 and all(set(s[0]) == {"alice", "bob"} for s in steps)
    assert steps[-1][2] == {"alice": 1.0, "bob": 1.0} and steps[-1][5]["bob"]["success"]
    assert {a: e.get_return() for a, e in episode.agent_episodes.items()} == {"alice": 1.0, "bob": 1.0}

    custom = TextMultiAgentEnv({"task_ids": [4]}, env=CoopCraftEnv(max_turns=3))  # any contract env, explicit ids
    obs, _ = custom.reset(seed=5)
    assert custom.data_idx == 4 and set(obs) == {"alice", "bob"} and custom.instruction == ""

    register_multiagent_envs()
    for name in registry.MULTIAGENT_ENVS:
        assert _global_registry.contains(ENV_CREATOR, "agentgym/" + name)
    made = _global_registry.get(ENV_CREATOR, "agentgym/connect_four")({})
    assert made.env_name == "connect_four" and made.possible_agents == ["player_0", "player_1"]


def test_rllib_env_checker_accepts_random_text_actions():
    from ray.rllib.utils.pre_checks.env import check_multiagent_environments

    from rllib_agentgym.envs.multiagent_env import TextMultiAgentEnv

    for name in registry.MULTIAGENT_ENVS:
        check_multiagent_environments(TextMultiAgentEnv({"env": name, "env_options": ENV_OPTIONS.get(name)}))
    rng = random.Random(0)
    env = TextMultiAgentEnv({"env": "connect_four", "react_format": False})
    obs, _ = env.reset(seed=1)
    for _ in range(200):  # gibberish forfeits quickly; the episode always ends
        obs, _, terminateds, _, _ = env.step({a: env.action_spaces[a].sample() if rng.random() < 0.5 else "drop 4" for a in obs})
        if terminateds["__all__"]:
            break
    assert terminateds["__all__"]

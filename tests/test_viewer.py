"""Trajectory viewer: the JSON API on a synthetic run directory, and the page in headless Chromium."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from synthetic_run import iteration_summaries, make_run_dir

from rllib_agentgym import run_logs
from rllib_agentgym.viewer import serve

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def experiment_dir(tmp_path_factory) -> Path:
    """An experiment dir with two trials: one with result.json, one with progress.csv only."""
    root = tmp_path_factory.mktemp("experiment")
    make_run_dir(root / "GRPO_textcraft_00000", num_iterations=3)
    make_run_dir(root / "GRPO_textcraft_00001", num_iterations=2, progress_only=True)
    (root / ".hidden" / "x").mkdir(parents=True)
    return root


@pytest.fixture(scope="module")
def viewer(experiment_dir):
    server, url = serve(experiment_dir)
    yield url
    server.stop()


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def rows(viewer: str, **params) -> list[dict]:
    query = urllib.parse.urlencode({"trial": "GRPO_textcraft_00000", **params})
    status, body = get(f"{viewer}api/trajectories?{query}")
    assert status == 200, body
    assert body["total"] == len(body["trajectories"])
    return body["trajectories"]


def all_summaries(iterations=(1, 2, 3)) -> list[dict]:
    return [{**s, "iteration": it} for it in iterations for s in iteration_summaries(it)]


def keys(records) -> list[tuple[int, int, int, int]]:
    """Sorted identities (a multiset, so duplicates would show)."""
    return sorted((r["iteration"], r["data_idx"], r["group_id"], r["num_turns"]) for r in records)


def test_trials_lists_both_layouts(viewer):
    status, trials = get(f"{viewer}api/trials")
    assert status == 200
    by_name = {t["name"]: t for t in trials}
    assert set(by_name) == {"GRPO_textcraft_00000", "GRPO_textcraft_00001"}
    assert by_name["GRPO_textcraft_00000"]["num_results"] == 3
    assert by_name["GRPO_textcraft_00001"]["num_results"] == 2  # read from progress.csv
    assert by_name["GRPO_textcraft_00000"]["num_trajectory_files"] == 3
    assert by_name["GRPO_textcraft_00000"]["last"]["kl"] == pytest.approx(0.003)


def test_iterations_summarise_each_file(viewer):
    status, body = get(f"{viewer}api/iterations?trial=GRPO_textcraft_00000")
    assert status == 200
    assert [it["iteration"] for it in body["iterations"]] == [1, 2, 3]
    for it in body["iterations"]:
        expected = iteration_summaries(it["iteration"])
        assert it["count"] == len(expected)
        assert it["success_rate"] == pytest.approx(sum(s["success"] for s in expected) / len(expected))
    assert body["categories"] == sorted({s["category"] for s in all_summaries()})


def test_filters_return_exactly_the_matching_trajectories(viewer):
    everything = all_summaries()
    assert keys(rows(viewer)) == keys(everything)
    assert keys(rows(viewer, iteration=2)) == keys(s for s in everything if s["iteration"] == 2)
    assert keys(rows(viewer, task=21)) == keys(s for s in everything if s["data_idx"] == 21)
    assert keys(rows(viewer, task="depth 2")) == keys(s for s in everything if s["category"] == "depth 2")
    assert keys(rows(viewer, category="depth 3")) == keys(s for s in everything if s["category"] == "depth 3")
    assert keys(rows(viewer, success="false")) == keys(s for s in everything if not s["success"])
    partial = keys(rows(viewer, min_reward=0.1, max_reward=0.5))
    assert partial and partial == keys(s for s in everything if 0.1 <= s["reward"] <= 0.5)
    combined = keys(rows(viewer, iteration=1, success="true", category="depth 1"))
    assert combined == keys(s for s in everything
                            if s["iteration"] == 1 and s["success"] and s["category"] == "depth 1")
    assert rows(viewer, iteration=99) == []
    # Newest iteration first; rows carry no turns (those come with /api/trajectory).
    listed = rows(viewer)
    assert listed[0]["iteration"] == 3 and "turns" not in listed[0]


def test_pagination_and_single_trajectory(viewer):
    status, page = get(f"{viewer}api/trajectories?trial=GRPO_textcraft_00000&limit=4&offset=2")
    assert status == 200 and page["total"] == len(all_summaries()) and len(page["trajectories"]) == 4
    row = rows(viewer, iteration=2)[3]
    status, full = get(f"{viewer}api/trajectory?trial=GRPO_textcraft_00000&iteration=2&index={row['index']}")
    assert status == 200
    expected = iteration_summaries(2)[row["index"]]
    assert full["turns"] == expected["turns"] and full["data_idx"] == row["data_idx"]


def test_metrics_from_result_json_and_progress_csv(viewer):
    for trial, n in (("GRPO_textcraft_00000", 3), ("GRPO_textcraft_00001", 2)):
        status, metrics = get(f"{viewer}api/metrics?trial={trial}")
        assert status == 200
        assert metrics["curves"] == {"reward": "env_runners/episode_return_mean", "success": "env_runners/success_rate",
                                     "horizon": "env_runners/horizon", "kl": "learners/default_policy/kl"}
        series = metrics["series"]
        assert series["training_iteration"] == list(range(1, n + 1))
        assert series["learners/default_policy/kl"] == pytest.approx([0.001 * i for i in range(1, n + 1)])
        assert not any(k.startswith("config") for k in series) and "date" not in series


def test_errors_are_json(viewer):
    assert get(f"{viewer}api/trajectories")[0] == 400  # two trials: which one?
    assert get(f"{viewer}api/trajectories?trial=nope")[0] == 404
    assert get(f"{viewer}api/trajectories?trial=GRPO_textcraft_00000&min_reward=high")[0] == 400
    assert get(f"{viewer}api/trajectory?trial=GRPO_textcraft_00000&iteration=1&index=999")[0] == 404
    assert get(f"{viewer}api/nothing")[0] == 404
    host, port = viewer.split("//")[1].rstrip("/").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("GET", "/../server.py")  # outside static/: refused
    assert conn.getresponse().status == 404
    conn.close()


def test_trial_dir_itself_and_tolerant_reads(tmp_path):
    trial = make_run_dir(tmp_path / "only_trial", num_iterations=2)
    with open(trial / "result.json", "a") as f:  # an iteration without learner stats, then a half-written line
        f.write(json.dumps({"training_iteration": 3, "env_runners": {"episode_return_mean": 0.9}}) + "\n")
        f.write('{"training_iteration": 4, "env_runn')
    with open(run_logs.trajectory_path(trial, 2), "a") as f:
        f.write('{"iteration": 2, "data_idx"')
    server, url = serve(trial)
    try:
        _, trials = get(f"{url}api/trials")
        assert [t["name"] for t in trials] == ["only_trial"]
        _, metrics = get(f"{url}api/metrics")  # one trial: ?trial= may be left out
        assert metrics["series"]["training_iteration"] == [1, 2, 3]
        assert metrics["series"]["learners/default_policy/kl"][2] is None
        assert len(rows(url, trial="only_trial", iteration=2)) == len(iteration_summaries(2))
    finally:
        server.stop()


def wait_for_rows(page, n: int) -> None:
    page.wait_for_function("n => document.querySelectorAll('#trajectories tbody tr').length === n", arg=n)


def test_page_renders_and_filters_in_chromium(viewer, tmp_path):
    """The page in headless Chromium: iterations, curves, a trajectory's turns side by side, and
    every filter (category, task, iteration, reward range) narrowing the list exactly."""
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (apt-get install chromium)")
    from PIL import Image

    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(viewer + "#trial=GRPO_textcraft_00000")
            page.wait_for_selector("body[data-ready='1']")

            # Starts on the newest iteration; show all of them.
            assert page.locator("#f-iteration").input_value() == "3"
            page.click("#iterations li[data-iteration='']")
            wait_for_rows(page, len(all_summaries()))

            # Curves: the four charts have lines drawn.
            assert page.locator("#curves .chart").count() == 4
            assert page.locator("#curves .chart path.line").count() == 4

            # Clicking a row shows its turns, observation and action side by side.
            target = page.locator("#trajectories tbody tr").nth(1)
            iteration = int(target.get_attribute("data-iteration"))
            index = int(target.get_attribute("data-index"))
            expected = iteration_summaries(iteration)[index]
            target.click()
            page.wait_for_selector("#detail:not([hidden]) #turns tbody tr")
            turns = page.locator("#turns tbody tr")
            assert turns.count() == expected["num_turns"]
            first = turns.nth(0)
            observation_box = first.locator("td.observation").bounding_box()
            agent_box = first.locator("td.agent").bounding_box()
            assert agent_box["x"] > observation_box["x"] + observation_box["width"] - 1  # beside, not below
            assert abs(agent_box["y"] - observation_box["y"]) < 2
            # Observation text (with its "<b>" markup) is shown verbatim, never as HTML.
            assert first.locator("td.observation pre").inner_text() == expected["turns"][0]["observation"]
            assert expected["turns"][0]["action"] in first.locator(".action").inner_text()

            # A filter narrows the list to exactly the matching rows.
            page.select_option("#f-category", "depth 2")
            want = [s for s in all_summaries() if s["category"] == "depth 2"]
            wait_for_rows(page, len(want))
            categories = page.locator("#trajectories tbody tr td:nth-child(3)").all_inner_texts()
            assert set(categories) == {"depth 2"}
            page.fill("#f-task", str(want[0]["data_idx"]))
            narrowed = [s for s in want if s["data_idx"] == want[0]["data_idx"]]
            wait_for_rows(page, len(narrowed))

            shot = tmp_path / "viewer.png"
            page.screenshot(path=str(shot))
            table = page.locator("#list-panel").bounding_box()

            # Clear, then the iteration and reward filters: exactly the matching rows again.
            page.click("#f-clear")
            wait_for_rows(page, len(all_summaries()))
            page.select_option("#f-iteration", "1")
            first_iteration = all_summaries((1,))
            wait_for_rows(page, len(first_iteration))
            assert set(page.locator("#trajectories tbody tr td:nth-child(1)").all_inner_texts()) == {"1"}
            page.fill("#f-min", "0.1")
            page.fill("#f-max", "0.5")
            partial = [s for s in first_iteration if 0.1 <= s["reward"] <= 0.5]
            assert partial and len(partial) < len(first_iteration)
            wait_for_rows(page, len(partial))
            shown = [float(r) for r in page.locator("#trajectories tbody tr td:nth-child(4)").all_inner_texts()]
            assert sorted(shown) == sorted(s["reward"] for s in partial)
            page.fill("#f-max", "")
            page.fill("#f-min", "1")  # as many rows as before (2), so wait for the rewards to change
            page.wait_for_function("() => [...document.querySelectorAll('#trajectories tbody tr td:nth-child(4)')]"
                                   ".every(td => Number(td.textContent) >= 1)")
            wait_for_rows(page, sum(s["reward"] >= 1 for s in first_iteration))
        finally:
            browser.close()
    assert not errors, errors
    image = Image.open(shot).convert("RGB")
    assert image.size == (1400, 900)
    assert len(image.getcolors(maxcolors=1 << 20)) > 50  # text, charts, badges: not a blank page
    rows_region = image.crop((int(table["x"]), int(table["y"]), int(table["x"] + table["width"]),
                              int(table["y"] + table["height"])))
    dark = int((np.asarray(rows_region, dtype=np.int32).sum(axis=2) < 200).sum())
    assert dark > 500  # the list panel has text drawn in it

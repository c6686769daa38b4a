"""Seeded data of the embedded code host (WebArena's GITLAB site): deterministic, so tasks can cite it."""

from __future__ import annotations

import random
import sqlite3

SCHEMA = """
CREATE TABLE users(username TEXT PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE projects(id INTEGER PRIMARY KEY, namespace TEXT NOT NULL, name TEXT NOT NULL,
    description TEXT NOT NULL, base_stars INTEGER NOT NULL, visibility TEXT NOT NULL,
    default_branch TEXT NOT NULL, created TEXT NOT NULL, UNIQUE(namespace, name));
CREATE TABLE members(project_id INTEGER NOT NULL, username TEXT NOT NULL, role TEXT NOT NULL,
    PRIMARY KEY(project_id, username));
CREATE TABLE issues(id INTEGER PRIMARY KEY, project_id INTEGER NOT NULL, iid INTEGER NOT NULL, title TEXT NOT NULL,
    body TEXT NOT NULL, state TEXT NOT NULL, author TEXT NOT NULL, assignee TEXT, labels TEXT NOT NULL,
    created TEXT NOT NULL);
CREATE TABLE notes(id INTEGER PRIMARY KEY, issue_id INTEGER NOT NULL, author TEXT NOT NULL, body TEXT NOT NULL,
    created TEXT NOT NULL);
CREATE TABLE merge_requests(id INTEGER PRIMARY KEY, project_id INTEGER NOT NULL, iid INTEGER NOT NULL,
    title TEXT NOT NULL, source_branch TEXT NOT NULL, target_branch TEXT NOT NULL, state TEXT NOT NULL,
    author TEXT NOT NULL, created TEXT NOT NULL);
-- projects the signed-in user has starred
CREATE TABLE stars(project_id INTEGER PRIMARY KEY);
"""

ME = "devon"
ROLES = ["Guest", "Reporter", "Developer", "Maintainer", "Owner"]

USERS = {
    ME: "Devon Park",
    "amara": "Amara Osei",
    "bjorn": "Bjorn Lindqvist",
    "carmen": "Carmen Vidal",
    "dmitri": "Dmitri Volkov",
    "elif": "Elif Yilmaz",
    "farah": "Farah Siddiqui",
    "gustavo": "Gustavo Reyes",
    "hiro": "Hiro Takahashi",
    "ingrid": "Ingrid Berg",
    "jamal": "Jamal Carter",
    "keiko": "Keiko Sato",
    "liam": "Liam O'Brien",
    "mila": "Mila Horvat",
    "nico": "Nico Ferrari",
    "olga": "Olga Ivanova",
}

# (namespace, name, description, owner); the signed-in user's extra roles follow.
PROJECTS = [
    ("devon", "dotfiles", "My shell, editor and terminal configuration.", ME),
    ("devon", "recipe-box", "A tiny web app to keep family recipes.", ME),
    ("devon", "advent-of-code", "Solutions to Advent of Code puzzles.", ME),
    ("octo-lab", "rocket-docs", "Documentation site for the Octo Lab rocket toolkit.", "amara"),
    ("octo-lab", "telemetry-service", "Collects and stores flight telemetry.", "amara"),
    ("octo-lab", "ground-station", "Ground station software for small satellites.", "bjorn"),
    ("pixelworks", "sprite-editor", "A pixel art sprite editor in the browser.", "carmen"),
    ("pixelworks", "tilemap-engine", "2D tilemap rendering engine.", "carmen"),
    ("opendata", "city-bikes", "Open data on city bike share stations.", "elif"),
    ("opendata", "air-quality-api", "REST API for air quality sensor readings.", "farah"),
    ("a11y-guild", "accessible-forms", "Patterns for building accessible web forms.", "keiko"),
    ("nimbus", "cloud-cli", "Command line client for the Nimbus cloud.", "liam"),
]
MY_ROLES = {
    "rocket-docs": "Maintainer",
    "telemetry-service": "Developer",
    "sprite-editor": "Maintainer",
    "city-bikes": "Reporter",
    "accessible-forms": "Developer",
}

_ISSUE_TITLES = [
    "Crash when the config file is empty",
    "Add dark mode",
    "Typo in the installation guide",
    "Improve error message on timeout",
    "Support Python 3.12",
    "Tests fail on Windows",
    "Document the release process",
    "Slow start-up with large inputs",
    "Add CSV export",
    "Broken link in README",
    "Memory leak after long runs",
    "Add keyboard shortcuts",
    "Upgrade dependencies",
    "Flaky integration test",
    "Localize the UI into Spanish",
    "Button misaligned on mobile",
    "Add contribution guidelines",
    "Cache results between runs",
]
_LABELS = ["bug", "feature", "documentation", "enhancement", "question", "help wanted"]
_MR_TITLES = [
    "Fix null check in parser",
    "Add dark mode toggle",
    "Update README badges",
    "Refactor config loading",
    "Bump dependencies",
    "Add CSV export command",
    "Speed up start-up",
    "Fix flaky test",
]
_BRANCHES = [
    "fix-parser",
    "dark-mode",
    "docs-badges",
    "refactor-config",
    "deps-bump",
    "csv-export",
    "fast-start",
    "fix-flaky-test",
]
_NOTES = [
    "I can reproduce this on the latest version.",
    "Working on a fix now.",
    "Could you attach the logs?",
    "Thanks for the report!",
    "This should be fixed in the next release.",
]


def build(conn: sqlite3.Connection) -> None:
    rng = random.Random(8023)
    conn.executescript(SCHEMA)
    conn.executemany("INSERT INTO users VALUES (?, ?)", USERS.items())
    others = [u for u in USERS if u != ME]
    issue_pk = 0
    for pid, (namespace, name, description, owner) in enumerate(PROJECTS, start=1):
        branch = rng.choice(["main", "main", "master"])
        conn.execute(
            "INSERT INTO projects VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                pid,
                namespace,
                name,
                description,
                rng.randint(0, 250),
                rng.choice(["public", "public", "private"]),
                branch,
                f"202{rng.randint(0, 3)}-{rng.randint(1, 12):02d}-01",
            ),
        )
        members = {owner: "Owner"}
        if name in MY_ROLES:
            members[ME] = MY_ROLES[name]
        for user in rng.sample([u for u in others if u != owner], rng.randint(1, 5)):
            members[user] = rng.choice(ROLES[:4])
        conn.executemany("INSERT INTO members VALUES (?, ?, ?)", [(pid, u, r) for u, r in members.items()])
        people = list(members)
        for iid, title in enumerate(rng.sample(_ISSUE_TITLES, rng.randint(4, 10)), start=1):
            issue_pk += 1
            created = f"2023-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
            conn.execute(
                "INSERT INTO issues VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    issue_pk,
                    pid,
                    iid,
                    title,
                    f"{title}. Steps and details are in the description.",
                    "opened" if rng.random() < 0.65 else "closed",
                    rng.choice(others),
                    rng.choice(people + [None, None]),
                    ",".join(sorted(rng.sample(_LABELS, rng.randint(1, 2)))),
                    created,
                ),
            )
            for _ in range(rng.randint(0, 3)):
                conn.execute(
                    "INSERT INTO notes(issue_id, author, body, created) VALUES (?, ?, ?, ?)",
                    (issue_pk, rng.choice(people), rng.choice(_NOTES), created),
                )
        for iid, k in enumerate(rng.sample(range(len(_MR_TITLES)), rng.randint(2, 5)), start=1):
            conn.execute(
                "INSERT INTO merge_requests(project_id, iid, title, source_branch, target_branch, state, author, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    pid,
                    iid,
                    _MR_TITLES[k],
                    _BRANCHES[k],
                    branch,
                    rng.choice(["opened", "merged", "merged", "closed"]),
                    rng.choice(people),
                    f"2023-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                ),
            )
    conn.executemany("INSERT INTO stars VALUES (?)", [(4,), (9,)])

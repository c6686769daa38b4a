"""Seeded data of the embedded forum (WebArena's REDDIT site): deterministic, so tasks can cite it."""

from __future__ import annotations

import random
import sqlite3

SCHEMA = """
CREATE TABLE users(name TEXT PRIMARY KEY, joined TEXT NOT NULL);
CREATE TABLE forums(id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, title TEXT NOT NULL,
    description TEXT NOT NULL, base_subscribers INTEGER NOT NULL);
CREATE TABLE posts(id INTEGER PRIMARY KEY, forum_id INTEGER NOT NULL, author TEXT NOT NULL, title TEXT NOT NULL,
    body TEXT NOT NULL, base_score INTEGER NOT NULL, created TEXT NOT NULL);
CREATE TABLE comments(id INTEGER PRIMARY KEY, post_id INTEGER NOT NULL, author TEXT NOT NULL, body TEXT NOT NULL,
    base_score INTEGER NOT NULL, created TEXT NOT NULL);
-- the signed-in user's own votes (kind 'post' or 'comment') and subscriptions
CREATE TABLE votes(kind TEXT NOT NULL, target_id INTEGER NOT NULL, value INTEGER NOT NULL,
    PRIMARY KEY(kind, target_id));
CREATE TABLE subscriptions(forum_id INTEGER PRIMARY KEY);
"""

ME = "quietowl"

FORUMS: dict[str, tuple[str, str, list[str]]] = {
    "books": (
        "Books",
        "Talk about the books you read and love.",
        [
            "What book changed how you think?",
            "Finished my 50th book of the year",
            "Underrated fantasy series",
            "Audiobooks or paper books?",
            "Best opening lines ever written",
            "Library haul this weekend",
            "Classics that are actually fun",
        ],
    ),
    "gaming": (
        "Gaming",
        "Video games, board games and everything in between.",
        [
            "Hidden gems on old consoles",
            "Co-op games for couples",
            "Speedrun record broken again",
            "Is the new patch any good?",
            "My retro collection so far",
            "Games with the best soundtracks",
            "Tips for a first tabletop campaign",
        ],
    ),
    "cooking": (
        "Cooking",
        "Recipes, techniques and kitchen disasters.",
        [
            "Perfect sourdough after ten tries",
            "Cheap weeknight dinners",
            "Cast iron care myths",
            "Homemade pasta without a machine",
            "Spice blends you always keep",
            "Best way to store fresh herbs",
            "Fermenting hot sauce at home",
        ],
    ),
    "science": (
        "Science",
        "News and discussion about scientific research.",
        [
            "New exoplanet in the habitable zone",
            "How do vaccines train the immune system?",
            "Octopus intelligence keeps surprising researchers",
            "Fusion experiment hits a milestone",
            "Why is the sky blue, really?",
            "Deep sea creatures found near vents",
            "The physics of a perfect skipping stone",
        ],
    ),
    "movies": (
        "Movies",
        "Film news, reviews and recommendations.",
        [
            "Best movie soundtracks of the decade",
            "Practical effects still look better",
            "Films that deserve a sequel",
            "Director commentary worth hearing",
            "Comfort movies for rainy days",
            "Most rewatchable heist films",
            "Silent films everyone should see",
        ],
    ),
    "photography": (
        "Photography",
        "Share photos and talk about gear and technique.",
        [
            "Golden hour at the lake",
            "First roll of film developed",
            "Which prime lens to buy first?",
            "Street photography etiquette",
            "Editing workflow for beginners",
            "Night sky with a kit lens",
            "Macro shots of morning dew",
        ],
    ),
    "running": (
        "Running",
        "For runners of every pace.",
        [
            "First marathon finished!",
            "Shoes for flat feet",
            "How to stop side stitches",
            "Trail running safety tips",
            "Couch to 5k week three",
            "Winter running gear advice",
            "Negative splits explained",
        ],
    ),
    "gardening": (
        "Gardening",
        "Plants, soil and the joy of growing things.",
        [
            "Tomatoes splitting after rain",
            "Balcony garden progress",
            "Composting in a small apartment",
            "Best plants for shade",
            "Saving seeds from heirloom beans",
            "Dealing with aphids naturally",
            "Raised bed soil mix",
        ],
    ),
    "history": (
        "History",
        "Discussions of historical events and people.",
        [
            "Daily life in ancient Rome",
            "The lost library of Alexandria",
            "Maps that changed the world",
            "Forgotten inventors of the 1800s",
            "Why the Bronze Age collapsed",
            "Letters from the front lines",
            "Medieval food was not bland",
        ],
    ),
    "technology": (
        "Technology",
        "Gadgets, software and the future of tech.",
        [
            "Switching to a mechanical keyboard",
            "Self-hosting my photos",
            "Is right to repair winning?",
            "Battery tech breakthroughs explained",
            "Old laptop, new Linux life",
            "Password managers compared",
            "Smart home without the cloud",
        ],
    ),
}

USERS = [
    ME,
    "maplefox",
    "riverstone",
    "byte_bard",
    "sunnyside42",
    "oak_and_ash",
    "nightjar",
    "pixelpilot",
    "tidewalker",
    "copperkettle",
    "lunamoth",
    "gravelroad",
    "zenpanda",
    "ironquill",
    "mossyrock",
    "starlingsky",
    "fernhollow",
    "quartzite",
    "wanderlust77",
    "bluebellhill",
]

_POST_BODIES = [
    "I have been thinking about this for a while and wanted to hear what everyone here thinks.",
    "Long time lurker, first post. Curious about your experiences.",
    "Sharing this because it made my week. Details in the comments.",
    "Would love some recommendations or advice from people who know more than me.",
]
_COMMENTS = [
    "Great post, thanks for sharing!",
    "I had the exact same experience last year.",
    "Not sure I agree, but it is an interesting take.",
    "This is the kind of content I come here for.",
    "Could you share more details?",
    "Saving this for later.",
    "Came here to say this.",
    "Underrated comment right here.",
    "I learned something new today.",
    "This made me smile.",
]


def build(conn: sqlite3.Connection) -> None:
    rng = random.Random(9999)
    conn.executescript(SCHEMA)
    conn.executemany(
        "INSERT INTO users VALUES (?, ?)", [(u, f"20{rng.randint(18, 22)}-{rng.randint(1, 12):02d}-01") for u in USERS]
    )
    post_id = 0
    for forum_id, (name, (title, description, titles)) in enumerate(FORUMS.items(), start=1):
        conn.execute(
            "INSERT INTO forums VALUES (?, ?, ?, ?, ?)", (forum_id, name, title, description, rng.randint(150, 4000))
        )
        for post_title in titles:
            post_id += 1
            created = f"2023-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
            conn.execute(
                "INSERT INTO posts VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    post_id,
                    forum_id,
                    rng.choice(USERS[1:]),
                    post_title,
                    rng.choice(_POST_BODIES),
                    rng.randint(-5, 400),
                    created,
                ),
            )
            for _ in range(rng.choice([0, 1, 2, 3, 3, 4, 5, 6])):
                conn.execute(
                    "INSERT INTO comments(post_id, author, body, base_score, created) VALUES (?, ?, ?, ?, ?)",
                    (
                        post_id,
                        rng.choice(USERS[1:]),
                        rng.choice(_COMMENTS),
                        rng.randint(-3, 90),
                        f"{created[:10]} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}",
                    ),
                )
    # The signed-in user starts subscribed to three forums.
    conn.executemany("INSERT INTO subscriptions VALUES (?)", [(1,), (3,), (10,)])

"""Write the embedded task set (`tasks/*.json`, `tasks/splits.json`) from the sites' seeded data.

    python -m envs.webarena.taskgen [--out DIR]

Each task is a WebArena config dict; answers, URLs and page checks are
computed from the same seed functions the sites use, so the files stay right
when the seed data changes (a test checks that the shipped files equal this
output). Templates are grouped as in WebArena: information seeking
(string_match), navigation (url_match) and content / configuration changes
(program_html, require_reset true). Task ids: shopping 0-, reddit 1000-,
gitlab 2000-; every fifth task of a site goes to the test split.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlencode

from envs.webarena.sites import codehost_seed, forum_seed, shop_seed
from envs.webarena.tasks import EMBEDDED_TASKS, SPLITS_FILE

SITE_FILES = {"shopping": "shopping.json", "reddit": "reddit.json", "gitlab": "gitlab.json"}
_BASE_ID = {"shopping": 0, "reddit": 1000, "gitlab": 2000}
_TEMPLATE_BASE = {"shopping": 0, "reddit": 100, "gitlab": 200}
_PLACEHOLDER = {"shopping": "__SHOPPING__", "reddit": "__REDDIT__", "gitlab": "__GITLAB__"}


def _db(build: Callable[[sqlite3.Connection], None]) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    build(conn)
    return conn


def _string(**refs: Any) -> dict[str, Any]:
    return {
        "eval_types": ["string_match"],
        "reference_answers": refs,
        "reference_url": "",
        "program_html": [],
        "string_note": "",
        "reference_answer_raw_annotation": next(iter(refs.values())),
    }


def _url(url: str) -> dict[str, Any]:
    return {
        "eval_types": ["url_match"],
        "reference_answers": None,
        "reference_url": url,
        "program_html": [],
        "url_note": "GOLD in PRED",
    }


def _html(*targets: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "eval_types": ["program_html"],
        "reference_answers": None,
        "reference_url": "",
        "program_html": [{"url": u, "locator": loc, "required_contents": req} for u, loc, req in targets],
    }


def _text(selector: str) -> str:
    """A locator: the element's text with runs of whitespace collapsed (table cells come out space-separated)."""
    return f"document.querySelector('{selector}').innerText.replace(/\\s+/g, ' ').trim()"


class _Builder:
    """Collects the tasks of one site; template ids are numbered in the order templates are added."""

    def __init__(self, site: str):
        self.site, self.tasks = site, []
        self.root = _PLACEHOLDER[site]
        self._template = _TEMPLATE_BASE[site] - 1

    def template(self) -> int:
        self._template += 1
        return self._template

    def add(self, template_id: int, template: str, values: dict[str, Any], ev: dict[str, Any], start: str = "") -> None:
        intent = template
        for key, value in values.items():
            intent = intent.replace("{{" + key + "}}", str(value))
        self.tasks.append(
            {
                "sites": [self.site],
                "task_id": _BASE_ID[self.site] + len(self.tasks),
                "require_login": True,
                "storage_state": None,
                "start_url": self.root + start,
                "geolocation": None,
                "intent_template": template,
                "instantiation_dict": values,
                "intent": intent,
                "require_reset": "program_html" in ev["eval_types"],
                "eval": ev,
                "intent_template_id": template_id,
            }
        )


def shopping() -> list[dict[str, Any]]:
    db, b, rng = _db(shop_seed.build), _Builder("shopping"), random.Random(1)
    products = db.execute(
        "SELECT p.*, c.name AS category, (SELECT COUNT(*) FROM reviews r WHERE r.product_id = p.id) AS n_reviews "
        "FROM products p JOIN categories c ON c.id = p.category_id ORDER BY p.id"
    ).fetchall()
    pick = lambda n, pool=products: rng.sample(list(pool), n)  # noqa: E731
    reviewed = [p for p in products if p["n_reviews"] > 0]
    in_stock = [p for p in products if p["stock"] >= 5]
    categories = db.execute("SELECT * FROM categories ORDER BY id").fetchall()
    orders = db.execute("SELECT * FROM orders ORDER BY id").fetchall()

    t = b.template()
    for p in pick(6):
        b.add(
            t, "What is the price of {{product}}?", {"product": p["name"]}, _string(must_include=[f"{p['price']:.2f}"])
        )
    t = b.template()
    for p in pick(5, reviewed):
        b.add(
            t,
            "How many reviews does {{product}} have?",
            {"product": p["name"]},
            _string(must_include=[str(p["n_reviews"])]),
        )
    t = b.template()
    for c in pick(4, categories):
        cheapest = db.execute(
            "SELECT name FROM products WHERE category_id = ? ORDER BY price LIMIT 1", (c["id"],)
        ).fetchone()["name"]
        b.add(
            t,
            "Which product in the {{category}} category is the cheapest?",
            {"category": c["name"]},
            _string(must_include=[cheapest]),
        )
    t = b.template()
    for o in pick(4, orders):
        b.add(
            t,
            "What was the order total of my order #{{order}}?",
            {"order": o["id"]},
            _string(must_include=[f"{o['total']:.2f}"]),
        )
    t = b.template()
    for o in pick(3, orders):
        b.add(t, "What is the status of my order #{{order}}?", {"order": o["id"]}, _string(exact_match=o["status"]))
    t = b.template()
    for p in pick(4):
        b.add(t, "What is the SKU of {{product}}?", {"product": p["name"]}, _string(exact_match=p["sku"]))
    t = b.template()
    for p in pick(4, reviewed):
        reviews = db.execute("SELECT * FROM reviews WHERE product_id = ?", (p["id"],)).fetchall()
        titles = [r["title"] for r in reviews]
        unique = [r for r in reviews if titles.count(r["title"]) == 1]
        r = unique[0] if unique else reviews[0]
        b.add(
            t,
            "Who wrote the review titled '{{title}}' of {{product}}?",
            {"title": r["title"], "product": p["name"]},
            _string(must_include=[r["author"]]),
        )
    t = b.template()
    for p in pick(3):
        b.add(
            t,
            "What does the store say about {{product}} in its description?",
            {"product": p["name"]},
            _string(fuzzy_match=[p["description"]]),
        )
    t = b.template()
    for missing in ("Solar Powered Toaster", "Titanium Garden Gnome"):
        ev = _string(fuzzy_match="N/A")
        ev["string_note"] = f"The store does not sell a product called {missing}."
        b.add(
            t,
            "What is the price of the {{product}}? Answer N/A if the store does not sell it.",
            {"product": missing},
            ev,
        )

    t = b.template()
    for p in pick(5):
        b.add(
            t, "Show me the product page of {{product}}.", {"product": p["name"]}, _url(f"{b.root}/product/{p['id']}")
        )
    t = b.template()
    for term in ("kettle", "green tea", "puzzle", "shampoo", "backpack"):
        b.add(t, "Search the store for '{{term}}'.", {"term": term}, _url(f"{b.root}/search?{urlencode({'q': term})}"))
    t = b.template()
    for c in pick(3, categories):
        b.add(
            t,
            "Show me the products of the {{category}} category sorted by price from low to high.",
            {"category": c["name"]},
            _url(f"{b.root}/category/{c['id']}?sort=price_asc"),
        )
    t = b.template()
    for o in pick(3, orders):
        b.add(t, "Open the details page of my order #{{order}}.", {"order": o["id"]}, _url(f"{b.root}/order/{o['id']}"))
    b.add(b.template(), "Show me my shopping cart.", {}, _url(f"{b.root}/cart"))
    b.add(b.template(), "Take me to the page where I can edit my shipping address.", {}, _url(f"{b.root}/account/edit"))

    t = b.template()
    for p in pick(5, in_stock):
        qty = rng.randint(2, 4)
        b.add(
            t,
            "Add {{qty}} units of {{product}} to my shopping cart.",
            {"qty": qty, "product": p["name"]},
            _html((f"{b.root}/cart", _text("#cart"), {"must_include": [p["name"], f"Qty: {qty}"]})),
        )
    t = b.template()
    reviews = [
        ("5", "Love it", "Exactly what I needed."),
        ("2", "Too flimsy", "It bent on the first day."),
        ("4", "Pretty good", "Works well, arrived late."),
        ("1", "Not for me", "Returned it after a week."),
    ]
    for p, (rating, title, body) in zip(pick(4), reviews):
        b.add(
            t,
            "Write a {{rating}}-star review of {{product}} with the summary '{{title}}' and the text '{{body}}'.",
            {"rating": rating, "product": p["name"], "title": title, "body": body},
            _html(
                (
                    f"{b.root}/product/{p['id']}",
                    _text("#reviews"),
                    {"must_include": [title, f"Rating: {rating}/5, by {shop_seed.CUSTOMER['name']}", body]},
                )
            ),
        )
    t = b.template()
    for street, city, state, zip_ in [
        ("17 Harbor Road", "Portland", "ME", "04101"),
        ("850 Elm Avenue", "Austin", "TX", "73301"),
        ("3 Birch Lane", "Madison", "WI", "53703"),
    ]:
        b.add(
            t,
            "Change my default shipping address to {{street}}, {{city}}, {{state}} {{zip}}.",
            {"street": street, "city": city, "state": state, "zip": zip_},
            _html((f"{b.root}/account", _text("#address"), {"exact_match": f"{street}, {city}, {state} {zip_}"})),
        )
    t = b.template()
    for p in pick(3, in_stock):
        b.add(
            t,
            "Buy one {{product}} and place the order.",
            {"product": p["name"]},
            _html((f"{b.root}/orders", _text("#orders tbody tr"), {"must_include": [p["name"], "Pending"]})),
        )
    t = b.template()
    for o in [o for o in orders if o["status"] == "Pending"]:
        b.add(
            t,
            "Cancel my pending order #{{order}}.",
            {"order": o["id"]},
            _html((f"{b.root}/order/{o['id']}", _text("#order-status"), {"exact_match": "Canceled"})),
        )
    return b.tasks


def reddit() -> list[dict[str, Any]]:
    db, b, rng = _db(forum_seed.build), _Builder("reddit"), random.Random(2)
    posts = db.execute(
        "SELECT p.*, f.name AS forum, (SELECT COUNT(*) FROM comments c WHERE c.post_id = p.id) AS n_comments "
        "FROM posts p JOIN forums f ON f.id = p.forum_id ORDER BY p.id"
    ).fetchall()
    forums = db.execute(
        "SELECT f.*, f.base_subscribers + (s.forum_id IS NOT NULL) AS subscribers, "
        "s.forum_id IS NOT NULL AS subscribed FROM forums f "
        "LEFT JOIN subscriptions s ON s.forum_id = f.id ORDER BY f.id"
    ).fetchall()
    authors = sorted({p["author"] for p in posts})
    pick = lambda n, pool=posts: rng.sample(list(pool), n)  # noqa: E731
    post_url = lambda p: f"{b.root}/f/{p['forum']}/{p['id']}"  # noqa: E731

    t = b.template()
    for p in pick(5):
        b.add(t, "Who submitted the post '{{title}}'?", {"title": p["title"]}, _string(must_include=[p["author"]]))
    t = b.template()
    for p in pick(5):
        b.add(
            t,
            "How many comments does the post '{{title}}' have?",
            {"title": p["title"]},
            _string(must_include=[str(p["n_comments"])]),
        )
    t = b.template()
    for f in pick(4, forums):
        b.add(
            t,
            "How many subscribers does the forum f/{{forum}} have?",
            {"forum": f["name"]},
            _string(must_include=[str(f["subscribers"])]),
        )
    t = b.template()
    for f in pick(4, forums):
        top = max((p for p in posts if p["forum_id"] == f["id"]), key=lambda p: (p["base_score"], -p["id"]))
        b.add(
            t,
            "What is the title of the highest-scoring post in f/{{forum}}?",
            {"forum": f["name"]},
            _string(must_include=[top["title"]]),
        )
    t = b.template()
    for p in pick(4):
        b.add(
            t,
            "How many points does the post '{{title}}' have?",
            {"title": p["title"]},
            _string(must_include=[str(p["base_score"])]),
        )
    t = b.template()
    for p in pick(3):
        b.add(
            t,
            "In which forum was the post '{{title}}' submitted? Give the forum's name.",
            {"title": p["title"]},
            _string(must_include=[p["forum"]]),
        )
    t = b.template()
    for user in rng.sample(authors, 3):
        n = sum(p["author"] == user for p in posts)
        b.add(t, "How many posts has the user {{user}} submitted?", {"user": user}, _string(must_include=[str(n)]))

    t = b.template()
    for f in pick(4, forums):
        b.add(t, "Open the forum f/{{forum}}.", {"forum": f["name"]}, _url(f"{b.root}/f/{f['name']}"))
    t = b.template()
    for f in pick(4, forums):
        b.add(
            t,
            "Show me the newest posts in f/{{forum}}.",
            {"forum": f["name"]},
            _url(f"{b.root}/f/{f['name']}?sort=new"),
        )
    t = b.template()
    for p in pick(4):
        b.add(t, "Open the post '{{title}}'.", {"title": p["title"]}, _url(post_url(p)))
    t = b.template()
    for user in rng.sample(authors, 4):
        b.add(t, "Show me the profile page of the user {{user}}.", {"user": user}, _url(f"{b.root}/user/{user}"))

    t = b.template()
    for f in pick(4, [f for f in forums if not f["subscribed"]]):
        b.add(
            t,
            "Subscribe to the forum f/{{forum}}.",
            {"forum": f["name"]},
            _html((f"{b.root}/forums", _text("#my-subscriptions"), {"must_include": [f"f/{f['name']}"]})),
        )
    t = b.template()
    for f in pick(2, [f for f in forums if f["subscribed"]]):
        b.add(
            t,
            "Unsubscribe from the forum f/{{forum}}.",
            {"forum": f["name"]},
            _html((f"{b.root}/f/{f['name']}", _text("#subscription"), {"exact_match": "Subscribe"})),
        )
    for direction, n in (("Upvote", 4), ("Downvote", 2)):
        t = b.template()
        for p in pick(n):
            b.add(
                t,
                direction + " the post '{{title}}'.",
                {"title": p["title"]},
                _html((post_url(p), _text("#post-vote-state"), {"exact_match": f"You {direction.lower()}d this post"})),
            )
    t = b.template()
    replies = [
        "Thanks, this was really helpful!",
        "I disagree, but good points.",
        "Bookmarking this thread.",
        "Great photo, what camera did you use?",
    ]
    for p, reply in zip(pick(4), replies):
        b.add(
            t,
            "Reply to the post '{{title}}' with the comment '{{comment}}'.",
            {"title": p["title"], "comment": reply},
            _html((post_url(p), _text("#comments"), {"must_include": [f"{forum_seed.ME} · 1 points", reply]})),
        )
    t = b.template()
    new_posts = [
        ("Weekly reading thread", "What is everyone reading this week?"),
        ("Favorite budget recipes", "Share your cheapest tasty meal."),
        ("Show your setup", "Post a photo of your desk or gear."),
        ("Beginner questions welcome", "Ask anything, no judgement."),
    ]
    for f, (title, body) in zip(pick(4, forums), new_posts):
        b.add(
            t,
            "Create a post in f/{{forum}} titled '{{title}}' with the body '{{body}}'.",
            {"forum": f["name"], "title": title, "body": body},
            _html(
                (f"{b.root}/f/{f['name']}", _text("#posts"), {"must_include": [title]}),
                (f"{b.root}/user/{forum_seed.ME}", _text("#user-posts"), {"must_include": [title]}),
            ),
        )
    return b.tasks


def gitlab() -> list[dict[str, Any]]:
    db, b, rng = _db(codehost_seed.build), _Builder("gitlab"), random.Random(3)
    projects = db.execute(
        "SELECT p.*, p.namespace || '/' || p.name AS path, p.base_stars + (s.project_id IS NOT NULL) AS stars, "
        "s.project_id IS NOT NULL AS starred, (SELECT role FROM members m WHERE m.project_id = p.id AND "
        f"m.username = '{codehost_seed.ME}') AS my_role FROM projects p LEFT JOIN stars s ON s.project_id = p.id "
        "ORDER BY p.id"
    ).fetchall()
    issues = db.execute(
        "SELECT i.*, p.namespace || '/' || p.name AS path FROM issues i "
        "JOIN projects p ON p.id = i.project_id ORDER BY i.id"
    ).fetchall()
    mrs = db.execute(
        "SELECT m.*, p.namespace || '/' || p.name AS path FROM merge_requests m "
        "JOIN projects p ON p.id = m.project_id ORDER BY m.id"
    ).fetchall()
    members = db.execute("SELECT * FROM members").fetchall()
    managed = [p for p in projects if p["my_role"] in ("Maintainer", "Owner")]
    pick = lambda n, pool=projects: rng.sample(list(pool), n)  # noqa: E731
    issue_url = lambda i: f"{b.root}/{i['path']}/-/issues/{i['iid']}"  # noqa: E731

    t = b.template()
    for p in pick(5):
        n = sum(i["project_id"] == p["id"] and i["state"] == "opened" for i in issues)
        b.add(
            t,
            "How many open issues does the project {{project}} have?",
            {"project": p["path"]},
            _string(must_include=[str(n)]),
        )
    t = b.template()
    for i in pick(5, [i for i in issues if i["assignee"]]):
        b.add(
            t,
            "Who is assigned to issue #{{iid}} of {{project}}? Give the username.",
            {"iid": i["iid"], "project": i["path"]},
            _string(must_include=[i["assignee"]]),
        )
    t = b.template()
    for p in pick(4):
        b.add(
            t,
            "How many stars does the project {{project}} have?",
            {"project": p["path"]},
            _string(must_include=[str(p["stars"])]),
        )
    t = b.template()
    for m in pick(4, mrs):
        b.add(
            t,
            "What is the source branch of merge request !{{iid}} of {{project}}?",
            {"iid": m["iid"], "project": m["path"]},
            _string(exact_match=m["source_branch"]),
        )
    t = b.template()
    for p in pick(3):
        owner = next(m["username"] for m in members if m["project_id"] == p["id"] and m["role"] == "Owner")
        b.add(
            t,
            "Who is the owner of the project {{project}}? Give the username.",
            {"project": p["path"]},
            _string(must_include=[owner]),
        )
    t = b.template()
    for p in pick(3):
        n = sum(m["project_id"] == p["id"] for m in members)
        b.add(
            t,
            "How many members does the project {{project}} have?",
            {"project": p["path"]},
            _string(must_include=[str(n)]),
        )
    top = max(projects, key=lambda p: (p["stars"], -p["id"]))
    b.add(
        b.template(),
        "Which project has the most stars? Give its path as namespace/name.",
        {},
        _string(must_include=[top["namespace"], top["name"]]),
    )

    t = b.template()
    for p in pick(4):
        label = rng.choice(
            sorted({lab for i in issues if i["project_id"] == p["id"] for lab in i["labels"].split(",")})
        )
        b.add(
            t,
            "Show me the open issues labeled '{{label}}' in {{project}}.",
            {"label": label, "project": p["path"]},
            _url(f"{b.root}/{p['path']}/-/issues?{urlencode({'label': label})}"),
        )
    t = b.template()
    for p in pick(3):
        b.add(
            t,
            "Show me the merged merge requests of {{project}}.",
            {"project": p["path"]},
            _url(f"{b.root}/{p['path']}/-/merge_requests?state=merged"),
        )
    t = b.template()
    for i in pick(4, issues):
        b.add(t, "Open issue #{{iid}} of {{project}}.", {"iid": i["iid"], "project": i["path"]}, _url(issue_url(i)))
    t = b.template()
    for p in pick(3):
        b.add(
            t,
            "Go to the members page of {{project}}.",
            {"project": p["path"]},
            _url(f"{b.root}/{p['path']}/-/project_members"),
        )

    t = b.template()
    new_issues = [
        ("Add a dark theme to the docs", "enhancement"),
        ("Crash on empty input file", "bug"),
        ("Explain the config options", "documentation"),
        ("Support ARM builds", "feature"),
    ]
    for p, (title, label) in zip(pick(4), new_issues):
        iid = 1 + max(i["iid"] for i in issues if i["project_id"] == p["id"])
        url = f"{b.root}/{p['path']}/-/issues/{iid}"
        b.add(
            t,
            "Create an issue in {{project}} titled '{{title}}' with the label '{{label}}'.",
            {"project": p["path"], "title": title, "label": label},
            _html((url, _text("h1"), {"must_include": [title]}), (url, _text("#issue-labels"), {"exact_match": label})),
        )
    t = b.template()
    for i in pick(4, [i for i in issues if i["state"] == "opened"]):
        b.add(
            t,
            "Close issue #{{iid}} of {{project}}.",
            {"iid": i["iid"], "project": i["path"]},
            _html((issue_url(i), _text("#issue-state"), {"exact_match": "Closed"})),
        )
    t = b.template()
    users = codehost_seed.USERS
    for p in pick(3, managed):
        user = rng.choice(
            sorted(u for u in users if not any(m["project_id"] == p["id"] and m["username"] == u for m in members))
        )
        role = rng.choice(["Guest", "Reporter", "Developer"])
        b.add(
            t,
            "Add {{user}} to the project {{project}} as a {{role}}.",
            {"user": user, "project": p["path"], "role": role},
            _html(
                (
                    f"{b.root}/{p['path']}/-/project_members",
                    _text("#members"),
                    {"must_include": [f"{user} {users[user]} {role}"]},
                )
            ),
        )
    t = b.template()
    for p in pick(3, [p for p in projects if not p["starred"]]):
        b.add(
            t,
            "Star the project {{project}}.",
            {"project": p["path"]},
            _html((f"{b.root}/{p['path']}", _text("#star-button"), {"exact_match": "Unstar"})),
        )
    t = b.template()
    notes = [
        "I can look into this next week.",
        "Is this still a problem on main?",
        "Closing soon unless someone objects.",
    ]
    for i, note in zip(pick(3, issues), notes):
        b.add(
            t,
            "Comment '{{comment}}' on issue #{{iid}} of {{project}}.",
            {"comment": note, "iid": i["iid"], "project": i["path"]},
            _html((issue_url(i), _text("#notes"), {"must_include": [f"{codehost_seed.ME} commented", note]})),
        )
    t = b.template()
    descriptions = [
        "Docs for the rocket toolkit, now with tutorials.",
        "Maintained fork with weekly releases.",
        "Accessible form patterns with examples.",
    ]
    for p, text in zip(pick(3, managed), descriptions):
        b.add(
            t,
            "Change the description of {{project}} to '{{description}}'.",
            {"project": p["path"], "description": text},
            _html((f"{b.root}/{p['path']}", _text("#project-description"), {"exact_match": text})),
        )
    t = b.template()
    for i in pick(3, issues):
        people = sorted(
            m["username"] for m in members if m["project_id"] == i["project_id"] and m["username"] != i["assignee"]
        )
        user = rng.choice(people)
        b.add(
            t,
            "Assign issue #{{iid}} of {{project}} to {{user}}.",
            {"iid": i["iid"], "project": i["path"], "user": user},
            _html((issue_url(i), _text("#issue-assignee"), {"exact_match": user})),
        )
    return b.tasks


GENERATORS = {"shopping": shopping, "reddit": reddit, "gitlab": gitlab}


def generate() -> dict[str, str]:
    """File name -> JSON text of the whole embedded task set."""
    files, splits = {}, {"train": [], "test": []}
    for site, make in GENERATORS.items():
        site_tasks = make()
        files[SITE_FILES[site]] = json.dumps(site_tasks, indent=1) + "\n"
        for n, task in enumerate(site_tasks):
            splits["test" if n % 5 == 4 else "train"].append(task["task_id"])
    files[SPLITS_FILE] = json.dumps(splits) + "\n"
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=EMBEDDED_TASKS)
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    for name, text in generate().items():
        (out / name).write_text(text)
    print(f"wrote {', '.join(sorted(generate()))} to {out}")


if __name__ == "__main__":
    main()

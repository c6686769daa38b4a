"""The embedded forum (plays WebArena's REDDIT site, a Postmill): forums, posts, comments, votes, subscriptions.

The signed-in user is `forum_seed.ME`. Scores and subscriber counts shown are
the seeded counts plus the signed-in user's own votes and subscriptions, so a
vote or a subscription is visible on the page the way it is on a real forum.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from fastapi import FastAPI, Form, Request
from starlette.responses import Response

from envs.webarena.sites import forum_seed
from envs.webarena.sites.common import Renderer, SiteDatabase, one, redirect, rows, session_of

TITLE = "Postmill"
SORTS = ["hot", "new", "top"]
FRONT_PAGE_SIZE = 20
_ORDER_BY = {"hot": "score + 2 * n_comments DESC, p.id", "new": "p.created DESC", "top": "score DESC, p.id"}

_POSTS = """
SELECT p.id, p.title, p.body, p.author, p.created, f.name AS forum,
       p.base_score + COALESCE((SELECT value FROM votes v WHERE v.kind = 'post' AND v.target_id = p.id), 0) AS score,
       COALESCE((SELECT value FROM votes v WHERE v.kind = 'post' AND v.target_id = p.id), 0) AS my_vote,
       (SELECT COUNT(*) FROM comments c WHERE c.post_id = p.id) AS n_comments
FROM posts p JOIN forums f ON f.id = p.forum_id
"""
_FORUMS = """
SELECT f.*, f.base_subscribers + (s.forum_id IS NOT NULL) AS subscribers, s.forum_id IS NOT NULL AS subscribed,
       (SELECT COUNT(*) FROM posts p WHERE p.forum_id = f.id) AS n_posts
FROM forums f LEFT JOIN subscriptions s ON s.forum_id = f.id
"""


def create_app(root: Path) -> tuple[FastAPI, SiteDatabase]:
    db = SiteDatabase("forum", forum_seed.build, root)
    html = Renderer("forum", {"site_title": TITLE, "me": forum_seed.ME})
    app = FastAPI(title=TITLE, docs_url=None, redoc_url=None, openapi_url=None)

    def message(heading: str, what: str, status_code: int) -> Response:
        return html.page("message.html", status_code=status_code, heading=heading, what=what)

    def posts(conn: sqlite3.Connection, where: str, args: tuple, sort: str) -> list[sqlite3.Row]:
        return rows(conn, f"{_POSTS} WHERE {where} ORDER BY {_ORDER_BY.get(sort, _ORDER_BY['hot'])}", *args)

    def forum_row(conn: sqlite3.Connection, name: str) -> sqlite3.Row | None:
        return one(conn, f"{_FORUMS} WHERE f.name = ?", name)

    @app.get("/")
    def front(request: Request, sort: str = "hot", page: int = 1) -> Response:
        with db.connect(session_of(request)) as conn:
            every = posts(conn, "1", (), sort)
            page = max(1, page)
            shown = every[(page - 1) * FRONT_PAGE_SIZE : page * FRONT_PAGE_SIZE]
            sort = sort if sort in SORTS else "hot"
            more = f"/?sort={sort}&page={page + 1}" if page * FRONT_PAGE_SIZE < len(every) else ""
            return html.page(
                "listing.html", heading="Front page", posts=shown, sorts=SORTS, sort=sort, base_url="/", next_page=more
            )

    @app.get("/forums")
    def forums(request: Request) -> Response:
        with db.connect(session_of(request)) as conn:
            return html.page("forums.html", forums=rows(conn, f"{_FORUMS} ORDER BY f.name"))

    @app.get("/search")
    def search(request: Request, q: str = "") -> Response:
        with db.connect(session_of(request)) as conn:
            pattern = f"%{q.strip()}%"
            found = posts(conn, "(p.title LIKE ? OR p.body LIKE ?)", (pattern, pattern), "top") if q.strip() else []
            return html.page("listing.html", heading=f"Search results for '{q}'", posts=found, query=q)

    @app.get("/f/{name}")
    def forum(request: Request, name: str, sort: str = "hot") -> Response:
        with db.connect(session_of(request)) as conn:
            f = forum_row(conn, name)
            if f is None:
                return message("404 Not Found", f"There is no forum named {name}.", 404)
            return html.page(
                "listing.html",
                heading=f"f/{name}: {f['title']}",
                forum=f,
                posts=posts(conn, "f.name = ?", (name,), sort),
                sorts=SORTS,
                sort=sort if sort in SORTS else "hot",
                base_url=f"/f/{name}",
            )

    @app.post("/f/{name}/subscribe")
    def subscribe(request: Request, name: str) -> Response:
        with db.connect(session_of(request)) as conn:
            f = forum_row(conn, name)
            if f is None:
                return message("404 Not Found", f"There is no forum named {name}.", 404)
            if f["subscribed"]:
                conn.execute("DELETE FROM subscriptions WHERE forum_id = ?", (f["id"],))
            else:
                conn.execute("INSERT INTO subscriptions VALUES (?)", (f["id"],))
        return redirect(f"/f/{name}")

    def post_row(conn: sqlite3.Connection, name: str, post_id: int) -> sqlite3.Row | None:
        return one(conn, f"{_POSTS} WHERE f.name = ? AND p.id = ?", name, post_id)

    @app.get("/f/{name}/{post_id}")
    def post(request: Request, name: str, post_id: int) -> Response:
        with db.connect(session_of(request)) as conn:
            p = post_row(conn, name, post_id)
            if p is None:
                return message("404 Not Found", f"There is no post {post_id} in f/{name}.", 404)
            comments = rows(conn, "SELECT * FROM comments WHERE post_id = ? ORDER BY base_score DESC, id", post_id)
            return html.page("post.html", p=p, comments=comments)

    @app.post("/f/{name}/{post_id}/vote")
    def vote(request: Request, name: str, post_id: int, value: int = Form(...)) -> Response:
        with db.connect(session_of(request)) as conn:
            p = post_row(conn, name, post_id)
            if p is None or value not in (1, -1):
                return message("Vote not counted", "No such post, or a vote other than +1 / -1.", 400)
            conn.execute("DELETE FROM votes WHERE kind = 'post' AND target_id = ?", (post_id,))
            if p["my_vote"] != value:  # voting the same way again retracts the vote
                conn.execute("INSERT INTO votes VALUES ('post', ?, ?)", (post_id, value))
        return redirect(f"/f/{name}/{post_id}")

    @app.post("/f/{name}/{post_id}/comment")
    def comment(request: Request, name: str, post_id: int, body: str = Form("")) -> Response:
        with db.connect(session_of(request)) as conn:
            if post_row(conn, name, post_id) is None:
                return message("404 Not Found", f"There is no post {post_id} in f/{name}.", 404)
            if not body.strip():
                return message("Comment not posted", "A comment cannot be empty.", 400)
            conn.execute(
                "INSERT INTO comments(post_id, author, body, base_score, created) VALUES (?, ?, ?, 1, ?)",
                (post_id, forum_seed.ME, body.strip(), "2024-01-15 12:00"),
            )
        return redirect(f"/f/{name}/{post_id}")

    @app.get("/submit")
    def submit_form(forum: str = "") -> Response:
        return html.page("submit.html", forum=forum)

    @app.post("/submit")
    def submit(request: Request, forum: str = Form(""), title: str = Form(""), body: str = Form("")) -> Response:
        name = forum.strip().removeprefix("f/")
        with db.connect(session_of(request)) as conn:
            f = forum_row(conn, name)
            if f is None:
                return message("Submission failed", f"There is no forum named '{name}'.", 400)
            if not title.strip():
                return message("Submission failed", "A submission needs a title.", 400)
            cur = conn.execute(
                "INSERT INTO posts(forum_id, author, title, body, base_score, created) VALUES (?, ?, ?, ?, 1, ?)",
                (f["id"], forum_seed.ME, title.strip(), body.strip(), "2024-01-15 12:00"),
            )
        return redirect(f"/f/{name}/{cur.lastrowid}")

    @app.get("/user/{name}")
    def user(request: Request, name: str) -> Response:
        with db.connect(session_of(request)) as conn:
            u = one(conn, "SELECT * FROM users WHERE name = ?", name)
            if u is None:
                return message("404 Not Found", f"There is no user named {name}.", 404)
            comments = rows(
                conn,
                "SELECT c.*, p.title, f.name AS forum FROM comments c JOIN posts p ON p.id = c.post_id "
                "JOIN forums f ON f.id = p.forum_id WHERE c.author = ? ORDER BY c.created DESC",
                name,
            )
            return html.page("user.html", u=u, posts=posts(conn, "p.author = ?", (name,), "new"), comments=comments)

    return app, db

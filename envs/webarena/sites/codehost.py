"""The embedded code host (plays WebArena's GITLAB site): projects, issues, merge requests, members, stars.

URLs follow GitLab's shape (`/<namespace>/<project>/-/issues/<iid>`), so
WebArena-style url_match references read the same. The signed-in user is
`codehost_seed.ME`; managing members and settings needs the Maintainer or
Owner role, as on GitLab.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from fastapi import FastAPI, Form, Request
from starlette.responses import Response

from envs.webarena.sites import codehost_seed
from envs.webarena.sites.codehost_seed import ME, ROLES
from envs.webarena.sites.common import Renderer, SiteDatabase, one, redirect, rows, session_of

TITLE = "GitLab"
EXPLORE_SORTS = [("name", "Name"), ("stars", "Most stars"), ("created", "Newest")]
_EXPLORE_ORDER = {"name": "p.namespace, p.name", "stars": "stars DESC, p.id", "created": "p.created DESC, p.id"}
_MANAGERS = {"Maintainer", "Owner"}

_PROJECTS = f"""
SELECT p.*, p.namespace || '/' || p.name AS path,
       p.base_stars + (s.project_id IS NOT NULL) AS stars, s.project_id IS NOT NULL AS starred,
       (SELECT COUNT(*) FROM issues i WHERE i.project_id = p.id AND i.state = 'opened') AS open_issues,
       (SELECT COUNT(*) FROM merge_requests m WHERE m.project_id = p.id AND m.state = 'opened') AS open_mrs,
       (SELECT COUNT(*) FROM members m WHERE m.project_id = p.id) AS n_members,
       (SELECT role FROM members m WHERE m.project_id = p.id AND m.username = '{ME}') AS my_role
FROM projects p LEFT JOIN stars s ON s.project_id = p.id
"""


def create_app(root: Path) -> tuple[FastAPI, SiteDatabase]:
    db = SiteDatabase("codehost", codehost_seed.build, root)
    html = Renderer("codehost", {"site_title": TITLE, "me": ME})
    app = FastAPI(title=TITLE, docs_url=None, redoc_url=None, openapi_url=None)

    def message(heading: str, what: str, status_code: int) -> Response:
        return html.page("message.html", status_code=status_code, heading=heading, what=what)

    def not_found(what: str) -> Response:
        return message("404 Not Found", what, 404)

    def project(conn: sqlite3.Connection, ns: str, name: str) -> sqlite3.Row | None:
        return one(conn, f"{_PROJECTS} WHERE p.namespace = ? AND p.name = ?", ns, name)

    def issue(conn: sqlite3.Connection, p: sqlite3.Row, iid: int) -> sqlite3.Row | None:
        return one(conn, "SELECT * FROM issues WHERE project_id = ? AND iid = ?", p["id"], iid)

    @app.get("/")
    def dashboard(request: Request) -> Response:
        with db.connect(session_of(request)) as conn:
            mine = rows(conn, f"{_PROJECTS} WHERE my_role IS NOT NULL ORDER BY p.namespace, p.name")
            return html.page("projects.html", heading="Your projects", projects=mine, show_role=True)

    @app.get("/explore")
    def explore(request: Request, sort: str = "name") -> Response:
        with db.connect(session_of(request)) as conn:
            order = _EXPLORE_ORDER.get(sort, _EXPLORE_ORDER["name"])
            return html.page(
                "projects.html",
                heading="Explore projects",
                projects=rows(conn, f"{_PROJECTS} ORDER BY {order}"),
                sorts=EXPLORE_SORTS,
                sort=sort if sort in _EXPLORE_ORDER else "name",
            )

    @app.get("/users/{username}")
    def user(request: Request, username: str) -> Response:
        with db.connect(session_of(request)) as conn:
            u = one(conn, "SELECT * FROM users WHERE username = ?", username)
            if u is None:
                return not_found(f"There is no user {username}.")
            projects = rows(
                conn,
                "SELECT p.namespace, p.name, p.namespace || '/' || p.name AS path, m.role FROM members m "
                "JOIN projects p ON p.id = m.project_id WHERE m.username = ? ORDER BY path",
                username,
            )
            return html.page("user.html", u=u, projects=projects)

    @app.get("/{ns}/{name}")
    def overview(request: Request, ns: str, name: str) -> Response:
        with db.connect(session_of(request)) as conn:
            p = project(conn, ns, name)
            return html.page("project.html", p=p) if p else not_found(f"There is no project {ns}/{name}.")

    @app.post("/{ns}/{name}/-/star")
    def star(request: Request, ns: str, name: str) -> Response:
        with db.connect(session_of(request)) as conn:
            p = project(conn, ns, name)
            if p is None:
                return not_found(f"There is no project {ns}/{name}.")
            if p["starred"]:
                conn.execute("DELETE FROM stars WHERE project_id = ?", (p["id"],))
            else:
                conn.execute("INSERT INTO stars VALUES (?)", (p["id"],))
        return redirect(f"/{ns}/{name}")

    @app.get("/{ns}/{name}/-/issues")
    def issues(request: Request, ns: str, name: str, state: str = "opened", label: str = "") -> Response:
        with db.connect(session_of(request)) as conn:
            p = project(conn, ns, name)
            if p is None:
                return not_found(f"There is no project {ns}/{name}.")
            state = state if state in ("opened", "closed", "all") else "opened"
            every = rows(conn, "SELECT * FROM issues WHERE project_id = ? ORDER BY iid DESC", p["id"])
            if label:
                every = [i for i in every if label in i["labels"].split(",")]
            counts = {
                "opened": sum(i["state"] == "opened" for i in every),
                "closed": sum(i["state"] == "closed" for i in every),
                "all": len(every),
            }
            shown = [i for i in every if state == "all" or i["state"] == state]
            labels = sorted(
                {
                    lab
                    for (labs,) in conn.execute("SELECT labels FROM issues WHERE project_id = ?", (p["id"],))
                    for lab in labs.split(",")
                    if lab
                }
            )
            return html.page(
                "issues.html", p=p, issues=shown, counts=counts, state=state, labels=labels, label_filter=label
            )

    @app.get("/{ns}/{name}/-/issues/new")
    def new_issue_form(request: Request, ns: str, name: str) -> Response:
        with db.connect(session_of(request)) as conn:
            p = project(conn, ns, name)
            return html.page("new_issue.html", p=p) if p else not_found(f"There is no project {ns}/{name}.")

    @app.post("/{ns}/{name}/-/issues")
    def new_issue(
        request: Request, ns: str, name: str, title: str = Form(""), body: str = Form(""), labels: str = Form("")
    ) -> Response:
        with db.connect(session_of(request)) as conn:
            p = project(conn, ns, name)
            if p is None:
                return not_found(f"There is no project {ns}/{name}.")
            if not title.strip():
                return message("Issue not created", "An issue needs a title.", 400)
            iid = one(conn, "SELECT COALESCE(MAX(iid), 0) + 1 AS n FROM issues WHERE project_id = ?", p["id"])["n"]
            label_list = ",".join(sorted({lab.strip() for lab in labels.split(",") if lab.strip()}))
            conn.execute(
                "INSERT INTO issues(project_id, iid, title, body, state, author, assignee, labels, created) "
                "VALUES (?, ?, ?, ?, 'opened', ?, NULL, ?, '2024-01-15')",
                (p["id"], iid, title.strip(), body.strip(), ME, label_list),
            )
        return redirect(f"/{ns}/{name}/-/issues/{iid}")

    @app.get("/{ns}/{name}/-/issues/{iid}")
    def issue_page(request: Request, ns: str, name: str, iid: int) -> Response:
        with db.connect(session_of(request)) as conn:
            p = project(conn, ns, name)
            i = issue(conn, p, iid) if p else None
            if i is None:
                return not_found(f"There is no issue #{iid} in {ns}/{name}.")
            notes = rows(conn, "SELECT * FROM notes WHERE issue_id = ? ORDER BY id", i["id"])
            return html.page("issue.html", p=p, i=i, notes=notes)

    @app.post("/{ns}/{name}/-/issues/{iid}/state")
    def toggle_state(request: Request, ns: str, name: str, iid: int) -> Response:
        with db.connect(session_of(request)) as conn:
            p = project(conn, ns, name)
            i = issue(conn, p, iid) if p else None
            if i is None:
                return not_found(f"There is no issue #{iid} in {ns}/{name}.")
            conn.execute(
                "UPDATE issues SET state = ? WHERE id = ?", ("closed" if i["state"] == "opened" else "opened", i["id"])
            )
        return redirect(f"/{ns}/{name}/-/issues/{iid}")

    @app.post("/{ns}/{name}/-/issues/{iid}/assign")
    def assign(request: Request, ns: str, name: str, iid: int, assignee: str = Form("")) -> Response:
        with db.connect(session_of(request)) as conn:
            p = project(conn, ns, name)
            i = issue(conn, p, iid) if p else None
            if i is None:
                return not_found(f"There is no issue #{iid} in {ns}/{name}.")
            username = assignee.strip().lstrip("@")
            if one(conn, "SELECT 1 FROM members WHERE project_id = ? AND username = ?", p["id"], username) is None:
                return message("Not assigned", f"'{username}' is not a member of {ns}/{name}.", 400)
            conn.execute("UPDATE issues SET assignee = ? WHERE id = ?", (username, i["id"]))
        return redirect(f"/{ns}/{name}/-/issues/{iid}")

    @app.post("/{ns}/{name}/-/issues/{iid}/notes")
    def add_note(request: Request, ns: str, name: str, iid: int, body: str = Form("")) -> Response:
        with db.connect(session_of(request)) as conn:
            p = project(conn, ns, name)
            i = issue(conn, p, iid) if p else None
            if i is None:
                return not_found(f"There is no issue #{iid} in {ns}/{name}.")
            if not body.strip():
                return message("Comment not added", "A comment cannot be empty.", 400)
            conn.execute(
                "INSERT INTO notes(issue_id, author, body, created) VALUES (?, ?, ?, '2024-01-15')",
                (i["id"], ME, body.strip()),
            )
        return redirect(f"/{ns}/{name}/-/issues/{iid}")

    @app.get("/{ns}/{name}/-/merge_requests")
    def merge_requests(request: Request, ns: str, name: str, state: str = "opened") -> Response:
        with db.connect(session_of(request)) as conn:
            p = project(conn, ns, name)
            if p is None:
                return not_found(f"There is no project {ns}/{name}.")
            every = rows(conn, "SELECT * FROM merge_requests WHERE project_id = ? ORDER BY iid DESC", p["id"])
            state = state if state in ("opened", "merged", "closed", "all") else "opened"
            counts = {s: sum(m["state"] == s for m in every) for s in ("opened", "merged", "closed")}
            counts["all"] = len(every)
            shown = [m for m in every if state == "all" or m["state"] == state]
            return html.page("merge_requests.html", p=p, mrs=shown, counts=counts, state=state)

    @app.get("/{ns}/{name}/-/merge_requests/{iid}")
    def merge_request(request: Request, ns: str, name: str, iid: int) -> Response:
        with db.connect(session_of(request)) as conn:
            p = project(conn, ns, name)
            m = one(conn, "SELECT * FROM merge_requests WHERE project_id = ? AND iid = ?", p["id"], iid) if p else None
            if m is None:
                return not_found(f"There is no merge request !{iid} in {ns}/{name}.")
            return html.page("merge_request.html", p=p, m=m)

    def members_page(conn: sqlite3.Connection, p: sqlite3.Row) -> Response:
        members = rows(
            conn,
            "SELECT m.username, m.role, u.name FROM members m JOIN users u ON u.username = m.username "
            "WHERE m.project_id = ? ORDER BY m.username",
            p["id"],
        )
        return html.page("members.html", p=p, members=members, can_manage=p["my_role"] in _MANAGERS)

    @app.get("/{ns}/{name}/-/project_members")
    def members(request: Request, ns: str, name: str) -> Response:
        with db.connect(session_of(request)) as conn:
            p = project(conn, ns, name)
            return members_page(conn, p) if p else not_found(f"There is no project {ns}/{name}.")

    @app.post("/{ns}/{name}/-/project_members")
    def invite(request: Request, ns: str, name: str, username: str = Form(""), role: str = Form("")) -> Response:
        with db.connect(session_of(request)) as conn:
            p = project(conn, ns, name)
            if p is None:
                return not_found(f"There is no project {ns}/{name}.")
            if p["my_role"] not in _MANAGERS:
                return message("Not allowed", "You need Maintainer access to invite members.", 403)
            username, role = username.strip().lstrip("@"), role.strip().capitalize()
            if one(conn, "SELECT 1 FROM users WHERE username = ?", username) is None:
                return message("Invitation failed", f"There is no user '{username}'.", 400)
            if role not in ROLES[:4]:
                return message("Invitation failed", "The role must be Guest, Reporter, Developer or Maintainer.", 400)
            conn.execute(
                "INSERT INTO members VALUES (?, ?, ?) ON CONFLICT(project_id, username) DO UPDATE SET role = "
                "excluded.role",
                (p["id"], username, role),
            )
        return redirect(f"/{ns}/{name}/-/project_members")

    @app.get("/{ns}/{name}/-/settings")
    def settings_form(request: Request, ns: str, name: str) -> Response:
        with db.connect(session_of(request)) as conn:
            p = project(conn, ns, name)
            if p is None:
                return not_found(f"There is no project {ns}/{name}.")
            return html.page("settings.html", p=p, can_manage=p["my_role"] in _MANAGERS)

    @app.post("/{ns}/{name}/-/settings")
    def settings(
        request: Request, ns: str, name: str, description: str = Form(""), visibility: str = Form("")
    ) -> Response:
        with db.connect(session_of(request)) as conn:
            p = project(conn, ns, name)
            if p is None:
                return not_found(f"There is no project {ns}/{name}.")
            if p["my_role"] not in _MANAGERS:
                return message("Not allowed", "You need Maintainer access to change the settings.", 403)
            visibility = visibility.strip().lower() or p["visibility"]
            if visibility not in ("public", "private"):
                return message("Settings not saved", "Visibility must be public or private.", 400)
            conn.execute(
                "UPDATE projects SET description = ?, visibility = ? WHERE id = ?",
                (description.strip(), visibility, p["id"]),
            )
        return redirect(f"/{ns}/{name}")

    return app, db

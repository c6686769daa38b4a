"""The embedded shop (plays WebArena's SHOPPING site): catalogue, search, cart, orders, reviews, account.

Server-rendered HTML with plain links and forms, so a browser agent works it
the way it works Magento in WebArena. State lives in the session's SQLite copy
(see `common.SiteDatabase`).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote_plus

from fastapi import FastAPI, Form, Request
from starlette.responses import Response

from envs.webarena.sites import shop_seed
from envs.webarena.sites.common import Renderer, SiteDatabase, one, redirect, rows, session_of

TITLE = "OneStop Market"
SORTS = [("name", "Name"), ("price_asc", "Price: Low to High"), ("price_desc", "Price: High to Low")]
_ORDER_BY = {"name": "p.name", "price_asc": "p.price ASC", "price_desc": "p.price DESC"}


def create_app(root: Path) -> tuple[FastAPI, SiteDatabase]:
    db = SiteDatabase("shop", shop_seed.build, root)
    html = Renderer("shop", {"site_title": TITLE})
    app = FastAPI(title=TITLE, docs_url=None, redoc_url=None, openapi_url=None)

    def page(conn: sqlite3.Connection, template: str, status_code: int = 200, **ctx) -> Response:
        ctx["cart_count"] = one(conn, "SELECT COALESCE(SUM(qty), 0) AS n FROM cart_items")["n"]
        return html.page(template, status_code=status_code, **ctx)

    def message(conn: sqlite3.Connection, heading: str, what: str, status_code: int) -> Response:
        return page(conn, "message.html", status_code=status_code, heading=heading, what=what)

    def product_rows(conn: sqlite3.Connection, where: str, args: tuple, sort: str) -> list[sqlite3.Row]:
        order = _ORDER_BY.get(sort, "p.name")
        return rows(
            conn,
            "SELECT p.*, (SELECT COUNT(*) FROM reviews r WHERE r.product_id = p.id) AS n_reviews "
            f"FROM products p WHERE {where} ORDER BY {order}",
            *args,
        )

    @app.get("/")
    def home(request: Request) -> Response:
        with db.connect(session_of(request)) as conn:
            categories = rows(
                conn,
                "SELECT c.id, c.name, COUNT(p.id) AS n FROM categories c "
                "JOIN products p ON p.category_id = c.id GROUP BY c.id ORDER BY c.id",
            )
            featured = rows(conn, "SELECT * FROM products WHERE id % 8 = 1 ORDER BY id")
            return page(conn, "home.html", categories=categories, featured=featured)

    @app.get("/category/{category_id}")
    def category(request: Request, category_id: int, sort: str = "name") -> Response:
        with db.connect(session_of(request)) as conn:
            cat = one(conn, "SELECT * FROM categories WHERE id = ?", category_id)
            if cat is None:
                return message(conn, "404 Not Found", f"There is no category {category_id}.", 404)
            products = product_rows(conn, "p.category_id = ?", (category_id,), sort)
            return page(
                conn,
                "products.html",
                heading=cat["name"],
                products=products,
                sorts=SORTS,
                sort=sort if sort in _ORDER_BY else "name",
                base_url=f"/category/{category_id}",
            )

    @app.get("/search")
    def search(request: Request, q: str = "", sort: str = "name") -> Response:
        with db.connect(session_of(request)) as conn:
            pattern = f"%{q.strip()}%"
            products = (
                product_rows(conn, "(p.name LIKE ? OR p.description LIKE ?)", (pattern, pattern), sort)
                if q.strip()
                else []
            )
            return page(
                conn,
                "products.html",
                heading=f"Search results for: '{q}'",
                products=products,
                sorts=SORTS,
                sort=sort if sort in _ORDER_BY else "name",
                query=q,
                base_url=f"/search?q={quote_plus(q)}",
            )

    @app.get("/product/{product_id}")
    def product(request: Request, product_id: int) -> Response:
        with db.connect(session_of(request)) as conn:
            p = one(
                conn,
                "SELECT p.*, c.name AS category FROM products p JOIN categories c ON c.id = p.category_id "
                "WHERE p.id = ?",
                product_id,
            )
            if p is None:
                return message(conn, "404 Not Found", f"There is no product {product_id}.", 404)
            reviews = rows(
                conn, "SELECT * FROM reviews WHERE product_id = ? ORDER BY created DESC, id DESC", product_id
            )
            avg = sum(r["rating"] for r in reviews) / len(reviews) if reviews else 0.0
            return page(conn, "product.html", p=p, reviews=reviews, avg=avg)

    @app.post("/product/{product_id}/review")
    def review(
        request: Request, product_id: int, rating: str = Form(""), title: str = Form(""), body: str = Form("")
    ) -> Response:
        with db.connect(session_of(request)) as conn:
            if one(conn, "SELECT id FROM products WHERE id = ?", product_id) is None:
                return message(conn, "404 Not Found", f"There is no product {product_id}.", 404)
            if rating.strip() not in {"1", "2", "3", "4", "5"} or not title.strip():
                return message(conn, "Review not saved", "A review needs a rating from 1 to 5 and a summary.", 400)
            name = one(conn, "SELECT name FROM customer WHERE id = 1")["name"]
            conn.execute(
                "INSERT INTO reviews(product_id, author, rating, title, body, created) VALUES (?, ?, ?, ?, ?, ?)",
                (product_id, name, int(rating), title.strip(), body.strip(), "2024-01-15"),
            )
        return redirect(f"/product/{product_id}")

    @app.post("/cart/add")
    def cart_add(request: Request, product_id: int = Form(...), qty: str = Form("1")) -> Response:
        with db.connect(session_of(request)) as conn:
            p = one(conn, "SELECT * FROM products WHERE id = ?", product_id)
            if p is None:
                return message(conn, "404 Not Found", f"There is no product {product_id}.", 404)
            if not qty.strip().isdigit() or not 1 <= int(qty) <= 99:
                return message(conn, "Not added", "The quantity must be a whole number from 1 to 99.", 400)
            conn.execute(
                "INSERT INTO cart_items VALUES (?, ?) ON CONFLICT(product_id) DO UPDATE SET qty = qty + excluded.qty",
                (product_id, int(qty)),
            )
        return redirect("/cart")

    @app.post("/cart/remove")
    def cart_remove(request: Request, product_id: int = Form(...)) -> Response:
        with db.connect(session_of(request)) as conn:
            conn.execute("DELETE FROM cart_items WHERE product_id = ?", (product_id,))
        return redirect("/cart")

    def cart_items(conn: sqlite3.Connection) -> list[sqlite3.Row]:
        return rows(
            conn,
            "SELECT ci.product_id, ci.qty, p.name, p.price FROM cart_items ci "
            "JOIN products p ON p.id = ci.product_id ORDER BY p.name",
        )

    @app.get("/cart")
    def cart(request: Request) -> Response:
        with db.connect(session_of(request)) as conn:
            items = cart_items(conn)
            return page(conn, "cart.html", items=items, total=sum(i["price"] * i["qty"] for i in items))

    def ship_to(conn: sqlite3.Connection) -> str:
        c = one(conn, "SELECT * FROM customer WHERE id = 1")
        return f"{c['name']}, {c['street']}, {c['city']}, {c['state']} {c['zip']}"

    @app.get("/checkout")
    def checkout_form(request: Request) -> Response:
        with db.connect(session_of(request)) as conn:
            items = cart_items(conn)
            if not items:
                return redirect("/cart")
            return page(
                conn,
                "checkout.html",
                n_items=sum(i["qty"] for i in items),
                total=sum(i["price"] * i["qty"] for i in items),
                ship_to=ship_to(conn),
            )

    @app.post("/checkout")
    def checkout(request: Request, ship_to_: str = Form("", alias="ship_to")) -> Response:
        with db.connect(session_of(request)) as conn:
            items = cart_items(conn)
            if not items:
                return message(conn, "Nothing to order", "Your shopping cart is empty.", 400)
            order_id = one(conn, "SELECT MAX(id) + 1 AS n FROM orders")["n"]
            total = round(sum(i["price"] * i["qty"] for i in items), 2)
            conn.execute(
                "INSERT INTO orders VALUES (?, ?, ?, ?, ?)",
                (order_id, "2024-01-15", "Pending", total, ship_to_.strip() or ship_to(conn)),
            )
            conn.executemany(
                "INSERT INTO order_items VALUES (?, ?, ?, ?)",
                [(order_id, i["product_id"], i["qty"], i["price"]) for i in items],
            )
            conn.execute("DELETE FROM cart_items")
        return redirect(f"/order/{order_id}")

    @app.get("/orders")
    def orders(request: Request) -> Response:
        with db.connect(session_of(request)) as conn:
            listing = rows(
                conn,
                "SELECT o.*, (SELECT GROUP_CONCAT(p.name, ', ') FROM order_items oi JOIN products p "
                "ON p.id = oi.product_id WHERE oi.order_id = o.id) AS summary FROM orders o ORDER BY o.id DESC",
            )
            return page(conn, "orders.html", orders=listing)

    @app.get("/order/{order_id}")
    def order(request: Request, order_id: int) -> Response:
        with db.connect(session_of(request)) as conn:
            o = one(conn, "SELECT * FROM orders WHERE id = ?", order_id)
            if o is None:
                return message(conn, "404 Not Found", f"There is no order {order_id}.", 404)
            items = rows(
                conn,
                "SELECT oi.*, p.name FROM order_items oi JOIN products p ON p.id = oi.product_id WHERE oi.order_id = ?",
                order_id,
            )
            return page(conn, "order.html", o=o, items=items)

    @app.post("/order/{order_id}/cancel")
    def cancel(request: Request, order_id: int) -> Response:
        with db.connect(session_of(request)) as conn:
            conn.execute("UPDATE orders SET status = 'Canceled' WHERE id = ? AND status = 'Pending'", (order_id,))
        return redirect(f"/order/{order_id}")

    @app.get("/account")
    def account(request: Request) -> Response:
        with db.connect(session_of(request)) as conn:
            return page(conn, "account.html", c=one(conn, "SELECT * FROM customer WHERE id = 1"))

    @app.get("/account/edit")
    def account_form(request: Request) -> Response:
        with db.connect(session_of(request)) as conn:
            return page(conn, "account_edit.html", c=one(conn, "SELECT * FROM customer WHERE id = 1"))

    @app.post("/account/edit")
    def account_edit(
        request: Request,
        street: str = Form(""),
        city: str = Form(""),
        state: str = Form(""),
        zip_: str = Form("", alias="zip"),
        phone: str = Form(""),
    ) -> Response:
        with db.connect(session_of(request)) as conn:
            if not all(v.strip() for v in (street, city, state, zip_)):
                return message(conn, "Address not saved", "Street, city, state and zip code are required.", 400)
            conn.execute(
                "UPDATE customer SET street = ?, city = ?, state = ?, zip = ?, phone = ? WHERE id = 1",
                (street.strip(), city.strip(), state.strip(), zip_.strip(), phone.strip()),
            )
        return redirect("/account")

    return app, db

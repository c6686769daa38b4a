"""Seeded data of the embedded shop (WebArena's SHOPPING site): deterministic, so tasks can cite it."""

from __future__ import annotations

import random
import sqlite3

SCHEMA = """
CREATE TABLE categories(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE products(id INTEGER PRIMARY KEY, sku TEXT NOT NULL, name TEXT NOT NULL,
    category_id INTEGER NOT NULL, price REAL NOT NULL, stock INTEGER NOT NULL, description TEXT NOT NULL);
CREATE TABLE reviews(id INTEGER PRIMARY KEY, product_id INTEGER NOT NULL, author TEXT NOT NULL,
    rating INTEGER NOT NULL, title TEXT NOT NULL, body TEXT NOT NULL, created TEXT NOT NULL);
CREATE TABLE customer(id INTEGER PRIMARY KEY, name TEXT, email TEXT, street TEXT, city TEXT,
    state TEXT, zip TEXT, phone TEXT);
CREATE TABLE cart_items(product_id INTEGER PRIMARY KEY, qty INTEGER NOT NULL);
CREATE TABLE orders(id INTEGER PRIMARY KEY, created TEXT NOT NULL, status TEXT NOT NULL,
    total REAL NOT NULL, ship_to TEXT NOT NULL);
CREATE TABLE order_items(order_id INTEGER NOT NULL, product_id INTEGER NOT NULL, qty INTEGER NOT NULL,
    price REAL NOT NULL);
"""

CATALOGUE: dict[str, list[str]] = {
    "Electronics": [
        "Wireless Earbuds Pro",
        "Bluetooth Speaker Mini",
        "USB-C Charging Cable 2m",
        "Portable Power Bank 20000mAh",
        "Noise Cancelling Headphones",
        "Smart Fitness Band",
        "HD Webcam 1080p",
        "Mechanical Keyboard TKL",
    ],
    "Home & Kitchen": [
        "Stainless Steel Kettle",
        "Ceramic Dinner Plate Set",
        "Cast Iron Skillet 10in",
        "Bamboo Cutting Board",
        "French Press Coffee Maker",
        "Silicone Baking Mat",
        "Glass Food Storage Set",
        "Electric Hand Mixer",
    ],
    "Books": [
        "The Quiet Orchard",
        "Patterns of the Sea",
        "A Short History of Maps",
        "Cooking with Seasons",
        "The Last Lighthouse Keeper",
        "Introduction to Astronomy",
        "Gardening for Beginners",
        "Letters from the North",
    ],
    "Sports & Outdoors": [
        "Yoga Mat Non-Slip",
        "Insulated Water Bottle 1L",
        "Trail Running Shoes",
        "Camping Lantern LED",
        "Resistance Bands Set",
        "Hiking Backpack 30L",
        "Adjustable Dumbbell 20lb",
        "Folding Camping Chair",
    ],
    "Beauty & Personal Care": [
        "Lavender Body Lotion",
        "Vitamin C Serum",
        "Bamboo Toothbrush 4-Pack",
        "Argan Oil Shampoo",
        "Mineral Sunscreen SPF 50",
        "Charcoal Face Mask",
        "Rose Water Toner",
        "Shea Butter Lip Balm",
    ],
    "Toys & Games": [
        "Wooden Building Blocks",
        "Mountain Puzzle 1000 Pieces",
        "Remote Control Car",
        "Plush Teddy Bear",
        "Magnetic Drawing Board",
        "Castle Quest Board Game",
        "Kids Art Easel",
        "Stacking Rings Toy",
    ],
    "Grocery": [
        "Organic Green Tea 100 Bags",
        "Dark Chocolate 85%",
        "Wildflower Honey 500g",
        "Roasted Almonds 1lb",
        "Extra Virgin Olive Oil 1L",
        "Arabica Coffee Beans 2lb",
        "Steel Cut Oats 2lb",
        "Maple Syrup Grade A",
    ],
}

_ADJECTIVES = ["dependable", "well-made", "popular", "compact", "sturdy", "thoughtfully designed", "great-value"]
_USES = ["everyday use", "gifting", "travel", "the whole family", "small spaces", "weekend projects"]
_REVIEWERS = [
    "Alex Chen",
    "Maria Gomez",
    "Sam Patel",
    "Julia Novak",
    "Omar Haddad",
    "Lena Fischer",
    "Tom Baker",
    "Priya Nair",
    "Diego Ruiz",
    "Hannah Lee",
    "Kofi Mensah",
    "Sofia Rossi",
    "Noah Kim",
    "Ava Murphy",
    "Ivan Petrov",
    "Chloe Martin",
    "Ethan Wright",
    "Mei Tanaka",
    "Lucas Silva",
    "Zara Ahmed",
]
_TITLES = {
    5: ["Absolutely love it", "Exceeded expectations", "Perfect purchase", "Five stars"],
    4: ["Very good overall", "Solid choice", "Happy with it", "Good value"],
    3: ["Does the job", "Average at best", "Okay for the price"],
    2: ["Somewhat disappointed", "Not as described", "Meh"],
    1: ["Broke quickly", "Would not recommend", "Waste of money"],
}
_BODIES = {
    5: "Works exactly as advertised and the quality is excellent.",
    4: "Good quality, a few small things could be better.",
    3: "It is fine, nothing special, but it works.",
    2: "Quality is lower than I hoped and shipping was slow.",
    1: "Stopped working after a week; I returned it.",
}
ORDER_STATUSES = ["Complete", "Complete", "Canceled", "Pending", "Processing", "Complete"]

CUSTOMER = {
    "name": "Grace Holloway",
    "email": "grace.holloway@example.com",
    "street": "42 Linden Street",
    "city": "Springfield",
    "state": "IL",
    "zip": "62701",
    "phone": "555-0142",
}


def build(conn: sqlite3.Connection) -> None:
    rng = random.Random(7770)
    conn.executescript(SCHEMA)
    pid = 0
    for cid, (category, names) in enumerate(CATALOGUE.items(), start=1):
        conn.execute("INSERT INTO categories VALUES (?, ?)", (cid, category))
        for name in names:
            pid += 1
            price = round(rng.randint(3, 180) + rng.choice([0.49, 0.99, 0.25, 0.75]), 2)
            description = (
                f"{name} is a {rng.choice(_ADJECTIVES)} pick for {rng.choice(_USES)}. "
                f"Ships in {rng.randint(1, 5)} business days."
            )
            conn.execute(
                "INSERT INTO products VALUES (?, ?, ?, ?, ?, ?, ?)",
                (pid, f"SKU-{cid}{pid:03d}", name, cid, price, rng.randint(0, 60), description),
            )
            for _ in range(rng.choice([0, 1, 2, 2, 3, 3, 4, 5])):
                rating = rng.choice([1, 2, 3, 4, 4, 5, 5, 5])
                conn.execute(
                    "INSERT INTO reviews(product_id, author, rating, title, body, created) VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        pid,
                        rng.choice(_REVIEWERS),
                        rating,
                        rng.choice(_TITLES[rating]),
                        _BODIES[rating],
                        f"2023-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                    ),
                )
    conn.execute("INSERT INTO customer VALUES (1, :name, :email, :street, :city, :state, :zip, :phone)", CUSTOMER)
    ship_to = f"{CUSTOMER['name']}, {CUSTOMER['street']}, {CUSTOMER['city']}, {CUSTOMER['state']} {CUSTOMER['zip']}"
    for order_id in range(101, 115):
        items = rng.sample(range(1, pid + 1), rng.randint(1, 3))
        total = 0.0
        for product_id in items:
            qty = rng.randint(1, 3)
            price = conn.execute("SELECT price FROM products WHERE id = ?", (product_id,)).fetchone()[0]
            total += qty * price
            conn.execute("INSERT INTO order_items VALUES (?, ?, ?, ?)", (order_id, product_id, qty, price))
        created = f"2023-{(order_id - 100):02d}-{rng.randint(1, 28):02d}"
        status = ORDER_STATUSES[order_id % len(ORDER_STATUSES)]
        conn.execute("INSERT INTO orders VALUES (?, ?, ?, ?, ?)", (order_id, created, status, round(total, 2), ship_to))

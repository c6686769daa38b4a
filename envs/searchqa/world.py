"""A generated multi-hop world: the embedded default corpus and questions.

No real corpus can be downloaded here, and a model must not be able to answer
from memory, so the default Deep Search data is a made-up encyclopedia,
deterministic from a seed: people, cities, countries, companies, products,
universities and rivers with invented names, each described by one document
in plain prose that states the entity's attributes and its *outgoing*
relations only (a company's page names its founder, never the founder's
birth city). A question of h hops chains h relations from a named entity,
e.g. 3 hops:

    In which city was the founder of the company that makes Quellin Nova born?

so answering takes h searches: each page read gives the name to search next.

Guarantees that make the questions fair and hard to guess:

- every relation is functional (one maker per product, one founder per
  company...), every name is unique and no name shares a root word with
  another, so each question has exactly one answer;
- a chain never visits an entity twice and the answer never appears in the
  question;
- the world is two disjoint sub-worlds ("regions") with no relation between
  them: train questions only use train-region entities, test questions only
  test-region ones, so no fact a model could memorize from training answers
  a test question, and test answers are names never seen in training;
- answers are entity names drawn from hundreds of candidates, or years and
  lengths spread over centuries / thousands of kilometres.

The prose comes from a few templates per sentence; `extract()` inverts them,
which is what the scripted expert uses to read a retrieved page.
"""

from __future__ import annotations

import functools
import random
import re
import string
from dataclasses import dataclass, field

from bm25s.stopwords import STOPWORDS_EN

from envs.searchqa.data import Doc

KINDS = ("person", "city", "country", "company", "product", "university", "river")


@dataclass(frozen=True)
class Field:
    """One fact an entity page states: a relation to another entity or a value."""

    kind: str
    name: str
    target: str | None  # the kind it points to; None for a value (a year, a length)
    question: str  # "In which city was {x} born?"
    phrase: str = ""  # relations only: the noun phrase "the city where {x} was born"


_FIELD_LIST = [
    Field("person", "birth_city", "city", "In which city was {x} born?", "the city where {x} was born"),
    Field("person", "alma_mater", "university", "Which university did {x} attend?", "the university that {x} attended"),
    Field("person", "employer", "company", "Which company does {x} work for?", "the company that {x} works for"),
    Field("person", "birth_year", None, "In what year was {x} born?"),
    Field("city", "country", "country", "In which country does {x} lie?", "the country in which {x} lies"),
    Field("city", "river", "river", "Which river flows through {x}?", "the river that flows through {x}"),
    Field("city", "founding_year", None, "In what year was {x} founded?"),
    Field("country", "capital", "city", "What is the capital of {x}?", "the capital of {x}"),
    Field("country", "leader", "person", "Who is the leader of {x}?", "the leader of {x}"),
    Field("country", "independence_year", None, "In what year did {x} gain independence?"),
    Field("company", "founder", "person", "Who founded {x}?", "the founder of {x}"),
    Field("company", "headquarters", "city", "In which city is {x} headquartered?", "the city where {x} is headquartered"),
    Field("company", "founding_year", None, "In what year was {x} founded?"),
    Field("product", "maker", "company", "Which company makes {x}?", "the company that makes {x}"),
    Field("product", "launch_year", None, "In what year was {x} launched?"),
    Field("university", "location", "city", "In which city is {x} located?", "the city where {x} is located"),
    Field("university", "founding_year", None, "In what year was {x} founded?"),
    Field("river", "source_country", "country", "In which country does {x} rise?", "the country where {x} rises"),
    Field("river", "length_km", None, "How long is {x}, in kilometres?"),
]
FIELDS: dict[tuple[str, str], Field] = {(f.kind, f.name): f for f in _FIELD_LIST}

# One entry per sentence of a page; each sentence has interchangeable templates.
# Every template ends with a period and no value contains one, which is what
# lets extract() invert them.
_SENTENCES: dict[str, list[list[str]]] = {
    "person": [
        ["{name} is {profession} born in {birth_year}.", "{name} (born {birth_year}) is {profession}."],
        ["{surname} was born in the city of {birth_city}.", "The birthplace of {surname} is {birth_city}."],
        ["{surname} studied at {alma_mater}.", "{surname} is a graduate of {alma_mater}."],
        ["{surname} works for {employer}.", "{surname} is currently employed by {employer}."],
    ],
    "city": [
        ["{name} is a city in {country} with a population of {population}.", "{name} is a city of {population} inhabitants in {country}."],
        ["It was founded in {founding_year}.", "The city was established in {founding_year}."],
        ["The {river} flows through {name}.", "{name} lies on the banks of the {river}."],
    ],
    "country": [
        ["{name} is a country whose capital is {capital}.", "The capital of {name} is {capital}."],
        ["{name} gained independence in {independence_year}.", "It has been independent since {independence_year}."],
        ["Its current leader is {leader}.", "{name} is led by {leader}."],
    ],
    "company": [
        ["{name} is {industry} company founded in {founding_year}.", "Founded in {founding_year}, {name} is {industry} company."],
        ["It was founded by {founder}.", "The company was started by {founder}."],
        ["Its headquarters are in {headquarters}.", "{name} is headquartered in {headquarters}."],
        ["It employs about {employees} people.", "{name} has roughly {employees} employees."],
    ],
    "product": [
        ["{name} is {category} made by {maker}.", "{name} is {category} manufactured by {maker}."],
        ["It was launched in {launch_year}.", "{name} first went on sale in {launch_year}."],
    ],
    "university": [
        ["{name} is {uni_type} university located in {location}.", "{name} is {uni_type} university in the city of {location}."],
        ["It was founded in {founding_year}.", "The university was established in {founding_year}."],
        ["It has about {students} students.", "{name} enrolls roughly {students} students."],
    ],
    "river": [
        ["The {name} is a river {length_km} kilometres long.", "The {name} is {length_km} km long."],
        ["It rises in {source_country}.", "The source of the {name} lies in {source_country}."],
    ],
}

# Company name suffix -> (industry, product categories).
_INDUSTRIES = {
    "Motors": ("automotive", ["car", "truck", "motorcycle"]),
    "Systems": ("software", ["database", "operating system", "office suite"]),
    "Labs": ("biotechnology", ["diagnostic kit", "vaccine", "enzyme"]),
    "Foods": ("food", ["breakfast cereal", "soft drink", "snack bar"]),
    "Aeronautics": ("aerospace", ["airliner", "helicopter", "satellite"]),
    "Energy": ("energy", ["solar panel", "wind turbine", "battery"]),
    "Robotics": ("robotics", ["industrial robot", "drone", "robot vacuum"]),
    "Instruments": ("electronics", ["smartphone", "laptop", "camera"]),
    "Pharma": ("pharmaceutical", ["painkiller", "antibiotic", "antiviral drug"]),
    "Textiles": ("textile", ["running shoe", "raincoat", "backpack"]),
}
_PRODUCT_WORDS = ["Nova", "Prime", "Vista", "Pulse", "Orbit", "Apex", "Echo", "Zenith", "Flux", "Aura", "Crest", "Drift", "Ember", "Halo", "Vertex", "Nimbus"]
_PROFESSIONS = [
    "painter", "chemist", "architect", "novelist", "economist", "sculptor", "engineer", "physician", "composer",
    "historian", "journalist", "diplomat", "mathematician", "geologist", "photographer", "film director",
    "botanist", "lawyer", "astronomer", "entrepreneur",
]
_UNI_TYPES = ["public", "private", "technical", "research"]

_ONSETS = ["b", "br", "c", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "pr", "r", "s", "sh", "st", "t", "tr", "v", "z"]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "ai", "ea", "io", "ou"]
_CODAS = ["", "", "n", "r", "l", "s", "m", "nd", "rk", "x", "th"]

# Entities per region at scale 1: about 2,250 train pages and 750 test pages.
_REGION_SIZES = {
    "train": {"person": 900, "city": 360, "country": 36, "company": 300, "product": 480, "university": 90, "river": 90},
    "test": {"person": 300, "city": 120, "country": 12, "company": 100, "product": 160, "university": 30, "river": 30},
}
_QUESTIONS_PER_HOP = {"train": 1000, "test": 250}
MAX_HOPS = 4


@dataclass
class Entity:
    kind: str
    name: str
    region: str
    values: dict[str, str] = field(default_factory=dict)  # every template field, rendered
    links: dict[str, int] = field(default_factory=dict)  # relation field -> entity index
    aliases: tuple[str, ...] = ()  # other accepted answers ("Orvane" for "Orvane River")
    text: str = ""


@dataclass(frozen=True)
class Question:
    text: str
    answers: tuple[str, ...]
    split: str
    start: str  # the entity the question names
    path: tuple[tuple[str, str], ...]  # (kind, field) per hop, in search order

    @property
    def hops(self) -> int:
        return len(self.path)


@dataclass(frozen=True)
class World:
    seed: int
    entities: tuple[Entity, ...]
    questions: tuple[Question, ...]

    def docs(self) -> list[Doc]:
        return [Doc(str(i), e.name, e.text) for i, e in enumerate(self.entities)]


class _Names:
    """Unique invented names; no two entities share a root word."""

    def __init__(self, rng: random.Random):
        self._rng = rng
        self._roots: set[str] = set()

    def root(self) -> str:
        while True:
            syllables = self._rng.choice((2, 2, 2, 3))
            word = "".join(self._rng.choice(_ONSETS) + self._rng.choice(_VOWELS) for _ in range(syllables))
            word += self._rng.choice(_CODAS)
            if len(word) >= 5 and word not in STOPWORDS_EN and word not in self._roots:
                self._roots.add(word)
                return word.capitalize()


def _a(phrase: str) -> str:
    """`phrase` with its indefinite article: "an astronomer", "a car"."""
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def _build_region(rng: random.Random, names: _Names, region: str, sizes: dict[str, int], first_names: list[str], offset: int) -> list[Entity]:
    """Entities of one region; links are absolute indices (region starts at `offset`)."""
    ents: list[Entity] = []
    by_kind: dict[str, list[int]] = {}

    def add(kind: str, name: str, aliases: tuple[str, ...] = ()) -> Entity:
        entity = Entity(kind, name, region, aliases=aliases)
        by_kind.setdefault(kind, []).append(offset + len(ents))
        ents.append(entity)
        return entity

    def get(idx: int) -> Entity:
        return ents[idx - offset]

    suffixes = sorted(_INDUSTRIES)
    for _ in range(sizes["country"]):
        add("country", names.root() + rng.choice(["ia", "land", "ar", "ovia", "eth"]))
    for _ in range(sizes["city"]):
        add("city", names.root())
    for _ in range(sizes["river"]):
        root = names.root()
        add("river", f"{root} River", aliases=(root,))
    for _ in range(sizes["university"]):
        root = names.root()
        add("university", rng.choice([f"{root} University", f"University of {root}", f"{root} Institute of Technology"]))
    for _ in range(sizes["company"]):
        root = names.root()
        add("company", f"{root} {rng.choice(suffixes)}", aliases=(root,))
    for _ in range(sizes["product"]):
        add("product", f"{names.root()} {rng.choice(_PRODUCT_WORDS)}")
    for _ in range(sizes["person"]):
        add("person", f"{rng.choice(first_names)} {names.root()}")

    countries, cities = by_kind["country"], by_kind["city"]
    # Every country gets at least one city, so it has a capital of its own.
    city_country = {c: countries[i] if i < len(countries) else rng.choice(countries) for i, c in enumerate(cities)}
    for p in by_kind["person"]:
        e = get(p)
        e.values.update(name=e.name, surname=e.name.split()[-1], profession=_a(rng.choice(_PROFESSIONS)), birth_year=str(rng.randint(1900, 1995)))
        e.links.update(birth_city=rng.choice(cities), alma_mater=rng.choice(by_kind["university"]), employer=rng.choice(by_kind["company"]))
    for c in cities:
        e = get(c)
        e.values.update(name=e.name, population=f"{rng.randint(5, 3000) * 1000 + rng.randint(0, 999):,}", founding_year=str(rng.randint(800, 1899)))
        e.links.update(country=city_country[c], river=rng.choice(by_kind["river"]))
    for k in countries:
        e = get(k)
        own_cities = [c for c in cities if city_country[c] == k]
        e.values.update(name=e.name, independence_year=str(rng.randint(1700, 1999)))
        e.links.update(capital=rng.choice(own_cities), leader=rng.choice(by_kind["person"]))
    for m in by_kind["company"]:
        e = get(m)
        founder = rng.choice(by_kind["person"])
        founded = min(int(get(founder).values["birth_year"]) + rng.randint(20, 50), 2020)
        e.values.update(name=e.name, industry=_a(_INDUSTRIES[e.name.split()[-1]][0]), founding_year=str(founded), employees=f"{rng.randint(20, 90000):,}")
        e.links.update(founder=founder, headquarters=rng.choice(cities))
    for q in by_kind["product"]:
        e = get(q)
        maker_idx = rng.choice(by_kind["company"])
        maker = get(maker_idx)
        categories = _INDUSTRIES[maker.name.split()[-1]][1]
        e.values.update(name=e.name, category=_a(rng.choice(categories)), launch_year=str(rng.randint(int(maker.values["founding_year"]), 2024)))
        e.links.update(maker=maker_idx)
    for u in by_kind["university"]:
        e = get(u)
        e.values.update(name=e.name, uni_type=_a(rng.choice(_UNI_TYPES)), founding_year=str(rng.randint(1400, 1990)), students=f"{rng.randint(800, 60000):,}")
        e.links.update(location=rng.choice(cities))
    for r in by_kind["river"]:
        e = get(r)
        e.values.update(name=e.name, length_km=str(rng.randint(30, 4000)))
        e.links.update(source_country=rng.choice(countries))
    return ents


def _write_pages(rng: random.Random, entities: list[Entity]) -> None:
    for e in entities:
        for rel, idx in e.links.items():
            e.values[rel] = entities[idx].name
        e.text = " ".join(rng.choice(options).format(**e.values) for options in _SENTENCES[e.kind])


def _answers(entities: list[Entity], entity: Entity, fld: Field) -> tuple[str, ...]:
    if fld.target is not None:
        target = entities[entity.links[fld.name]]
        return (target.name, *target.aliases)
    value = entity.values[fld.name]
    if fld.name == "length_km":
        return (value, f"{value} km", f"{value} kilometres", f"{value} kilometers")
    return (value,)


def _sample_question(rng: random.Random, entities: list[Entity], pool: list[int], hops: int, split: str) -> Question | None:
    """One random chain of `hops` facts from a random start, or None if it loops."""
    start = rng.choice(pool)
    current, visited, path = start, {start}, []
    for hop in range(hops):
        kind = entities[current].kind
        options = [f for f in _FIELD_LIST if f.kind == kind and (f.target is not None or hop == hops - 1)]
        fld = rng.choice(options)
        path.append(fld)
        if fld.target is None:
            break
        if hop < hops - 1:
            current = entities[current].links[fld.name]
            if current in visited:
                return None
            visited.add(current)
    last_entity = entities[current]
    last = path[-1]
    if last.target is not None and last_entity.links[last.name] in visited:
        return None
    np_ = entities[start].name
    for fld in path[:-1]:
        np_ = fld.phrase.format(x=np_)
    text = last.question.format(x=np_)
    answers = _answers(entities, last_entity, last)
    if any(a.lower() in text.lower() for a in answers):
        return None
    return Question(text, answers, split, entities[start].name, tuple((f.kind, f.name) for f in path))


def generate_world(seed: int = 0, scale: float = 1.0) -> World:
    """Build the world for `seed`; `scale` multiplies entity and question counts."""
    rng = random.Random(seed)
    names = _Names(rng)
    first_names = [names.root() for _ in range(160)]
    entities: list[Entity] = []
    for region, sizes in _REGION_SIZES.items():
        scaled = {k: max(2, round(v * scale)) for k, v in sizes.items()}
        scaled["city"] = max(scaled["city"], scaled["country"])  # every country needs a city of its own
        entities += _build_region(rng, names, region, scaled, first_names, offset=len(entities))
    _write_pages(rng, entities)

    questions: list[Question] = []
    for split, per_hop in _QUESTIONS_PER_HOP.items():
        pool = [i for i, e in enumerate(entities) if e.region == split]
        seen: set[str] = set()
        split_questions: list[Question] = []
        for hops in range(1, MAX_HOPS + 1):
            wanted, made, tries = max(1, round(per_hop * scale)), 0, 0
            while made < wanted and tries < wanted * 50:
                tries += 1
                q = _sample_question(rng, entities, pool, hops, split)
                if q is None or q.text in seen:
                    continue
                seen.add(q.text)
                split_questions.append(q)
                made += 1
        rng.shuffle(split_questions)
        questions += split_questions
    return World(seed, tuple(entities), tuple(questions))


@functools.lru_cache(maxsize=4)
def get_world(seed: int = 0) -> World:
    """The world for `seed` at the default scale, generated once per process."""
    return generate_world(seed)


@functools.cache
def _field_patterns(kind: str, name: str) -> tuple[re.Pattern[str], ...]:
    patterns = []
    for options in _SENTENCES[kind]:
        for template in options:
            parts = list(string.Formatter().parse(template))
            if not any(f == name for _, f, _, _ in parts):
                continue
            regex = r"(?:^|(?<=\. ))"
            for literal, fname, _, _ in parts:
                regex += re.escape(literal)
                if fname is not None:
                    regex += r"(?P<value>[^.]+?)" if fname == name else r"[^.]+?"
            patterns.append(re.compile(regex))
    return tuple(patterns)


def extract(kind: str, name: str, text: str) -> str | None:
    """Read field `name` off the page text of a `kind` entity (inverts the templates)."""
    match = _field_match(kind, name, text)
    return match.group("value") if match else None


def extract_quote(kind: str, name: str, text: str) -> str | None:
    """The page's own words that state field `name`: its sentence, from the start through the value.

    "Mesherk is a city in Venoueth" for a city's country (the sentence goes on
    "with a population of ..."): what a reader quotes to show where a value came from.
    """
    match = _field_match(kind, name, text)
    return text[match.start():match.end("value")] if match else None


def _field_match(kind: str, name: str, text: str) -> re.Match[str] | None:
    for pattern in _field_patterns(kind, name):
        match = pattern.search(text)
        if match:
            return match
    return None

"""The generator of the shipped search corpus: an invented archipelago, written out as passages.

Every fact is made up (names are built from syllables), so a model cannot answer from memory and
must search. Each entity gets one passage; questions come in two kinds:

- single-hop: one attribute of one entity ("In what year was the town of Velmarost founded?");
- two-hop: an attribute of an entity named only through another ("In what year was the town
  where Ada Kellwyn was born founded?").

Each question lists its answers (first one canonical), the passage ids that support it, and the
search queries an oracle would issue (``hops``), which the scripted policy replays. The output is
deterministic: ``python -m toolgym.plugins.search.worldgen`` rewrites ``data/corpus.jsonl`` and
``data/qa.jsonl`` byte for byte (a test checks that the shipped files are what it writes).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SEED = "toolgym-search-world/1"
Entity = dict[str, Any]
DATA_DIR = Path(__file__).parent / "data"

_ONSET = [
    "b",
    "br",
    "c",
    "d",
    "dr",
    "f",
    "g",
    "h",
    "k",
    "kel",
    "l",
    "m",
    "n",
    "p",
    "qu",
    "r",
    "s",
    "st",
    "t",
    "th",
    "v",
    "w",
    "z",
]
_NUCLEUS = ["a", "e", "i", "o", "u", "ae", "ei", "ou", "y"]
_CODA = ["", "", "n", "r", "l", "s", "th", "m", "rn", "ck", "sk", "nd", "w"]
_TOWN_END = ["mere", "holt", "by", "wick", "stead", "ford", "haven", "moor", "ton", "mouth", "gate", "fell"]
_FIRST = [
    "Ada",
    "Tomas",
    "Ilse",
    "Oren",
    "Mira",
    "Jorun",
    "Elin",
    "Casimir",
    "Petra",
    "Aldo",
    "Signe",
    "Bram",
    "Hedda",
    "Lucan",
    "Vera",
    "Anselm",
    "Nadia",
    "Emeric",
    "Rosalind",
    "Tobin",
    "Greta",
    "Leopold",
    "Ines",
    "Matthias",
    "Solveig",
    "Dorian",
    "Katrin",
    "Ulric",
    "Beatrix",
    "Piet",
]
_PROFESSIONS = [
    "astronomer",
    "shipwright",
    "botanist",
    "cartographer",
    "composer",
    "engineer",
    "painter",
    "poet",
    "physician",
    "clockmaker",
    "chemist",
    "architect",
    "novelist",
    "glassblower",
]
_WORK_KIND = {
    "astronomer": "star atlas",
    "shipwright": "treatise",
    "botanist": "herbal",
    "cartographer": "atlas",
    "composer": "symphony",
    "engineer": "invention",
    "painter": "painting",
    "poet": "poem cycle",
    "physician": "medical treatise",
    "clockmaker": "clock",
    "chemist": "treatise",
    "architect": "building",
    "novelist": "novel",
    "glassblower": "window",
}
_ADJ = [
    "Silver",
    "Drowned",
    "Patient",
    "Amber",
    "Hollow",
    "Ninth",
    "Salt",
    "Quiet",
    "Copper",
    "Last",
    "Winter",
    "Borrowed",
    "Crooked",
    "Glass",
    "Iron",
    "Northern",
    "Sleeping",
    "Scarlet",
    "Wandering",
    "Golden",
]
_NOUN = [
    "Orchard",
    "Lantern",
    "Heron",
    "Tide",
    "Compass",
    "Harbour",
    "Meridian",
    "Garden",
    "Bell",
    "Storm",
    "Almanac",
    "Comet",
    "Willow",
    "Ferry",
    "Loom",
    "Archive",
    "Beacon",
    "Thistle",
    "Anchor",
    "Cathedral",
]
_INDUSTRY = [
    "salt works",
    "rope making",
    "blue dye",
    "slate quarries",
    "oyster beds",
    "paper mills",
    "wool trade",
    "boat building",
    "cider presses",
    "copper mines",
    "lace making",
    "peat cutting",
]
_SEAS = ["Grey Sea", "Sea of Marrow", "Ambrine Strait", "Northern Reach", "Gulf of Oss"]
_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_FESTIVAL_WHAT = [
    "the first herring catch",
    "the return of the swallows",
    "the longest night",
    "the apple harvest",
    "a ship that survived a great storm",
    "the town's founding",
    "the spring tides",
    "the first frost",
]
_INGREDIENTS = [
    "smoked eel",
    "barley",
    "sea kale",
    "juniper berries",
    "goat cheese",
    "rye",
    "mussels",
    "turnips",
    "blackcurrants",
    "honey",
    "chestnuts",
    "salted cod",
]
_DISH_KIND = ["stew", "pie", "bread", "pudding", "broth", "cake", "dumplings", "tart"]
_FIELDS = ["navigation", "medicine", "music", "law", "agriculture", "astronomy", "engineering", "theology"]


@dataclass
class World:
    rng: random.Random
    used: set[str] = field(default_factory=set)
    docs: list[dict[str, str]] = field(default_factory=list)
    qa: list[dict[str, Any]] = field(default_factory=list)

    def word(self, syllables: int, end: str = "") -> str:
        while True:
            parts = [self.rng.choice(_ONSET) + self.rng.choice(_NUCLEUS) for _ in range(syllables)]
            name = ("".join(parts) + self.rng.choice(_CODA) + end).capitalize()
            if name not in self.used and 4 <= len(name) <= 14:
                self.used.add(name)
                return name

    def unique(self, make: Any) -> str:
        while True:
            name = make()
            if name not in self.used:
                self.used.add(name)
                return str(name)

    def doc(self, kind: str, title: str, sentences: list[str]) -> str:
        doc_id = f"{kind}-{sum(1 for d in self.docs if d['id'].startswith(kind + '-')):03d}"
        self.docs.append({"id": doc_id, "title": title, "text": " ".join(sentences)})
        return doc_id

    def ask(
        self, question: str, answer: str | int, support: list[str], hops: list[str], kind: str = "single"
    ) -> None:
        self.qa.append(
            {
                "id": f"q{len(self.qa):04d}",
                "question": question,
                "answers": [str(answer)],
                "support": support,
                "hops": hops,
                "type": kind,
            }
        )


def _shuffled(rng: random.Random, items: list[str]) -> list[str]:
    items = list(items)
    rng.shuffle(items)
    return items


def build_world(seed: str = SEED) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """(passages, questions) of the world of ``seed``."""
    w = World(random.Random(seed))
    r = w.rng
    islands = [w.word(2) for _ in range(8)]
    seas = {isl: r.choice(_SEAS) for isl in islands}
    people: list[Entity] = [
        {
            "name": f"{r.choice(_FIRST)} {w.word(2)}",
            "born": r.randint(1640, 1930),
            "profession": r.choice(_PROFESSIONS),
        }
        for _ in range(80)
    ]
    towns: list[Entity] = []
    for i in range(50):
        towns.append(
            {
                "name": w.word(1, r.choice(_TOWN_END)),
                "island": islands[i % len(islands)],
                "founded": r.randint(1050, 1780),
                "founder": f"{r.choice(_FIRST)} {w.word(2)}",
                "industry": r.choice(_INDUSTRY),
                "population": r.randint(800, 95000),
            }
        )
    rivers: list[Entity] = [
        {"name": w.word(2), "island": islands[i % len(islands)], "length": r.randint(12, 340)}
        for i in range(20)
    ]
    mountains: list[Entity] = [
        {"name": f"Mount {w.word(2)}", "island": islands[i % len(islands)], "height": r.randint(420, 3100)}
        for i in range(15)
    ]
    for i, town in enumerate(towns):
        town["river"] = rivers[i % len(rivers)]["name"]
    for person in people:
        person["birthplace"] = r.choice(towns)["name"]
    for i, river in enumerate(rivers):
        river["source"] = mountains[i % len(mountains)]["name"]
        river["mouth"] = seas[river["island"]]
    for m in mountains:
        climber = r.choice(people)
        m["climber"], m["climbed"] = climber["name"], climber["born"] + r.randint(22, 45)

    town_by_name: dict[str, Entity] = {t["name"]: t for t in towns}
    person_doc: dict[str, str] = {}
    town_doc: dict[str, str] = {}

    for isl in islands:
        capital = next(t["name"] for t in towns if t["island"] == isl)
        peak = max((m for m in mountains if m["island"] == isl), key=lambda m: m["height"])
        area = r.randint(40, 2600)
        d = w.doc(
            "island",
            isl,
            [
                f"{isl} is an island of the archipelago, lying in the {seas[isl]}.",
                f"It covers {area} square kilometres and its capital is {capital}.",
                f"The highest point of {isl} is {peak['name']}.",
            ],
        )
        w.ask(f"What is the capital of the island of {isl}?", capital, [d], [f"capital of the island {isl}"])
    for t in towns:
        s = _shuffled(
            r,
            [
                f"It was founded in {t['founded']} by {t['founder']}.",
                f"The town lies on the {t['river']} river.",
                f"It is known for its {t['industry']}.",
                f"At the last census it had {t['population']} inhabitants.",
            ],
        )
        d = town_doc[t["name"]] = w.doc(
            "town", t["name"], [f"{t['name']} is a town on the island of {t['island']}.", *s]
        )
        attr = r.choice(["founded", "founder", "industry", "river"])
        q = {
            "founded": (f"In what year was the town of {t['name']} founded?", t["founded"]),
            "founder": (f"Who founded the town of {t['name']}?", t["founder"]),
            "industry": (f"What is the town of {t['name']} known for?", t["industry"]),
            "river": (f"On which river does the town of {t['name']} lie?", t["river"]),
        }[attr]
        w.ask(q[0], q[1], [d], [q[0]])
    for rv in rivers:
        d = w.doc(
            "river",
            f"{rv['name']} (river)",
            [
                f"The {rv['name']} is a river of {rv['island']}, {rv['length']} kilometres long.",
                f"It rises on the slopes of {rv['source']} and flows into the {rv['mouth']}.",
            ],
        )
        w.ask(
            f"How long is the {rv['name']} river, in kilometres?",
            rv["length"],
            [d],
            [f"{rv['name']} river length"],
        )
    for m in mountains:
        d = w.doc(
            "mountain",
            m["name"],
            [
                f"{m['name']} is a mountain on {m['island']}, {m['height']} metres high.",
                f"It was first climbed in {m['climbed']} by {m['climber']}.",
            ],
        )
        w.ask(f"Who first climbed {m['name']}?", m["climber"], [d], [f"{m['name']} first climbed"])
    works: list[Entity] = []
    for p in people:
        work = {
            "title": w.unique(lambda: f"The {r.choice(_ADJ)} {r.choice(_NOUN)}"),
            "creator": p["name"],
            "kind": _WORK_KIND[p["profession"]],
            "year": p["born"] + r.randint(24, 60),
        }
        works.append(work)
        p["work"] = work["title"]
        died = p["born"] + r.randint(62, 91)
        s = _shuffled(
            r,
            [
                f"{p['name']} was born in {p['born']} in {p['birthplace']}.",
                f"{p['name']} is best remembered for {work['title']}, a {work['kind']} of {work['year']}.",
                f"{p['name']} died in {died}.",
            ],
        )
        person_doc[p["name"]] = w.doc(
            "person", p["name"], [f"{p['name']} was a {p['profession']} of the archipelago.", *s]
        )
    for p in people:
        d = person_doc[p["name"]]
        attr = r.choice(["born", "birthplace", "profession"])
        q = {
            "born": (f"In what year was {p['name']} born?", p["born"]),
            "birthplace": (f"In which town was {p['name']} born?", p["birthplace"]),
            "profession": (f"What was the profession of {p['name']}?", p["profession"]),
        }[attr]
        w.ask(q[0], q[1], [d], [q[0]])
    for work in works[:40]:
        d = w.doc(
            "work",
            work["title"],
            [
                f"{work['title']} is a {work['kind']} made in {work['year']} by {work['creator']}.",
                "It is counted among the best-known works of its maker.",
            ],
        )
        w.ask(
            f"Who made the {work['kind']} {work['title']}?",
            work["creator"],
            [d],
            [f"{work['title']} {work['kind']}"],
        )
    for _ in range(30):
        name = w.unique(lambda: f"{r.choice(_ADJ)} {r.choice(_NOUN)}")
        yard, captain = r.choice(towns), r.choice(people)
        launched = captain["born"] + r.randint(20, 40)
        fate = r.choice(
            [
                f"was wrecked off {r.choice(islands)} in {launched + r.randint(3, 30)}",
                f"was broken up for timber in {launched + r.randint(20, 60)}",
                f"is preserved as a museum ship in {r.choice(towns)['name']}",
            ]
        )
        d = w.doc(
            "ship",
            f"{name} (ship)",
            [
                f"The {name} was a ship built at {yard['name']} and launched in {launched}.",
                f"Her first captain was {captain['name']}.",
                f"The {name} {fate}.",
            ],
        )
        w.ask(f"At which town was the ship {name} built?", yard["name"], [d], [f"ship {name} built launched"])
        w.ask(
            f"On which island is the town where the ship {name} was built?",
            yard["island"],
            [d, town_doc[yard["name"]]],
            [f"ship {name} built launched", f"{yard['name']} town island"],
            "two-hop",
        )
    for _ in range(20):
        town = r.choice(towns)
        name = w.unique(
            lambda t=town: (
                f"{t['name']} {r.choice(['Lantern Night', 'Tide Fair', 'Bell Days', 'Harvest Moot', 'Kite Feast'])}"
            )
        )
        month, what, first = r.choice(_MONTHS), r.choice(_FESTIVAL_WHAT), town["founded"] + r.randint(5, 300)
        d = w.doc(
            "festival",
            name,
            [
                f"The {name} is a festival held every {month} in {town['name']}.",
                f"It celebrates {what} and was first held in {first}.",
            ],
        )
        w.ask(f"In which month is the {name} held?", month, [d], [f"{name} festival month"])
    for _ in range(20):
        town, ingredient = r.choice(towns), r.choice(_INGREDIENTS)
        name = w.unique(lambda: f"{w.word(2)} {r.choice(_DISH_KIND)}")
        d = w.doc(
            "dish",
            name,
            [
                f"{name} is a dish from {town['name']}, made chiefly with {ingredient}.",
                "It is traditionally served on feast days.",
            ],
        )
        w.ask(f"What is the main ingredient of {name}?", ingredient, [d], [f"{name} dish ingredient"])
    for _ in range(15):
        town, founder, subject = r.choice(towns), r.choice(people), r.choice(_FIELDS)
        name = w.unique(lambda t=town: f"{r.choice(['College', 'Academy', 'School'])} of {t['name']}")
        year = founder["born"] + r.randint(30, 55)
        d = w.doc(
            "institution",
            name,
            [
                f"The {name} was founded in {year} by {founder['name']}.",
                f"It is known above all for teaching {subject}.",
            ],
        )
        w.ask(f"Who founded the {name}?", founder["name"], [d], [f"{name} founded"])
        w.ask(
            f"In what year was the founder of the {name} born?",
            founder["born"],
            [d, person_doc[founder["name"]]],
            [f"{name} founded", f"{founder['name']} born"],
            "two-hop",
        )
    for p in people[:40]:
        town = town_by_name[p["birthplace"]]
        w.ask(
            f"In what year was the town where {p['name']} was born founded?",
            town["founded"],
            [person_doc[p["name"]], town_doc[town["name"]]],
            [f"{p['name']} born", f"{town['name']} town founded"],
            "two-hop",
        )
    return w.docs, w.qa


def write(out_dir: Path = DATA_DIR) -> None:
    docs, qa = build_world()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "corpus.jsonl").write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs))
    (out_dir / "qa.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in qa))


if __name__ == "__main__":
    write()
    print(f"wrote {DATA_DIR / 'corpus.jsonl'} and {DATA_DIR / 'qa.jsonl'}")

"""A demo world made to learn in: invented towns, people and countries, and four task families that use each tool
the way the paper's agents do, generated from a seed in well under a second.

Families (the answer is always short and scored by exact match through ``afm.rewards``, data source ``afm_demo``):

* ``arith``    "Compute 37*48+15."                        -> ``code`` (print the expression) -> 1791
* ``lookup``   "What is the population of Town 4821?"      -> ``web_search`` (the snippet links the town's page but
  holds no figure; in the teacher-shortcut world, a census page is linked above it) -> ``crawl_page`` (the page
  states it) -> 48213
* ``multihop`` "What is the founding year of the birthplace of Citizen 3315?" -> ``wiki_search`` (born in Town
  4821) -> ``wiki_search`` (Town 4821 is a town in Keldria, founded in 1843) -> 1843
* ``calc``     "How many years before 2026 was the founding of Town 4821?" -> ``wiki_search`` (founded in 1843) ->
  ``code`` (print(2026-1843))                                 -> 183

Towns and people are numbered (``Town 4821``, ``Citizen 3315``), not named: every family then copies digits from
the question or an observation into a tool call, the one copy skill a 2-layer CPU student picks up in minutes
(digits are single tokens); for the same reason ``multihop`` asks for a year, not a country (the student answered
a constant country whatever the passage said). With invented names (``Varnok``, ``Alma Torvel``) it learned the
arithmetic family and little else: it wrote names it had memorised instead of copying the question's
(benchmarks/RESULTS.md, 2026-11-25).

Every question ends with what must be copied (``Town 4821``, ``Citizen 3315``, ``Compute 37*48+15``; all operands
two digits), and the teacher's first thought restates it (``<think>Town 4821: I need ...``, ``<think>Compute
37*48+15 with code.``): the first copy then sits at the same distance from its source in every family, one copy
pattern instead of four. Before, every default run ended with one family at 0-4% (``arith`` or ``calc``); with this
shape, the student's ``rope_theta`` at 1e6 and a key/value head per query head, the default learns all four
(benchmarks/RESULTS.md, 2026-11-26 afternoon).

**The teacher-shortcut world** (``build_world(shortcut=True)``, what ``afm quickstart`` runs unless
``--no-teacher-shortcut``): the shortcut
RL is meant to remove (the paper's second half: agentic RL takes the distilled agent beyond its teacher). Each town
also has a census page (``census-town-4821.html``: "Its population was 47102 at the last census"), and the search
ranks it first for "Town 4821 population"; for half the towns (``CENSUS_CURRENT``) the town has grown or shrunk
since, and only its own page (``town-4821.html``, ranked second) states the current population, the answer. The
teacher is imperfect the way an LLM teacher is: in ``SHORTCUT_RATE`` of its ``lookup`` runs it reads the top result
instead of the town's own page (the same plan, the same kind of copy, another address), and its verifier, which has
seen only that page, passes the figure. The quality filter drops the shortcut runs that were wrong but keeps the half
that happened to be right, and nothing on the census page tells the two apart, so the SFT set still reads the census
page in 0.8 x 0.5 : 0.2 = 2 of every 3 ``lookup`` demonstrations. The student copies that habit: the choice is the
first token of the crawl address after the host (``/census`` or ``/town``), learned as the demonstrations' odds
(p(census page) 0.65-0.69 on every held-out town); greedy, it always reads the census page and is right on about half
the questions. RL selection then keeps the ``lookup`` questions it solves only sometimes, and DAPO's reward, the real
``compute_score`` (exact match with the page's figure), pays the rollouts that read the town's page and not the wrong
census figures: RL removes a habit SFT cannot, because the filtered demonstrations never show it failing. The other
families have no such shortcut (their teacher's slips are caught by its verifier or dropped by the filter), so the
quickstart's RL set is the ``lookup`` questions (``SHORTCUT_FAMILY``), the RL data a user picks where the distilled
agent falls short.

What the addresses taught (benchmarks/RESULTS.md, 2026-11-26 night and 2026-11-27): a census count in the search
snippet "confirmed" by a second search was a second copy route and needed 6 SFT epochs; a choice *after* the copied
digits (``town-4821-census.html``) was never sampled (0 of 64 runs read the town's page: the student continues the
way the first search result does), so DAPO had no better route to reinforce. With the choice first, DAPO at
temperature 0.7 flipped it on every held-out town from one SFT policy (``lookup`` +32 points); from another it did
not, because that policy wrote the town's own address wrongly (right on 4 of 25 towns against 20 of 25 for the
census page's): a route copied worse is a route RL learns to avoid. Two addresses that make both copies alike
(``census/town-4821`` with ``town-4821``; ``census/town-4821`` with ``pages/town-4821``) either kept the asymmetry or
kept the student on the SFT loss plateau in 3 of 3 runs, so the world is back on this one. Routes through
the wiki (as the shortcut or as the careful route, the choice in the first thought or after the search) and twice the
``lookup`` questions did no better (RESULTS.md, 2026-11-27 morning): the route shown 1 time in 3 is copied worse.
What helped is more steps: with 6 SFT epochs (``SHORTCUT_SETTINGS``) seeds 0, 1 and 3 copied both addresses right
on 21-25 of 25 towns and DAPO took ``lookup`` +60, +44 and +52; seed 2 copied its own page's on 13 (14 after 8
epochs) and gained +8 [0, +20]. At SFT lr 1e-3 instead of 2e-3 the same seed copied 24 of 25; DAPO's 4 steps at 1e-4
then broke digit copies on seed 0 (``calc`` -24), and 8 steps at 5e-5 moved the route without that: ``lookup`` +40,
+48, +32 on seeds 0-2 with no other family below its CI (RESULTS.md, 2026-11-27 ninth session): the default.

Splits ``train`` (teacher distillation), ``rl`` (agentic RL) and ``heldout`` (evaluation) are disjoint in towns,
people and arithmetic operands. Facts are invented, so an answer can
only come from the tools. The world's documents are served by the demo servers (:class:`afm.quickstart.servers.
DemoServers` with ``world=``): town pages on the demo site, town and person passages in the wiki corpus, town
entries (without figures) in the search corpus.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from afm.prompts.registry import Prompt

FAMILIES = ("arith", "lookup", "multihop", "calc")
SPLITS = ("train", "rl", "heldout")
DATA_SOURCE = "afm_demo"
YEAR = 2026
TOOLS_OF = {"arith": ("code",), "lookup": ("web_search", "crawl_page"), "multihop": ("wiki_search",),
            "calc": ("wiki_search", "code")}
# the teacher-shortcut world (module docstring; off by default)
CENSUS_CURRENT = 0.5  # share of towns whose census page still states their population
SHORTCUT_RATE = 0.8  # share of lookup runs in which the teacher reads the census page (the top search result)
# the family RL is meant to improve there, and why (the quickstart's report says it)
SHORTCUT_FAMILY = "lookup"
SHORTCUT_WHY = ("the teacher reads the top search result, the town's census page, instead of the town's own page; "
                "the filter keeps it whenever the census was still right (half the towns), so SFT copies it and is "
                "right about half the time; DAPO's reward (compute_score against the current figure) pays only the "
                "rollouts that read the town's own page")
COUNTRIES = ("Keldria", "Ostmark", "Varelia", "Doruna", "Tessin", "Arvola", "Brenmoor", "Caldera", "Elmaro",
             "Fennick", "Gorvath", "Halvene")
PROMPT = Prompt(
    key="afm.quickstart.world:PROMPT", version="2026-11-24.1",  # the key resolves to this object (module:attr)
    text=("Solve it with the tools web_search, crawl_page, wiki_search and code; think, plan, call tools, "
          "suggest an answer, double check it, then answer."),
    tools=("web_search", "crawl_page", "wiki_search", "code"),
    answer_format="<answer>short answer</answer>",
    description="the quickstart's demo world (afm.quickstart.world)",
    tags=("think", "plan", "web_search", "crawl_page", "wiki_search", "code", "observation", "reflection",
          "suggested_answer", "double_check", "answer"))


def slug(name: str) -> str:
    """The page name of a town on the demo site (``Town 4821`` -> ``town-4821``)."""
    return name.lower().replace(" ", "-")


def census_slug(name: str) -> str:
    """The page name of a town's census page (teacher-shortcut world: ``Town 4821`` -> ``census-town-4821``): the
    word that tells it from the town's own page is the first token after the host, not a token after copied digits
    (module docstring)."""
    return f"census-{slug(name)}"


@dataclass(frozen=True)
class Town:
    name: str
    country: str
    population: int
    founded: int
    census: int = 0  # teacher-shortcut world: the figure of its census page (the last census); 0: no such page

    @property
    def slug(self) -> str:
        return slug(self.name)

    @property
    def census_slug(self) -> str:
        return census_slug(self.name)


@dataclass(frozen=True)
class Person:
    name: str
    town: str
    trade: str


@dataclass
class Task:
    """One question with its gold answer, family and the facts a solver needs (``facts``; never shown)."""

    id: str
    family: str
    split: str
    question: str
    answer: str
    facts: dict[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        """The question file row (``afm eval run`` / ``afm infer`` / ``afm data distill`` / ``afm data rl``)."""
        return {"id": self.id, "question": self.question, "answer": [self.answer], "golden_answers": [self.answer],
                "family": self.family, "task": "math" if self.family == "arith" else "qa",
                "data_source": DATA_SOURCE, "tools": list(PROMPT.tools),
                "prompt_key": "afm.quickstart.world:PROMPT"}


@dataclass
class World:
    """Towns and people of every split, and the tasks."""

    seed: int
    towns: dict[str, list[Town]]
    people: dict[str, list[Person]]
    tasks: dict[str, list[Task]]

    def all_towns(self) -> list[Town]:
        return [t for s in SPLITS for t in self.towns[s]]

    def all_people(self) -> list[Person]:
        return [p for s in SPLITS for p in self.people[s]]

    def search_results(self) -> int:
        """Results per search the questions need: the town's page; in the teacher-shortcut world its census page
        (ranked first) and its own page."""
        return 2 if any(t.census for t in self.all_towns()) else 1

    def town(self, name: str) -> Town | None:
        return next((t for t in self.all_towns() if t.name.lower() == name.lower()), None)

    def person(self, name: str) -> Person | None:
        return next((p for p in self.all_people() if p.name.lower() == name.lower()), None)

    # -- documents for the servers ----------------------------------------------------------------------------
    def site_documents(self) -> list[dict[str, Any]]:
        """Town pages for the demo site: ``{slug, title, paragraphs}``; the population is only here (in the
        teacher-shortcut world, also each town's census page, whose figure is out of date for half the towns)."""
        pages = [{"slug": t.slug, "title": t.name,
                  "paragraphs": [f"{t.name} is a town in {t.country}. Its population is {t.population}."]}
                 for t in self.all_towns()]
        archive = [{"slug": t.census_slug, "title": f"{t.name} census",
                    "paragraphs": [f"{t.name} is a town in {t.country}. Its population was {t.census} at the last "
                                   "census."]} for t in self.all_towns() if t.census]
        return pages + archive

    def search_corpus(self, site_url: str) -> list[dict[str, str]]:
        """Search records linking each town's page; the snippet names the town but holds no figure. In the
        teacher-shortcut world each town's census page has a record too, which mentions the population and so
        ranks first for "<town> population"."""
        base = site_url.rstrip("/")
        records = [{"id": t.slug, "title": t.name, "url": f"{base}/{t.slug}.html",
                    "text": f"{t.name}, a town in {t.country}. Facts and figures on its page."}
                   for t in self.all_towns()]
        archive = [{"id": t.census_slug, "title": f"{t.name} census", "url": f"{base}/{t.census_slug}.html",
                    "text": f"{t.name}, a town in {t.country}: its population at the last census."}
                   for t in self.all_towns() if t.census]
        return records + archive

    def wiki_corpus(self) -> list[dict[str, str]]:
        """Wiki passages: one per town (country, founding year) and one per person (birthplace)."""
        towns = [{"id": t.slug, "contents": f'"{t.name}"\n{t.name} is a town in {t.country}, founded in '
                                                     f"{t.founded}."} for t in self.all_towns()]
        people = [{"id": slug(p.name),
                   "contents": f'"{p.name}"\n{p.name} was a {p.trade} born in {p.town}.'} for p in self.all_people()]
        return towns + people

    def write(self, out_dir: str | Path) -> dict[str, Path]:
        """Question files ``<split>_<family>.jsonl`` plus ``<split>.jsonl`` (all families) and ``world.json``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths: dict[str, Path] = {}
        for split in SPLITS:
            rows = [t.row() for t in self.tasks[split]]
            paths[split] = _write_jsonl(out / f"{split}.jsonl", rows)
            for fam in FAMILIES:
                paths[f"{split}_{fam}"] = _write_jsonl(out / f"{split}_{fam}.jsonl",
                                                       [r for r in rows if r["family"] == fam])
        (out / "world.json").write_text(json.dumps({
            "seed": self.seed, "towns": {s: [_town_row(t) for t in v] for s, v in self.towns.items()},
            "people": {s: [asdict(p) for p in v] for s, v in self.people.items()}}, indent=1) + "\n")
        return paths


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _town_row(town: Town) -> dict[str, Any]:
    """A town as world.json stores it (``census`` only in the teacher-shortcut world)."""
    row = asdict(town)
    if not town.census:
        row.pop("census")
    return row


def stale_census(population: int, rng: random.Random, current_share: float = CENSUS_CURRENT) -> int:
    """The census page's figure of a town: its ``population`` with probability ``current_share``, else an
    older count, 1-20% off (five digits, never the population)."""
    if rng.random() < current_share:
        return population
    older = population - max(1, round(population * rng.uniform(0.01, 0.2)))
    return older if older >= 10000 else population + (population - older)  # a town that shrank: still 5 digits


def build_world(seed: int = 0, per_family: dict[str, int] | None = None, *, shortcut: bool = False,
                census_current: float = CENSUS_CURRENT) -> World:
    """The world for ``seed``: ``per_family[split]`` tasks of each family per split (default 750 / 60 / 25).
    ``shortcut``: the teacher-shortcut world, where ``census_current`` of the towns' census pages show their
    population and the others an older census count (module docstring); every other draw is the same."""
    counts = {"train": 750, "rl": 60, "heldout": 25, **(per_family or {})}
    rng = random.Random(seed)
    # the census figures from a stream of their own: every other draw (towns, people, operands) stays what it was
    # on the worlds the student was measured to learn (benchmarks/RESULTS.md)
    census_rng = random.Random(f"census-{seed}")
    # 2n towns and n people per split, all numbered apart; never a number that reads as a founding year (1200-1989)
    # or a population (5 digits), which the search tools would match and the student would confuse
    needed = sum(3 * counts[s] for s in SPLITS)
    pool = range(2100, 10000) if needed <= 7900 else range(100000, 1000000)
    numbers = iter(rng.sample(pool, needed))
    used_triples: set[tuple[int, int, int]] = set()
    towns: dict[str, list[Town]] = {}
    people: dict[str, list[Person]] = {}
    tasks: dict[str, list[Task]] = {}
    trades = ("painter", "sailor", "weaver", "poet", "baker", "surveyor", "potter", "clockmaker")
    for split in SPLITS:
        n = counts[split]
        ts = [Town(f"Town {next(numbers)}", rng.choice(COUNTRIES), rng.randrange(10000, 99999),
                   rng.randrange(1200, 1990)) for _ in range(2 * n)]
        if shortcut:
            ts = [replace(t, census=stale_census(t.population, census_rng, census_current)) for t in ts]
        ps = [Person(f"Citizen {next(numbers)}", ts[i].name, rng.choice(trades)) for i in range(n)]
        towns[split], people[split] = ts, ps
        out: list[Task] = []
        for i in range(n):
            while True:
                a, b, c = rng.randrange(11, 99), rng.randrange(11, 99), rng.randrange(11, 99)
                if (a, b, c) not in used_triples:
                    used_triples.add((a, b, c))
                    break
            out.append(Task(f"{split}-arith-{i}", "arith", split, f"Compute {a}*{b}+{c}.", str(a * b + c),
                            {"expr": f"{a}*{b}+{c}"}))
            t = ts[n + i]  # lookup / calc towns are not the people's birthplaces
            out.append(Task(f"{split}-lookup-{i}", "lookup", split, f"What is the population of {t.name}?",
                            str(t.population), {"town": t.name}))
            p = ps[i]
            out.append(Task(f"{split}-multihop-{i}", "multihop", split,
                            f"What is the founding year of the birthplace of {p.name}?", str(ts[i].founded),
                            {"person": p.name, "town": p.town}))
            u = ts[(n + i + n // 2) % (2 * n)] if n > 1 else t
            out.append(Task(f"{split}-calc-{i}", "calc", split,
                            f"How many years before {YEAR} was the founding of {u.name}?", str(YEAR - u.founded),
                            {"town": u.name}))
        tasks[split] = out
    return World(seed, towns, people, tasks)

"""A small invented world for offline web/MHQA demos: documents for the search corpus, the wiki corpus and the
demo web site, plus questions whose answers need one or two hops through them.

Facts are fictional on purpose, so that a demo answer can only come from the tools, never from a model's memory.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DemoDocument:
    """One page of the demo world; ``slug`` names its page on the demo site (``/<slug>.html``)."""

    slug: str
    title: str
    paragraphs: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n\n".join(self.paragraphs)


DEMO_DOCUMENTS: tuple[DemoDocument, ...] = (
    DemoDocument("veltria", "Veltria", (
        "Veltria is a small island republic in the Corvan Sea. Its capital and largest city is Marrowgate.",
        "The republic was founded in 1874 after the Treaty of Ostel. Its official language is Veltrian, and its "
        "currency is the Veltrian crown.",
        "Veltria is known for its lighthouses, its salt flats and the annual Lantern Regatta.",
    )),
    DemoDocument("marrowgate", "Marrowgate", (
        "Marrowgate is the capital of Veltria, with a population of about 212,000 people.",
        "The city was designed by the architect Ilse Varnholt, who laid out its spiral harbour district in 1881.",
        "Marrowgate hosts the National Observatory of Veltria and the Corvan Maritime Museum.",
    )),
    DemoDocument("ilse-varnholt", "Ilse Varnholt", (
        "Ilse Varnholt (1839-1912) was a Veltrian architect and engineer, born in the fishing town of Quillhaven.",
        "She designed the street plan of Marrowgate and the Brassel Lighthouse, completed in 1890.",
        "Varnholt studied engineering in Ostel and was the first woman admitted to the Corvan Society of Builders.",
    )),
    DemoDocument("quillhaven", "Quillhaven", (
        "Quillhaven is a fishing town on the northern coast of Veltria, 38 kilometres from Marrowgate.",
        "It is the birthplace of the architect Ilse Varnholt. Its harbour freezes on average 11 days per year.",
    )),
    DemoDocument("brassel-lighthouse", "Brassel Lighthouse", (
        "The Brassel Lighthouse stands on Cape Brassel, at the southern tip of Veltria. It is 47 metres tall.",
        "It was designed by Ilse Varnholt and completed in 1890. Its lamp can be seen from 41 kilometres away.",
    )),
    DemoDocument("lantern-regatta", "Lantern Regatta", (
        "The Lantern Regatta is a night-time sailing race held every August in Marrowgate harbour.",
        "It was first held in 1903. The record for the course was set in 1987 by the sloop Grey Heron, "
        "skippered by Tomas Ekwall, in 2 hours and 14 minutes.",
    )),
    DemoDocument("tomas-ekwall", "Tomas Ekwall", (
        "Tomas Ekwall (born 1951) is a Veltrian sailor who won the Lantern Regatta five times.",
        "He later served as director of the Corvan Maritime Museum from 1996 to 2011.",
    )),
    DemoDocument("veltrian-crown", "Veltrian crown", (
        "The Veltrian crown is the currency of Veltria. One crown is divided into 100 shells.",
        "The crown replaced the older salt mark in 1921, at a rate of 8 salt marks to one crown.",
    )),
    DemoDocument("national-observatory", "National Observatory of Veltria", (
        "The National Observatory of Veltria in Marrowgate opened in 1932. Its main telescope has a 1.2 metre mirror.",
        "Its first director was the astronomer Petra Lund, who catalogued 3,400 variable stars.",
    )),
    DemoDocument("petra-lund", "Petra Lund", (
        "Petra Lund (1890-1968) was a Veltrian astronomer, the first director of the National Observatory of "
        "Veltria.",
        "The asteroid 5127 Lund is named after her. She was born in Quillhaven.",
    )),
)

def _place_documents() -> tuple[DemoDocument, ...]:
    """Pages for the towns of the demo SFT data (afm.demo_content.samples), so a model trained on it can search for them."""
    from afm.demo_content.samples import _FOUNDERS, _PLACES, _RIVERS

    return tuple(DemoDocument(place.lower(), place, (f"{place} is a town on the River {river}.",
                                                     f"{place} was founded by {founder} beside the River {river}."))
                 for place, river, founder in zip(_PLACES, _RIVERS, _FOUNDERS, strict=True))


DEMO_DOCUMENTS = DEMO_DOCUMENTS + _place_documents()

# (question, answer, hops): the answers follow from DEMO_DOCUMENTS only.
DEMO_QUESTIONS: tuple[tuple[str, str, int], ...] = (
    ("What is the capital of Veltria?", "Marrowgate", 1),
    ("In which town was the architect who designed the street plan of Marrowgate born?", "Quillhaven", 2),
    ("How tall is the lighthouse designed by Ilse Varnholt?", "47 metres", 2),
    ("Who skippered the sloop that set the Lantern Regatta course record?", "Tomas Ekwall", 1),
    ("Which museum did the record-holding skipper of the Lantern Regatta later direct?",
     "Corvan Maritime Museum", 2),
    ("How many shells make one Veltrian crown?", "100", 1),
    ("Who was the first director of the observatory in the capital of Veltria?", "Petra Lund", 2),
)


def demo_page_url(site_url: str, doc: DemoDocument) -> str:
    """URL of a document's page on a demo site served at ``site_url``."""
    return f"{site_url.rstrip('/')}/{doc.slug}.html"


def demo_search_corpus(site_url: str) -> list[dict[str, str]]:
    """Records ``{id, title, url, text}`` for the local search backend, linking to the demo site's pages."""
    return [{"id": d.slug, "title": d.title, "url": demo_page_url(site_url, d), "text": d.text}
            for d in DEMO_DOCUMENTS]


def demo_wiki_corpus() -> list[dict[str, str]]:
    """Search-R1-style wiki records ``{id, contents}`` with ``contents = '"Title"\\ntext'``, one per paragraph."""
    out = []
    for d in DEMO_DOCUMENTS:
        for i, para in enumerate(d.paragraphs):
            out.append({"id": f"{d.slug}-{i}", "contents": f'"{d.title}"\n{para}'})
    return out

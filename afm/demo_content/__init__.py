"""The demo's content, as a leaf: invented documents and questions for the search, crawl and wiki servers
(:mod:`.web`) and the hand-written CoA samples of the first quickstart (:mod:`.samples`).

It imports nothing of afm but :mod:`afm.trajectory`, so servers, evaluation and the demo itself can all read it
without importing each other.
"""

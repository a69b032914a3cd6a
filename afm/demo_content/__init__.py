"""The demo's content, as a leaf: invented documents and questions for the search, crawl and wiki servers
(:mod:`.web`) and the hand-written CoA samples of the first quickstart (:mod:`.samples`).

Product data, not an offline stand-in (:mod:`afm.offline` says why): the servers serve it when no corpus is
configured and ``afm eval``'s ``demo_*`` benchmarks ask its questions. It imports nothing of afm but
:mod:`afm.trajectory` (tests/test_import_layers.py), so servers, evaluation, ``--local`` RL and the quickstart can all
read it without importing each other.
"""

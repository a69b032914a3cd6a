"""Standalone FastAPI tool servers (search, crawl, wiki retrieval), reached by afm.tools over HTTP."""

"""Stdlib leaves every layer may use: each module imports nothing of afm (a test checks it).

- :mod:`.names`: the one name normaliser (benchmarks, data sources, prompt keys);
- :mod:`.table_io`: the one reader of JSONL / JSON / parquet row files;
- :mod:`.env_defaults`: default ports and model names, read from the repository's ``environment.sh``;
- :mod:`.chat_client`: the one OpenAI-compatible chat client (teacher, judge, selector, summaries);
- :mod:`.kvcache`: the SQLite / Redis caches of the servers and the judge;
- :mod:`.procs`: free ports and real server processes on 127.0.0.1 (product servers, tests, the quickstart);
- :mod:`.ray_scope`: a ``--local`` run's own Ray folder, stopped without ending other clusters.
"""

"""``afm quickstart``: the recipe in miniature, offline on CPU (an application of afm; no product code imports it).

- :mod:`.profile`: the one source of its settings (how much each run does, the student's shape, DAPO's knobs);
- :mod:`.run`: the eight stages, from the world to the report (``afm quickstart`` calls :func:`.run.run`);
- :mod:`.world`: the demo world (four task families, their splits, documents and the teacher-shortcut variant);
- :mod:`.teacher`: the rule-based teacher model behind the OpenAI API that solves the world;
- :mod:`.servers`: the demo site and the search, crawl and wiki servers as real processes;
- :mod:`.recipe`: distill -> filter -> convert -> masked SFT -> eval, and RL selection (``python -m
  afm.quickstart.recipe``);
- :mod:`.rl`: DAPO through verl's trainer, launched as ``experiments/train_dapo_code_agent.sh --local``;
- :mod:`.summary`: accuracy per stage and family with CIs, costs, the report and the plot.
"""

"""The demo world (afm.quickstart.world), its rule-based teacher model (afm.quickstart.teacher) and the distillation
stage of the miniature recipe (afm.quickstart.recipe) with the real servers, sandbox, filter and converter."""

from __future__ import annotations

import json
import urllib.request

import pytest

from afm.prompts import get_prompt
from afm.quickstart.teacher import Solver, TeacherModel
from afm.quickstart.world import FAMILIES, PROMPT, SPLITS, build_world
from afm.rewards import compute_score

SMALL = {"train": 6, "rl": 4, "heldout": 4}


def test_world_is_seeded_and_splits_are_disjoint():
    a, b = build_world(3, SMALL), build_world(3, SMALL)
    assert [t.question for t in a.tasks["train"]] == [t.question for t in b.tasks["train"]]
    assert [t.question for t in build_world(4, SMALL).tasks["train"]] != [t.question for t in a.tasks["train"]]
    towns = [{t.name for t in a.towns[s]} for s in SPLITS]
    people = [{p.name for p in a.people[s]} for s in SPLITS]
    exprs = [{t.facts["expr"] for t in a.tasks[s] if t.family == "arith"} for s in SPLITS]
    for sets in (towns, people, exprs):
        assert all(not (x & y) for i, x in enumerate(sets) for y in sets[i + 1:])
    for split in SPLITS:
        assert sorted({t.family for t in a.tasks[split]}) == sorted(FAMILIES)
        assert len(a.tasks[split]) == 4 * SMALL[split]
    assert get_prompt(PROMPT.key) is PROMPT  # the key resolves to the object (records and eval name it)


def test_entities_are_numbered_apart_from_years_and_populations():
    """Towns and citizens carry numbers (the copy skill a tiny student learns), never one that reads as a founding
    year or a population, and each number names one entity."""
    import re

    world = build_world(5, {"train": 40, "rl": 5, "heldout": 5})
    names = [t.name for t in world.all_towns()] + [p.name for p in world.all_people()]
    assert all(re.fullmatch(r"(Town|Citizen) \d{4}", n) for n in names)
    numbers = [int(n.split()[1]) for n in names]
    assert len(set(numbers)) == len(numbers) and min(numbers) >= 2100
    assert all(1200 <= t.founded < 1990 and 10000 <= t.population < 100000 for t in world.all_towns())
    assert world.town("town " + names[0].split()[1]) == world.all_towns()[0]
    assert world.site_documents()[0]["slug"] == names[0].lower().replace(" ", "-")


def test_every_gold_scores_one_and_a_wrong_answer_zero():
    world = build_world(0, SMALL)
    for task in world.tasks["heldout"]:
        row = task.row()
        good = compute_score(row["data_source"], f"<answer>{task.answer}</answer>", row["answer"])
        bad = compute_score(row["data_source"], "<answer>Atlantis 12</answer>", row["answer"])
        assert good["acc"] == 1.0 and bad["acc"] == 0.0, task


def test_every_question_ends_with_what_the_first_thought_restates():
    """The first copy sits at the same place in every family: the question ends with the entity (or expression) and
    the teacher's first thought begins with it, so one copy pattern serves the four families (afm.quickstart.world)."""
    import re

    world = build_world(5, SMALL)
    s = Solver(seed=0, mistake_rate=0.0, miss_rate=0.0)
    for task in world.tasks["train"]:
        m = re.search(r"((?:Town|Citizen) \d+|Compute \d\d\*\d\d\+\d\d)[?.]$", task.question)
        assert m, task.question
        think = re.search(r"<think>(.*?)</think>", s.planner(task.question, "(nothing yet)", "Write the plan.")).group(1)
        assert think.startswith(m.group(1)), (task.family, task.question, think)


def test_the_default_world_has_no_census_figures_in_its_snippets():
    """The default world is the one every default run was measured on: no census pages, no figure in a snippet."""
    world = build_world(0, SMALL)
    assert all(t.census == 0 for t in world.all_towns())
    assert all(r["text"].endswith("Facts and figures on its page.") for r in world.search_corpus("http://site"))
    assert len(world.site_documents()) == len(world.all_towns())


def test_the_shortcut_world_has_a_census_page_out_of_date_for_half_the_towns():
    """The teacher-shortcut world (afm.quickstart.world): each town also has a census page, the search's top result for
    its population, whose figure is the population for about half the towns and 1-20% off for the others; only the
    town's own page is current; snippets hold no figure; every other draw is the default world's."""
    world = build_world(0, {"train": 200, "rl": 5, "heldout": 5}, shortcut=True)
    towns = world.all_towns()
    current = sum(t.census == t.population for t in towns) / len(towns)
    assert 0.4 < current < 0.6, current
    stale = [t for t in towns if t.census != t.population]
    assert all(10000 <= t.census < 100000 and abs(t.census - t.population) <= 0.2 * t.population + 1 for t in stale)
    records = world.search_corpus("http://site")
    assert not any(ch.isdigit() for r in records for ch in r["text"].split(",", 1)[1])  # no figure in a snippet
    pages = {d["slug"]: d["paragraphs"][0] for d in world.site_documents()}
    t = stale[0]
    assert pages[t.slug] == f"{t.name} is a town in {t.country}. Its population is {t.population}."
    assert pages[t.census_slug] == f"{t.name} is a town in {t.country}. Its population was {t.census} at the " \
                                        "last census."
    urls = {r["url"] for r in records}
    assert {f"http://site/{t.slug}.html", f"http://site/census-{t.slug}.html"} <= urls
    assert [x.question for x in build_world(0, SMALL, shortcut=True).tasks["heldout"]] == \
        [x.question for x in build_world(0, SMALL).tasks["heldout"]]
    assert [(x.name, x.population, x.founded) for x in build_world(0, SMALL, shortcut=True).all_towns()] == \
        [(x.name, x.population, x.founded) for x in build_world(0, SMALL).all_towns()]


def test_the_census_page_is_the_search_servers_top_result(tmp_path):
    """Why the hurried teacher reads it: the real search server (BM25 over the world's records) ranks a town's census
    page first for the teacher's query and its own page second."""
    import httpx

    from afm.quickstart.servers import DemoServers

    world = build_world(0, {"train": 20, "rl": 2, "heldout": 2}, shortcut=True)
    with DemoServers(tmp_path / "servers", world=world) as servers:
        url = f"http://127.0.0.1:{servers.ports['search']}/search"
        for task in [t for t in world.tasks["train"] if t.family == "lookup"][:5]:
            town = world.town(task.facts["town"])
            hits = httpx.post(url, json={"q": f"{town.name} population", "num": 3}).json()["organic"]
            assert [h["link"].split("/", 3)[3] for h in hits[:2]] == [f"{town.census_slug}.html",
                                                                         f"{town.slug}.html"], hits


def test_the_teacher_takes_the_census_page_only_when_asked_and_its_verifier_passes_it():
    """The imperfect teacher: with ``shortcut_rate`` (SHORTCUT_RATE in the shortcut world), that share of lookup runs
    reads the census page (the top search result) instead of the town's own page, with the same plan; it answers the
    census figure, and its verifier (which saw only that page) scores it 4, right or wrong. The default teacher (rate
    0) never does, and a second read after a failed check takes the town's own page."""
    from afm.quickstart.world import SHORTCUT_RATE

    world = build_world(0, {"train": 300, "rl": 5, "heldout": 5}, shortcut=True)
    s = Solver(seed=0, mistake_rate=0.0, miss_rate=0.0, shortcut_rate=SHORTCUT_RATE)
    default = Solver(seed=0, mistake_rate=0.0, miss_rate=0.0)
    records = world.search_corpus("http://site")
    lookup = [t for t in world.tasks["train"] if t.family == "lookup"]

    def searched(town) -> str:
        hits = [r for r in records if r["title"].startswith(town.name)]
        return f"<web_search> {town.name} population</web_search>\n\n<observation>\n" + "\n".join(
            f"{r['title']}\n{r['url']}\n{r['text']}" for r in sorted(hits, key=lambda r: "census" not in r["url"])) \
            + "\n</observation>"

    reads = {t.question: s.tool_agent("crawl_page", t.question, searched(world.town(t.facts["town"])), "read")
             for t in lookup}
    short = [t for t in lookup if "/census-" in reads[t.question]]
    assert abs(len(short) / len(lookup) - SHORTCUT_RATE) < 0.07
    assert all(s.planner(t.question, "(nothing yet)", "Plan.") == default.planner(t.question, "(nothing yet)", "Plan.")
               for t in lookup)
    assert not any("/census-" in default.tool_agent("crawl_page", t.question, searched(world.town(t.facts["town"])),
                                                   "read") for t in lookup)
    t = next(x for x in short if world.town(x.facts["town"]).census != world.town(x.facts["town"]).population)
    town = world.town(t.facts["town"])
    history = searched(town) + f"\n\n<crawl_page> http://site/{town.census_slug}.html</crawl_page>\n\n" \
        f"<observation>\n{town.name} is a town in {town.country}. Its population was {town.census} at the last " \
        "census.\n</observation>"
    assert f"<answer>{town.census}</answer>" in s.answerer(t.question, history)
    user = f"Question: {t.question}\n\nWork so far:\n{history}\n\nSuggested answer: {town.census}\n\nDouble-check"
    assert "<score>4</score>" in s.verifier(t.question, history, user)  # wrong, and passed: the filter must drop it
    assert f"/{town.slug}.html" in s.tool_agent("crawl_page", t.question, history, "read again")
    page = f"\n\n<crawl_page> x</crawl_page>\n\n<observation>\n{town.name} is a town in {town.country}. " \
           f"Its population is {town.population}.\n</observation>"
    assert f"<answer>{town.population}</answer>" in s.answerer(t.question, history + page)


def test_teacher_endpoint_answers_openai_chat_requests():
    with TeacherModel(seed=0) as teacher:
        system = "You are the PLANNER of a research team that answers a question with tools.\n..."
        body = {"model": "t", "messages": [{"role": "system", "content": system},
                                           {"role": "user", "content": "Question: Compute 12*34+5.\n\nWork so far:\n"
                                                                       "(nothing yet)\n\nWrite the plan."}]}
        req = urllib.request.Request(teacher.base_url + "/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        reply = json.loads(urllib.request.urlopen(req, timeout=10).read())
        text = reply["choices"][0]["message"]["content"]
        assert "<steps>\ncode: compute the expression\nanswer:" in text
        assert reply["usage"]["total_tokens"] > 0
        bad = urllib.request.Request(teacher.base_url + "/chat/completions", data=b"{not json",
                                     headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(bad, timeout=10)
        assert err.value.code == 400


def test_solver_reads_facts_from_observations_only():
    s = Solver(seed=0, mistake_rate=0.0, miss_rate=0.0)
    q = "What is the founding year of the birthplace of Citizen 3315?"
    history = ("<wiki_search>Citizen 3315</wiki_search>\n\n<observation>\nDoc 1 (Title: \"Citizen 3315\")\n"
               "Citizen 3315 was a poet born in Town 4821.\n</observation>\n\n<wiki_search>Town 4821</wiki_search>\n\n"
               "<observation>\nDoc 1 (Title: \"Town 4821\")\nTown 4821 is a town in Keldria, founded in 1843.\n"
               "</observation>")
    assert "<argument>Town 4821</argument>" in s.tool_agent("wiki_search", q, history.split("<wiki_search>Town")[0],
                                                             "find the country of that town")
    assert "<answer>1843</answer>" in s.answerer(q, history)
    assert "<answer>unknown</answer>" in s.answerer(q, "(nothing yet)")
    # the verifier recomputes arithmetic from the question, so a copying slip in the program is caught
    slip = "<code>\n```py\nprint(21*34+5)\n```\n</code>\n\n<observation>\n[STDOUT:BEGIN]\n719\n[STDOUT:END]\n</observation>"
    user = "Question: Compute 12*34+5.\n\nWork so far:\n" + slip + "\n\nSuggested answer: 719\n\nDouble-check"
    assert "<score>1</score>" in s.verifier("Compute 12*34+5.", slip, user)


def test_distillation_through_the_real_teacher_servers_and_sandbox(tmp_path):
    from afm.quickstart.recipe import SFT_DATASET, distill_sft_data, make_world
    from afm.quickstart.servers import DemoServers

    world, root = make_world(tmp_path, seed=1, per_family={"train": 8, "rl": 2, "heldout": 2})
    with DemoServers(tmp_path / "servers", world=world) as servers:
        clean = distill_sft_data(root, servers, tmp_path / "clean", mistake_rate=0.0, miss_rate=0.0, shards=2)
        noisy = distill_sft_data(root, servers, tmp_path / "noisy", mistake_rate=1.0, miss_rate=0.5)
        one = distill_sft_data(root, servers, tmp_path / "one", mistake_rate=0.0, miss_rate=0.0, shards=1)
    runs = [json.loads(line) for line in clean["runs"].read_text().splitlines()]
    assert len(runs) == 32
    # two `afm data distill --shard K/2` processes took half the questions each; together, the one process's SFT set
    assert [len((tmp_path / "clean" / f"runs.{k}.jsonl").read_text().splitlines()) for k in (0, 1)] == [16, 16]
    assert not (tmp_path / "one" / "runs.0.jsonl").exists()
    assert (clean["data"] / f"{SFT_DATASET}.json").read_text() == (one["data"] / f"{SFT_DATASET}.json").read_text()
    # the SFT set follows the question file, whatever order the concurrent teacher runs finished in
    order = [json.loads(line)["id"] for line in (root / "world" / "train.jsonl").read_text().splitlines()]
    kept_ids = [json.loads(line)["question_id"] for line in clean["kept"].read_text().splitlines()]
    assert kept_ids == sorted(kept_ids, key=order.index) and set(kept_ids) <= set(order)
    correct = [r for r in runs if r["status"] == "ok" and r["final_answer"] == r["gold"][0]]
    assert len(correct) >= 0.9 * len(runs)
    by_family = {f: [r for r in runs if f"-{f}-" in r["question_id"]] for f in FAMILIES}
    tools = {f: {c["name"] for r in rs for c in r["tool_calls"]} for f, rs in by_family.items()}
    assert tools == {"arith": {"code"}, "lookup": {"web_search", "crawl_page"}, "multihop": {"wiki_search"},
                     "calc": {"wiki_search", "code"}}
    rows = json.loads((clean["data"] / f"{SFT_DATASET}.json").read_text())
    assert len(rows) == clean["filter_report"]["records_out"] and "<observation>" in rows[0]["output"]
    info = json.loads((clean["data"] / "dataset_info.json").read_text())
    assert SFT_DATASET in info
    # controller.space_after_tag: one-line calls and answers start with a space (the entity keeps its question
    # tokens), programs keep their fenced layout, and the tools still got the stripped argument
    import re
    text = "\n".join(r["output"] for r in rows)
    one_line = re.findall(r"<(wiki_search|web_search|crawl_page|answer|suggested_answer)>([^\n<]*)</\1>", text)
    assert one_line and all(body.startswith(" ") and not body.startswith("  ") for _, body in one_line)
    assert "<code>\n```py" in text
    assert all(c["status"] == "ok" for r in correct for c in r["tool_calls"])
    # every arithmetic program of the noisy teacher has a slip: the verifier rejects some answers (re-plan, then a
    # self-corrected run, upsampled) and misses others (wrong runs the quality filter drops)
    filters = {f["name"]: f for f in noisy["filter_report"]["filters"]}
    assert filters["quality"]["dropped"] > 0
    assert filters["upsample"]["added"] > 0


def test_shortcut_distillation_keeps_only_the_shortcuts_that_were_right(tmp_path):
    """The teacher-shortcut world through the real teacher server, search server and filter: the shortcut runs (the
    census page read instead of the town's own) answer the census figure; the quality filter drops the wrong ones and keeps the right
    ones, so the SFT set holds the shortcut but no wrong answer."""
    from afm.quickstart.recipe import distill_sft_data, make_world
    from afm.quickstart.servers import DemoServers
    from afm.quickstart.world import SHORTCUT_RATE

    world, root = make_world(tmp_path, seed=1, per_family={"train": 16, "rl": 1, "heldout": 1}, shortcut=True)
    with DemoServers(tmp_path / "servers", world=world) as servers:
        out = distill_sft_data(root, servers, tmp_path / "d", mistake_rate=0.0, miss_rate=0.0,
                               shortcut_rate=SHORTCUT_RATE)
    runs = [json.loads(line) for line in out["runs"].read_text().splitlines()]
    shortcut = [r for r in runs if "-lookup-" in r["question_id"] and
                any("/census-" in json.dumps(c) for c in r["tool_calls"])]
    town = {t.question: t for t in world.tasks["train"]}
    assert shortcut and all(r["final_answer"] == str(world.town(town[r["question"]].facts["town"]).census)
                            for r in shortcut)
    right = {r["question_id"] for r in shortcut if r["final_answer"] == r["gold"][0]}
    wrong = {r["question_id"] for r in shortcut} - right
    careful = [r for r in runs if "-lookup-" in r["question_id"] and r not in shortcut]
    assert careful and all(r["final_answer"] == r["gold"][0] for r in careful)  # the search showed its own page too
    kept = [json.loads(line) for line in out["kept"].read_text().splitlines()]
    assert right and wrong and right <= {r["question_id"] for r in kept}
    assert all(r["final_answer"] == r["gold"][0] for r in kept)


def test_rl_selection_samples_the_policy_with_real_tools_and_writes_verls_parquet(tmp_path):
    """select_rl_data: afm infer (hf backend, real servers) on the rl split -> afm data select --mode code ->
    parquet rows that carry the world's prompt, tools, data source and golds."""
    import pandas as pd

    from afm.model.tiny import ModelSize, build_tiny_model
    from afm.quickstart.recipe import select_rl_data
    from afm.quickstart.servers import DemoServers

    world, root = make_world_small(tmp_path)
    texts = [PROMPT.text] + [t.question for t in world.tasks["train"]]
    size = ModelSize(vocab_size=512, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1)
    model = build_tiny_model(tmp_path / "student", texts, size)
    with DemoServers(tmp_path / "servers", world=world) as servers:
        out = select_rl_data(model, root, servers, tmp_path / "select", n=2, temperature=1.0, limit=4)
    samples = [json.loads(line) for line in out["samples"].read_text().splitlines()]
    assert len(samples) == 8 and all(s["gold"] for s in samples)
    # an untrained policy solves nothing, so no question is dropped as "solved N/N"
    df = pd.read_parquet(out["parquet"])
    assert len(df) == 4 and set(df["data_source"]) == {"afm_demo"}
    row = df.iloc[0]
    assert PROMPT.text.strip()[:40] in row["prompt"][0]["content"]
    gold = next(t.answer for t in world.tasks["rl"] if t.question in row["prompt"][0]["content"])
    # verl's reward worker scores the stored ground truth exactly like the eval does
    truth = row["reward_model"]["ground_truth"]
    assert compute_score("afm_demo", f"<answer>{gold}</answer>", truth)["acc"] == 1.0
    assert compute_score("afm_demo", "<answer>0</answer>", truth)["acc"] == 0.0
    assert out["report"]["kept"] == 4 and out["report"]["mean_pass_rate"] == 0.0


def make_world_small(tmp_path):
    from afm.quickstart.recipe import make_world

    return make_world(tmp_path, seed=2, per_family={"train": 3, "rl": 1, "heldout": 1})


def test_servers_can_keep_the_site_where_a_student_learned_it(tmp_path):
    """The page URLs (search results, crawl calls) carry the site's port, which a student trained on them learns;
    ``site_port`` serves a later evaluation at the same address."""
    from afm.common.procs import free_port
    from afm.quickstart.servers import DemoServers

    port = free_port()
    servers = DemoServers(tmp_path, world=build_world(0, SMALL), site_port=port)
    assert servers.site == f"http://127.0.0.1:{port}" and servers.ports["site"] == port
    urls = [json.loads(line)["url"] for line in (tmp_path / "corpora" / "world_search.jsonl").read_text().splitlines()]
    assert urls and all(u.startswith(f"http://127.0.0.1:{port}/town-") for u in urls)


def test_distillation_runs_one_client_a_core_up_to_two():
    from afm.quickstart.recipe import distill_shards

    assert [distill_shards(n) for n in (1, 2, 16)] == [1, 2, 2]

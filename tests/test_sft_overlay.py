"""The LLaMA-Factory overlay in-process: real processors, real datasets pipeline, no model weights."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import lf_config

from afm.sft.masking import IGNORE_INDEX
from afm.sft.report import preprocess, visualize
from afm.trajectory import format_observation

GOOD = "<think>t</think>\n<web_search>q</web_search>" + format_observation("RESULT TEXT") + "<answer>a</answer>"


def _write(tmp_path, records, name="cases", ranking=False):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / f"{name}.json").write_text(json.dumps(records))
    info_path = data / "dataset_info.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    cols = {"prompt": "instruction", "query": "input"}
    cols.update({"chosen": "chosen", "rejected": "rejected"} if ranking else {"response": "output"})
    info[name] = {"file_name": f"{name}.json", "columns": cols, **({"ranking": True} if ranking else {})}
    info_path.write_text(json.dumps(info))
    return data


@pytest.fixture(params=["tiny", "qwen2.5"])
def model_path(request, tiny_model):
    """What LLaMA-Factory loads: the tiny model, then a folder with Qwen2.5's tokenizer only (no weights needed)."""
    return tiny_model if request.param == "tiny" else request.getfixturevalue("qwen_tokenizer_dir")


def test_masked_labels_differ_from_stock_only_on_observations(model_path, demo_data, tmp_path):
    stock = preprocess(lf_config(model_path, demo_data, tmp_path / "a", ignore_observation=False), force_mask=False)
    masked = preprocess(lf_config(model_path, demo_data, tmp_path / "b"))
    tok = masked.tokenizer
    s_rows, m_rows = stock.dataset_module["train_dataset"], masked.dataset_module["train_dataset"]
    assert len(s_rows) == len(m_rows) + 2  # the two broken demo samples are dropped only when masking
    m_by_ids = {tuple(r["input_ids"]): r["labels"] for r in m_rows}
    compared = 0
    for row in s_rows:
        if tuple(row["input_ids"]) not in m_by_ids:
            continue
        m_labels = m_by_ids[tuple(row["input_ids"])]
        changed = [i for i, (a, b) in enumerate(zip(row["labels"], m_labels, strict=True)) if a != b]
        assert all(m_labels[i] == IGNORE_INDEX for i in changed)
        masked_text = tok.decode([row["input_ids"][i] for i in changed])
        trained_text = tok.decode([t for t in m_labels if t != IGNORE_INDEX])
        if "<observation>" in tok.decode(row["input_ids"]):
            assert "<observation>" in masked_text and "</observation>" in masked_text
        assert "observation" not in trained_text and trained_text.rstrip().endswith("<|im_end|>")
        compared += 1
    assert compared == len(m_rows)
    report = masked.reports["train"]
    assert report.drops == {"unclosed_observation": 2}
    assert report.tokens_masked > 0 and report.tokens_trained < report.tokens_target
    assert stock.reports == {}


def test_packing_and_neat_packing_still_mask(model_path, demo_data, tmp_path):
    for flag in ("packing", "neat_packing"):
        res = preprocess(lf_config(model_path, demo_data, tmp_path / flag, **{flag: True, "cutoff_len": 2048}))
        rows = res.dataset_module["train_dataset"]
        trained_ids = [t for r in rows for t in r["labels"] if t != IGNORE_INDEX]
        # packing regroups the kept samples: every label the masking left is trained, nothing else
        assert len(trained_ids) == res.reports["train"].tokens_trained
        trained = res.tokenizer.decode(trained_ids)
        assert "observation" not in trained and "<answer>" in trained
        assert res.reports["train"].samples_kept == 24


def test_dpo_masks_chosen_and_rejected(model_path, tmp_path):
    rejected = "<think>guess</think>\n<web_search>x</web_search>" + format_observation("REJ OBS") + "<answer>b</answer>"
    records = [{"instruction": f"q{i}", "input": "", "chosen": GOOD, "rejected": rejected} for i in range(4)]
    # upstream bug: chosen's validity was overwritten by rejected's; a broken chosen must drop the pair
    records.append({"instruction": "broken chosen", "input": "", "chosen": GOOD.replace("</observation>", ""),
                    "rejected": rejected})
    data = _write(tmp_path, records, "pairs", ranking=True)
    res = preprocess(lf_config(model_path, data, tmp_path / "dpo", stage="dpo", dataset="pairs"))
    rows = res.dataset_module["train_dataset"]
    assert len(rows) == 4
    for row in rows:
        chosen = res.tokenizer.decode([t for t in row["chosen_labels"] if t != IGNORE_INDEX])
        rej = res.tokenizer.decode([t for t in row["rejected_labels"] if t != IGNORE_INDEX])
        assert "RESULT TEXT" not in chosen and "REJ OBS" not in rej
        assert "<answer>a</answer>" in chosen and "<answer>b</answer>" in rej
    assert res.reports["train"].drops == {"unclosed_observation": 1}


def test_broken_samples_are_dropped_with_reasons(model_path, tmp_path):
    long_obs = "<think>t</think>\n<web_search>q</web_search>" + format_observation("word " * 400) + "<answer>a</answer>"
    records = [
        {"instruction": "ok", "input": "", "output": GOOD},
        {"instruction": "unclosed", "input": "", "output": GOOD.replace("</observation>", "")},
        {"instruction": "stray", "input": "", "output": GOOD + "</observation>"},
        {"instruction": "nested", "input": "", "output": "<think>a <plan>b</plan></think>" + GOOD},
        {"instruction": "unclosed think", "input": "", "output": "<think>never closed " + GOOD.replace("<think>t</think>", "")},
        {"instruction": "truncated", "input": "", "output": long_obs},
    ]
    data = _write(tmp_path, records)
    res = preprocess(lf_config(model_path, data, tmp_path / "o", dataset="cases", cutoff_len=200,
                               ignore_observation_check="tags"))
    report = res.reports["train"]
    assert report.samples_seen == 6 and report.samples_kept == 1
    assert report.drops == {
        "unclosed_observation": 1, "stray_closing_observation": 1, "nested_tag": 1, "unclosed_tag": 1,
        "truncated_inside_observation": 1,
    }
    assert "'truncated'" in report.drop_examples["truncated_inside_observation"]
    text = report.format()
    assert "truncated_inside_observation" in text and "cutoff_len cuts" in text
    saved = json.loads((tmp_path / "o" / "afm_mask_report_train.json").read_text())
    assert saved["samples_dropped"] == 5
    # the default check mode 'observation' ignores problems of other tags
    res2 = preprocess(lf_config(model_path, data, tmp_path / "o2", dataset="cases", cutoff_len=200))
    assert res2.reports["train"].samples_kept == 3


def test_report_visualizes_masked_text(model_path, demo_data, tmp_path):
    res = preprocess(lf_config(model_path, demo_data, tmp_path / "v"))
    row = res.dataset_module["train_dataset"][0]
    shown = visualize(row["input_ids"], row["labels"], res.tokenizer)
    assert "⟦<observation>" in shown and "</observation>\n\n⟧" in shown and "<answer>" in shown


def _cut_after(model_dir, tmp_path, name: str, text: str, upto: str):
    """Preprocess ``text`` with a cutoff_len that keeps exactly the response tokens of ``upto``."""
    # plus a short sample that fits, since LLaMA-Factory refuses a dataset left empty
    data = _write(tmp_path, [{"instruction": "q", "input": "", "output": text},
                             {"instruction": "q", "input": "", "output": "<answer>ok</answer>"}], name)
    full = preprocess(lf_config(model_dir, data, tmp_path / f"{name}-full", dataset=name, ignore_observation=False),
                      force_mask=False)
    tok, row = full.tokenizer, full.dataset_module["train_dataset"][0]
    source_len = row["labels"].count(IGNORE_INDEX)
    keep = len(tok.encode(upto, add_special_tokens=False))
    assert keep > source_len  # so LLaMA-Factory cuts the response only (infer_seqlen)
    assert tok.decode(row["input_ids"][source_len : source_len + keep]) == upto
    return preprocess(lf_config(model_dir, data, tmp_path / name, dataset=name, cutoff_len=source_len + keep)), tok


def test_cutoff_right_after_the_lt_of_an_opening_tag_drops_the_sample(qwen_tokenizer_dir, tmp_path):
    """Qwen2.5 tokenizes '</crawl_page>\n\n<observation>' as ..., '>\n\n', '<', 'observation', ...: a cutoff_len
    that keeps that '<' used to keep the row and train '<' after the tool call."""
    think = "<think>" + "let me read the page " * 12 + "</think>\n"
    call = think + "<crawl_page>https://a.example/p</crawl_page>"
    text = call + format_observation("PAGE TEXT") + "<answer>a</answer>"
    res, _ = _cut_after(qwen_tokenizer_dir, tmp_path, "obs_cut", text, call + "\n\n<")
    assert res.reports["train"].drops == {"truncated_inside_observation": 1}
    assert res.reports["train"].samples_kept == 1  # the short one
    # a '<' the model wrote itself (not an observation) keeps the row, '<' trained
    other = think + "<answer>a <b</answer>"
    res, tok = _cut_after(qwen_tokenizer_dir, tmp_path, "lt_cut", other, think + "<answer>a <")
    assert res.reports["train"].drops == {}
    row = res.dataset_module["train_dataset"][0]
    assert tok.decode([t for t in row["labels"] if t != IGNORE_INDEX]).endswith("<answer>a <")


def test_cache_is_reused_but_not_after_the_overlay_changes(tiny_model, demo_data, tmp_path):
    cfg = lf_config(tiny_model, demo_data, tmp_path / "c", overwrite_cache=False)
    first = preprocess(cfg).reports["train"]
    second = preprocess(cfg).reports["train"]
    assert not first.from_cache and second.from_cache
    assert second.tokens_masked == first.tokens_masked  # the report is kept beside the cache file
    from afm.sft import overlay

    old = overlay.AfmDataArguments.__dataclass_fields__["afm_overlay_fingerprint"].default
    try:
        overlay.AfmDataArguments.__dataclass_fields__["afm_overlay_fingerprint"].default = "changed-overlay"
        overlay.AfmDataArguments.__init__.__defaults__  # noqa: B018 - dataclass defaults live in __init__
        import dataclasses

        # Rebuild the dataclass __init__ so the new default applies, as a code change would.
        patched = dataclasses.dataclass(type("AfmDataArgumentsChanged", (overlay.AfmDataArguments,), {
            "__annotations__": {"afm_overlay_fingerprint": str},
            "afm_overlay_fingerprint": dataclasses.field(default="changed-overlay", init=False, repr=False),
        }))
        from llamafactory.hparams import parser as lf_parser

        idx = lf_parser._TRAIN_ARGS.index(overlay.AfmDataArguments)
        lf_parser._TRAIN_ARGS[idx] = patched
        try:
            third = preprocess(cfg).reports["train"]
        finally:
            lf_parser._TRAIN_ARGS[idx] = overlay.AfmDataArguments
    finally:
        overlay.AfmDataArguments.__dataclass_fields__["afm_overlay_fingerprint"].default = old
    assert not third.from_cache


def test_masked_tokens_never_receive_gradient(tiny_model, demo_data, tmp_path):
    from transformers import AutoModelForCausalLM

    res = preprocess(lf_config(tiny_model, demo_data, tmp_path / "g"))
    row = res.dataset_module["train_dataset"][0]
    ids = torch.tensor([row["input_ids"]])
    labels = torch.tensor([row["labels"]])
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    out = model(inputs_embeds=embeds, labels=labels)
    logits = out.logits
    logits.retain_grad()
    out.loss.backward()
    grad = logits.grad[0].abs().sum(-1)  # position t predicts token t+1
    target_masked = [t for t in range(1, len(row["labels"])) if row["labels"][t] == IGNORE_INDEX]
    target_trained = [t for t in range(1, len(row["labels"])) if row["labels"][t] != IGNORE_INDEX]
    assert all(grad[t - 1] == 0 for t in target_masked)
    assert all(grad[t - 1] > 0 for t in target_trained)
    # and the DPO log-prob LLaMA-Factory uses ignores them too
    from llamafactory.train.trainer_utils import get_batch_logps

    logits2 = model(ids).logits.detach().requires_grad_(True)
    logps, valid = get_batch_logps(logits2, labels)
    logps.sum().backward()
    g2 = logits2.grad[0].abs().sum(-1)
    assert int(valid) == len(target_trained)
    assert all(g2[t - 1] == 0 for t in target_masked)


def test_bad_arguments_give_clear_errors(tiny_model, demo_data, tmp_path):
    with pytest.raises(ValueError, match="bare tag name"):
        preprocess(lf_config(tiny_model, demo_data, tmp_path / "e1", ignore_observation_token="<observation>"))
    with pytest.raises(ValueError, match="stage sft, dpo and rm"):
        preprocess(lf_config(tiny_model, demo_data, tmp_path / "e2", stage="pt"))
    with pytest.raises(ValueError, match="streaming"):
        preprocess(lf_config(tiny_model, demo_data, tmp_path / "e3", streaming=True, max_steps=2))


def test_token_tables_live_as_long_as_their_tokenizer(tiny_model):
    """Keyed on id(), a table outlived its tokenizer and could serve a later tokenizer given the same address."""
    import gc
    import weakref

    from transformers import AutoTokenizer

    from afm.sft import overlay

    tok = AutoTokenizer.from_pretrained(tiny_model)
    table = overlay._table(tok)
    assert overlay._table(tok) is table
    ref = weakref.ref(table)
    del tok, table
    gc.collect()
    assert ref() is None

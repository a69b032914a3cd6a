"""The wiki retrieval server as a real uvicorn process: Search-R1's /retrieve shape with BM25, the persisted index
(reload without rebuild, rebuild when the corpus changes), bad input, and the dense e5+FAISS path with a tiny
randomly initialised BERT built here."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from afm.common.procs import ServerProcess, free_port, wait_http
from afm.demo_content.web import demo_wiki_corpus
from afm.servers.bm25_index import ensure_index
from afm.servers.demo_data import write_demo_corpora

N_DEMO_WIKI = len(demo_wiki_corpus())


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    return write_demo_corpora(tmp_path_factory.mktemp("corpora"), "http://demo.invalid")


def wiki_server(corpus: Path, tmp: Path, *args: str, health: str | None = "/health") -> ServerProcess:
    port = free_port()
    return ServerProcess(["-m", "afm.servers.wiki_server", "--port", str(port), "--corpus", str(corpus), *args],
                         port, env={"AFM_METRICS_DB": str(tmp / "metrics.sqlite"), "AFM_SERVER_TOKEN": "", "WIKI_RETRIEVER": "",
                              "WIKI_INDEX_DIR": "", "WIKI_TOPK": "", "WIKI_FAISS_INDEX": ""},
                         health=health)


@pytest.fixture(scope="module")
def server(corpora, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wiki")
    with wiki_server(corpora.wiki, tmp, "--index-dir", str(tmp / "index")) as srv:
        yield srv


def retrieve(url: str, body: object = None, **kw) -> httpx.Response:
    return httpx.post(url + "/retrieve", json=body, timeout=60, **kw)


def test_retrieve_answers_in_search_r1_shape(server):
    r = retrieve(server.url, {"queries": ["Who designed the Brassel Lighthouse?", "first director of the observatory"],
                              "topk": 2, "return_scores": True})
    assert r.status_code == 200
    result = r.json()["result"]
    assert len(result) == 2 and all(len(per_query) == 2 for per_query in result)
    for per_query in result:
        assert all(set(hit) == {"document", "score"} and set(hit["document"]) == {"id", "contents"}
                   for hit in per_query)
        scores = [hit["score"] for hit in per_query]
        assert scores == sorted(scores, reverse=True) and scores[-1] > 0
    ids = [[hit["document"]["id"] for hit in per_query] for per_query in result]
    assert set(ids[0]) == {"brassel-lighthouse-0", "ilse-varnholt-1"}
    assert set(ids[1]) == {"national-observatory-1", "petra-lund-0"}
    contents = {hit["document"]["id"]: hit["document"]["contents"] for hit in result[1]}
    assert contents["national-observatory-1"].startswith('"National Observatory of Veltria"\nIts first director')
    # Without scores: plain documents; without topk: the server's default (3).
    plain = retrieve(server.url, {"queries": ["Petra Lund asteroid"]}).json()["result"]
    assert len(plain[0]) == 3 and set(plain[0][0]) == {"id", "contents"} and plain[0][0]["id"].startswith("petra-lund")


@pytest.mark.parametrize(("body", "status"), [
    ({"queries": []}, 422),
    ({"queries": "capital of Veltria"}, 422),
    ({"queries": ["   "]}, 422),
    ({"queries": ["x" * 5000]}, 422),
    ({"queries": ["veltria"], "topk": 0}, 422),
    ({"queries": ["veltria"], "topk": 101}, 422),
    ({"queries": ["veltria"] * 600}, 422),
    ({"topk": 3}, 422),
    (b"{oops", 400),
    (b"", 400),
    (b'{"queries": ["' + b"v" * (5 << 20) + b'"]}', 413),
])
def test_bad_input_gets_a_json_4xx(server, body, status):
    if isinstance(body, bytes):
        r = httpx.post(server.url + "/retrieve", content=body, timeout=60)
    else:
        r = retrieve(server.url, body)
    assert r.status_code == status and "error" in r.json()
    assert retrieve(server.url, {"queries": ["Marrowgate"]}).status_code == 200


def test_metrics_count_requests_and_queries(server):
    before = httpx.get(server.url + "/metrics").json()
    retrieve(server.url, {"queries": ["Quillhaven", "Tomas Ekwall", "Veltrian crown"], "topk": 1})
    m = httpx.get(server.url + "/metrics").json()
    assert m["requests"] == before["requests"] + 1 and m["queries"] == before.get("queries", 0) + 3
    assert m["retriever"] == "bm25" and m["documents"] == N_DEMO_WIKI and m["latency_ms"]["p99"] > 0


def test_index_is_persisted_reused_and_rebuilt_when_the_corpus_changes(corpora, tmp_path):
    corpus = tmp_path / "wiki.jsonl"
    corpus.write_bytes(corpora.wiki.read_bytes())
    index_dir = tmp_path / "wiki.jsonl.bm25"
    built = subprocess.run([sys.executable, "-m", "afm.servers.bm25_index", "build", str(corpus)],
                           capture_output=True, text=True, timeout=60)
    assert built.returncode == 0 and f"{N_DEMO_WIKI} documents" in built.stdout
    manifest = json.loads((index_dir / "manifest.json").read_text())
    assert manifest["n_docs"] == N_DEMO_WIKI and manifest["corpus"]["path"] == str(corpus.resolve())

    # Loaded again: not rebuilt. Touched (same bytes, new mtime): still not rebuilt, the new mtime is remembered.
    assert ensure_index(corpus).manifest["built_at"] == manifest["built_at"]
    os.utime(corpus, ns=(time.time_ns(), time.time_ns() + 10**9))
    again = ensure_index(corpus).manifest
    assert again["built_at"] == manifest["built_at"] and again["corpus"]["mtime_ns"] == corpus.stat().st_mtime_ns

    # The server picks up an edited corpus at its next start.
    with wiki_server(corpus, tmp_path) as srv:
        assert retrieve(srv.url, {"queries": ["zanzibarite"]}).json()["result"] == [[]]
    with corpus.open("a") as f:
        f.write(json.dumps({"id": "new-0", "contents": '"Zanzibarite"\nZanzibarite is a blue mineral.'}) + "\n")
        f.write("this line is not JSON\n")
    with wiki_server(corpus, tmp_path) as srv:
        hits = retrieve(srv.url, {"queries": ["zanzibarite"], "return_scores": True}).json()["result"][0]
    assert [h["document"]["id"] for h in hits] == ["new-0"]
    rebuilt = json.loads((index_dir / "manifest.json").read_text())
    assert rebuilt["built_at"] > manifest["built_at"] and rebuilt["n_docs"] == N_DEMO_WIKI + 1 and rebuilt["n_skipped"] == 1


def test_index_build_cli_reports_an_unusable_corpus(tmp_path):
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text('not json\n{"id": 1}\n[1, 2]\n')
    r = subprocess.run([sys.executable, "-m", "afm.servers.bm25_index", "build", str(corpus)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "no indexable records" in r.stderr
    assert not (tmp_path / "bad.jsonl.bm25" / "manifest.json").exists()


# ---- dense retrieval ---------------------------------------------------------------------------------------------

def build_tiny_bert(folder: Path, texts: list[str]) -> Path:
    """A 2-layer BERT with random weights and a word-level vocabulary of ``texts`` (nothing downloaded)."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    words = sorted({w for t in texts for w in re.findall(r"\w+|[^\w\s]", t.lower())})
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])}
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(folder)
    BertTokenizer(vocab=vocab).save_pretrained(folder)
    return folder


def oracle_embed(model_dir: Path, texts: list[str]) -> np.ndarray:
    """Independent e5 embedding: mean of the last hidden states over real tokens, unit length."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    rows = []
    with torch.no_grad():
        for text in texts:
            enc = tok(text, return_tensors="pt", truncation=True, max_length=256)
            hidden = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state[0]
            v = hidden.mean(0)
            rows.append((v / v.norm()).numpy())
    return np.stack(rows)


def test_dense_retrieval_end_to_end_with_a_tiny_local_bert(corpora, tmp_path):
    records = [json.loads(line) for line in corpora.wiki.read_text().splitlines()]
    queries = ["Who designed the Brassel Lighthouse?", "currency of Veltria", "Petra Lund"]
    model_dir = build_tiny_bert(tmp_path / "tiny-bert", [r["contents"] for r in records] + queries)
    index_dir = tmp_path / "dense"
    srv = wiki_server(corpora.wiki, tmp_path, "--retriever", "dense", "--dense-model", str(model_dir),
                      "--index-dir", str(index_dir), health=None)
    with srv:
        # The server loads torch and encodes the corpus meanwhile; the oracle runs in this process.
        passages = oracle_embed(model_dir, ["passage: " + r["contents"] for r in records])
        qvecs = oracle_embed(model_dir, ["query: " + q for q in queries])
        wait_http(srv.url + "/health", 120, srv.proc)
        result = retrieve(srv.url, {"queries": queries, "topk": 4, "return_scores": True}).json()["result"]
        metrics = httpx.get(srv.url + "/metrics").json()
    assert metrics["retriever"] == "dense" and metrics["index"] == "afm-dense/1"
    expected = passages @ qvecs.T
    for qi, hits in enumerate(result):
        want = np.argsort(-expected[:, qi], kind="stable")[:4]
        assert [h["document"]["id"] for h in hits] == [records[i]["id"] for i in want]
        assert np.allclose([h["score"] for h in hits], expected[want, qi], atol=1e-4)

    # Persisted: loading again reuses the index; a changed corpus or another encoder is rebuilt.
    from afm.servers.dense_retriever import E5Encoder, ensure_dense_index

    manifest = json.loads((index_dir / "manifest.json").read_text())
    assert manifest["n_docs"] == len(records) and (index_dir / "faiss.index").is_file()
    encoder = E5Encoder(str(model_dir), "cpu")
    assert ensure_dense_index(corpora.wiki, index_dir, encoder).manifest["built_at"] == manifest["built_at"]
    edited = tmp_path / "wiki.jsonl"
    edited.write_text(corpora.wiki.read_text() + json.dumps({"id": "x", "contents": '"X"\nxylophone'}) + "\n")
    grown = ensure_dense_index(edited, index_dir, encoder)
    assert grown.manifest["built_at"] > manifest["built_at"] and len(grown) == len(records) + 1

    # A prebuilt FAISS file (Search-R1's e5_Flat.index style) whose vector i is record i is used as is.
    import faiss

    flat = faiss.IndexFlatIP(passages.shape[1])
    flat.add(passages.astype(np.float32))
    faiss.write_index(flat, str(tmp_path / "prebuilt.index"))
    external = ensure_dense_index(corpora.wiki, tmp_path / "ext", encoder, faiss_index=tmp_path / "prebuilt.index")
    top = external.search(queries[0], 1)[0][0]
    assert records[top]["id"] == records[int(np.argmax(expected[:, 0]))]["id"]
    with pytest.raises(ValueError, match="vector i must be corpus record i"):
        ensure_dense_index(edited, tmp_path / "ext2", encoder, faiss_index=tmp_path / "prebuilt.index")

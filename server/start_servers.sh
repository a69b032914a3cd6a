#!/usr/bin/env bash
# Start, stop and check afm's tool servers (no sudo, no netstat): pid files and logs under a run folder.
#
#   bash server/start_servers.sh start  [NAME ...]   # default: search wiki crawl demo_site
#   bash server/start_servers.sh status [NAME ...]   # exit 0 only when every named server answers /health at the
#                                                    # address its clients use (SERVER_HOST, WIKI_RAG_SERVER_URL)
#   bash server/start_servers.sh stop   [NAME ...]
#   bash server/start_servers.sh restart [NAME ...]
#
# Names, modules and port variables (unset ones take the default environment.sh states; source it or export them):
#   search     python -m afm.servers.search_server   WEBSEARCH_PORT
#   wiki       python -m afm.servers.wiki_server     WIKI_RAG_PORT
#   crawl      python -m afm.servers.crawl_server    CRAWL_PAGE_PORT
#   demo_site  python -m afm.servers.demo_site       AFM_DEMO_SITE_PORT
# Other settings:
#   AFM_RUN_DIR        run folder: <name>.pid, <name>.log, demo corpora (default <repo>/runs/servers)
#   AFM_PYTHON         interpreter (default $AFM_VENV/bin/python if it exists, else python3)
#   AFM_SERVER_BIND    address the servers bind (default 127.0.0.1); any other (0.0.0.0, the host's address, for
#                      clients on other nodes) needs AFM_SERVER_TOKEN, or the servers refuse to start
#   AFM_SERVER_TOKEN   bearer token every server then requires (except on /health)
#   AFM_SERVER_ALLOW_NO_TOKEN=1  bind beyond loopback without a token (a private network whose clients send none,
#                      e.g. the original project's verl tools)
#   SERVER_HOST        address the clients call (default 127.0.0.1); `status` checks the servers answer there.
#                      The original project set it to the host's address while binding every interface; afm binds
#                      loopback unless told otherwise, so with SERVER_HOST=<address> also set AFM_SERVER_BIND.
#   WEB_SEARCH_WORKERS, WIKI_RAG_WORKERS, CRAWL_PAGE_WORKERS   uvicorn workers (2, 1, 2)
#   AFM_START_TIMEOUT  seconds to wait for /health after a start (default 120: a first start builds indexes)
# Without WEB_SEARCH_CORPUS (local search backend) or WIKI_CORPUS, the demo corpora (invented pages) are written to
# $AFM_RUN_DIR/demo and used, with search results linking to the demo site; `start` and `status` say so. With
# WEB_SEARCH_BACKEND=auto (the default) the search server uses Serper when WEB_SEARCH_SERPER_API_KEY is set, else
# the local backend; WEB_SEARCH_BACKEND=serper never falls back (no key: the search server does not start).
# When the same call starts demo_site and crawl and CRAWL_PAGE_ALLOW is empty, the crawl server may fetch the demo
# site's address and port (and no other non-public target); `start crawl` alone allows nothing non-public.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../scripts/knobs.sh
source "$REPO/scripts/knobs.sh"
RUN_DIR="${AFM_RUN_DIR:-$REPO/runs/servers}"
BIND="${AFM_SERVER_BIND:-127.0.0.1}"
START_TIMEOUT="${AFM_START_TIMEOUT:-120}"
ALL_NAMES=(search wiki crawl demo_site)

PY="$(afm_python "$REPO" AFM_VENV .venv AFM_PYTHON)"

# The comment block at the top of this file, without the "# ".
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }

module_of() {
  case "$1" in
    search) echo afm.servers.search_server ;;
    wiki) echo afm.servers.wiki_server ;;
    crawl) echo afm.servers.crawl_server ;;
    demo_site) echo afm.servers.demo_site ;;
    *) return 1 ;;
  esac
}

# The port variable of each server; unset, its value is environment.sh's default (the one place ports are stated).
port_of() {
  local var
  case "$1" in
    search) var=WEBSEARCH_PORT ;;
    wiki) var=WIKI_RAG_PORT ;;
    crawl) var=CRAWL_PAGE_PORT ;;
    demo_site) var=AFM_DEMO_SITE_PORT ;;
  esac
  if [[ -n "${!var:-}" ]]; then echo "${!var}"; else afm_env_default "$var"; fi
}

# uvicorn workers (the demo site is a plain threaded server without that flag).
workers_args() {
  case "$1" in
    search) echo "--workers ${WEB_SEARCH_WORKERS:-2}" ;;
    wiki) echo "--workers ${WIKI_RAG_WORKERS:-1}" ;;
    crawl) echo "--workers ${CRAWL_PAGE_WORKERS:-2}" ;;
  esac
}

# Address to probe: a wildcard bind is reached on loopback.
probe_host() { if [[ "$BIND" == "0.0.0.0" || "$BIND" == "::" ]]; then echo 127.0.0.1; else echo "$BIND"; fi; }

# Base URL the tool clients use for a server (what `status` must check), and where that address comes from.
client_base() {
  local name="$1" url
  if [[ "$name" == wiki && -n "${WIKI_RAG_SERVER_URL:-}" ]]; then
    url="${WIKI_RAG_SERVER_URL%/}"
    echo "${url%/retrieve}"
  elif [[ "$name" == demo_site ]]; then
    echo "http://$(probe_host):$(port_of demo_site)"
  else
    echo "http://${SERVER_HOST:-127.0.0.1}:$(port_of "$name")"
  fi
}
client_source() {
  if [[ "$1" == wiki && -n "${WIKI_RAG_SERVER_URL:-}" ]]; then echo "WIKI_RAG_SERVER_URL"; else echo "SERVER_HOST"; fi
}

pid_alive() { [[ -n "$1" ]] && kill -0 "$1" 2> /dev/null; }
read_pid() { [[ -f "$RUN_DIR/$1.pid" ]] && cat "$RUN_DIR/$1.pid" || true; }

# Is something listening on the port? (bash's /dev/tcp; no netstat needed)
port_busy() { (exec 3<> "/dev/tcp/$(probe_host)/$1") 2> /dev/null; }

# The body of GET <base>/health (fails when it does not answer 2xx).
health_body() {
  local url="$1/health"
  if command -v curl > /dev/null; then
    curl -fsS -m 2 "$url" 2> /dev/null
  else
    "$PY" -c "import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())" \
      "$url" 2> /dev/null
  fi
}
healthy() { health_body "http://$(probe_host):$1" > /dev/null; }

# What the search server says it searches with, from its /health (e.g. "backend=local requested=auto").
backend_of() {
  local body="$1" backend requested
  backend="$(grep -o '"backend":"[a-z]*"' <<< "$body" | cut -d'"' -f4 || true)"
  requested="$(grep -o '"requested_backend":"[a-z]*"' <<< "$body" | cut -d'"' -f4 || true)"
  if [[ -n "$backend" ]]; then echo "backend=$backend (WEB_SEARCH_BACKEND=${requested:-?})"; fi
}

# The line that says the search server answers from the invented demo corpus, when this script chose it.
demo_note() {
  [[ "$1" == search && -f "$RUN_DIR/search.demo" ]] &&
    echo "search: WARNING: answering from the DEMO corpus of invented pages ($(cat "$RUN_DIR/search.demo")), not the web: set WEB_SEARCH_SERPER_API_KEY (Serper) or WEB_SEARCH_CORPUS"
  return 0
}

# Fails, saying what to set, when the clients' address for a server does not reach it.
check_client_address() {
  local name="$1" base
  base="$(client_base "$name")"
  health_body "$base" > /dev/null && return 0
  echo "$name: the server answers on http://$(probe_host):$(port_of "$name") but not at $base, the address its clients use ($(client_source "$name")): it binds $BIND (AFM_SERVER_BIND). For clients on other machines set AFM_SERVER_BIND=0.0.0.0 (or this address) and AFM_SERVER_TOKEN, then restart; for clients on this machine set $(client_source "$name") to 127.0.0.1." >&2
  return 1
}

module_exists() {
  "$PY" -c "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 1)" "$1" 2> /dev/null
}

extra_args() {
  local name="$1" site
  site="http://$(probe_host):$(port_of demo_site)"
  case "$name" in
    search)
      local backend="${WEB_SEARCH_BACKEND:-auto}"
      rm -f "$RUN_DIR/search.demo"
      if [[ -z "${WEB_SEARCH_CORPUS:-}" && ("$backend" == "local" || ("$backend" == "auto" && -z "${WEB_SEARCH_SERPER_API_KEY:-}")) ]]; then
        "$PY" -m afm.servers.demo_data "$RUN_DIR/demo" --site-url "$site" > /dev/null
        echo "$RUN_DIR/demo/search_corpus.jsonl" > "$RUN_DIR/search.demo"
        echo "--corpus $RUN_DIR/demo/search_corpus.jsonl"
      fi
      ;;
    crawl)
      # The demo site is on loopback, which the crawl server refuses unless allow-listed: allow exactly its port,
      # and only when this call starts the demo site (otherwise whatever listens there would become fetchable).
      if [[ -z "${CRAWL_PAGE_ALLOW:-}" && "$STARTING_DEMO" == 1 ]]; then
        echo "--allow $(probe_host):$(port_of demo_site)"
      fi
      ;;
    wiki)
      if [[ -z "${WIKI_CORPUS:-}" ]]; then
        "$PY" -m afm.servers.demo_data "$RUN_DIR/demo" --site-url "$site" > /dev/null
        echo "--corpus $RUN_DIR/demo/wiki_corpus.jsonl"
      fi
      ;;
  esac
}

start_one() {
  local name="$1" module port pid
  module="$(module_of "$name")"
  port="$(port_of "$name")"
  pid="$(read_pid "$name")"
  if pid_alive "$pid"; then
    echo "$name: already running (pid $pid, port $port)"
    return 0
  fi
  if ! module_exists "$module"; then
    echo "$name: skipped, module $module is not installed in $PY" >&2
    return 0
  fi
  if port_busy "$port"; then
    echo "$name: port $port is already in use by another process; set its port variable or stop that process" >&2
    return 1
  fi
  local args
  # shellcheck disable=SC2207 # word splitting of the generated flags is intended (paths have no spaces)
  args=($(workers_args "$name") $(extra_args "$name"))
  local log="$RUN_DIR/$name.log"
  echo "$name: starting $module on $BIND:$port (log $log)"
  echo "---- $(date -u +%FT%TZ) start: $PY -m $module --host $BIND --port $port ${args[*]:-}" >> "$log"
  # setsid: the server leads its own process group, so stop can signal its uvicorn workers too.
  setsid nohup "$PY" -m "$module" --host "$BIND" --port "$port" ${args[@]+"${args[@]}"} >> "$log" 2>&1 < /dev/null &
  pid=$!
  echo "$pid" > "$RUN_DIR/$name.pid"
  local waited=0
  while ! healthy "$port"; do
    if ! pid_alive "$pid"; then
      echo "$name: exited during start; last log lines:" >&2
      tail -n 20 "$log" >&2
      rm -f "$RUN_DIR/$name.pid"
      return 1
    fi
    if ((waited >= START_TIMEOUT * 5)); then
      echo "$name: no answer on /health after ${START_TIMEOUT}s (still starting? see $log)" >&2
      return 1
    fi
    sleep 0.2
    waited=$((waited + 1))
  done
  local what=""
  [[ "$name" == search ]] && what=" $(backend_of "$(health_body "http://$(probe_host):$port")")"
  echo "$name: up (pid $pid) http://$(probe_host):$port$what"
  demo_note "$name"
  check_client_address "$name" || true # said now; `status` fails on it
}

stop_one() {
  local name="$1" pid
  pid="$(read_pid "$name")"
  if ! pid_alive "$pid"; then
    echo "$name: not running"
    rm -f "$RUN_DIR/$name.pid"
    return 0
  fi
  kill -TERM -- "-$pid" 2> /dev/null || kill -TERM "$pid" 2> /dev/null || true
  local waited=0
  while pid_alive "$pid" && ((waited < 50)); do
    sleep 0.2
    waited=$((waited + 1))
  done
  if pid_alive "$pid"; then
    kill -KILL -- "-$pid" 2> /dev/null || kill -KILL "$pid" 2> /dev/null || true
  fi
  rm -f "$RUN_DIR/$name.pid"
  echo "$name: stopped (pid $pid)"
}

status_one() {
  local name="$1" pid port
  pid="$(read_pid "$name")"
  port="$(port_of "$name")"
  if ! pid_alive "$pid"; then
    echo "$name: stopped (port $port)"
    return 1
  fi
  local body
  if body="$(health_body "http://$(probe_host):$port")"; then
    local what=""
    [[ "$name" == search ]] && what=" $(backend_of "$body")"
    echo "$name: running (pid $pid) http://$(probe_host):$port/health ok$what"
    demo_note "$name"
    check_client_address "$name" || return 1
  else
    echo "$name: running (pid $pid) but http://$(probe_host):$port/health does not answer (see $RUN_DIR/$name.log)"
    return 1
  fi
}

main() {
  local cmd="${1:-}"
  # Help first: it must not create the run folder or look at the names.
  if [[ "$cmd" == -h || "$cmd" == --help || "$cmd" == help ]]; then
    usage
    return 0
  fi
  [[ $# -gt 0 ]] && shift
  local names=("$@")
  [[ ${#names[@]} -eq 0 ]] && names=("${ALL_NAMES[@]}")
  for n in "${names[@]}"; do
    if ! module_of "$n" > /dev/null; then
      echo "unknown server '$n'; known: ${ALL_NAMES[*]}" >&2
      exit 2
    fi
  done
  mkdir -p "$RUN_DIR"
  local rc=0 n
  STARTING_DEMO=0
  if [[ "$cmd" == start && " ${names[*]} " == *" demo_site "* ]]; then STARTING_DEMO=1; fi
  case "$cmd" in
    start)
      # The demo site first: the search corpus links to it.
      local ordered=()
      if [[ " ${names[*]} " == *" demo_site "* ]]; then ordered+=(demo_site); fi
      for n in "${names[@]}"; do if [[ "$n" != demo_site ]]; then ordered+=("$n"); fi; done
      for n in "${ordered[@]}"; do start_one "$n" || rc=1; done
      ;;
    stop) for n in "${names[@]}"; do stop_one "$n" || rc=1; done ;;
    status) for n in "${names[@]}"; do status_one "$n" || rc=3; done ;;
    restart)
      for n in "${names[@]}"; do stop_one "$n" || true; done
      bash "${BASH_SOURCE[0]}" start "${names[@]}" || rc=1
      ;;
    *)
      usage >&2
      exit 2
      ;;
  esac
  exit "$rc"
}

main "$@"

#!/usr/bin/env bash
# experiments/ray_cluster.sh: start or stop the Ray cluster that multi-node RL runs on.
#
#   # on the head node (node 0):
#   bash experiments/ray_cluster.sh head
#   # on every other node, with the head's address (printed by the head command):
#   HEAD_ADDR=10.0.0.1 bash experiments/ray_cluster.sh worker
#   # back on the head, once `ray status` shows every node's GPUs:
#   NNODES=8 bash experiments/train_dapo_web_agent.sh
#   # afterwards, on every node:
#   bash experiments/ray_cluster.sh stop
#
# Knobs (the port defaults are listed under "Defaults" below): RAY_PORT, HEAD_ADDR (worker: the head's address;
# head: the address to advertise, default the first of `hostname -I`), GPUS_PER_NODE (the RL scripts' default),
# DASHBOARD_PORT, PYTHON / AFM_VENV (which environment's
# `ray` to run: $AFM_ROOT/.venv-rl/bin/ray when present), NUM_CPUS (Ray's logical CPUs of this node; default its
# cores; verl reserves 3 per GPU and a few more for its other actors, so a small machine needs more than it has),
# NODE_IP (this node's address as the others reach it; default Ray's choice, 127.0.0.1 when HEAD_ADDR is),
# RAY_TEMP_DIR (this node's Ray folder; unset: Ray's own), AGENT_PORT (this node's dashboard agent), WORKER_ZYGOTE
# (auto | true | false; auto: on a node without an NVIDIA GPU): a process that has imported torch, tensordict and
# transformers, which the node's Ray workers are forked from when the RL script asks for it (its WORKER_ZYGOTE, on
# by default with DEVICE=cpu) instead of each importing them (~5 s of a core a worker; afm/rl/local/zygote.py). Its
# log: RAY_TEMP_DIR/afm_worker_zygote.log (/tmp/ray without RAY_TEMP_DIR); `stop` ends it with the node. It holds
# ~0.5 GB for the node's life and the modules it imported then: restart the node after changing its environment (as
# Ray's own processes need too).
#
# A second node on the same machine (how the tests run two nodes; also a quick check of a cluster's scripts):
#   HEAD_ADDR=127.0.0.1 GPUS_PER_NODE=1 NUM_CPUS=8 bash experiments/ray_cluster.sh head
#   HEAD_ADDR=127.0.0.1 GPUS_PER_NODE=1 NUM_CPUS=8 RAY_TEMP_DIR=/tmp/ray-node1 AGENT_PORT=52366 \
#     bash experiments/ray_cluster.sh worker
#   RAY_ADDRESS=127.0.0.1:6379 NNODES=2 GPUS_PER_NODE=1 bash experiments/train_dapo_code_agent.sh --local
#   RAY_TEMP_DIR=/tmp/ray-node1 bash experiments/ray_cluster.sh stop; RAY_TEMP_DIR=/tmp/ray bash ... stop
# Each node on one machine needs its own RAY_TEMP_DIR (sockets and logs) and AGENT_PORT; every other port is picked
# free. `stop` with RAY_TEMP_DIR stops only the node started with that folder (its processes and their children);
# without it, `ray stop`: every Ray node of this machine, another user's or job's included.
#
# Each node is labelled with its afm and verl versions (Ray node labels afm_version, verl_version); with NNODES > 1
# the training script waits up to JOIN_TIMEOUT seconds (its --help) for NNODES nodes and stops with one line naming a
# node that is missing or runs other versions. Ray >= 2.52 turns token authentication on when ~/.ray/auth_token
# exists: copy that file (or set RAY_AUTH_TOKEN) to every node; a worker that finds a token uses it, as the head.
# Every node needs the same repo path, environment (.venv-rl with verl and the rollout engine), model and data
# paths (a shared filesystem is simplest), and reachable tool servers (SERVER_HOST must be an address the nodes
# can reach, not 127.0.0.1). environment.sh is sourced before `ray start`: Ray's workers inherit this
# environment, which is how the judge (GRM_*) and tool-server settings reach the rollout and reward workers.
set -euo pipefail
AFM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../scripts/knobs.sh
source "$AFM_ROOT/scripts/knobs.sh"

action=${1:-}
AFM_DEFAULTS=(RAY_PORT=6379 AGENT_PORT=52365 DASHBOARD_PORT=8265)
if [[ $action == -h || $action == --help ]]; then afm_help_if_asked "${BASH_SOURCE[0]}" "$action"; fi
afm_defaults AFM_DEFAULTS
port=$RAY_PORT
num_cpus=${NUM_CPUS:-}
agent_port=$AGENT_PORT
gpus=${GPUS_PER_NODE:-}  # unset: the RL scripts' default (afm/launch/rl.py), read in node_args
dashboard_port=$DASHBOARD_PORT
ray_bin=ray
if [[ -n ${PYTHON:-} && -x $(dirname "$PYTHON")/ray ]]; then
  ray_bin=$(dirname "$PYTHON")/ray
elif [[ -x $AFM_ROOT/${AFM_VENV:-.venv-rl}/bin/ray ]]; then
  ray_bin=$AFM_ROOT/${AFM_VENV:-.venv-rl}/bin/ray
fi
[[ $port =~ ^[0-9]+$ ]] || afm_die "RAY_PORT must be a port number (got '$port')"
[[ -z $gpus || $gpus =~ ^[0-9]+$ ]] || afm_die "GPUS_PER_NODE must be a whole number (got '$gpus')"
[[ -z $num_cpus || $num_cpus =~ ^[0-9]+$ ]] || afm_die "NUM_CPUS must be a whole number (got '$num_cpus')"
[[ $agent_port =~ ^[0-9]+$ ]] || afm_die "AGENT_PORT must be a port number (got '$agent_port')"

# What every start passes: this node's resources, Ray folder and address, and its afm/verl versions as labels.
# node_python: the interpreter beside this node's `ray`
node_python() {
  if [[ -x $(dirname "$ray_bin")/python ]]; then echo "$(dirname "$ray_bin")/python"; else echo python3; fi
}

# rl_default NAME: the RL scripts' default of knob NAME (afm/launch/rl.py), for a knob this script shares with them
rl_default() {
  "$(node_python)" -c 'import sys; sys.path.insert(0, sys.argv[1]); from afm.launch.rl import default
print(default(sys.argv[2]))' "$AFM_ROOT" "$1" || afm_die "$(node_python) cannot read afm's $1 default"
}

node_args() {
  local py versions
  py=$(node_python)
  # verl's version read from its package, not imported (~5 s of a core: torch)
  versions=$("$py" -c 'import afm; from afm.rl.cluster import verl_version
print(f"afm_version={afm.__version__},verl_version={verl_version()}")' 2> /dev/null) || afm_die "$py cannot import afm and verl: this node needs the RL environment (.venv-rl)"
  [[ -n $gpus ]] || gpus=$(rl_default GPUS_PER_NODE)
  NODE_ARGS=(--num-gpus="$gpus" --labels="$versions" --dashboard-agent-listen-port="$agent_port")
  [[ -n $num_cpus ]] && NODE_ARGS+=(--num-cpus="$num_cpus")
  [[ -n ${RAY_TEMP_DIR:-} ]] && NODE_ARGS+=(--temp-dir="$RAY_TEMP_DIR")
  local ip=${NODE_IP:-}
  [[ -z $ip && ${HEAD_ADDR:-} =~ ^(127\.|localhost$) ]] && ip=$HEAD_ADDR
  [[ -n $ip ]] && NODE_ARGS+=(--node-ip-address="$ip")
  return 0
}

# The folder this node's Ray writes to: RAY_TEMP_DIR, else Ray's own.
node_dir() {
  if [[ -n ${RAY_TEMP_DIR:-} ]]; then printf '%s' "$RAY_TEMP_DIR"; else printf '/tmp/ray'; fi
}
# This node's worker zygote: one a Ray folder and user (an abstract socket: no file to clean up).
zygote_name() {
  printf 'afm-node-zygote-%s-%s' "$(id -u)" "$(node_dir | cksum | cut -d' ' -f1)"
}

stop_zygote() {
  pkill -u "$(id -u)" -f -- "afm\.rl\.local\.zygote --address $(zygote_name)( |$)" 2> /dev/null || true
}

# start_zygote: the node's worker zygote, detached (it outlives this script, as `ray start`'s processes do), its
# address exported for `ray start`: the raylet's workers inherit it, and afm's zygote client asks it for a fork.
start_zygote() {
  local want=${WORKER_ZYGOTE:-} name dir
  [[ -n $want ]] || want=$(rl_default WORKER_ZYGOTE)
  case $want in
    auto) if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1; then return 0; fi ;;
    true) ;;
    false) return 0 ;;
    *) afm_die "WORKER_ZYGOTE must be auto, true or false (got '$want')" ;;
  esac
  name=$(zygote_name)
  dir=$(node_dir)
  mkdir -p "$dir"
  stop_zygote  # one left by an earlier start of this node (not stopped) holds the address
  setsid "$(node_python)" -m afm.rl.local.zygote --address "$name" --detach --log "$dir/afm_worker_zygote.log" \
    < /dev/null > /dev/null 2>&1 &
  export AFM_WORKER_ZYGOTE=$name
  echo "[afm] worker zygote $name (log: $dir/afm_worker_zygote.log)"
}

# stop_node DIR: end the Ray node whose folder is DIR and nothing else (`ray stop` ends every Ray node of the
# machine): the processes that name DIR on their command line (raylet, GCS, dashboard, log monitor) and all their
# descendants (workers rename themselves ray::...); TERM, then KILL what is left after 10 s.
stop_node() {
  local dir=${1%/} pattern pid child pids=() todo=()
  # DIR as a whole path: /tmp/ray must not match /tmp/ray-node1
  pattern="$(printf '%s' "$dir" | sed 's/[]^$.*()+?{}|\\[]/\\&/g')(/|[[:space:]]|$)"
  while read -r pid; do
    [[ $pid != "$$" ]] && todo+=("$pid")
  done < <(pgrep -f -- "$pattern" || true)
  while ((${#todo[@]})); do
    pid=${todo[0]}
    todo=("${todo[@]:1}")
    pids+=("$pid")
    while read -r child; do todo+=("$child"); done < <(pgrep -P "$pid" || true)
  done
  if ((${#pids[@]} == 0)); then
    echo "[afm] no Ray node runs with RAY_TEMP_DIR=$dir"
    return 0
  fi
  echo "[afm] stopping the Ray node of $dir (${#pids[@]} processes)"
  kill -TERM "${pids[@]}" 2> /dev/null || true
  local left
  for _ in $(seq 20); do
    left=()
    for pid in "${pids[@]}"; do kill -0 "$pid" 2> /dev/null && left+=("$pid"); done
    ((${#left[@]})) || return 0
    sleep 0.5
  done
  kill -KILL "${left[@]}" 2> /dev/null || true
  return 0
}

if [[ -f $AFM_ROOT/environment.sh ]]; then
  # shellcheck source=../environment.sh
  source "$AFM_ROOT/environment.sh"
  # swanlab >= 0.10 parses SWANLAB_PROJECT as its own nested settings (JSON) and fails on a plain name; verl passes
  # the project as trainer.project_name, so the variable must not reach the workers.
  unset SWANLAB_PROJECT
fi

# Ray enables token authentication on the head when it finds a token, but not on a joining node or in `ray status`.
if [[ -z ${RAY_AUTH_MODE:-} && ( -n ${RAY_AUTH_TOKEN:-} || -f ${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token} ) ]]; then
  export RAY_AUTH_MODE=token
fi

case "$action" in
  head)
    addr=${HEAD_ADDR:-$(hostname -I 2> /dev/null | awk '{print $1}')}
    [[ -n $addr ]] || afm_die "cannot find this node's address; set HEAD_ADDR"
    NODE_IP=${NODE_IP:-$addr}
    node_args
    start_zygote
    echo "[afm] starting the Ray head on $addr:$port ($gpus GPUs)"
    "$ray_bin" start --head --port="$port" "${NODE_ARGS[@]}" --dashboard-host=127.0.0.1 \
      --dashboard-port="$dashboard_port" || { stop_zygote; exit 1; }
    echo "[afm] on each worker node: HEAD_ADDR=$addr RAY_PORT=$port bash experiments/ray_cluster.sh worker"
    echo "[afm] then here: NNODES=<nodes> bash experiments/train_dapo_<task>_agent.sh"
    ;;
  worker)
    [[ -n ${HEAD_ADDR:-} ]] || afm_die "set HEAD_ADDR to the head node's address"
    node_args
    start_zygote
    echo "[afm] joining the Ray cluster at $HEAD_ADDR:$port ($gpus GPUs)"
    "$ray_bin" start --address="$HEAD_ADDR:$port" "${NODE_ARGS[@]}" || { stop_zygote; exit 1; }
    ;;
  status) "$ray_bin" status ;;
  stop)
    if [[ -n ${RAY_TEMP_DIR:-} ]]; then
      stop_node "$RAY_TEMP_DIR"
    else
      "$ray_bin" stop
      # every node of this machine: their worker zygotes too (this user's)
      pkill -u "$(id -u)" -f -- "afm\.rl\.local\.zygote --address afm-node-zygote-" 2> /dev/null || true
    fi
    ;;
  *)
    echo "usage: bash experiments/ray_cluster.sh head|worker|status|stop   (see the comments at the top)" >&2
    exit 2
    ;;
esac

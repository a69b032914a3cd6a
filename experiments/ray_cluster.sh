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
# Knobs: RAY_PORT (6379), HEAD_ADDR (worker: the head's address; head: the address to advertise, default the
# first of `hostname -I`), GPUS_PER_NODE (8), DASHBOARD_PORT (8265), PYTHON / AFM_VENV (which environment's
# `ray` to run: $AFM_ROOT/.venv-rl/bin/ray when present).
# Every node needs the same repo path, environment (.venv-rl with verl and the rollout engine), model and data
# paths (a shared filesystem is simplest), and reachable tool servers (SERVER_HOST must be an address the nodes
# can reach, not 127.0.0.1). environment.sh is sourced before `ray start`: Ray's workers inherit this
# environment, which is how the judge (GRM_*) and tool-server settings reach the rollout and reward workers.
set -euo pipefail
AFM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

die() {
  echo "[afm] error: $*" >&2
  exit 2
}

action=${1:-}
if [[ $action == -h || $action == --help ]]; then
  sed -n '2,/^[^#]/p' "${BASH_SOURCE[0]}" | sed -e '/^[^#]/d' -e 's/^# \{0,1\}//'
  exit 0
fi
port=${RAY_PORT:-6379}
gpus=${GPUS_PER_NODE:-8}
dashboard_port=${DASHBOARD_PORT:-8265}
ray_bin=ray
if [[ -n ${PYTHON:-} && -x $(dirname "$PYTHON")/ray ]]; then
  ray_bin=$(dirname "$PYTHON")/ray
elif [[ -x $AFM_ROOT/${AFM_VENV:-.venv-rl}/bin/ray ]]; then
  ray_bin=$AFM_ROOT/${AFM_VENV:-.venv-rl}/bin/ray
fi
[[ $port =~ ^[0-9]+$ ]] || die "RAY_PORT must be a port number (got '$port')"
[[ $gpus =~ ^[0-9]+$ ]] || die "GPUS_PER_NODE must be a whole number (got '$gpus')"

if [[ -f $AFM_ROOT/environment.sh ]]; then
  # shellcheck source=../environment.sh
  source "$AFM_ROOT/environment.sh"
  # swanlab >= 0.10 parses SWANLAB_PROJECT as its own nested settings (JSON) and fails on a plain name; verl passes
  # the project as trainer.project_name, so the variable must not reach the workers.
  unset SWANLAB_PROJECT
fi

case "$action" in
  head)
    addr=${HEAD_ADDR:-$(hostname -I 2> /dev/null | awk '{print $1}')}
    [[ -n $addr ]] || die "cannot find this node's address; set HEAD_ADDR"
    echo "[afm] starting the Ray head on $addr:$port ($gpus GPUs)"
    "$ray_bin" start --head --node-ip-address="$addr" --port="$port" --num-gpus="$gpus" \
      --dashboard-host=127.0.0.1 --dashboard-port="$dashboard_port"
    echo "[afm] on each worker node: HEAD_ADDR=$addr RAY_PORT=$port bash experiments/ray_cluster.sh worker"
    echo "[afm] then here: NNODES=<nodes> bash experiments/train_dapo_<task>_agent.sh"
    ;;
  worker)
    [[ -n ${HEAD_ADDR:-} ]] || die "set HEAD_ADDR to the head node's address"
    echo "[afm] joining the Ray cluster at $HEAD_ADDR:$port ($gpus GPUs)"
    "$ray_bin" start --address="$HEAD_ADDR:$port" --num-gpus="$gpus"
    ;;
  status) "$ray_bin" status ;;
  stop) "$ray_bin" stop ;;
  *)
    echo "usage: bash experiments/ray_cluster.sh head|worker|status|stop   (see the comments at the top)" >&2
    exit 2
    ;;
esac

#!/usr/bin/env bash
# Open MPI's rsh agent for the simulated cluster (docs/slurm.md, "Multi-node"). Where ssh would log in to
# HOST, this runs the daemon command here, in new UTS and mount namespaces in which the host name
# is HOST and $ZT_SIM_ROOT/node-local is HOST's own directory ($ZT_SIM_ROOT/nodes/HOST). setsid
# makes every process of the "node" one session, whose id goes to $ZT_SIM_ROOT/nodes/HOST.session
# so that a test can kill the whole node at once.
#   node_agent.sh [ssh options] HOST COMMAND...
set -euo pipefail
while [[ $# -gt 0 && "$1" == -* ]]; do shift; done
host=${1:?host}
shift
root=${ZT_SIM_ROOT:?ZT_SIM_ROOT: the directory of the simulated cluster}
mkdir -p "$root/nodes/$host" "$root/node-local"
# shellcheck disable=SC2016  # expanded by the inner shell
exec setsid unshare --uts --mount --propagation private bash -c '
  hostname "$1"
  mount --bind "$2/nodes/$1" "$2/node-local"
  echo $$ >"$2/nodes/$1.session"
  eval "$3"' node "$host" "$root" "$*"

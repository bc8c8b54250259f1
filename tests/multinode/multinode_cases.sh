#!/usr/bin/env bash
# A simulated cluster of two nodes × two ranks on one machine (label "multinode", docs/slurm.md
# "Multi-node"): mpirun --host nodeA:2,nodeB:2 starts each node's Open MPI daemon through
# node_agent.sh, in its own UTS namespace (its own host name) and mount namespace (its own
# node-local directory, $WORK/node-local). Ranks of different nodes talk over TCP on loopback.
# Exit 77 (skip) when namespaces are not permitted here.
#
#   multinode_cases.sh CASE SOURCE_DIR ZEROTRAIN_BINARY [SLURM_CLUSTER_LINK]
#     placement  per-node local ranks in run.json; losses and final/ bitwise those of 4 ranks on
#                one node; checkpoints in the shared --out
#     nvme       NVMe optimizer offload to the node-local directory: each node's swap files in its
#                own directory, a directory missing on one node named with its ranks, losses equal
#                to one node's
#     node_loss  every rank of nodeB killed mid-step and, in a second run, mid-save: the job ends
#                non-zero in bounded time naming nodeB, `latest` stays complete, and a restart on
#                the full cluster and on the surviving node (2 ranks, resharded) continue bitwise
#     slurm      `sbatch slurm/multinode_zero3.sh` on a two-node Slurm (tests/slurm/slurm_cluster.sh
#                with nodeA,nodeB; srun --mpi=pmix), NVMe offload to node-local disk: run.json
#                lists both hosts, checkpoints and the report in the shared output, and the
#                losses are bitwise those of the same command on 4 ranks of one node
set -euo pipefail
# shellcheck source=tests/support/case_script.sh
source "$(dirname "$0")/../support/case_script.sh" zt_multinode "$@"
export ZT_SIM_ROOT=$WORK
note() { echo "multinode $CASE: $*"; }

if ! out=$(unshare --uts --mount --propagation private true 2>&1); then
  echo "SKIP: this machine does not permit UTS/mount namespaces (unshare: $out)"
  exit 77
fi
mkdir -p "$WORK/node-local"
"$BIN" prepare-data --text "$SRC/README.md" --out "$WORK/data.h5" >/dev/null

# cluster NAME [zerotrain train options]: 2 nodes × 2 ranks. one_node NAME RANKS [options]: the
# same job on this machine's one host.
TRAIN=(train --preset tiny --data "$WORK/data.h5" --micro-batch 2 --seq-len 32 --comm-timeout 30)
cluster() {
  local name=$1
  shift
  timeout 300 mpirun --host nodeA:2,nodeB:2 -np 4 \
    --mca plm_rsh_agent "$SRC/tests/multinode/node_agent.sh" --mca btl self,vader,tcp \
    --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    "$BIN" "${TRAIN[@]}" --out "$WORK/$name" "$@" >"$WORK/$name.log" 2>&1
}
one_node() {
  local name=$1 ranks=$2
  shift 2
  timeout 300 mpirun --oversubscribe -np "$ranks" --mca btl self,vader \
    --mca btl_vader_single_copy_mechanism none \
    "$BIN" "${TRAIN[@]}" --out "$WORK/$name" "$@" >"$WORK/$name.log" 2>&1
}
must() { "$@" || { cat "$WORK/$2.log" >&2; fail "$2: zerotrain exited non-zero"; }; }
losses() { grep -oE '"loss":[^,}]*' "$WORK/$1/metrics.jsonl" | tr '\n' ' '; }
same_losses() {
  [[ -n "$(losses "$1")" && "$(losses "$1")" == "$(losses "$2")" ]] ||
    fail "$1 and $2 differ:"$'\n'"  $1: $(losses "$1")"$'\n'"  $2: $(losses "$2")"
  note "$1 has the losses of $2, bit for bit"
}
digest() { "$PY" "$SRC/tests/world_invariant/state_digest.py" model "$WORK/$1/final"; }

case "$CASE" in
  slurm)
    CLUSTER=${4:?slurm cluster link}
    [ -r "$CLUSTER/env.sh" ] || {
      echo "SKIP: no two-node Slurm at $CLUSTER (multinode_slurm_cluster_start skipped or failed)"
      exit 77
    }
    # shellcheck source=/dev/null
    source "$CLUSTER/env.sh"
    cd "$WORK"
    export ZEROTRAIN_ROOT=$SRC ZEROTRAIN_BIN=$BIN ZEROTRAIN_OUTPUT_ROOT=$WORK/outputs
    export ZEROTRAIN_BACKEND=cpu ZEROTRAIN_PRESET=tiny ZEROTRAIN_SEQ_LEN=32 ZEROTRAIN_MICRO_BATCH=2
    export ZEROTRAIN_STEPS=6 ZEROTRAIN_SAVE_EVERY=3 ZEROTRAIN_DATA=$WORK/data.h5
    export ZEROTRAIN_OFFLOAD=nvme ZEROTRAIN_NVME_PATH=$ZT_NODE_LOCAL/swap
    export ZEROTRAIN_EXTRA_ARGS="--log-every 1" ZEROTRAIN_COMM_TIMEOUT=60
    export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
    mkdir -p "$CLUSTER/nodes/nodeA/swap" "$CLUSTER/nodes/nodeB/swap" "$ZT_NODE_LOCAL/swap"
    job=$(timeout 600 sbatch --parsable --wait --nodes=2 --ntasks-per-node=2 --gpus-per-node=0 \
      --cpus-per-task=1 --output="$WORK/%x-%j.out" "$SRC/slurm/multinode_zero3.sh") ||
      { cat "$WORK"/*.out >&2; fail "sbatch slurm/multinode_zero3.sh failed"; }
    job=${job%%;*}
    run=$WORK/outputs/zero3-multinode-$job
    for f in run.json metrics.jsonl report.json report.md final/config.json launch.attempt-0.txt \
      checkpoints/step-00000006/manifest.json; do
      [ -s "$run/$f" ] || { cat "$WORK"/*.out >&2; fail "missing $run/$f"; }
    done
    grep -q -- "--mpi=pmix" "$run/launch.attempt-0.txt" || fail "not launched with srun --mpi=pmix"
    "$PY" - "$run/run.json" <<'PY' || { cat "$WORK"/*.out >&2; fail "run.json"; }
import json, sys
run = json.load(open(sys.argv[1]))
assert run["hostnames"] == ["nodeA", "nodeA", "nodeB", "nodeB"], run["hostnames"]
assert [p["local_rank"] for p in run["placement"]] == [0, 1, 0, 1], run["placement"]
config = run["config"]
assert config["zero_stage"] == 3 and config["offload_optimizer"] == "nvme", config
print("multinode slurm: run.json lists nodeA and nodeB, local ranks 0,1 on each")
PY
    # The same zerotrain command on 4 ranks of this one host.
    eval "words=($(cat "$run/launch.attempt-0.txt"))"
    args=()
    for ((i = ${#words[@]} - 1; i >= 0; i--)); do
      [ "${words[$i]}" = "$BIN" ] && break
    done
    for w in "${words[@]:i+1}"; do
      [ "${prev:-}" = --out ] && w=$WORK/one_node_slurm
      args+=("$w")
      prev=$w
    done
    timeout 300 mpirun --oversubscribe -np 4 --mca btl self,vader \
      --mca btl_vader_single_copy_mechanism none "$BIN" "${args[@]}" >"$WORK/one_node.log" 2>&1 ||
      { cat "$WORK/one_node.log" >&2; fail "the one-node rerun failed"; }
    cp -r "$run" "$WORK/slurm_run"
    same_losses slurm_run one_node_slurm
    ;;
  placement)
    must cluster two_nodes --zero-stage 3 --steps 4 --save-every 2
    "$PY" - "$WORK/two_nodes/run.json" <<'PY' || fail "run.json's placement"
import json, sys
run = json.load(open(sys.argv[1]))
got = [(p["host"], p["local_rank"], p["local_size"]) for p in run["placement"]]
want = [("nodeA", 0, 2), ("nodeA", 1, 2), ("nodeB", 0, 2), ("nodeB", 1, 2)]
assert got == want, f"placement {got}, expected {want}"
assert run["hostnames"] == ["nodeA", "nodeA", "nodeB", "nodeB"], run["hostnames"]
print("multinode placement: run.json places ranks 0,1 on nodeA and 2,3 on nodeB, local ranks 0,1")
PY
    [ -f "$WORK/two_nodes/checkpoints/step-00000004/manifest.json" ] ||
      fail "no step-4 checkpoint in the shared --out"
    must one_node one_node 4 --zero-stage 3 --steps 4 --save-every 2
    same_losses two_nodes one_node
    [ "$(digest two_nodes)" == "$(digest one_node)" ] || fail "final/ differs from one node's"
    note "final/ is bitwise the one-node run's"
    ;;
  nvme)
    # The same path names each node's own directory; only nodeA has it: nodeB's ranks refuse.
    mkdir -p "$WORK/nodes/nodeA/swap"
    if cluster missing --zero-stage 3 --steps 2 --offload-optimizer nvme \
      --nvme-path "$WORK/node-local/swap"; then
      fail "an nvme path missing on nodeB was accepted"
    fi
    grep -Eq "rank [23]\b.*$WORK/node-local/swap|$WORK/node-local/swap.*rank [23]\b" \
      "$WORK/missing.log" || { cat "$WORK/missing.log" >&2; fail "the error names no rank of nodeB"; }
    note "an nvme path missing on nodeB is refused naming nodeB's rank"
    mkdir -p "$WORK/nodes/nodeB/swap"
    cluster swapped --zero-stage 3 --steps 4 --save-every 2 --offload-optimizer nvme \
      --nvme-path "$WORK/node-local/swap" --debug-stall-checkpoint 3 &
    pid=$!
    seen=""
    for _ in $(seq 600); do
      a=$(find "$WORK/nodes/nodeA/swap" -name '*.swp' | wc -l)
      b=$(find "$WORK/nodes/nodeB/swap" -name '*.swp' | wc -l)
      if [ "$a" = 2 ] && [ "$b" = 2 ]; then seen=yes; break; fi
      sleep 0.05
    done
    wait "$pid" || { cat "$WORK/swapped.log" >&2; fail "the nvme run exited non-zero"; }
    [ -n "$seen" ] || fail "the swap files were not 2 per node directory (nodeA $a, nodeB $b)"
    note "each node's two ranks swapped to its own node-local directory"
    [ -f "$WORK/swapped/checkpoints/step-00000004/manifest.json" ] ||
      fail "no checkpoint in the shared --out"
    mkdir -p "$WORK/one_swap"
    one_node one_node_nvme 4 --zero-stage 3 --steps 4 --save-every 2 --offload-optimizer nvme \
      --nvme-path "$WORK/one_swap" || fail "the one-node nvme run failed"
    same_losses swapped one_node_nvme
    ;;
  node_loss)
    # World-invariant, so that the surviving node can continue the same run bitwise.
    RUN=(--zero-stage 3 --world-invariant --save-every 2 --steps 200 --log-every 1)
    must cluster uninterrupted "${RUN[@]}"
    kill_node_when() {  # kill_node_when NAME FILE: every process of nodeB once FILE exists
      local name=$1 file=$2 t0
      cluster "$name" "${RUN[@]}" "${@:3}" &
      local pid=$!
      for _ in $(seq 1200); do [ -e "$file" ] && break; sleep 0.05; done
      [ -e "$file" ] || fail "$name: $file never appeared"
      pkill -KILL -s "$(cat "$WORK/nodes/nodeB.session")" || fail "$name: could not kill nodeB"
      t0=$(date +%s)
      if wait "$pid"; then fail "$name: the job exited 0 after nodeB died"; fi
      elapsed=$(($(date +%s) - t0))
      [ "$elapsed" -le 60 ] || fail "$name: the survivors took ${elapsed}s to end"
      grep -q "nodeB" "$WORK/$name.log" || { cat "$WORK/$name.log" >&2; fail "$name: nodeB is not named"; }
      note "$name: nodeB killed, the job ended non-zero after ${elapsed}s naming nodeB"
    }
    latest_step() { tr -dc '0-9' <"$WORK/$1/checkpoints/latest" | sed 's/^0*//'; }
    # Mid-step: once the step-4 checkpoint is committed, training is past it.
    kill_node_when mid_step "$WORK/mid_step/checkpoints/step-00000004/manifest.json"
    # Mid-save: every save stalls 5 s with its rank files half written (step 2's too, hence no
    # longer), and nodeB dies within the step-4 one's; `latest` stays step 2.
    kill_node_when mid_save "$WORK/mid_save/checkpoints/.tmp-step-00000004" \
      --debug-stall-checkpoint 5
    [ "$(latest_step mid_save)" = 2 ] || fail "mid_save: latest is step $(latest_step mid_save), not 2"
    [ "$(latest_step mid_step)" -ge 4 ] || fail "mid_step: latest is step $(latest_step mid_step)"
    for name in mid_step mid_save; do
      step=$(latest_step "$name")
      "$BIN" info "$WORK/$name/checkpoints/$(cat "$WORK/$name/checkpoints/latest")" --verify \
        >/dev/null || fail "$name: latest (step $step) is not a complete checkpoint"
      note "$name: latest is the complete step-$step checkpoint"
      cp -a "$WORK/$name" "$WORK/${name}_survivors"
      must cluster "$name" "${RUN[@]}" --resume auto
      # The surviving node alone: 2 ranks, grad-accum 2, the same global batch.
      must one_node "${name}_survivors" 2 "${RUN[@]}" --grad-accum 2 --resume auto
      for run in "$name" "${name}_survivors"; do
        grep -q "resumed from .* at step $step (saved by 4 ranks" "$WORK/$run.log" ||
          { cat "$WORK/$run.log" >&2; fail "$run did not resume from step $step"; }
        same_losses "$run" uninterrupted
      done
    done
    ;;
  *)
    fail "unknown case $CASE"
    ;;
esac

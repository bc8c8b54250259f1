# shellcheck shell=bash
# Shared logic of the zerotrain sbatch scripts; sourced, never run. A script sets its defaults
# (ZEROTRAIN_* variables, see below) and calls zt_train_job, or zt_setup + zt_launch_training.
#
# Every setting is an environment variable the submitter may override (sbatch exports the
# submitting environment by default):
#   ZEROTRAIN_ROOT         repository root (default: SLURM_SUBMIT_DIR, else the script's parent)
#   ZEROTRAIN_BIN          zerotrain binary (default $ZEROTRAIN_ROOT/build/zerotrain)
#   ZEROTRAIN_OUTPUT_ROOT  parent of the run directories (default $ZEROTRAIN_ROOT/outputs)
#   ZEROTRAIN_RUN_DIR      the run directory (default $ZEROTRAIN_OUTPUT_ROOT/<job name>-<job id>,
#                          array tasks <job name>-<array job id>_<task id>)
#   ZEROTRAIN_BACKEND      auto | cpu | cuda (auto: the GPUs when the node has any)
#   ZEROTRAIN_PRESET / ZEROTRAIN_MODEL   preset name, or a model directory to start from
#   ZEROTRAIN_DATA         token dataset (default: sample text prepared into the output root)
#   ZEROTRAIN_STAGE ZEROTRAIN_MICRO_BATCH ZEROTRAIN_GRAD_ACCUM ZEROTRAIN_SEQ_LEN ZEROTRAIN_STEPS
#   ZEROTRAIN_EPOCHS       the run's length in passes over the data (train --epochs) instead of
#                          ZEROTRAIN_STEPS
#   ZEROTRAIN_PRECISION ZEROTRAIN_CHECKPOINTING (none|selective|full|every:K) ZEROTRAIN_SAVE_EVERY
#   ZEROTRAIN_OFFLOAD      none | cpu | nvme (optimizer state; see zt_offload_args)
#   ZEROTRAIN_NVME_PATH    swap directory for ZEROTRAIN_OFFLOAD=nvme (default RUN_DIR/nvme)
#   ZEROTRAIN_OFFLOAD_ARGS extra offload flags passed verbatim (overrides ZEROTRAIN_OFFLOAD)
#   ZEROTRAIN_COMM_TIMEOUT seconds before a stuck collective aborts the job
#   ZEROTRAIN_EXTRA_ARGS   anything else for `zerotrain train` (word-split); an option the script
#                          passes itself (--resume auto, --save-every, ...) given here wins
#   ZEROTRAIN_LAUNCHER     auto | srun | mpirun (auto: srun --mpi=pmix when the plugin exists)
#   ZEROTRAIN_MPIRUN_KILL_WAIT  mpirun's odls_base_sigkill_timeout (default 1): on a SIGTERM it
#                          relays it after this long and kills the ranks after twice this long
#                          (the time a stop without the SIGUSR1 lead has to save); it also waits
#                          twice this long to exit after a stop (exit 124)
#   ZEROTRAIN_REQUEUE      1: requeue the job after a signal-triggered checkpoint (default 1)
#   ZEROTRAIN_LAUNCH_NODES / ZEROTRAIN_LAUNCH_TASKS / ZEROTRAIN_STEP_GPUS   a job step smaller
#                          than the allocation (sweep rows): nodes, ranks, GPUs per node
#   NCCL_*                 defaults below, each kept when already set

zt_log() { printf '[zerotrain-slurm] %s\n' "$*" >&2; }
zt_die() {
  printf '[zerotrain-slurm] error: %s\n' "$*" >&2
  exit 2
}

# Refuses to run outside a Slurm job.
zt_require_slurm() {
  if [ -z "${SLURM_JOB_ID:-}" ]; then
    zt_die "$(basename "$0") is a Slurm batch script: submit it with sbatch (no SLURM_JOB_ID)"
  fi
}

zt_is_positive_int() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }

# GPUs visible per node: SLURM_GPUS_ON_NODE, else CUDA_VISIBLE_DEVICES, else nvidia-smi, else 0.
zt_gpus_per_node() {
  if [ -n "${SLURM_GPUS_ON_NODE:-}" ]; then
    echo "$SLURM_GPUS_ON_NODE"
  elif [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    local -a ids
    IFS=, read -ra ids <<<"$CUDA_VISIBLE_DEVICES"
    echo "${#ids[@]}"
  elif command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true
  else
    echo 0
  fi
}

# Ranks (tasks) per node of the step about to start.
zt_tasks_per_node() {
  local nodes=${ZEROTRAIN_LAUNCH_NODES:-${SLURM_JOB_NUM_NODES:-1}}
  local tasks=${ZEROTRAIN_LAUNCH_TASKS:-${SLURM_NTASKS:-1}}
  echo $(((tasks + nodes - 1) / nodes))
}

# With a GPU backend, one rank per GPU: the GPUs per node must equal the tasks per node.
zt_check_gpus() {
  local gpus tasks
  gpus=${ZEROTRAIN_STEP_GPUS:-$(zt_gpus_per_node)}
  tasks=$(zt_tasks_per_node)
  case "$ZEROTRAIN_BACKEND" in
    cpu) return 0 ;;
    auto) [ "$gpus" -eq 0 ] && return 0 ;;
  esac
  if [ "$gpus" -ne "$tasks" ]; then
    zt_die "GPU count mismatch: $gpus GPU(s) per node but $tasks task(s) per node" \
      "(--ntasks=${ZEROTRAIN_LAUNCH_TASKS:-${SLURM_NTASKS:-1}} on" \
      "${ZEROTRAIN_LAUNCH_NODES:-${SLURM_JOB_NUM_NODES:-1}} node(s)); zerotrain runs one rank" \
      "per GPU (set ZEROTRAIN_BACKEND=cpu to train on CPUs)"
  fi
}

# Locations, defaults, the run directory and the job's environment next to the results.
zt_setup() {
  zt_require_slurm
  : "${ZEROTRAIN_ROOT:?ZEROTRAIN_ROOT is not set}"
  ZEROTRAIN_BIN=${ZEROTRAIN_BIN:-$ZEROTRAIN_ROOT/build/zerotrain}
  ZEROTRAIN_OUTPUT_ROOT=${ZEROTRAIN_OUTPUT_ROOT:-$ZEROTRAIN_ROOT/outputs}
  ZEROTRAIN_BACKEND=${ZEROTRAIN_BACKEND:-auto}
  ZEROTRAIN_PRECISION=${ZEROTRAIN_PRECISION:-bf16}
  ZEROTRAIN_STEPS=${ZEROTRAIN_STEPS:-1000}
  ZEROTRAIN_SEQ_LEN=${ZEROTRAIN_SEQ_LEN:-2048}
  ZEROTRAIN_MICRO_BATCH=${ZEROTRAIN_MICRO_BATCH:-1}
  ZEROTRAIN_GRAD_ACCUM=${ZEROTRAIN_GRAD_ACCUM:-1}
  ZEROTRAIN_STAGE=${ZEROTRAIN_STAGE:-3}
  ZEROTRAIN_CHECKPOINTING=${ZEROTRAIN_CHECKPOINTING:-none}
  ZEROTRAIN_SAVE_EVERY=${ZEROTRAIN_SAVE_EVERY:-100}
  ZEROTRAIN_OFFLOAD=${ZEROTRAIN_OFFLOAD:-none}
  ZEROTRAIN_COMM_TIMEOUT=${ZEROTRAIN_COMM_TIMEOUT:-600}
  ZEROTRAIN_LAUNCHER=${ZEROTRAIN_LAUNCHER:-auto}
  ZEROTRAIN_REQUEUE=${ZEROTRAIN_REQUEUE:-1}
  case "$ZEROTRAIN_BACKEND" in auto | cpu | cuda) ;;
    *) zt_die "ZEROTRAIN_BACKEND must be auto, cpu or cuda, got '$ZEROTRAIN_BACKEND'" ;;
  esac
  [ -x "$ZEROTRAIN_BIN" ] || zt_die "no zerotrain binary at $ZEROTRAIN_BIN (build it or set ZEROTRAIN_BIN)"
  if [ -z "${ZEROTRAIN_RUN_DIR:-}" ]; then
    local name=${SLURM_JOB_NAME:-zerotrain}-$SLURM_JOB_ID
    [ -n "${SLURM_ARRAY_JOB_ID:-}" ] && name=${SLURM_JOB_NAME:-zerotrain}-${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}
    ZEROTRAIN_RUN_DIR=$ZEROTRAIN_OUTPUT_ROOT/$name
  fi
  mkdir -p "$ZEROTRAIN_RUN_DIR"
  # One file per attempt: a requeued job keeps the environment of each of its runs.
  local attempt=${SLURM_RESTART_COUNT:-0}
  env | sort >"$ZEROTRAIN_RUN_DIR/slurm-env.attempt-$attempt.txt"
  scontrol show job "$SLURM_JOB_ID" >"$ZEROTRAIN_RUN_DIR/slurm-job.attempt-$attempt.txt" 2>&1 || true
  zt_nccl_defaults
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}
  zt_log "job $SLURM_JOB_ID (attempt $attempt) on ${SLURM_JOB_NODELIST:-?}: run directory $ZEROTRAIN_RUN_DIR"
}

# Sane NCCL defaults, each overridable by exporting it before sbatch.
zt_nccl_defaults() {
  export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
  export NCCL_IB_TIMEOUT=${NCCL_IB_TIMEOUT:-22}        # 4.096 µs · 2^22 ≈ 17 s per IB retry
  export NCCL_IB_RETRY_CNT=${NCCL_IB_RETRY_CNT:-7}
  export NCCL_ASYNC_ERROR_HANDLING=${NCCL_ASYNC_ERROR_HANDLING:-1}  # for PyTorch-based tools
  export TORCH_NCCL_ASYNC_ERROR_HANDLING=${TORCH_NCCL_ASYNC_ERROR_HANDLING:-1}
  # zerotrain's own equivalent of async error handling is --comm-timeout (ZEROTRAIN_COMM_TIMEOUT).
}

# The dataset: ZEROTRAIN_DATA, else the bundled sample text prepared once into the output root
# (written under a temporary name and renamed, so concurrent array tasks never see half a file).
zt_dataset() {
  if [ -n "${ZEROTRAIN_DATA:-}" ]; then
    [ -r "$ZEROTRAIN_DATA" ] || zt_die "ZEROTRAIN_DATA=$ZEROTRAIN_DATA is not readable"
    echo "$ZEROTRAIN_DATA"
    return
  fi
  local data=$ZEROTRAIN_OUTPUT_ROOT/data/sample.h5
  if [ ! -e "$data" ]; then
    mkdir -p "$(dirname "$data")"
    local tmp=$data.tmp.$SLURM_JOB_ID.${SLURM_ARRAY_TASK_ID:-0}
    "$ZEROTRAIN_BIN" prepare-data --text "$ZEROTRAIN_ROOT/inputs/data/sample.txt" --out "$tmp" \
      --overwrite >&2 || zt_die "prepare-data failed"
    mv -f "$tmp" "$data"
  fi
  echo "$data"
}

# Offload flags for `zerotrain train` (nvme: ZEROTRAIN_NVME_PATH, default RUN_DIR/nvme). A build
# whose `train --help` lacks --offload-optimizer (before the offload issue landed) runs a CPU job
# without offload (with a warning) and stops a GPU job with an error.
zt_offload_args() {
  local offload=$1
  if [ -n "${ZEROTRAIN_OFFLOAD_ARGS:-}" ]; then
    echo "$ZEROTRAIN_OFFLOAD_ARGS"
    return
  fi
  case "$offload" in
    none) return ;;
    cpu | nvme) ;;
    *) zt_die "offload must be none, cpu or nvme, got '$offload'" ;;
  esac
  # The help is read whole before it is searched: `--help | grep -q` under pipefail fails when
  # grep stops reading first (the writer's SIGPIPE), which dropped the offload at random.
  local help
  help=$("$ZEROTRAIN_BIN" train --help 2>/dev/null) || help=""
  if [[ $help == *--offload-optimizer* ]]; then
    if [ "$offload" = nvme ]; then
      echo "--offload-optimizer nvme --nvme-path ${ZEROTRAIN_NVME_PATH:-$ZEROTRAIN_RUN_DIR/nvme}"
    else
      echo "--offload-optimizer $offload"
    fi
  elif [ "$ZEROTRAIN_BACKEND" = cpu ]; then
    zt_log "warning: this zerotrain has no offload flags yet: CPU run without offload=$offload"
  else
    zt_die "offload=$offload requested but this zerotrain has no --offload-optimizer yet"
  fi
}

# The launcher command (array LAUNCHER): srun --mpi=pmix, or mpirun inside the allocation when
# srun's pmix plugin is unavailable.
zt_launcher() {
  local nodes=${ZEROTRAIN_LAUNCH_NODES:-} tasks=${ZEROTRAIN_LAUNCH_TASKS:-}
  local kind=$ZEROTRAIN_LAUNCHER
  if [ "$kind" = auto ]; then
    local plugins
    plugins=$(srun --mpi=list 2>&1) || plugins=""  # read whole: see zt_offload_args
    if grep -qw pmix <<<"$plugins"; then kind=srun; else kind=mpirun; fi
  fi
  case "$kind" in
    srun)
      LAUNCHER=(srun --mpi=pmix --kill-on-bad-exit=1)
      [ -n "$nodes" ] && LAUNCHER+=(--nodes="$nodes")
      [ -n "$tasks" ] && LAUNCHER+=(--ntasks="$tasks" --ntasks-per-node="$(zt_tasks_per_node)")
      if [ -n "${ZEROTRAIN_STEP_GPUS:-}" ] && [ "$ZEROTRAIN_BACKEND" != cpu ]; then
        LAUNCHER+=(--gpus-per-node="$ZEROTRAIN_STEP_GPUS")
      fi
      ;;
    mpirun)
      [ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
      # --bind-to none: Open MPI would bind each rank to one core (two ranks or fewer) or one
      # socket, whatever --cpus-per-task gave it, and its OMP_NUM_THREADS would share that.
      LAUNCHER=(mpirun -np "${tasks:-${SLURM_NTASKS:-1}}" --npernode "$(zt_tasks_per_node)"
        --bind-to none)
      # On a SIGTERM mpirun waits this long, relays it to the ranks, waits as long again and
      # kills them (1 s by default: a stop without the SIGUSR1 lead then has about 2 s to save);
      # it also waits twice this long to exit after a rank exits non-zero (a stop's 124 too).
      # Its relay comes this long after Slurm's own SIGTERM: zerotrain is told to take it as the
      # same request (ZT_SIGTERM_RELAY_SECONDS, runtime/signals.h), not as a second one.
      if [ -n "${ZEROTRAIN_MPIRUN_KILL_WAIT:-}" ]; then
        [[ "$ZEROTRAIN_MPIRUN_KILL_WAIT" =~ ^[0-9]+$ ]] ||
          zt_die "ZEROTRAIN_MPIRUN_KILL_WAIT must be whole seconds, got '$ZEROTRAIN_MPIRUN_KILL_WAIT'"
        LAUNCHER+=(--mca odls_base_sigkill_timeout "$ZEROTRAIN_MPIRUN_KILL_WAIT"
          -x "ZT_SIGTERM_RELAY_SECONDS=${ZT_SIGTERM_RELAY_SECONDS:-$((ZEROTRAIN_MPIRUN_KILL_WAIT + 2))}")
      fi
      ;;
    *) zt_die "ZEROTRAIN_LAUNCHER must be auto, srun or mpirun, got '$kind'" ;;
  esac
}

ZT_CHILD=""
ZT_STOP_REQUESTED=""
ZT_TERM_RECEIVED=""

# SIGUSR1 to the batch shell (#SBATCH --signal=B:USR1@120, or scancel --signal=USR1 --batch):
# forward it to the launcher's process group; zerotrain saves at the next step boundary and exits
# 124. SIGTERM is not forwarded: Slurm sends it to every process of the job itself (mpirun relays
# its own too, which zerotrain takes as the same request: see zt_launcher).
zt_on_usr1() {
  ZT_STOP_REQUESTED=1
  if [ -n "$ZT_CHILD" ]; then
    zt_log "SIGUSR1: asking zerotrain (process group $ZT_CHILD) to checkpoint and stop"
    kill -USR1 -- "-$ZT_CHILD" 2>/dev/null || kill -USR1 "$ZT_CHILD" 2>/dev/null || true
  fi
}

# SIGTERM to the batch shell: Slurm's stop without the USR1 lead (preemption, scancel, a time
# limit), sent to every process of the job at once, zerotrain's ranks included. The shell keeps
# waiting: under mpirun the ranks run in the batch step, which ends when the shell does, killing
# them mid-save.
zt_on_term() {
  ZT_TERM_RECEIVED=1
  zt_log "SIGTERM: zerotrain got it too and saves at the next step boundary; waiting for it"
}

# Appends to train_args each option of `own` (option-value pairs) that `extra` does not give:
# zerotrain refuses an option given twice, and ZEROTRAIN_EXTRA_ARGS (--save-every 1) is meant to
# win. --model and --preset, and --steps and
# --epochs, each stand for the other.
zt_own_args_not_in_extra() {
  local i opt word
  local -A given=()
  for word in ${extra[@]+"${extra[@]}"}; do
    [[ "$word" == --* ]] && given[${word%%=*}]=1
  done
  # The script reads the run directory and the data itself: those are set by their variables.
  [ -z "${given[--out]:-}" ] ||
    zt_die "--out in ZEROTRAIN_EXTRA_ARGS: set ZEROTRAIN_RUN_DIR (the script reads the directory too)"
  [ -z "${given[--data]:-}" ] || zt_die "--data in ZEROTRAIN_EXTRA_ARGS: set ZEROTRAIN_DATA"
  # A sweep row's columns (sweep.sh: ZT_ROW_OPTIONS) are the row's alone.
  # shellcheck disable=SC2086  # flag strings are meant to be word-split
  for word in ${ZEROTRAIN_EXTRA_ARGS:-}; do
    for opt in ${ZT_ROW_OPTIONS:-}; do
      [ "${word%%=*}" != "$opt" ] ||
        zt_die "$opt in ZEROTRAIN_EXTRA_ARGS would override every sweep row's: set it in the sweep file"
    done
  done
  [ -n "${given[--model]:-}" ] && given[--preset]=1
  [ -n "${given[--preset]:-}" ] && given[--model]=1
  [ -n "${given[--epochs]:-}" ] && given[--steps]=1
  [ -n "${given[--steps]:-}" ] && given[--epochs]=1
  for ((i = 0; i < ${#own[@]}; i += 2)); do
    opt=${own[i]}
    if [ -n "${given[$opt]:-}" ]; then
      zt_log "ZEROTRAIN_EXTRA_ARGS (or the script's arguments) set $opt: leaving out the script's own $opt ${own[i + 1]}"
    else
      train_args+=("$opt" "${own[i + 1]}")
    fi
  done
}

# A `--resume DIR` in `extra` (ZEROTRAIN_EXTRA_ARGS: another run's checkpoint to start from)
# becomes --resume auto once the run directory holds checkpoints of its own (a requeued job):
# the job goes on from its newest one, as torchtitan's initial_load_path gives way to the
# checkpoints of its own folder; zerotrain refuses to mix the other run into this one.
zt_resume_own_checkpoints() {
  local i word
  [ -e "$ZEROTRAIN_RUN_DIR/checkpoints/latest" ] || return 0
  for i in "${!extra[@]}"; do
    word=${extra[i]}
    if [ "$word" = --resume ] && [ -n "${extra[i + 1]:-}" ] && [ "${extra[i + 1]}" != auto ] &&
      [ "${extra[i + 1]}" != none ]; then
      zt_log "$ZEROTRAIN_RUN_DIR holds checkpoints of its own: --resume auto continues them, in place of --resume ${extra[i + 1]} (which started the run)"
      extra[i + 1]=auto
    elif [[ "$word" == --resume=* ]] && [ "${word#--resume=}" != auto ] &&
      [ "${word#--resume=}" != none ]; then
      zt_log "$ZEROTRAIN_RUN_DIR holds checkpoints of its own: --resume auto continues them, in place of $word (which started the run)"
      extra[i]=--resume=auto
    fi
  done
}

# Runs `zerotrain train` with the common flags plus "$@" under the launcher, then requeues the job
# when zerotrain stopped on a signal after saving (exit 124). Returns zerotrain's exit code.
zt_launch_training() {
  local data offload
  # (explicit exits: errexit does not apply inside a function called from `||`)
  data=$(zt_dataset) || exit 2
  offload=$(zt_offload_args "$ZEROTRAIN_OFFLOAD") || exit 2
  zt_check_gpus
  local -a own extra train_args launch length=(--steps "$ZEROTRAIN_STEPS")
  [ -z "${ZEROTRAIN_EPOCHS:-}" ] || length=(--epochs "$ZEROTRAIN_EPOCHS")
  if [ -n "${ZEROTRAIN_MODEL:-}" ]; then
    own=(--model "$ZEROTRAIN_MODEL")
  else
    own=(--preset "${ZEROTRAIN_PRESET:-tiny}")
  fi
  own+=(--data "$data" --out "$ZEROTRAIN_RUN_DIR"
    --backend "$ZEROTRAIN_BACKEND" --zero-stage "$ZEROTRAIN_STAGE"
    "${length[@]}" --seq-len "$ZEROTRAIN_SEQ_LEN"
    --micro-batch "$ZEROTRAIN_MICRO_BATCH" --grad-accum "$ZEROTRAIN_GRAD_ACCUM"
    --precision "$ZEROTRAIN_PRECISION" --activation-checkpointing "$ZEROTRAIN_CHECKPOINTING"
    --comm-timeout "$ZEROTRAIN_COMM_TIMEOUT" --resume auto --save-every "$ZEROTRAIN_SAVE_EVERY")
  # shellcheck disable=SC2206  # flag strings are meant to be word-split
  extra=($offload ${ZEROTRAIN_EXTRA_ARGS:-} "$@")
  train_args=(train)
  zt_resume_own_checkpoints
  zt_own_args_not_in_extra
  train_args+=(${extra[@]+"${extra[@]}"})
  zt_launcher
  launch=("${LAUNCHER[@]}" "$ZEROTRAIN_BIN" "${train_args[@]}")
  local launch_record=$ZEROTRAIN_RUN_DIR/launch.attempt-${SLURM_RESTART_COUNT:-0}.txt
  printf '%q ' "${launch[@]}" >"$launch_record"
  zt_log "launching: ${launch[*]}"

  trap zt_on_usr1 USR1
  trap zt_on_term TERM
  # Own process group (setsid), so the signal reaches the launcher and its local children only.
  setsid "${launch[@]}" &
  ZT_CHILD=$!
  local rc
  while true; do
    rc=0
    wait "$ZT_CHILD" || rc=$?
    # wait returns early (> 128) when a trapped signal arrives; keep waiting while it runs.
    kill -0 "$ZT_CHILD" 2>/dev/null || break
  done
  rc=0
  wait "$ZT_CHILD" || rc=$?  # the child's own status (bash remembers it)
  trap - USR1 TERM
  ZT_CHILD=""
  if [ "$rc" -eq 124 ]; then
    if [ -n "$ZT_STOP_REQUESTED" ]; then
      zt_log "zerotrain saved a checkpoint after SIGUSR1 and stopped (exit 124)"
    else
      zt_log "zerotrain saved a checkpoint and stopped on a signal Slurm sent it (exit 124)"
    fi
    if [ "$ZEROTRAIN_REQUEUE" = 1 ]; then
      local job_id=$SLURM_JOB_ID
      [ -n "${SLURM_ARRAY_JOB_ID:-}" ] && job_id=${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}
      zt_log "requeueing job $job_id; it resumes with --resume auto"
      if [ -n "$ZT_TERM_RECEIVED" ]; then  # Slurm's own stop: a cancelled job stays cancelled
        scontrol requeue "$job_id" || zt_log "scontrol requeue $job_id refused (a cancelled job)"
      else
        scontrol requeue "$job_id" || zt_die "scontrol requeue $job_id failed"
      fi
    fi
  elif [ "$rc" -ne 0 ] && [ -n "$ZT_TERM_RECEIVED" ]; then
    # mpirun exits 1 after its ranks stop on a SIGTERM, whether they saved or not.
    zt_log "stopped by SIGTERM (launcher exit $rc); newest checkpoint:" \
      "$(cat "$ZEROTRAIN_RUN_DIR/checkpoints/latest" 2>/dev/null || echo none)"
  elif [ "$rc" -ne 0 ]; then
    zt_log "zerotrain failed with exit code $rc"
  elif [ ! "$ZEROTRAIN_RUN_DIR/report.json" -nt "$launch_record" ]; then
    # srun can exit 0 when its tasks never started (e.g. a step launch aborted by slurmd).
    # (zerotrain refreshes report.json when it finds the run it was asked for already finished,
    # as a requeue of a finished job does; not a finished run of another layout, nor a run whose
    # report.json was never written.)
    zt_log "the launcher exited 0 but zerotrain wrote no report.json: treating it as a failure"
    rc=1
  else
    zt_log "training finished: $ZEROTRAIN_RUN_DIR"
  fi
  return "$rc"
}

# The whole job for the fixed-configuration scripts.
zt_train_job() {
  zt_setup
  local rc=0
  zt_launch_training "$@" || rc=$?
  exit "$rc"
}

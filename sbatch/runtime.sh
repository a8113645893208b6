# ==== hpkctl runtime: the same for every pod; the pod's part is above ====================
# Status files (DEVELOPERS.md, "The pod directory"): every write is a temp file + mv, so a
# reader never sees half a value.

hpk_now() { date -u +%Y-%m-%dT%H:%M:%SZ; }

# srun sets each MPI rank's SLURM_*/PMI* variables per task, after this script was written; an
# MPI container starts as `srun ... bash -c "$HPK_MPI_ENV" hpk-mpi apptainer ...`, which hands them
# to the container as APPTAINERENV_* (honoured under --cleanenv).
# shellcheck disable=SC2034  # used only by pods with an MPI container
HPK_MPI_ENV='
  for v in ${!SLURM_@} ${!SLURMD_@} ${!PMI_@} ${!PMIX_@} ${!OMPI_@} ${!I_MPI_@}; do
    export "APPTAINERENV_$v=${!v}"
  done
  exec "$@"'

# hpk_put NAME VALUE: atomically write one status file.
hpk_put() {
  local tmp="$HPK_STATUS/.$1.$$.tmp"
  printf '%s\n' "$2" >"$tmp" && mv -f "$tmp" "$HPK_STATUS/$1"
}

# hpk_fail REASON MESSAGE: the pod failed for a reason other than a container's exit code.
hpk_fail() {
  [ -e "$HPK_STATUS/pod.failed" ] || hpk_put pod.failed "$1"$'\n'"$2"
  printf 'hpkctl: pod failed: %s: %s\n' "$1" "$2" >&2
  [ -e "$HPK_STATUS/pod.done" ] || hpk_put pod.done 1
  exit 1
}

# hpk_hostpath PATH TYPE VOLUME: Kubernetes' hostPath type checks, on the node that mounts it.
hpk_hostpath() {
  local path=$1 type=$2 volume=$3 ok=0
  case $type in
    "") return 0 ;;
    DirectoryOrCreate) mkdir -p -- "$path" && ok=1 ;;
    Directory) [ -d "$path" ] && ok=1 ;;
    FileOrCreate) { [ -f "$path" ] || { mkdir -p -- "$(dirname -- "$path")" && : >>"$path"; }; } && ok=1 ;;
    File) [ -f "$path" ] && ok=1 ;;
    Socket) [ -S "$path" ] && ok=1 ;;
    CharDevice) [ -c "$path" ] && ok=1 ;;
    BlockDevice) [ -b "$path" ] && ok=1 ;;
  esac
  [ "$ok" = 1 ] || hpk_fail HostPathCheckFailed "volume $volume: hostPath $path is not a $type on $(hostname -s)"
}

# hpk_mkdir PATH VOLUME: create a volume's directory (emptyDir, PVC, subPath).
hpk_mkdir() {
  mkdir -p -- "$1" || hpk_fail CreateContainerError "cannot create the directory of volume $2 at $1"
}

# hpk_subpath ROOT PATH CREATE WHAT: a volumeMount's subPath or subPathExpr, expanded and with
# symlinks resolved, must stay inside its volume (Kubernetes' rule); CREATE=1 makes the directory.
hpk_subpath() {
  local root path
  root=$(realpath -m -- "$1") && path=$(realpath -m -- "$2") \
    || hpk_fail CreateContainerConfigError "$4: cannot resolve the path $2"
  case $path/ in
    "$root"/*) ;;
    *) hpk_fail CreateContainerConfigError "$4: the subPath resolves to $path, outside its volume $root" ;;
  esac
  [ "$3" = 1 ] || return 0
  mkdir -p -- "$2" || hpk_fail CreateContainerError "$4: cannot create the directory $2"
}

# hpk_fresh SIF: the cached image is younger than HPK_ALWAYS_PULL_WINDOW seconds.
# (Apptainer has no cheap digest check; hpkctl's own pull on the submit host uses the same rule.)
hpk_fresh() {
  local mtime
  mtime=$(stat -c %Y -- "$1" 2>/dev/null) || return 1
  [ $(($(date +%s) - mtime)) -lt "$HPK_ALWAYS_PULL_WINDOW" ]
}

# hpk_image SIF SOURCE POLICY [CREDENTIALS]: make sure a container image is in the cache.
# CREDENTIALS is a 0600 file from imagePullSecrets, read by the pull only. Pulls are serialised
# per image with flock and land under a temp name, so parallel jobs never run a half-written SIF.
hpk_image() {
  local sif=$1 source=$2 policy=$3 creds=${4:-}
  if [ -e "$sif" ]; then
    case $policy in
      Never|IfNotPresent) return 0 ;;
      Always) hpk_fresh "$sif" && return 0 ;;
    esac
  elif [ "$policy" = Never ]; then
    hpk_fail ErrImageNeverPull "image $source is not in the cache and imagePullPolicy is Never"
  fi
  if [ "$HPK_IMAGE_PULL" != job ]; then
    [ -e "$sif" ] || hpk_fail ErrImagePull \
      "image $source is not in the cache; at this site hpkctl pulls images before submitting"
    return 0
  fi
  mkdir -p -- "$(dirname -- "$sif")" || hpk_fail ErrImagePull "cannot create the image cache for $sif"
  (
    flock 9 || exit 1
    if [ -e "$sif" ] && { [ "$policy" != Always ] || hpk_fresh "$sif"; }; then exit 0; fi
    if [ -n "$creds" ]; then
      set -a
      # shellcheck source=/dev/null
      . "$creds" || exit 1
      set +a
    fi
    tmp="$sif.tmp.$$"
    "$HPK_APPTAINER" pull --force "$tmp" "$source" && mv -f "$tmp" "$sif"
    rc=$?
    rm -f -- "$tmp"
    exit "$rc"
  ) 9>"$sif.lock" >>"$HPK_LOGS/pull.log" 2>&1 \
    || hpk_fail ErrImagePull "pulling $source failed: $(tail -n 3 "$HPK_LOGS/pull.log" | tr '\n' ' ')"
}

# hpk_env_add FILE NAME VALUE: append one variable in Apptainer's --env-file (shell) syntax.
hpk_env_add() {
  local q=$3
  q=${q//\'/\'\\\'\'}
  printf "%s='%s'\n" "$2" "$q" >>"$1"
}

# hpk_size_limit PATH LIMIT_KIB VOLUME: false (and the pod evicted) when an emptyDir is too big.
hpk_size_limit() {
  local used
  used=$(du -sk -- "$1" 2>/dev/null | cut -f1)
  [ "${used:-0}" -le "$2" ] && return 0
  hpk_put pod.failed "Evicted"$'\n'"emptyDir volume $3 is over its sizeLimit ($2 KiB)"
  return 1
}

# hpk_watch_sizes PID: what the kubelet does for sizeLimit, every HPK_SIZE_CHECK_INTERVAL seconds.
hpk_watch_sizes() {
  while sleep "$HPK_SIZE_CHECK_INTERVAL"; do
    hpk_size_limits || { kill -TERM "$1"; return; }
  done
}

# hpk_run NAME POLICY FUNCTION: run a container, restarting it as restartPolicy says, with the
# kubelet's back-off (HPK_RESTART_BACKOFF doubling up to HPK_RESTART_BACKOFF_MAX seconds).
# Returns the last exit code.
hpk_run() {
  local name=$1 policy=$2 fn=$3 rc restarts=0 delay=$HPK_RESTART_BACKOFF
  while :; do
    hpk_put "$name.started" "$(hpk_now)"
    "$fn" >>"$HPK_LOGS/$name.log" 2>&1 </dev/null
    rc=$?
    hpk_put "$name.finished" "$(hpk_now)"
    hpk_put "$name.exitcode" "$rc"
    case $policy in
      Never) return "$rc" ;;
      OnFailure) [ "$rc" -eq 0 ] && return 0 ;;
    esac
    [ -e "$HPK_STATUS/pod.terminating" ] && return "$rc"
    sleep "$delay"
    delay=$((delay * 2 > HPK_RESTART_BACKOFF_MAX ? HPK_RESTART_BACKOFF_MAX : delay * 2))
    restarts=$((restarts + 1))
    mv -f "$HPK_LOGS/$name.log" "$HPK_LOGS/$name.previous.log"
    mv -f "$HPK_STATUS/$name.exitcode" "$HPK_STATUS/$name.last-exitcode"
    mv -f "$HPK_STATUS/$name.finished" "$HPK_STATUS/$name.last-finished"
    hpk_put "$name.restarts" "$restarts"
  done
}

# hpk_names: every container name, init containers first (HPK_INIT/HPK_MAIN hold name, policy, function).
hpk_names() {
  local i
  for ((i = 0; i < ${#HPK_INIT[@]}; i += 3)); do printf '%s\n' "${HPK_INIT[i]}"; done
  for ((i = 0; i < ${#HPK_MAIN[@]}; i += 3)); do printf '%s\n' "${HPK_MAIN[i]}"; done
}

# hpk_terminate: the job is being cancelled or timed out; stop the containers, record it.
hpk_terminate() {
  trap '' TERM INT
  hpk_put pod.terminating "$(hpk_now)"
  kill -TERM -- 0 2>/dev/null
  wait
  local name
  for name in $(hpk_names); do
    if [ -e "$HPK_STATUS/$name.started" ] && [ ! -e "$HPK_STATUS/$name.exitcode" ]; then
      hpk_put "$name.finished" "$(hpk_now)"
      hpk_put "$name.exitcode" 143
    fi
  done
  [ -e "$HPK_STATUS/pod.failed" ] || hpk_put pod.failed "Terminated"$'\n'"the job was cancelled or reached its time limit"
  hpk_put pod.done 143
  exit 143
}

# hpk_start_containers: init containers one after another, then the main containers together.
# The pod's exit code is the first main container's.
hpk_start_containers() {
  local i rc=0 first=0 pid
  local -a pids=()
  for ((i = 0; i < ${#HPK_INIT[@]}; i += 3)); do
    hpk_run "${HPK_INIT[i]}" "${HPK_INIT[i + 1]}" "${HPK_INIT[i + 2]}" \
      || hpk_fail InitContainerFailed "init container ${HPK_INIT[i]} exited with code $(cat "$HPK_STATUS/${HPK_INIT[i]}.exitcode")"
  done
  for ((i = 0; i < ${#HPK_MAIN[@]}; i += 3)); do
    hpk_run "${HPK_MAIN[i]}" "${HPK_MAIN[i + 1]}" "${HPK_MAIN[i + 2]}" &
    pids+=("$!")
  done
  for pid in "${pids[@]}"; do
    wait "$pid"
    rc=$?
    [ "$first" -ne 0 ] || first=$rc
  done
  hpk_put pod.done "$first"
  return "$first"
}

# hpk_load_secrets: Secret values the pod's command lines refer to as "${HPK_SECRETS[i]}", from
# the 0600 file env/secrets (NUL-separated), so they never appear in this script.
# shellcheck disable=SC2034  # read by the container functions above when the pod uses them
hpk_load_secrets() {
  HPK_SECRETS=()
  [ -e "$HPK_POD_DIR/env/secrets" ] || return 0
  mapfile -d '' -t HPK_SECRETS <"$HPK_POD_DIR/env/secrets" \
    || hpk_fail CreateContainerConfigError "cannot read $HPK_POD_DIR/env/secrets"
}

# hpk_pod_part: inside the pod's network (the node's, or the parent container's namespace).
hpk_pod_part() {
  trap hpk_terminate TERM INT
  HPK_POD_IP=$(hostname -I 2>/dev/null | cut -d' ' -f1)
  HPK_POD_IP=${HPK_POD_IP:-127.0.0.1}
  HPK_HOST_IP=${HPK_HOST_IP:-$HPK_POD_IP}
  hpk_put pod.ip "$HPK_POD_IP"
  hpk_put host.ip "$HPK_HOST_IP"
  local name
  mkdir -p "$HPK_POD_DIR/etc" "$HPK_POD_DIR/run" || hpk_fail PodSetupFailed "cannot create $HPK_POD_DIR/etc and run"
  for name in $(hpk_names); do
    mkdir -p "$HPK_POD_DIR/tmp/$name" || hpk_fail PodSetupFailed "cannot create the /tmp of container $name"
  done
  hpk_load_secrets
  hpk_pod_setup
  hpk_start_containers
}

hpk_host_exit() {
  local rc=$?
  if [ ! -e "$HPK_STATUS/pod.done" ]; then
    [ -e "$HPK_STATUS/pod.failed" ] ||
      hpk_put pod.failed "JobFailed"$'\n'"the job ended (exit code $rc) before the pod finished; see $HPK_LOGS/slurm.out"
    hpk_put pod.done "$((rc == 0 ? 1 : rc))"
  fi
  rm -rf -- "$HPK_MEMORY_DIR"
}

# hpk_in_parent: run the pod part inside the parent container, which owns the pod's network
# namespace; the containers run nested inside it.
hpk_in_parent() {
  # The parent container has its own PATH: hand it the absolute path of the binary we use here.
  HPK_PARENT_APPTAINER=$(command -v -- "$HPK_APPTAINER" || printf '%s' "$HPK_APPTAINER")
  export HPK_PARENT_APPTAINER
  hpk_parent &
  local parent=$!
  trap 'kill -TERM "$parent" 2>/dev/null; wait "$parent"; exit 143' TERM INT
  wait "$parent"
  local rc=$?
  [ -e "$HPK_STATUS/pod.done" ] || hpk_fail ParentContainerFailed "the pod's parent container exited with code $rc; see $HPK_LOGS/slurm.out"
  return "$rc"
}

# hpk_host_part: the batch script proper, on the first node of the allocation.
hpk_host_part() {
  mkdir -p "$HPK_STATUS" "$HPK_LOGS" || exit 1
  trap hpk_host_exit EXIT
  hpk_put job.started "$(hpk_now)"
  hpk_put job.node "$(hostname -s)"
  hpk_put job.id "${SLURM_JOB_ID:-none}"
  HPK_HOST_IP=$(hostname -I 2>/dev/null | cut -d' ' -f1)
  export HPK_HOST_IP
  hpk_host_setup
  if declare -F hpk_parent >/dev/null; then
    hpk_in_parent
  else
    hpk_pod_part
  fi
}

# "job.sh pod-part" is how the parent container runs the pod part.
hpk_main() {
  if [ "${1:-}" = pod-part ]; then
    HPK_APPTAINER=${HPK_PARENT_APPTAINER:-$HPK_APPTAINER}
    hpk_pod_part
  else
    hpk_host_part
  fi
}

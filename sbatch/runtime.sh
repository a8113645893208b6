# ==== hpkctl runtime: the same for every pod; each job script (the pod's part) sources it =====
# from <state_dir>/runtime/ once its sha256 matched (DEVELOPERS.md, "The job script"), and
# calls hpk_main. Bash 4.2 and later: tests/pod/test_bash42.py scans it for newer constructs.
# Status files (DEVELOPERS.md, "The pod directory"): every write is a temp file + mv, so a
# reader never sees half a value.

# hpk_iso VAR EPOCH: VAR is the UTC time of EPOCH (seconds), ISO 8601 to the second, worked out in
# bash (the days-to-civil-date arithmetic), not by `date`: this runs at every status change, and a
# process costs 10-15 ms on a loaded node (bench/run pilot). bash 4.2's printf %(...)T would give
# local time (it ignores TZ set in the script); its %(%s)T, the epoch, does not depend on TZ.
hpk_iso() {
  local -i s=$2 z e doe yoe doy mp m
  z=$((s / 86400)) s=$((s % 86400))
  ((s >= 0)) || s=$((s + 86400)) z=$((z - 1))  # before 1970: whole days down, not toward 0
  z=$((z + 719468))
  e=$(((z >= 0 ? z : z - 146096) / 146097))
  doe=$((z - e * 146097))
  yoe=$(((doe - doe / 1460 + doe / 36524 - doe / 146096) / 365))
  doy=$((doe - (365 * yoe + yoe / 4 - yoe / 100)))
  mp=$(((5 * doy + 2) / 153))
  m=$((mp < 10 ? mp + 3 : mp - 9))
  printf -v "$1" '%04d-%02d-%02dT%02d:%02d:%02dZ' $((yoe + e * 400 + (m <= 2))) "$m" \
    $((doy - (153 * mp + 2) / 5 + 1)) $((s / 3600)) $((s % 3600 / 60)) $((s % 60))
}

# hpk_clock VAR: VAR is the time now (hpk_iso; VAR is none of their locals); hpk_now prints it (in
# "$(hpk_now)" a subshell: not on the way to a container).
hpk_clock() {
  local epoch
  printf -v epoch '%(%s)T' -1
  hpk_iso "$1" "$epoch"
}
hpk_now() {
  local now
  hpk_clock now
  printf '%s\n' "$now"
}

# An MPI container starts as `srun ... bash -c "$HPK_MPI_ENV" hpk-mpi apptainer ...`: each rank, on
# its node, sources this file again (the batch script checked it and exports its path) and runs
# hpk_rank.
# shellcheck disable=SC2034  # used only by pods with an MPI container
HPK_MPI_ENV='. "$HPK_RUNTIME" && hpk_rank "$@"'
export HPK_RUNTIME

# hpk_pilot_srun SRUN-ARGS...: pilot mode's MPI launch, in the container's own subshell (its exec
# is the container). This script is a one-task step of an allocation; the ranks are a step of their
# own there, with the pod's geometry (the script's words) on the nodes hpkctl placed the pod on
# (HPK_RANKS_NODES). This step's SLURM_* variables (one task, one node) would tell srun otherwise.
hpk_pilot_srun() {
  local v job=${SLURM_JOB_ID:-}
  for v in ${!SLURM_@}; do
    [ "$v" = SLURM_CONF ] || unset "$v"
  done
  exec setsid srun --jobid="$job" ${HPK_RANKS_NODES:+"--nodelist=$HPK_RANKS_NODES"} "$@"
}

# The kubelet's change log: after a status write the job drops a marker named after the pod's
# uid (its directory's name) into <state_dir>/changes/, a directory the kubelet creates, which
# reads that one directory per round instead of every pod's (hpkctl/pod/paths.py, CHANGES_DIR).
# Without it (hpkctl run, render --out) the marker is not written.
HPK_CHANGED=${HPK_POD_DIR%/*}
HPK_CHANGED=${HPK_CHANGED%/*}/changes/${HPK_POD_DIR##*/}
# Pilot mode: the kubelet reads the step's output (HPK_NOTIFY=1 in the step's environment; its srun
# passes the task's stdout back), so after each marker a line on fd 7 (the host part points it there)
# lets it read the change at once, not up to [kubelet] status_poll later. The marker stays the record.
hpk_changed() {
  { : >"$HPK_CHANGED"; } 2>/dev/null || :
  [ -z "${HPK_NOTIFY_FD:-}" ] || { printf '\n' >&7; } 2>/dev/null || :
}

# hpk_put NAME VALUE: atomically write one status file.
hpk_put() {
  local tmp="$HPK_STATUS/.$1.$$.tmp"
  printf '%s\n' "$2" >"$tmp" && mv -f "$tmp" "$HPK_STATUS/$1" || return
  hpk_changed
}

# hpk_puts NAME VALUE [NAME VALUE]...: atomically write several status files with one process: each
# is staged under its own name in status/.new.$$ (the host part makes it) and one mv moves them all
# (each rename atomic). Without the staging directory, one hpk_put each.
hpk_puts() {
  local stage="$HPK_STATUS/.new.$$"
  local -a staged=()
  while [ $# -ge 2 ]; do
    if [ -d "$stage" ]; then
      printf '%s\n' "$2" >"$stage/$1" && staged+=("$stage/$1") || return
    else
      hpk_put "$1" "$2" || return
    fi
    shift 2
  done
  [ ${#staged[@]} = 0 ] || { mv -f -- ${staged[@]+"${staged[@]}"} "$HPK_STATUS/" && hpk_changed; }
}

# hpk_put_now NAME: write the time now (hpk_clock) to status file NAME.
hpk_put_now() {
  local t
  hpk_clock t
  hpk_put "$1" "$t"
}

# hpk_fail REASON MESSAGE: the pod failed for a reason other than a container's exit code.
hpk_fail() {
  [ -e "$HPK_STATUS/pod.failed" ] || hpk_put pod.failed "$1"$'\n'"$2"
  printf 'hpkctl: pod failed: %s: %s\n' "$1" "$2" >&2
  [ -e "$HPK_STATUS/pod.done" ] || hpk_put pod.done 1
  exit 1
}

# hpk_memory_dir: the pod's private directory on the node's tmpfs (HPK_MEMORY_ROOT, [pods] memory_dir)
# for its Memory emptyDirs and its /dev/shm (.dev-shm): a fresh directory inside this user's own
# 0700 directory there. Other users see the pod's uid in squeue and could create a predictable path
# first, so a parent that is not this user's own 0700 directory is never used: the pod's directory is
# then a fresh mktemp -d in HPK_MEMORY_ROOT itself (a random name, 0700), and the pod still runs.
# HPK_MEMORY_DIR
# (run/memory) links to it: binds then name a source outside /dev, which Apptainer would take for a
# device bind (and skip). Sets HPK_MEMORY_REAL, which the EXIT trap removes.
hpk_memory_dir() {
  local parent own=0 template
  parent="$HPK_MEMORY_ROOT/hpk-$EUID"
  if [ -n "${HPK_NODE_KNOWN:-}" ]; then  # pilot mode: checked by an earlier step (hpk_node_known)
    own=1
  else
    [ -d "$parent" ] || mkdir -m 0700 -- "$parent" 2>/dev/null
    hpk_own_dir "$parent" && own=1 && hpk_node_record "$parent"
  fi
  # In its own 0700 directory nobody else can make a name: the pod's directory is named after the pod
  # and this shell, made with its .dev-shm by one mkdir (which fails if the name is taken: then, and
  # where the parent is not this user's own, mktemp's random name). A process fewer before the first
  # container than mktemp and mkdir; none where the host part's mkdir made it (HPK_MEMORY_MADE).
  HPK_MEMORY_REAL="$parent/pod.${HPK_POD_DIR##*/}.$$"
  if [ -z "${HPK_MEMORY_MADE:-}" ] \
    && { [ "$own" = 0 ] || ! mkdir -m 0700 -- "$HPK_MEMORY_REAL" "$HPK_MEMORY_REAL/.dev-shm" 2>/dev/null; }; then
    template="$parent.XXXXXXXX"
    [ "$own" = 0 ] || template="$parent/pod.XXXXXXXX"
    if ! HPK_MEMORY_REAL=$(exec mktemp -d -- "$template") || ! mkdir -- "$HPK_MEMORY_REAL/.dev-shm"; then
      hpk_fail MemoryDirRefused "cannot create the pod's memory directory in $HPK_MEMORY_ROOT ([pods] memory_dir)"
    fi
  fi
  export HPK_MEMORY_REAL
  ln -sfn -- "$HPK_MEMORY_REAL" "$HPK_MEMORY_DIR" \
    || hpk_fail MemoryDirRefused "cannot prepare the pod's memory directory $HPK_MEMORY_REAL"
}

# Pilot mode: every step of an allocation on a node finds the same node, so the first one records
# what it learnt there with processes (the node's address: hostname -I; that the memory directory's
# parent is this user's own 0700 directory: stat) in that directory's .pilot-node ("JOB NODE IP ."),
# and the later ones read it with bash's read (two processes fewer at each pod's start). It is
# trusted only for this allocation and node, only in a directory of this user's (-O, not a link) and
# only when the record itself is this user's (-O: written here, after the directory passed
# hpk_own_dir's 0700 check; in a directory others may write in, theirs is not); anything else
# (another allocation's, half written, planted) is done again.
# hpk_node_known: HPK_NODE_KNOWN=1 and HPK_NODE_IP (hostname -I's first address, or empty) when read there.
hpk_node_known() {
  local parent="$HPK_MEMORY_ROOT/hpk-$EUID" job node ip end
  HPK_NODE_KNOWN='' HPK_NODE_IP=''
  if [ -n "${HPK_PILOT:-}" ] && [ -n "${SLURM_JOB_ID:-}" ] && [ ! -L "$parent" ] && [ -O "$parent" ] \
    && [ -O "$parent/.pilot-node" ] && [ ! -L "$parent/.pilot-node" ] \
    && { read -r job node ip end <"$parent/.pilot-node"; } 2>/dev/null && [ "$end" = . ] \
    && [ "$job" = "$SLURM_JOB_ID" ] && [ "$node" = "${SLURMD_NODENAME:--}" ]; then
    HPK_NODE_IP=${ip#-} HPK_NODE_KNOWN=1
  fi
}

# hpk_node_record PARENT: pilot mode: what hpk_node_known reads, once PARENT passed its check.
hpk_node_record() {
  [ -n "${HPK_PILOT:-}" ] && [ -n "${SLURM_JOB_ID:-}" ] || return 0
  { printf '%s %s %s .\n' "$SLURM_JOB_ID" "${SLURMD_NODENAME:--}" "${HPK_NODE_IP:--}" >"$1/.pilot-node"; } 2>/dev/null
  return 0
}

# hpk_own_dir DIR: DIR is a directory (not a link) of this user's with mode 0700; else it says so.
hpk_own_dir() {
  [ ! -L "$1" ] && [ -d "$1" ] && [ "$(exec stat -c %u:%a -- "$1")" = "$EUID:700" ] && return 0
  printf 'hpkctl: %s on %s is not a directory of %s with mode 0700 (another user may have made it): not used\n' \
    "$1" "$(hostname -s)" "$(id -un)" >&2
  return 1
}

# hpk_rank APPTAINER ARGS...: one rank of an MPI container, run by srun on each task's node (see
# HPK_MPI_ENV). srun sets each rank's SLURM_*/PMI* variables per task, after the script was written:
# they reach the container as APPTAINERENV_* (honoured under --cleanenv). The ranks of a node share
# the pod's memory directory (their /dev/shm, Memory emptyDirs): on the batch script's node the one
# it made; on another node none exists, so the ranks make it at the same path (HPK_MEMORY_REAL, a
# random name, whose parent must be this user's own 0700 directory there), with the directories the
# binds name below run/memory, and the last rank to end removes it.
hpk_rank() {
  local v rc=0 d=$HPK_MEMORY_REAL p=${HPK_MEMORY_REAL%/*}
  for v in ${!SLURM_@} ${!SLURMD_@} ${!PMI_@} ${!PMIX_@} ${!OMPI_@} ${!I_MPI_@}; do
    export "APPTAINERENV_$v=${!v}"
  done
  if [ ! -d "$d" ] && [ "$p" != "$HPK_MEMORY_ROOT" ]; then
    mkdir -m 0700 -- "$p" 2>/dev/null
    hpk_own_dir "$p" || return 1
  fi
  hpk_ranks "$p" "$d" 1 "$@" || return 1
  trap 'kill -TERM "$!" 2>/dev/null' TERM INT HUP
  "$@" &
  while kill -0 "$!" 2>/dev/null; do wait "$!"; done
  wait "$!" || rc=$?
  hpk_ranks "$p" "$d" -1
  return "$rc"
}

# hpk_ranks PARENT DIR 1|-1 [ARGS...]: count a rank of this node in or out of DIR (PARENT locked:
# a descriptor opened for this only, never passed on to a container). Counting in makes DIR and the
# directories ARGS' --binds name below run/memory; the last one out removes a DIR the ranks made.
hpk_ranks() {
  local lock n b p=$1 d=$2 delta=$3
  shift 3
  exec {lock}<"$p" && flock -w 30 "$lock" || { printf 'hpkctl: cannot lock %s\n' "$p" >&2; return 1; }
  if [ "$delta" = 1 ]; then
    ! mkdir -m 0700 -- "$d" 2>/dev/null || : >"$d/.made-by-ranks"
    for b; do
      case $b in "$HPK_MEMORY_DIR"/*:*) b=${b%%:*} && mkdir -p -- "$d/${b#"$HPK_MEMORY_DIR"/}" ;; esac
    done
    hpk_own_dir "$d" || { exec {lock}<&-; return 1; }
  fi
  n=$(cat -- "$d/.ranks" 2>/dev/null)
  n=$((${n:-0} + delta))
  if [ "$n" -le 0 ] && [ -e "$d/.made-by-ranks" ]; then
    rm -rf -- "$d"
  else
    printf '%s\n' "$n" >"$d/.ranks"
  fi
  exec {lock}<&-
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

# hpk_subpath MODE ROOT PATH CREATE WHAT: a volumeMount's subPath or subPathExpr, checked as
# the container (MODE start) or an exec, probe or hook in it (MODE exec) starts: expanded and with
# symlinks resolved it must stay inside its volume (Kubernetes' rule); CREATE=1 makes the directory.
# An earlier container may have swapped the path for a symlink, so the path is opened and the check
# runs on what was opened; what is bound is its checked real path, which has no symlink left. The
# descriptor is closed again: Apptainer hands every open descriptor on to the container's process,
# and /proc/self/fd/N/.. of a host directory is the host's file system. (A container that runs
# meanwhile can still swap a directory of that real path between the check and Apptainer's mount.)
# Adds the source to HPK_SUBPATHS. A refusal fails the pod (start) or the exec (exec, status 125).
# Messages never show the expanded subPath: a subPathExpr may expand a Secret's value, and the
# message becomes the pod's status (issue 20.18).
hpk_subpath() {
  local mode=$1 root path fd real
  root=$(realpath -m -- "$2") && path=$(realpath -m -- "$3") \
    || hpk_subpath_refused "$mode" "$5: cannot resolve its path" || return
  root=${root%/}  # "/" as "", so that "$root"/* matches below it
  case $path/ in
    "$root"/*) ;;
    *) hpk_subpath_refused "$mode" "$5: the path resolves outside its volume (or allowed hostPath prefix) $root" || return ;;
  esac
  if [ "$4" = 1 ] && [ ! -e "$path" ]; then
    mkdir -p -- "$path" || hpk_subpath_refused "$mode" "$5: cannot create its subPath directory" || return
  fi
  if [ ! -d "$path" ] && [ ! -f "$path" ]; then
    # a socket or device (a hostPath) is not opened: its real path is checked
    real=$(realpath -e -- "$path") || hpk_subpath_refused "$mode" "$5: its path does not exist" || return
    case $real/ in
      "$root"/*) HPK_SUBPATHS+=("$real"); return 0 ;;
      *) hpk_subpath_refused "$mode" "$5: the path resolves outside its volume (or allowed hostPath prefix) $root" || return ;;
    esac
  fi
  exec {fd}<"$path" || hpk_subpath_refused "$mode" "$5: cannot open its path" || return
  real=$(readlink -- "/proc/$BASHPID/fd/$fd")
  exec {fd}<&-
  case $real/ in
    "$root"/*) HPK_SUBPATHS+=("$real") ;;
    *) hpk_subpath_refused "$mode" "$5: the path resolves outside its volume (or allowed hostPath prefix) $root" || return ;;
  esac
}

# hpk_unprotected MODE WHAT: the source hpk_subpath added last (a hostPath) must not be at, below or
# above a path of HPK_PROTECTED (hpkctl's own state), symlinks resolved.
hpk_unprotected() {
  local real p
  real=$(readlink -f -- "${HPK_SUBPATHS[${#HPK_SUBPATHS[@]} - 1]}")
  real=${real%/}
  for p in ${HPK_PROTECTED[@]+"${HPK_PROTECTED[@]}"}; do
    p=$(realpath -m -- "$p")
    case $real/ in
      "$p"/*) ;;
      *) case $p/ in "$real"/*) ;; *) continue ;; esac ;;
    esac
    hpk_subpath_refused "$1" "$2: the hostPath reaches $p (hpkctl's state, never mountable)" || return
  done
}

# hpk_subpath_refused MODE MESSAGE: a subPath that must not be bound. As a container starts, the pod
# fails (CreateContainerConfigError) and is stopped; an exec only says why (returns 1).
hpk_subpath_refused() {
  printf 'hpkctl: %s\n' "$2" >&2
  [ "$1" = start ] || return 1
  [ -e "$HPK_STATUS/pod.failed" ] || hpk_put pod.failed "CreateContainerConfigError"$'\n'"$2"
  kill -TERM "$$"
  exit 1
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
  ) 9>"$sif.lock" >>"$HPK_LOGS/pull.log" 2>&1 7>&- \
    || hpk_fail ErrImagePull "pulling $source failed: $(tail -n 3 "$HPK_LOGS/pull.log" | tr '\n' ' ')"
}

# hpk_wait_token FILE: a projected service-account token the kubelet writes right after sbatch
# returned (its TokenRequest is kept off the submit path); no container starts before it is there, as a
# kubelet mounts every volume before a pod's first container. It is usually there at the first look;
# after that looks 0.1 s apart, doubling up to 5 s (a bounded number: shared file systems throttle
# metadata polling), for HPK_TOKEN_WAIT seconds in all (~65 looks), then the pod fails.
hpk_wait_token() {
  local waited=0 pause=1  # tenths of a second
  while [ ! -s "$1" ]; do
    ((waited < ${HPK_TOKEN_WAIT:-300} * 10)) || hpk_fail FailedMount \
      "the service account token $1 was not written within ${HPK_TOKEN_WAIT:-300} s: the kubelet's TokenRequest failed (see the pod's FailedMount events)"
    sleep "$((pause / 10)).$((pause % 10))"
    waited=$((waited + pause))
    pause=$((pause * 2 > 50 ? 50 : pause * 2))
  done
}

# hpk_env_add FILE NAME VALUE: append one variable in Apptainer's --env-file (shell) syntax.
hpk_env_add() {
  local q=$3
  q=${q//\'/\'\\\'\'}
  printf "%s='%s'\n" "$2" "$q" >>"$1"
}

# hpk_size_limit LIMIT_KIB MESSAGE PATH...: false (and the pod evicted, with the kubelet's MESSAGE)
# when PATH... together use more than LIMIT_KIB on disk.
hpk_size_limit() {
  local limit=$1 message=$2 used
  shift 2
  used=$(du -skc -- "$@" 2>/dev/null | tail -n 1 | cut -f1)
  [ "${used:-0}" -le "$limit" ] && return 0
  [ -e "$HPK_STATUS/pod.failed" ] || hpk_put pod.failed "Evicted"$'\n'"$message"
  return 1
}

# hpk_watch_sizes PID: what the kubelet does for sizeLimit, every HPK_SIZE_CHECK_INTERVAL seconds.
hpk_watch_sizes() {
  while sleep "$HPK_SIZE_CHECK_INTERVAL"; do
    hpk_size_limits || { kill -TERM "$1"; return; }
  done
}

# ---- containers: start, hooks, stop (DEVELOPERS.md, "Stopping a pod") ----------------------------
# Each container has a runner (hpk_run, a background subshell) that starts it in the background,
# runs its hooks, waits for it and restarts it. SIGTERM to a runner stops its container:
# preStop, then SIGTERM, then SIGKILL after the grace period (HPK_GRACE); it is not restarted.

# hpk_children PID: the direct children of a process.
hpk_children() {
  cat /proc/"$1"/task/*/children 2>/dev/null || pgrep -P "$1"
}

# hpk_descendants PID: every process below PID.
hpk_descendants() {
  local kid
  for kid in $(hpk_children "$1"); do
    printf '%s\n' "$kid"
    hpk_descendants "$kid"
  done
}

# hpk_kill_tree PID: SIGKILL every process below PID, then PID.
hpk_kill_tree() {
  # shellcheck disable=SC2046  # one pid per word
  kill -KILL $(hpk_descendants "$1") 2>/dev/null
  kill -KILL "$1" 2>/dev/null
}

# hpk_hook NAME FN KIND: the container's post_start or pre_stop hook (function FN_KIND), its output
# in logs/NAME.KIND.log; a failure is recorded in NAME.hook-failed (the first of this run).
hpk_hook() {
  local name=$1 fn=$2 kind=$3 rc out
  out="$HPK_LOGS/$name.${kind/_/-}.log"
  "${fn}_$kind" >"$out" 2>&1 </dev/null 7>&-
  rc=$?
  [ "$rc" -eq 0 ] && return 0
  if [ "$kind" = pre_stop ]; then
    hpk_hook_failed "$name" FailedPreStopHook "preStop hook failed (exit code $rc): $(tail -c 1024 -- "$out")"
  else
    hpk_hook_failed "$name" FailedPostStartHook "postStart hook failed (exit code $rc): $(tail -c 1024 -- "$out")"
  fi
  return "$rc"
}

# hpk_hook_failed NAME REASON MESSAGE: the first hook failure of the container's current run.
hpk_hook_failed() {
  local name=$1
  [ -e "$HPK_STATUS/$name.hook-failed" ] || hpk_put "$name.hook-failed" "$2"$'\n'"$3"
}

# hpk_hook_http HOST PORT PATH SCHEME [HEADER...]: an httpGet hook, with bash's /dev/tcp (the node
# or parent image may lack curl). Any response within the grace period counts, as in the kubelet.
hpk_hook_http() {
  local host=$1 port=$2 path=$3 scheme=$4 header status
  shift 4
  if [ "$scheme" = HTTPS ]; then
    command -v curl >/dev/null || { echo "HTTPS hooks need curl on the node" >&2; return 1; }
    local -a args=()
    for header; do args+=(-H "$header"); done
    curl -ksS -o /dev/null --max-time "$HPK_GRACE" ${args[@]+"${args[@]}"} "https://$host:$port$path"
    return
  fi
  exec 3<>"/dev/tcp/$host/$port" || return 1
  {
    printf 'GET %s HTTP/1.1\r\nHost: %s:%s\r\nUser-Agent: kube-lifecycle/hpkctl\r\nConnection: close\r\n' \
      "$path" "$host" "$port"
    for header; do printf '%s\r\n' "$header"; done
    printf '\r\n'
  } >&3
  IFS= read -r status <&3
  exec 3<&-
  printf '%s\n' "$status"
  case $status in
    "HTTP/"*) return 0 ;;
    *) echo "no HTTP response from $host:$port" >&2; return 1 ;;
  esac
}

# hpk_centis: set HPK_CENTIS to a monotonic clock in hundredths of a second: /proc/uptime, read by
# bash itself (no process started; bash 4.2 has no EPOCHREALTIME, which came with 5.0), or where
# /proc cannot be read, GNU date's nanoseconds (coreutils). Whole seconds (SECONDS, date +%s) would
# cut up to a second off a grace period.
hpk_centis() {
  local up rest
  if { read -r up rest </proc/uptime; } 2>/dev/null && [[ $up == *.[0-9][0-9] ]]; then
    HPK_CENTIS=$((10#${up/./}))
  else
    HPK_CENTIS=$(($(date +%s%N) / 10000000))
  fi
}

# hpk_before END: the clock (hpk_centis) has not reached END yet.
hpk_before() {
  hpk_centis
  [ "$HPK_CENTIS" -lt "$1" ]
}

# hpk_stop_container NAME FN CPID: Kubernetes' stop sequence: preStop (if any), SIGTERM, and SIGKILL
# once HPK_GRACE seconds (at least 2, as the kubelet) have passed since the start (timed to 1/100 s
# with hpk_centis); preStop counts against the grace period, and one that overruns it gets 2 more
# seconds (the kubelet's rule).
# SIGTERM goes to the container function's process, which exec'd apptainer (or srun for MPI): it
# hands it to the container's process; SIGKILL goes to the whole tree. Returns once the container is gone.
hpk_stop_container() {
  local name=$1 fn=$2 cpid=$3 end hook HPK_CENTIS
  kill -0 "$cpid" 2>/dev/null || return 0
  hpk_centis
  end=$((HPK_CENTIS + (HPK_GRACE < 2 ? 2 : HPK_GRACE) * 100))
  if declare -F "${fn}_pre_stop" >/dev/null; then
    hpk_hook "$name" "$fn" pre_stop &
    hook=$!
    while kill -0 "$hook" 2>/dev/null && kill -0 "$cpid" 2>/dev/null && hpk_before "$end"; do
      sleep 0.2
    done
    if kill -0 "$hook" 2>/dev/null && kill -0 "$cpid" 2>/dev/null; then
      hpk_hook_failed "$name" FailedPreStopHook "preStop hook did not finish within the grace period (${HPK_GRACE}s)"
      hpk_centis
      end=$((HPK_CENTIS + 200))
    fi
    hpk_kill_tree "$hook"
    wait "$hook" 2>/dev/null
  fi
  kill -TERM "$cpid" 2>/dev/null
  while kill -0 "$cpid" 2>/dev/null && hpk_before "$end"; do sleep 0.2; done
  kill -0 "$cpid" 2>/dev/null || return 0
  hpk_kill_tree "$cpid"
  while kill -0 "$cpid" 2>/dev/null; do sleep 0.1; done
  return 0
}

# hpk_termination_message NAME RC: the terminated state's message (status/NAME.message, bytes as
# written): the last 4096 bytes of the terminationMessagePath file, or with FallbackToLogsOnError,
# an empty file and a non-zero exit code the last 80 lines of the log, at most 2048 bytes (kubelet).
hpk_termination_message() {
  local name=$1 rc=$2 file="$HPK_POD_DIR/run/$1.termination-log" tmp="$HPK_STATUS/.$1.message.$$.tmp"
  if [ -s "$file" ]; then
    tail -c 4096 -- "$file" >"$tmp"
  elif [ "$rc" -ne 0 ] && [[ " ${HPK_LOG_FALLBACK[*]+${HPK_LOG_FALLBACK[*]}} " == *" $name "* ]]; then
    tail -n 80 -- "$HPK_LOGS/$name.log" | tail -c 2048 >"$tmp"
  else
    return 0
  fi
  if [ -s "$tmp" ]; then mv -f "$tmp" "$HPK_STATUS/$name.message"; else rm -f "$tmp"; fi
}

# hpk_stop_runner: the runner's SIGTERM trap: stop the current container (and a postStart hook or
# back-off sleep in progress); it is not restarted.
hpk_stop_runner() {
  HPK_STOPPING=1
  [ -z "$HPK_CPID" ] || hpk_stop_container "$HPK_NAME" "$HPK_FN" "$HPK_CPID"
  [ -z "$HPK_WAITING" ] || hpk_kill_tree "$HPK_WAITING"
}

# hpk_restarts POLICY RC: whether the runner starts its container again after this exit (not while
# the container or the pod is being stopped).
hpk_restarts() {
  [ "$HPK_STOPPING" = 0 ] && [ ! -e "$HPK_STATUS/pod.terminating" ] || return 1
  case $1 in
    Never) return 1 ;;
    OnFailure) [ "$2" -ne 0 ] ;;
  esac
}

# hpk_oom_kills: how many processes the kernel's OOM killer has killed where this pod's containers
# run. The job's memory cgroup (Slurm's job_N level, else this process's own): cgroup v2's
# memory.events counts its whole subtree, v1's memory.oom_control a cgroup's own tasks only, so the
# subtree's are added up. Under cgroup v2 also the slice where rootless Apptainer puts a container
# it gives cgroup limits (--memory, --apply-cgroups in exec_flags): the scope
# user.slice:apptainer:PID of the user's systemd manager, outside the job and removed with the
# container; its slice's counter keeps the kill (HPK_APPTAINER_CGROUPS=1, set by the job script only
# then: the slice is shared by all this user's such containers on the node). HPK_CGROUP_ROOT, HPK_PROC_CGROUP: for tests.
hpk_oom_kills() {
  hpk_oom_count
  printf '%s\n' "$HPK_OOM_KILLS"
}

# hpk_oom_count: HPK_OOM_KILLS is hpk_oom_kills' count, with no process (no subshell, no find):
# hpk_run counts before each container start and after its end (bench/run pilot: `oom=$(...)` and
# its find took 50-60 ms of a pod's start on a loaded node).
hpk_oom_count() {
  local root=${HPK_CGROUP_ROOT:-/sys/fs/cgroup} ctrl path dir
  local -a files=()
  local level='/job_[0-9]+'
  # pilot mode: the pod is one step of an allocation that holds other pods; only its step counts
  [ -z "${HPK_PILOT:-}" ] || level='/job_[0-9]+/step_[0-9]+'
  while IFS=: read -r _ ctrl path; do
    [[ $path =~ ^(.*$level)(/|$) ]] && path=${BASH_REMATCH[1]}
    case $ctrl in
      memory) hpk_oom_v1 "$root/memory$path" ;;
      "")
        dir=$root
        [ -e "$dir/cgroup.controllers" ] || dir=$root/unified
        files+=("$dir$path/memory.events")
        # only where exec_flags give Apptainer cgroups: the slice counts every such container of
        # this user on the node, other pods' included
        [ "${HPK_APPTAINER_CGROUPS:-0}" = 0 ] \
          || files+=("$dir/user.slice/user-$UID.slice/user@$UID.service/user.slice/memory.events") ;;
    esac
  done <"${HPK_PROC_CGROUP:-/proc/self/cgroup}"
  # summed here, not by cat | awk: this runs before every container start (two processes fewer)
  local n=0 key value
  for dir in ${files[@]+"${files[@]}"}; do
    { while read -r key value _; do
        [ "$key" = oom_kill ] && [[ $value =~ ^[0-9]+$ ]] && n=$((n + value))
      done <"$dir"; } 2>/dev/null
  done
  HPK_OOM_KILLS=$n
}

# hpk_oom_v1 DIR: add DIR's memory.oom_control and those of the cgroups below it to hpk_oom_count's
# files (a cgroup v1 directory holds no links).
hpk_oom_v1() {
  local sub
  [ ! -e "$1/memory.oom_control" ] || files+=("$1/memory.oom_control")
  for sub in "$1"/*/; do
    [ ! -d "$sub" ] || hpk_oom_v1 "${sub%/}"
  done
}

# hpk_ranks_oom FUNCTION NAME: the container is an MPI launch (its ranks are a step of their own, on
# every node of the pod; the memory cgroup hpk_oom_count reads is this node's only, and in pilot mode
# this step's only) and srun's last words in its log say the OOM killer struck a task: "srun: error:
# n2: task 1: Out Of Memory" (srun then exits 1, not 137). Runs only for a container that failed.
hpk_ranks_oom() {
  [[ $(declare -f "$1") == *hpk-mpi* ]] || return 1
  tail -c 4096 -- "$HPK_LOGS/$2.log" 2>/dev/null | tail -n 20 \
    | grep -q -E '^srun: error: [^:]+: tasks? [0-9,-]+: Out Of Memory$'
}

# hpk_run NAME POLICY FUNCTION: run a container, restarting it as restartPolicy says, with the
# kubelet's back-off (HPK_RESTART_BACKOFF doubling up to HPK_RESTART_BACKOFF_MAX seconds). Runs as
# a background subshell (its variables are its own). Returns the last exit code.
hpk_run() {
  HPK_NAME=$1 HPK_FN=$3 HPK_CPID='' HPK_STOPPING=0 HPK_WAITING=''
  local name=$1 policy=$2 fn=$3 rc restarts=0 delay=$HPK_RESTART_BACKOFF probes_pid f oom t
  local -a ended up
  trap hpk_stop_runner TERM
  while :; do
    umask 0111  # the termination log is 0666 (as chmod made it: a process fewer before each start)
    : >"$HPK_POD_DIR/run/$name.termination-log"
    umask 077
    hpk_oom_count
    oom=$HPK_OOM_KILLS
    "$fn" >>"$HPK_LOGS/$name.log" 2>&1 </dev/null 7>&- &  # (fd 7: the kubelet's, not the container's)
    HPK_CPID=$!
    # The container is not Running until postStart returns (poststart is written before started, so
    # started without poststart means the hook returned); if it fails, the container is killed.
    declare -F "${fn}_post_start" >/dev/null && hpk_put_now "$name.poststart"
    hpk_clock t
    up=("$name.started" "$t")  # written with ready (one mv) when no hook or probe comes between
    if declare -F "${fn}_post_start" >/dev/null; then
      hpk_puts ${up[@]+"${up[@]}"}
      up=()
      hpk_hook "$name" "$fn" post_start &
      HPK_WAITING=$!
      while kill -0 "$HPK_WAITING" 2>/dev/null; do wait "$HPK_WAITING"; done
      wait "$HPK_WAITING" || { [ "$HPK_STOPPING" = 1 ] || hpk_stop_container "$name" "$fn" "$HPK_CPID"; }
      HPK_WAITING=''
      rm -f -- "$HPK_STATUS/$name.poststart"
      hpk_changed
    fi
    probes_pid=''
    if [ "$HPK_STOPPING" = 0 ] && kill -0 "$HPK_CPID" 2>/dev/null; then
      if declare -F "${fn}_probes" >/dev/null; then
        hpk_puts ${up[@]+"${up[@]}"}
        up=()
        "${fn}_probes" "$HPK_CPID" &
        probes_pid=$!
      else
        up+=("$name.ready" 1)
      fi
    fi
    hpk_puts ${up[@]+"${up[@]}"}
    # wait returns early when a trap ran (the container may still be stopping); the last one
    # gives the container's exit status.
    while kill -0 "$HPK_CPID" 2>/dev/null; do wait "$HPK_CPID"; done
    wait "$HPK_CPID"
    rc=$?
    # what is left of the container (its own process group: the function's setsid) ends with it,
    # as a container's processes do when its PID namespace goes
    kill -KILL -- "-$HPK_CPID" 2>/dev/null
    HPK_CPID=''
    if [ -n "$probes_pid" ]; then
      kill -TERM "$probes_pid" 2>/dev/null
      wait "$probes_pid" 2>/dev/null
    fi
    hpk_clock t  # finishedAt: the container's end, however long the writes below take
    hpk_termination_message "$name" "$rc"
    ended=("$name.ready" 0 "$name.finished" "$t")
    # SIGKILLed while the OOM killer killed in the job's memory cgroup: OOMKilled, as the kubelet says;
    # an MPI container's ranks: srun says so for a task on any node (hpk_ranks_oom)
    if [ "$rc" -eq 137 ] && hpk_oom_count && [ "$HPK_OOM_KILLS" -gt "$oom" ] \
      || { [ "$rc" -ne 0 ] && hpk_ranks_oom "$fn" "$name"; }; then
      ended+=("$name.reason" OOMKilled)
    fi
    # a restart to come: the status is waiting (CrashLoopBackOff) for these seconds, not terminated
    hpk_restarts "$policy" "$rc" && ended+=("$name.backoff" "$delay")
    # the container's end in one process (one mv of them all, in this order): the exit code last,
    # the file that says the container terminated
    hpk_puts ${ended[@]+"${ended[@]}"} "$name.exitcode" "$rc"
    hpk_restarts "$policy" "$rc" || return "$rc"
    sleep "$delay" &
    HPK_WAITING=$!
    wait "$HPK_WAITING"
    HPK_WAITING=''
    if [ "$HPK_STOPPING" = 1 ]; then
      rm -f -- "$HPK_STATUS/$name.backoff"
      hpk_changed
      return "$rc"
    fi
    delay=$((delay * 2 > HPK_RESTART_BACKOFF_MAX ? HPK_RESTART_BACKOFF_MAX : delay * 2))
    restarts=$((restarts + 1))
    mv -f "$HPK_LOGS/$name.log" "$HPK_LOGS/$name.previous.log"
    for f in exitcode finished message hook-failed probe-kill reason; do
      [ ! -e "$HPK_STATUS/$name.$f" ] || mv -f "$HPK_STATUS/$name.$f" "$HPK_STATUS/$name.last-$f"
    done
    rm -f -- "$HPK_STATUS/$name.backoff"
    hpk_put "$name.restarts" "$restarts"
  done
}

# hpk_names: every container name, init containers first (HPK_INIT/HPK_MAIN hold name, policy, function).
hpk_names() {
  local i
  for ((i = 0; i < ${#HPK_INIT[@]}; i += 3)); do printf '%s\n' "${HPK_INIT[i]}"; done
  for ((i = 0; i < ${#HPK_MAIN[@]}; i += 3)); do printf '%s\n' "${HPK_MAIN[i]}"; done
}

# Runners of the pod part: the init container running now, the main containers, the sidecars
# (init containers with restartPolicy Always) in start order.
HPK_INIT_RUNNER=''
HPK_RUNNERS=()
HPK_SIDECARS=()

# hpk_stop_runners PID...: stop these runners' containers concurrently and wait for them.
hpk_stop_runners() {
  local pid
  for pid; do kill -TERM "$pid" 2>/dev/null; done
  for pid; do wait "$pid" 2>/dev/null; done
}

# hpk_stop_sidecars: after the main containers, the sidecars in reverse order, one at a time.
hpk_stop_sidecars() {
  local i
  for ((i = ${#HPK_SIDECARS[@]} - 1; i >= 0; i--)); do hpk_stop_runners "${HPK_SIDECARS[i]}"; done
  HPK_SIDECARS=()
}

# hpk_cancelled SECONDS: a TERM that no delete announced (pod.deleting) is the time limit's --signal,
# which leaves the job RUNNING, or a cancel from outside (scancel, an administrator, preemption), for
# which slurmctld ends the job before it signals it: say so (pod.failed Cancelled). squeue gets
# SECONDS to answer, or nothing is written (as where it cannot answer: inside a cni parent container,
# where the host part asked already); Slurm's own verdict still wins when the status is read back.
# SIGNALING is a running job whose signal slurmctld has not yet seen delivered (the time limit's, busy node).
# Pilot mode: the allocation's own time limit ends its steps (Slurm says COMPLETING, reason TimeLimit):
# the pod's node went away under it (hpk_allocation_ended).
hpk_cancelled() {
  [ ! -e "$HPK_STATUS/pod.deleting" ] && [ ! -e "$HPK_STATUS/pod.failed" ] || return 0
  local state
  # an element of a batch of pods asks for itself (ARRAY_I): the array's own id lists every element
  state=$(timeout "$1" squeue --noheader --jobs="${HPK_SLURM_JOB:-${SLURM_JOB_ID:-0}}" --format=%T/%r 2>/dev/null) ||
    return 0
  case $state in
    "" | RUNNING/* | SIGNALING/*) return 0 ;;
    */TimeLimit) [ -z "${HPK_PILOT:-}" ] || { hpk_allocation_ended; return 0; } ;;
  esac
  hpk_put pod.failed "Cancelled"$'\n'"the Slurm job was cancelled from outside hpkctl (scancel, an administrator or preemption; Slurm says ${state%%/*}); its containers were stopped with their grace period"
}

# hpk_allocation_ended: pod.failed of a pilot pod whose allocation reached its time limit, as the
# kubelet's node shutdown says (reason Terminated), with what keeps a pod out of such an allocation
# (the same words as hpkctl/pod/outcome.py allocation_ended, for a pod whose script had no time to say)
hpk_allocation_ended() {
  local fix="a pod without activeDeadlineSeconds is placed where its allocation has [pilot] renewal_margin left: give the pod an activeDeadlineSeconds that covers its run (it then goes only where the allocation outlasts it), or raise [pilot] renewal_margin or time_limit in the site profile"
  [ "${HPK_ACTIVE_DEADLINE:-0}" -eq 0 ] \
    || fix="its activeDeadlineSeconds should have kept it out of an allocation ending before it (a clock moved, or it was adopted): raise [pilot] time_limit in the site profile"
  hpk_put pod.failed "Terminated"$'\n'"Pod was terminated in response to the end of its node: pilot allocation ${SLURM_JOB_ID:-?} reached its Slurm time limit; $fix"
}

# hpk_terminate: the job is being deleted or reached its time limit (SIGTERM to the batch shell):
# the main containers' stop sequences run concurrently, then the sidecars' in reverse order; the
# exit codes are recorded. Whether Slurm cancelled the job is asked meanwhile (squeue may be slow,
# and the time limit's TERM leaves only the grace period and 10 s).
hpk_terminate() {
  trap '' TERM INT
  # the pod has ended (this shell wrote pod.done; a trap runs between its commands): nothing is left to
  # stop, and a delete or the time limit arriving now must not turn its end into a failure (exit 143)
  # (the change is said again: the TERM may have come between pod.done's write and its notice)
  local code
  if { read -r code <"$HPK_STATUS/pod.done"; } 2>/dev/null; then hpk_changed; exit "$code"; fi
  hpk_cancelled 5 &
  local asking=$!
  hpk_put_now pod.terminating
  # shellcheck disable=SC2086  # empty when no init container runs
  hpk_stop_runners $HPK_INIT_RUNNER ${HPK_RUNNERS[@]+"${HPK_RUNNERS[@]}"}
  hpk_stop_sidecars
  wait "$asking"
  # shellcheck disable=SC2046  # helpers such as the sizeLimit watch
  kill -TERM $(jobs -p) 2>/dev/null
  wait
  local name
  for name in $(hpk_names); do
    if [ -e "$HPK_STATUS/$name.started" ] && [ ! -e "$HPK_STATUS/$name.exitcode" ]; then
      hpk_put_now "$name.finished"
      hpk_put "$name.exitcode" 143
    fi
  done
  # hpkctl delete (and the kubelet) write pod.deleting before they signal; a TERM without it is
  # the time limit's --signal (or the Job's activeDeadlineSeconds). Slurm's own verdict (CANCELLED,
  # PREEMPTED...) still wins when status is read back.
  if [ ! -e "$HPK_STATUS/pod.failed" ]; then
    if [ -e "$HPK_STATUS/pod.deleting" ]; then
      hpk_put pod.failed "Terminated"$'\n'"the pod was deleted; its containers were stopped with their grace period"
    elif [ -n "${HPK_PILOT:-}" ]; then  # not its own deadline (that wrote pod.failed): its allocation ended
      hpk_put pod.failed "Terminated"$'\n'"the pilot allocation it ran in ended (its time limit, or a cancel from outside hpkctl); its containers were stopped with their grace period, as at a node shutdown"
    else
      hpk_put pod.failed "DeadlineExceeded"$'\n'"the pod reached its time limit (activeDeadlineSeconds or slurm.default_time); its containers were stopped with their grace period"
    fi
  fi
  hpk_put pod.done 143
  hpk_linger
  exit 143
}

# hpk_linger: after a delete's stop sequence, wait (TERM no longer trapped) for the scancel that
# follows it, so Slurm records the job CANCELLED, as for any cancelled job. Bounded: if nobody
# cancels, the job ends by itself. Not in pilot mode: a pod's step just ends (143), nobody cancels it.
hpk_linger() {
  [ -e "$HPK_STATUS/pod.deleting" ] && [ -z "${HPK_PILOT:-}" ] || return 0
  trap - TERM INT
  sleep 60 &
  wait "$!"
}

# hpk_wait_started NAME FN RUNNER: a sidecar counts as started once postStart returned and its
# startup probe passed: NAME.started-probe (the probes write it) or, without probes, NAME.ready
# (hpk_run writes it after postStart). Returns 1 if the runner ended first.
hpk_wait_started() {
  local file="$HPK_STATUS/$1.ready"
  declare -F "${2}_probes" >/dev/null && file="$HPK_STATUS/$1.started-probe"
  while [ ! -e "$file" ] || [ -e "$HPK_STATUS/$1.poststart" ]; do
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.2
  done
}

# hpk_wait_launched NAME RUNNER: the container was started and its postStart hook returned (or the
# runner ended): the kubelet's SyncPod starts the next container only then.
hpk_wait_launched() {
  while [ ! -e "$HPK_STATUS/$1.started" ] || [ -e "$HPK_STATUS/$1.poststart" ]; do
    kill -0 "$2" 2>/dev/null || return 0
    sleep 0.1
  done
}

# hpk_start_containers: init containers one after another (a sidecar keeps running: the next one
# starts once it has started), then the main containers in order, each once the one before it
# started and its postStart hook returned; when they have all ended, the sidecars are stopped.
# The pod's exit code is the first main container's.
hpk_start_containers() {
  local i rc=0 first=0 pid name t
  for ((i = 0; i < ${#HPK_INIT[@]}; i += 3)); do
    name=${HPK_INIT[i]}
    if [ "${HPK_INIT[i + 1]}" = Always ]; then
      hpk_run "$name" Always "${HPK_INIT[i + 2]}" &
      HPK_SIDECARS+=("$!")
      hpk_wait_started "$name" "${HPK_INIT[i + 2]}" "$!"
      continue
    fi
    hpk_run "$name" "${HPK_INIT[i + 1]}" "${HPK_INIT[i + 2]}" &
    HPK_INIT_RUNNER=$!
    wait "$HPK_INIT_RUNNER"
    rc=$?
    HPK_INIT_RUNNER=''
    if [ "$rc" -ne 0 ]; then
      hpk_stop_sidecars
      hpk_fail InitContainerFailed "init container $name exited with code $(cat "$HPK_STATUS/$name.exitcode")"
    fi
  done
  for ((i = 0; i < ${#HPK_MAIN[@]}; i += 3)); do
    hpk_run "${HPK_MAIN[i]}" "${HPK_MAIN[i + 1]}" "${HPK_MAIN[i + 2]}" &
    HPK_RUNNERS+=("$!")
    # the next one starts once this one launched; after the last, only the wait for them all
    [ $((i + 3)) -ge ${#HPK_MAIN[@]} ] || hpk_wait_launched "${HPK_MAIN[i]}" "$!"
  done
  for pid in ${HPK_RUNNERS[@]+"${HPK_RUNNERS[@]}"}; do
    wait "$pid"
    rc=$?
    [ "$first" -ne 0 ] || first=$rc
  done
  if [ ${#HPK_SIDECARS[@]} = 0 ]; then  # no sidecars to stop: both in one process, pod.done last
    hpk_clock t
    hpk_puts pod.completing "$t" pod.done "$first"
    return "$first"
  fi
  hpk_put_now pod.completing  # the pod's result is known; only its sidecars are left to stop
  hpk_stop_sidecars
  hpk_put pod.done "$first"
  return "$first"
}

# hpk_load_secrets: Secret values the pod's command lines refer to as "${HPK_SECRETS[i]}", from
# the 0600 file env/secrets (NUL-separated), so they never appear in this script.
hpk_load_secrets() {
  hpk_read_secrets || hpk_fail CreateContainerConfigError "cannot read $HPK_POD_DIR/env/secrets"
}

# hpk_read_secrets: HPK_SECRETS from env/secrets, one value per NUL-terminated record (a read loop:
# mapfile -d came with bash 4.4). False when the file exists but cannot be read.
# shellcheck disable=SC2034  # read by the pod's container functions when the pod uses them
hpk_read_secrets() {
  local value
  HPK_SECRETS=()
  [ -e "$HPK_POD_DIR/env/secrets" ] || return 0
  { while IFS= read -r -d '' value; do HPK_SECRETS+=("$value"); done; } <"$HPK_POD_DIR/env/secrets"
}

# hpk_pod_part: inside the pod's network (the node's, or the parent container's namespace).
hpk_pod_part() {
  trap hpk_terminate TERM INT
  [ -z "${HPK_TERM_EARLY:-}" ] || kill -TERM $$  # it came while the job script set up (its first trap)
  if [ -z "${HPK_POD_IP:-}" ]; then  # in the parent container's network namespace (cni mode)
    HPK_POD_IP=$(exec hostname -I 2>/dev/null)
    HPK_POD_IP=${HPK_POD_IP%% *}
    HPK_POD_IP=${HPK_POD_IP:-127.0.0.1}
    HPK_HOST_IP=${HPK_HOST_IP:-$HPK_POD_IP}
    hpk_put pod.ip "$HPK_POD_IP"
    hpk_put host.ip "$HPK_HOST_IP"
  fi
  local d
  local -a dirs=()
  hpk_pod_dirs
  for d in ${dirs[@]+"${dirs[@]}"}; do  # the host part made them: mkdir only if one is missing
    [ -d "$d" ] && continue
    mkdir -p ${dirs[@]+"${dirs[@]}"} || hpk_fail PodSetupFailed "cannot create $HPK_POD_DIR/etc, run and the containers' /tmp"
    break
  done
  hpk_load_secrets
  hpk_pod_setup
  hpk_start_containers
}

# hpk_pod_dirs: the directories the pod part needs (etc, run, each container's /tmp) into the caller's dirs.
hpk_pod_dirs() {
  local i
  dirs+=("$HPK_POD_DIR/etc" "$HPK_POD_DIR/run")
  for ((i = 0; i < ${#HPK_INIT[@]}; i += 3)); do dirs+=("$HPK_POD_DIR/tmp/${HPK_INIT[i]}"); done
  for ((i = 0; i < ${#HPK_MAIN[@]}; i += 3)); do dirs+=("$HPK_POD_DIR/tmp/${HPK_MAIN[i]}"); done
}

hpk_host_exit() {
  local rc=$?
  [ -z "${HPK_DEADLINE_PID:-}" ] || kill "$HPK_DEADLINE_PID" 2>/dev/null
  if [ ! -e "$HPK_STATUS/pod.done" ]; then
    [ -e "$HPK_STATUS/pod.failed" ] ||
      hpk_put pod.failed "JobFailed"$'\n'"the job ended (exit code $rc) before the pod finished; see $HPK_LOGS/slurm.out"
    hpk_put pod.done "$((rc == 0 ? 1 : rc))"
  fi
  rm -rf -- ${HPK_MEMORY_REAL:+"$HPK_MEMORY_REAL" "$HPK_MEMORY_DIR"} "$HPK_STATUS/.new.$$"
}

# hpk_in_parent: run the pod part inside the parent container, which owns the pod's network
# namespace; the containers run nested inside it.
hpk_in_parent() {
  # The parent container has its own PATH: hand it the absolute path of the binary we use here.
  HPK_PARENT_APPTAINER=$(command -v -- "$HPK_APPTAINER" || printf '%s' "$HPK_APPTAINER")
  export HPK_PARENT_APPTAINER
  hpk_parent &
  local parent=$!
  # "job.sh exec" (the kubelet's exec, a later step of this job) finds the pod's namespaces below it.
  mkdir -p "$HPK_POD_DIR/run" && printf '%s\n' "$parent" >"$HPK_POD_DIR/run/parent.pid"
  # SIGTERM (delete, the time limit) goes on to the pod part inside (apptainer hands it to its
  # process), which stops the containers; this shell waits for it.
  # shellcheck disable=SC2046  # one pid per word
  trap 'trap "" TERM INT; hpk_cancelled 3; kill -TERM $(hpk_children "$parent") 2>/dev/null; wait "$parent"; hpk_linger; exit 143' TERM INT
  [ -z "${HPK_TERM_EARLY:-}" ] || kill -TERM $$  # it came while the host part set up
  wait "$parent"
  local rc=$?
  [ -e "$HPK_STATUS/pod.done" ] || hpk_fail ParentContainerFailed "the pod's parent container exited with code $rc; see $HPK_LOGS/slurm.out"
  return "$rc"
}

# hpk_host_part: the batch script proper, on the first node of the allocation.
# hpk_etc_hosts NAMES [LINE...]: the pod's /etc/hosts as the kubelet writes it: localhost, the pod's
# IP with NAMES (its hostname; with a subdomain, its FQDN first), then the hostAliases' LINEs.
hpk_etc_hosts() {
  {
    printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n'
    printf '%s\t%s\n' "$HPK_POD_IP" "$1"
    [ $# -lt 2 ] || printf '%s\n' "${@:2}"
  } >"$HPK_POD_DIR/etc/hosts" || hpk_fail PodSetupFailed "cannot write $HPK_POD_DIR/etc/hosts"
}

# hpk_resolv MODE [TEXT]: the pod's resolv.conf (dnsPolicy and dnsConfig): custom (None: TEXT),
# cluster (ClusterFirst: TEXT with the node's search domains), host (Default: the node's), or
# host+custom (the node's, then TEXT).
hpk_resolv() {
  case $1 in
    custom) printf '%s' "$2" ;;
    cluster) hpk_cluster_resolv "$2" ;;
    host) hpk_cat /etc/resolv.conf ;;
    host+custom) hpk_cat /etc/resolv.conf && printf '%s' "$2" ;;
  esac >"$HPK_POD_DIR/etc/resolv.conf" || hpk_fail PodSetupFailed "cannot write $HPK_POD_DIR/etc/resolv.conf"
}

# hpk_cat FILE: print FILE as it is (text: no NUL bytes) without a process; fails if it cannot be read.
hpk_cat() {
  local text=''
  [ -r "$1" ] || return 1
  IFS= read -r -d '' text <"$1"
  printf '%s' "$text"
}

# hpk_cluster_resolv TEXT: a ClusterFirst pod's resolv.conf: TEXT, with the node's own search
# domains (from its /etc/resolv.conf) after the cluster's on the search line, at most 32 in all,
# as the kubelet writes it, so short names of the site's hosts still resolve.
hpk_cluster_resolv() {
  local line word seen=" " out
  local -a node=() words
  local src=${HPK_NODE_RESOLV_CONF:-/etc/resolv.conf}  # tests point it elsewhere
  if [ -r "$src" ]; then
    while read -r -a words; do
      [ "${words[0]:-}" = search ] || [ "${words[0]:-}" = domain ] || continue
      node+=("${words[@]:1}")
    done <"$src"
  fi
  while IFS= read -r line; do
    if [[ $line == "search "* ]]; then
      out=search
      local -a names=()
      read -r -a names <<<"${line#search }"
      for word in ${names[@]+"${names[@]}"} ${node[@]+"${node[@]}"}; do
        [[ $seen == *" $word "* ]] && continue
        seen+="$word "
        out+=" $word"
      done
      line=$(printf '%s' "$out" | cut -d' ' -f1-33)
    fi
    printf '%s\n' "$line"
  done <<<"${1%$'\n'}"
}

# ---- the deadline clock: hpkctl/pod/array.py pastes this part into a Job array's script too ----
# hpk_deadline_left VAR FILE: VAR is the seconds of HPK_ACTIVE_DEADLINE left (0 or less: none) on the
# clock the first caller started in FILE (a requeued job, a Job's later elements count from it). One
# reading of the time for the start and the time left: with two, a second boundary between them cut
# a 1 s deadline to 0. An empty FILE (created, not yet written: read in between, or left so by a
# crash) counts as now, not as the epoch. No process: the clock runs at every pod's start.
hpk_deadline_left() {
  local now started=''
  printf -v now '%(%s)T' -1
  { set -C; printf '%s\n' "$now" >"$2"; } 2>/dev/null
  set +C
  { read -r started <"$2"; } 2>/dev/null
  [[ $started =~ ^[0-9]+$ ]] || started=$now
  printf -v "$1" '%d' $((started + HPK_ACTIVE_DEADLINE - now))
}
# ---- end of the deadline clock ----

# hpk_deadline: spec.activeDeadlineSeconds, counted from the pod's first start (a requeued job keeps
# it). When it passes, the pod is stopped with its stop sequence (the TERM trap) and fails with
# DeadlineExceeded, to the second: Slurm's time limit is whole minutes and its --signal may come up
# to a minute early, so the job's limit is only the backstop.
hpk_deadline() {
  [ "$HPK_ACTIVE_DEADLINE" -gt 0 ] || return 0
  local left
  hpk_deadline_left left "$HPK_STATUS/deadline.start"
  [ "$left" -gt 0 ] || left=0
  (
    sleep "$left"
    # not when the pod is ending anyway: done, its main containers finished (sidecars stopping),
    # or stopping for another reason (a delete, an eviction), which keeps its own
    for f in pod.done pod.completing pod.terminating pod.failed; do [ ! -e "$HPK_STATUS/$f" ] || exit 0; done
    hpk_put pod.failed "DeadlineExceeded"$'\n'"Pod was active on the node longer than the specified deadline"
    kill -TERM $$
  ) </dev/null >/dev/null 2>&1 &
  HPK_DEADLINE_PID=$!
}

hpk_host_part() {
  if [ -n "${HPK_NOTIFY:-}" ]; then  # fd 7 to the kubelet; the script's own output goes to its log (stderr's)
    exec 7>&1 1>&2
    HPK_NOTIFY_FD=7
  fi
  # one mkdir for the directories of the pod's start: status/.new.$$ (hpk_puts' staging), logs, and
  # the pod part's (which makes them only if one is missing)
  local -a dirs=("$HPK_STATUS/.new.$$" "$HPK_LOGS")
  hpk_pod_dirs
  hpk_node_known
  # pilot mode, the memory directory's parent checked by an earlier step (this user's own 0700
  # directory: nobody else makes a name in it, so a name not there now is this pod's): the pod's
  # memory directory in the same mkdir (hpk_memory_dir then only links it)
  HPK_MEMORY_MADE=''
  if [ -n "$HPK_NODE_KNOWN" ]; then
    HPK_MEMORY_REAL="$HPK_MEMORY_ROOT/hpk-$EUID/pod.${HPK_POD_DIR##*/}.$$"
    [ -e "$HPK_MEMORY_REAL" ] || { dirs+=("$HPK_MEMORY_REAL/.dev-shm"); HPK_MEMORY_MADE=1; }
  fi
  mkdir -p -- ${dirs[@]+"${dirs[@]}"} 2>/dev/null \
    || { HPK_MEMORY_MADE=''; mkdir -p -- "$HPK_STATUS" "$HPK_LOGS"; } || exit 1
  trap hpk_host_exit EXIT
  local short='' now
  # the kernel's host name up to its first dot, as `hostname -s` says, read without a process
  { read -r short </proc/sys/kernel/hostname; } 2>/dev/null && short=${short%%.*}
  short=${short:-$(hostname -s)}
  # pilot mode: the Slurm node(s) hpkctl placed the pod on (an MPI pod's ranks: all of them), which a
  # restarted kubelet books it on again; several Slurm nodes may share one host
  [ -z "${HPK_PILOT:-}" ] || short=${HPK_RANKS_NODES:-${SLURMD_NODENAME:-$short}}
  if [ -z "$HPK_NODE_KNOWN" ]; then
    HPK_NODE_IP=$(exec hostname -I 2>/dev/null)
    HPK_NODE_IP=${HPK_NODE_IP%% *}  # the first address (no cut: a process fewer on the way to the container)
  fi
  HPK_HOST_IP=$HPK_NODE_IP
  export HPK_HOST_IP
  hpk_clock now
  # the job's facts in one write (pilot mode: job.id is JOB.STEP; an element of a batch of pods:
  # ARRAY_I, HPK_SLURM_JOB from its array script); on the node's network the pod's
  # address is the node's (the pod part writes it in a parent container's network)
  if declare -F hpk_parent >/dev/null; then
    hpk_puts job.started "$now" job.node "$short" \
      job.id "${HPK_SLURM_JOB:-${SLURM_JOB_ID:-none}}${HPK_PILOT:+.${SLURM_STEP_ID:-}}"
  else
    HPK_POD_IP=${HPK_HOST_IP:-127.0.0.1}
    HPK_HOST_IP=${HPK_HOST_IP:-$HPK_POD_IP}
    hpk_puts job.started "$now" job.node "$short" \
      job.id "${HPK_SLURM_JOB:-${SLURM_JOB_ID:-none}}${HPK_PILOT:+.${SLURM_STEP_ID:-}}" pod.ip "$HPK_POD_IP" host.ip "$HPK_HOST_IP"
  fi
  hpk_deadline
  hpk_memory_dir
  hpk_host_setup
  if declare -F hpk_parent >/dev/null; then
    hpk_in_parent
  else
    hpk_pod_part
  fi
}

# "job.sh pod-part" is how the parent container runs the pod part; "job.sh exec" is below.
hpk_main() {
  case ${1:-} in
    pod-part)
      HPK_APPTAINER=${HPK_PARENT_APPTAINER:-$HPK_APPTAINER}
      HPK_POD_IP=''  # the parent container's own address, asked for in hpk_pod_part
      hpk_pod_part ;;
    exec)
      shift
      trap - TERM INT  # kubectl exec's step: a TERM ends it, no stop sequence
      [ -z "${HPK_TERM_EARLY:-}" ] || exit 143
      hpk_exec "$@" ;;
    *)
      hpk_host_part ;;
  esac
}

# hpk_has_probes: a container of the pod has probes (its function FN_probes, from the job script).
hpk_has_probes() {
  local i
  for ((i = 2; i < ${#HPK_INIT[@]}; i += 3)); do declare -F "${HPK_INIT[i]}_probes" >/dev/null && return 0; done
  for ((i = 2; i < ${#HPK_MAIN[@]}; i += 3)); do declare -F "${HPK_MAIN[i]}_probes" >/dev/null && return 0; done
  return 1
}

# ==== below: the parts only some pods use, read only by those ===============================
# Bash parses what it sources, and most pods use neither probes nor exec: sourcing ends here
# (return: the lines below are not even parsed, ~1 ms of every pod's start) unless this is "job.sh
# exec" or a container has probes. An MPI rank (HPK_MPI_ENV) needs nothing below either.
[ "${1:-}" = exec ] || hpk_has_probes || return 0

# ==== probes: startupProbe, livenessProbe, readinessProbe ==================================
# <function>_probes (in the job script) sets probe_KIND=(initialDelaySeconds periodSeconds
# timeoutSeconds successThreshold failureThreshold GRACE HANDLER ARGS...) for each probe and calls
# hpk_probes; hpk_run starts it with the container's pid once the container runs and ends it (TERM)
# when the container exits. HANDLER ARGS is one of
#   exec WORD...                                  <function>_exec WORD... exits 0
#   tcp HOST PORT                                 a TCP connection opens
#   http SCHEME HOST PORT TARGET [NAME VALUE]...  GET TARGET answers with a status of 200-399
# Status files: NAME.ready (1/0), NAME.started-probe (the startup probe passed, or there is none),
# NAME.probe-kill (why a failed startup or liveness probe stopped the container). Every failed try
# is a line in logs/NAME.probes.log, never in the container's log.

HPK_PROBE_AGENT=kube-probe/1.36

# hpk_probes NAME FN CPID KIND...: the kubelet's timing. The startup probe runs first; liveness and
# readiness start when it has passed, each on its own schedule. Not ready (no NAME.ready, or 0 from
# the run before) until readiness passes; ready at once without a readiness probe.
hpk_probes() {
  local name=$1 fn=$2 cpid=$3 kind
  shift 3
  local -a loops=()
  trap hpk_probes_end TERM INT
  rm -f -- "$HPK_STATUS/$name.started-probe"  # of the run before a restart
  if [[ " $* " == *" startup "* ]]; then
    hpk_probe_loop startup &
    loops=("$!")
    wait "$!" || { wait; return 0; }  # failed: the loop has stopped the container
    loops=()
  fi
  hpk_put_now "$name.started-probe"
  for kind in liveness readiness; do
    [[ " $* " == *" $kind "* ]] || continue
    hpk_probe_loop "$kind" &
    loops+=("$!")
  done
  [[ " $* " == *" readiness "* ]] || hpk_put "$name.ready" 1
  wait
}

# hpk_probes_end: the container ended (or the pod stops): stop every probe, the container is not ready.
hpk_probes_end() {
  trap '' TERM INT
  [ "${#loops[@]}" -eq 0 ] || kill -TERM ${loops[@]+"${loops[@]}"} 2>/dev/null
  wait
  rm -f -- "$HPK_STATUS/$name.started-probe"
  hpk_put "$name.ready" 0
  exit 0
}

# hpk_probe_loop KIND: one probe every periodSeconds after initialDelaySeconds, counting
# consecutive results against successThreshold and failureThreshold (hpk_probes' name, fn, cpid).
hpk_probe_loop() {
  local kind=$1 ok=0 bad=0 ready=0 try='' wd='' tick='' msg label ref="probe_$1[@]"
  local -a probe=("${!ref}")  # the caller's probe_KIND array (bash 4.2 has no namerefs)
  local delay=${probe[0]} period=${probe[1]} limit=${probe[2]} need_ok=${probe[3]} need_bad=${probe[4]}
  local grace=${probe[5]}
  local -a check=("${probe[@]:6}")
  label="${kind^} probe"
  trap 'trap "" TERM; kill -TERM -- ${try:+"-$try"} ${wd:+"-$wd"} $tick 2>/dev/null; exit 0' TERM
  sleep "$delay" &
  tick=$!
  wait "$tick"
  while :; do
    sleep "$period" &
    tick=$!
    if hpk_probe_try "$limit" "${check[@]}"; then
      ok=$((ok + 1)) bad=0
    else
      ok=0 bad=$((bad + 1))
      printf '%s Unhealthy: %s failed: %s\n' "$(hpk_now)" "$label" "$msg" >>"$HPK_LOGS/$name.probes.log"
    fi
    case $kind in
      startup)
        [ "$ok" -lt "$need_ok" ] || return 0
        [ "$bad" -lt "$need_bad" ] || { hpk_probe_kill; return 1; } ;;
      liveness)
        [ "$bad" -lt "$need_bad" ] || { hpk_probe_kill; return 1; } ;;
      readiness)
        if [ "$ready" = 0 ] && [ "$ok" -ge "$need_ok" ]; then
          ready=1
          hpk_put "$name.ready" 1
        elif [ "$ready" = 1 ] && [ "$bad" -ge "$need_bad" ]; then
          ready=0
          hpk_put "$name.ready" 0
        fi ;;
    esac
    wait "$tick"
  done
}

# hpk_probe_kill: a startup or liveness probe failed failureThreshold times: say why, stop the
# container (lifecycle: preStop, TERM, KILL after the grace period); hpk_run restarts it.
hpk_probe_kill() {
  local HPK_GRACE=${grace:-$HPK_GRACE}  # the probe's terminationGracePeriodSeconds wins
  hpk_put "$name.probe-kill" "$label failed: $msg"
  printf '%s Killing: Container %s failed %s, will be restarted\n' "$(hpk_now)" "$name" "${label,}" \
    >>"$HPK_LOGS/$name.probes.log"
  hpk_stop_container "$name" "$fn" "$cpid"
}

# hpk_probe_try SECONDS HANDLER ARGS...: one try, in its own process group, killed whole after
# SECONDS (timeoutSeconds). Sets msg (the kubelet's message, one line; try and wd are the loop's
# pids of the try and its watchdog); returns 0 on success.
hpk_probe_try() {
  local limit=$1 out="$HPK_POD_DIR/run/$name.$kind.probe" rc
  shift
  rm -f -- "$out.timeout"
  set -m
  "hpk_probe_$1" "${@:2}" >"$out" 2>&1 </dev/null &
  try=$!
  { sleep "$limit" && : >"$out.timeout" && kill -TERM -- "-$try" && sleep 1 && kill -KILL -- "-$try"; } \
    >/dev/null 2>&1 &
  wd=$!
  set +m
  wait "$try"
  rc=$?
  kill -TERM -- "-$wd" 2>/dev/null
  wait "$wd"
  try='' wd=''
  msg=$(head -c 10240 -- "$out" 2>/dev/null | tr '\r\n' '  ')
  msg=${msg% }
  if [ -e "$out.timeout" ]; then
    case $1 in
      exec) msg="command \"${*:2}\" timed out" ;;
      tcp) msg="dial tcp $(hpk_probe_hostport "$2" "$3"): i/o timeout" ;;
      http) msg="Get \"${2,,}://$(hpk_probe_hostport "$3" "$4")$5\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)" ;;
    esac
    return 1
  fi
  [ "$rc" -eq 0 ]
}

# hpk_probe_hostport HOST PORT: as Go joins them (an IPv6 address in brackets).
hpk_probe_hostport() {
  case $1 in
    *:*) printf '[%s]:%s' "$1" "$2" ;;
    *) printf '%s:%s' "$1" "$2" ;;
  esac
}

# hpk_probe_exec WORD...: the command in the container (a new apptainer exec); its output is the message.
hpk_probe_exec() {
  "${fn}_exec" "$@" 7>&-
}

# hpk_probe_dial HOST PORT: open fd 3 to HOST:PORT with bash's /dev/tcp (one connection), or set
# dial_err to Go's dial error ("dial tcp 10.0.0.5:8080: connect: connection refused").
hpk_probe_dial() {
  local err
  { exec 3<>"/dev/tcp/$1/$2"; } 2>/dev/null && return 0
  err=$({ : <>"/dev/tcp/$1/$2"; } 2>&1)  # once more, for bash's reason
  err=${err##*: }
  case $err in
    "Connection refused"|"") err="connect: connection refused" ;;
    *) err="connect: ${err,}" ;;
  esac
  dial_err="dial tcp $(hpk_probe_hostport "$1" "$2"): $err"
  return 1
}

# hpk_probe_tcp HOST PORT: the kubelet's TCP probe: the connection opens (and is closed at once).
hpk_probe_tcp() {
  local dial_err
  hpk_probe_dial "$1" "$2" || { echo "$dial_err"; return 1; }
  exec 3>&-
}

# hpk_probe_http SCHEME HOST PORT TARGET [NAME VALUE]...: GET TARGET as the kubelet sends it: Host
# (host:port unless given), User-Agent kube-probe/1.36 and Accept */* (unless given), the user's
# headers byte for byte, Connection: close. Success is a status of 200-399 (redirects not followed).
# HTTPS needs curl or openssl where the pod part runs (certificates are not verified, as the kubelet).
hpk_probe_http() {
  local scheme=$1 host=$2 port=$3 target=$4 hp req line code n have=' ' dial_err
  local -a curl_h=()
  hp=$(hpk_probe_hostport "$host" "$port")
  shift 4
  req="GET $target HTTP/1.1"$'\r\n'
  for ((n = 1; n < $#; n += 2)); do
    have+="${!n,,} "
  done
  [[ $have == *" host "* ]] || set -- Host "$hp" "$@"
  [[ $have == *" user-agent "* ]] || set -- "$@" User-Agent "$HPK_PROBE_AGENT"
  [[ $have == *" accept "* ]] || set -- "$@" Accept '*/*'
  set -- "$@" Connection close
  while [ $# -ge 2 ]; do
    req+="$1: $2"$'\r\n'
    if [ -n "$2" ]; then curl_h+=(-H "$1: $2"); else curl_h+=(-H "$1;"); fi
    shift 2
  done
  req+=$'\r\n'
  if [ "$scheme" = HTTPS ]; then
    if command -v curl >/dev/null; then
      line="HTTP/1.1 $(curl -sk --path-as-is --request-target "$target" -o /dev/null -w '%{http_code}' \
        "${curl_h[@]}" "https://$hp/" 2>/dev/null)"
    elif command -v openssl >/dev/null; then
      line=$(printf '%s' "$req" | openssl s_client -quiet -connect "$hp" 2>/dev/null | head -n 1)
    else
      echo "HTTPS probe needs curl or openssl where the pod runs (on the node, or in the parent container); neither is on PATH"
      return 1
    fi
  else
    hpk_probe_dial "$host" "$port" || { printf 'Get "http://%s%s": %s\n' "$hp" "$target" "$dial_err"; return 1; }
    printf '%s' "$req" >&3
    IFS= read -r line <&3
    exec 3>&-
  fi
  code=${line#HTTP/* }
  code=${code:0:3}
  if ! [[ $code =~ ^[0-9][0-9][0-9]$ ]] || [ "$code" = 000 ]; then
    printf 'Get "%s://%s%s": malformed HTTP response %s\n' "${scheme,,}" "$hp" "$target" "${line%$'\r'}"
    return 1
  fi
  [ "$code" -ge 200 ] && [ "$code" -lt 400 ] && return 0
  echo "HTTP probe failed with statuscode: $code"
  return 1
}

# ==== exec: a command in a running container (the kubelet's exec) ===========================
# "job.sh exec NAME [--tty] -- WORD..." runs WORD... in container NAME's image, environment and
# mounts: <function>_exec, a new `apptainer exec` as for exec probes and hooks (Apptainer cannot
# enter a running container that is not an instance). It shares the pod's network, volumes and the
# container's /tmp, not files written to the container's writable root. The kubelet runs it as a
# new step of the pod's own job (`srun --overlap --jobid`), so it runs on the pod's node, in the
# job's cgroup. In cni mode it first joins the namespaces (user, network, mount) of the parent
# container, where the pod part runs the containers and their probes. stdin, stdout and stderr are
# the caller's; --tty sets TERM=xterm in the container (as container runtimes do for a terminal).
# Exits with the command's exit code, or 125 with a message when the command cannot be started.
# Writes no status file: the pod does not notice.

# hpk_exec_fail MESSAGE: exec cannot run the command (the pod is not touched).
hpk_exec_fail() {
  printf 'hpkctl exec: %s\n' "$1" >&2
  exit 125
}

# hpk_function NAME: the function that starts container NAME (HPK_INIT/HPK_MAIN).
hpk_function() {
  local i
  for ((i = 0; i < ${#HPK_INIT[@]}; i += 3)); do
    [ "${HPK_INIT[i]}" != "$1" ] || { printf '%s\n' "${HPK_INIT[i + 2]}"; return 0; }
  done
  for ((i = 0; i < ${#HPK_MAIN[@]}; i += 3)); do
    [ "${HPK_MAIN[i]}" != "$1" ] || { printf '%s\n' "${HPK_MAIN[i + 2]}"; return 0; }
  done
  return 1
}

# hpk_pod_namespaces: the pid of the first process below the parent container's launcher that is
# in another network namespace than this shell: the parent container (its pod part).
hpk_pod_namespaces() {
  local launcher pid mine
  launcher=$(cat "$HPK_POD_DIR/run/parent.pid" 2>/dev/null) \
    || hpk_exec_fail "the pod's parent container has not started yet (no $HPK_POD_DIR/run/parent.pid)"
  mine=$(readlink /proc/self/ns/net)
  for pid in $(hpk_descendants "$launcher"); do
    if [ "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" != "$mine" ] && [ -e "/proc/$pid/ns/net" ]; then
      printf '%s\n' "$pid"
      return 0
    fi
  done
  hpk_exec_fail "no process of the pod's parent container found below pid $launcher on $(hostname -s); is this the pod's node?"
}

# hpk_exec NAME [--tty] -- WORD...: see above; HPK_IN_POD=1 once inside the parent container.
hpk_exec() {
  local name=${1:-} fn pid
  shift || true
  [ "${1:-}" != --tty ] || { export APPTAINERENV_TERM=xterm; shift; }
  [ -n "$name" ] && [ "${1:-}" = -- ] && [ $# -ge 2 ] \
    || hpk_exec_fail "usage: job.sh exec CONTAINER [--tty] -- COMMAND [ARG...]"
  shift
  fn=$(hpk_function "$name") || hpk_exec_fail "container $name is not in this pod (it has: $(hpk_names | paste -sd ' '))"
  if [ ! -e "$HPK_STATUS/$name.started" ] || [ -e "$HPK_STATUS/$name.exitcode" ] || [ -e "$HPK_STATUS/pod.done" ]; then
    hpk_exec_fail "container $name is not running"
  fi
  if [ -z "${HPK_IN_POD:-}" ] && declare -F hpk_parent >/dev/null; then
    command -v nsenter >/dev/null || hpk_exec_fail "nsenter (util-linux) is not on PATH on $(hostname -s); exec into a pod in cni mode needs it"
    pid=$(hpk_pod_namespaces) || exit
    # The parent container has its own PATH: hand it the absolute path of the binary used here.
    HPK_PARENT_APPTAINER=$(command -v -- "$HPK_APPTAINER" || printf '%s' "$HPK_APPTAINER")
    export HPK_PARENT_APPTAINER HPK_IN_POD=1
    # -U -n -m: its user, network and mount namespaces. --preserve-credentials: this user, the
    # user namespace's owner, is the parent's root already (and setgroups is denied in it).
    exec nsenter --target "$pid" -U -n -m --preserve-credentials -- \
      /bin/bash "$HPK_POD_DIR/job/job.sh" exec "$name" -- "$@"
  fi
  [ -z "${HPK_IN_POD:-}" ] || HPK_APPTAINER=${HPK_PARENT_APPTAINER:-$HPK_APPTAINER}
  hpk_exec_secrets
  "${fn}_exec" "$@"
}

# hpk_exec_secrets: hpk_load_secrets for exec, whose failure must not mark the pod failed.
hpk_exec_secrets() {
  hpk_read_secrets || hpk_exec_fail "cannot read $HPK_POD_DIR/env/secrets"
}

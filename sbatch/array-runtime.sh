# ==== hpkctl array runtime: the same for every workload; its settings are above =============
# Status files of the array ($HPK_ARRAY_STATUS; DEVELOPERS.md, "Workloads"), each written as a
# temp file + mv:
#   index.I           Succeeded or Failed: the index's result, once it has one
#   index.I.attempts  how many times pod I was run
#   failures          failed pods of the whole Job (counted under a lock: elements run at once)
#   failed-indexes    indexes that used up their backoffLimitPerIndex
#   job.started       when the first element started (seconds since the epoch)
#   job.failed        why the Job failed: reason, newline, message

hpk_a_put() {
  local tmp="$HPK_ARRAY_STATUS/.$1.$$.tmp"
  printf '%s\n' "$2" >"$tmp" && mv -f "$tmp" "$HPK_ARRAY_STATUS/$1"
}

# hpk_a_count FILE: add one to a counter shared by the elements; prints the new value.
hpk_a_count() {
  (
    flock 9 || exit 1
    local n
    n=$(cat "$HPK_ARRAY_STATUS/$1" 2>/dev/null) || n=0
    n=$((${n:-0} + 1))
    hpk_a_put "$1" "$n"
    printf '%s\n' "$n"
  ) 9>>"$HPK_ARRAY_STATUS/.lock"
}

# hpk_a_fail_job REASON MESSAGE: the Job failed; the other elements are cancelled (this one ends
# by itself, so Slurm keeps its own exit code and state).
hpk_a_fail_job() {
  (
    flock 9 || exit 1
    [ -e "$HPK_ARRAY_STATUS/job.failed" ] || hpk_a_put job.failed "$1"$'\n'"$2"
  ) 9>>"$HPK_ARRAY_STATUS/.lock"
  printf 'hpkctl: the %s failed: %s: %s\n' "${SLURM_JOB_NAME:-job}" "$1" "$2" >&2
  # pilot mode: the elements are steps that hpkctl run started; it stops the others (job.failed)
  [ -z "${HPK_PILOT:-}" ] || return 0
  local i others=()
  for ((i = 0; i < ${#HPK_PODS[@]}; i++)); do
    [ "$i" = "$SLURM_ARRAY_TASK_ID" ] || others+=("${SLURM_ARRAY_JOB_ID:?}_$i")
  done
  [ "${#others[@]}" -eq 0 ] || scancel "${others[@]}"
}

# hpk_a_deadline: activeDeadlineSeconds, counted from the first element's start (hpk_deadline_left,
# the pod runtime's clock, pasted above this runtime).
hpk_a_deadline() {
  [ "$HPK_ACTIVE_DEADLINE" -gt 0 ] || return 0
  local left
  hpk_deadline_left left "$HPK_ARRAY_STATUS/job.started"
  if [ "$left" -le 0 ]; then
    hpk_a_fail_job DeadlineExceeded "Job was active longer than specified deadline"
    exit 1
  fi
  # $$ is this element's batch shell: its TERM trap stops the pod with the pod's stop sequence
  (sleep "$left" && hpk_a_fail_job DeadlineExceeded "Job was active longer than specified deadline" &&
    kill -TERM $$) &
}

# hpk_a_run_pod DIR: run pod DIR's script once; TERM (scancel, the time limit's --signal) is passed
# on to it, so the pod's own stop sequence runs.
hpk_a_run_pod() {
  [ -z "$HPK_A_STOPPING" ] || return 143  # deleted before its pod started: it never does
  # logs/ for the output below; status/ too (hpkctl leaves it to the job): hpk_a_keep moves both
  mkdir -p -- "$1/logs" "$1/status" || return 1
  bash "$1/job/job.sh" >>"$1/logs/slurm.out" 2>&1 </dev/null &
  HPK_A_CHILD=$!
  # a TERM that came while the pod was being started found no child to hand it on to (the pod's
  # script holds a TERM from its first line until its stop sequence is set)
  [ -z "$HPK_A_STOPPING" ] || kill -TERM "$HPK_A_CHILD" 2>/dev/null
  local rc
  wait "$HPK_A_CHILD"
  rc=$?
  while [ -n "$HPK_A_STOPPING" ] && kill -0 "$HPK_A_CHILD" 2>/dev/null; do
    wait "$HPK_A_CHILD"
    rc=$?
  done
  return "$rc"
}

# hpk_a_keep DIR ATTEMPT: a failed pod's status and logs move to DIR/attempts/ATTEMPT before it
# runs again, so the next run starts as a new pod. (Its emptyDir volumes keep their content.)
hpk_a_keep() {
  mkdir -p -- "$1/attempts/$2" &&
    mv -f -- "$1/status" "$1/logs" "$1/attempts/$2/" &&
    rm -rf -- "$1/run" "$1/tmp" &&
    mkdir -p -- "$1/status" "$1/logs"
}

hpk_a_stop() {
  HPK_A_STOPPING=1
  # The Job failed (hpk_a_fail_job cancels its other elements, hpk_a_deadline this one): its pod is
  # stopped by its Job, as the Job controller deletes a failed Job's pods, not cancelled from outside
  # hpkctl, which is what the pod's stop sequence would say of a TERM on a job no longer RUNNING.
  local why st="${HPK_PODS[${SLURM_ARRAY_TASK_ID:-0}]}/status"
  if why=$(head -n 1 -- "$HPK_ARRAY_STATUS/job.failed" 2>/dev/null) && [ -n "$why" ] \
    && { [ -d "$st" ] || mkdir -- "$st" 2>/dev/null; } && [ ! -e "$st/pod.failed" ]; then
    printf 'Terminated\nits Job failed (%s); its containers were stopped with their grace period\n' "$why" \
      >"$st/.pod.failed.$$" && mv -f -- "$st/.pod.failed.$$" "$st/pod.failed"
  fi
  [ -n "$HPK_A_CHILD" ] && kill -TERM "$HPK_A_CHILD" 2>/dev/null
}

hpk_array_main() {
  local i=${SLURM_ARRAY_TASK_ID:-}
  if [ -z "$i" ] || [ -z "${HPK_PODS[i]:-}" ]; then
    printf 'hpkctl: this script runs as the elements 0-%s of a Slurm job array (sbatch sets --array)\n' \
      "$((${#HPK_PODS[@]} - 1))" >&2
    exit 2
  fi
  local pod=${HPK_PODS[i]} attempt=1 rc failed delay=$HPK_RESTART_BACKOFF
  HPK_A_CHILD='' HPK_A_STOPPING=''
  # the pod's status/ before index.I.attempts: a delete marks it (status/pod.deleting) just before its TERM
  mkdir -p -- "$HPK_ARRAY_STATUS" "$pod/status" || exit 1
  trap hpk_a_stop TERM INT  # before index.I.attempts: hpkctl's delete sends TERM once that is there
  if [ -e "$HPK_ARRAY_STATUS/job.failed" ]; then
    printf 'hpkctl: the Job has failed already; pod %s does not start\n' "$i" >&2
    exit 1
  fi
  hpk_a_deadline
  while :; do
    hpk_a_put "index.$i.attempts" "$attempt"
    hpk_a_run_pod "$pod"
    rc=$?
    if [ "$rc" -eq 0 ]; then
      hpk_a_put "index.$i" Succeeded
      exit 0
    fi
    if [ "$HPK_RETRIES" -eq 0 ] || [ -n "$HPK_A_STOPPING" ] || [ -e "$HPK_ARRAY_STATUS/job.failed" ]; then
      hpk_a_put "index.$i" Failed
      # deleted: wait for the scancel that follows (not in pilot mode: nobody cancels a step whose pod
      # ended, as hpk_linger in runtime.sh; the step would hold its CPUs in the allocation for 60 s)
      if [ -e "$pod/status/pod.deleting" ] && [ -z "${HPK_PILOT:-}" ]; then
        trap - TERM INT
        sleep 60 &
        wait "$!"
      fi
      exit "$rc"
    fi
    failed=$(hpk_a_count failures) || failed=0
    if [ "$HPK_BACKOFF_LIMIT_PER_INDEX" -ge 0 ]; then
      if [ "$attempt" -gt "$HPK_BACKOFF_LIMIT_PER_INDEX" ]; then
        hpk_a_put "index.$i" Failed
        failed=$(hpk_a_count failed-indexes) || failed=0
        if [ "$HPK_MAX_FAILED_INDEXES" -ge 0 ] && [ "$failed" -gt "$HPK_MAX_FAILED_INDEXES" ]; then
          hpk_a_fail_job MaxFailedIndexesExceeded "Job has exceeded the specified maximal number of failed indexes"
        fi
        exit "$rc"
      fi
    fi
    if [ "$HPK_BACKOFF_LIMIT" -ge 0 ] && [ "$failed" -gt "$HPK_BACKOFF_LIMIT" ]; then
      hpk_a_put "index.$i" Failed
      hpk_a_fail_job BackoffLimitExceeded "Job has reached the specified backoff limit"
      exit "$rc"
    fi
    printf 'hpkctl: pod %s failed (exit code %s); run %s starts in %s s\n' "$i" "$rc" "$((attempt + 1))" "$delay" >&2
    hpk_a_keep "$pod" "$attempt" || { hpk_a_put "index.$i" Failed; exit "$rc"; }
    sleep "$delay" & wait $!
    [ -n "$HPK_A_STOPPING" ] && { hpk_a_put "index.$i" Failed; exit "$rc"; }
    delay=$((delay * 2 > HPK_RESTART_BACKOFF_MAX ? HPK_RESTART_BACKOFF_MAX : delay * 2))
    attempt=$((attempt + 1))
  done
}

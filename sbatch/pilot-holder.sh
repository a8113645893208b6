#!/bin/bash
# hpkctl pilot allocation: holds this job's nodes for pods that a kubelet (or `hpkctl run --pilot`)
# starts in it as job steps (`srun --jobid=$SLURM_JOB_ID --exact ...`, one per pod). The batch script
# itself uses none of the resources steps take; it only waits.
#
# It ends by itself once no step has run for IDLE_SECONDS (its first argument) and its owner has placed
# no pod for as long (LEASE_FILE, the second: the owner touches it at every placement; steps of short
# pods come and go between two checks), so an allocation is never left holding nodes after its kubelet
# is gone. The kubelet releases idle allocations sooner (`[pilot] idle_release`); this is the safety
# net, at twice that. Checking costs one squeue and one stat per CHECK seconds.
set -u
idle=${1:-1200}
lease=${2:-}
check=$((idle / 4))
[ "$check" -ge 5 ] || check=5
[ "$check" -le 60 ] || check=60
last=$(date +%s)
trap 'exit 0' TERM INT
while :; do
  sleep "$check" &
  wait "$!"
  if ! steps=$(squeue --noheader --steps --jobs="$SLURM_JOB_ID" --format=%i 2>/dev/null); then
    last=$(date +%s)  # Slurm does not answer: never release on a guess
  elif grep -q '^[0-9]*\.[0-9]' <<<"$steps"; then
    last=$(date +%s)
  elif [ -n "$lease" ] && used=$(stat -c %Y -- "$lease" 2>/dev/null) && [ "$used" -gt "$last" ]; then
    last=$used
  elif [ $(($(date +%s) - last)) -ge "$idle" ]; then
    echo "hpkctl pilot: no step for ${idle}s, releasing the allocation"
    exit 0
  fi
done

# shellcheck shell=bash
# Helpers shared by the ci/ scripts (sourced, not executed).

# ts MESSAGE: print MESSAGE with the seconds since the sourcing script started ($TS_LABEL first)
T0=$(date +%s.%N)
ts() { awk -v l="${TS_LABEL:+$TS_LABEL }" -v t0="$T0" -v t="$(date +%s.%N)" -v m="$*" \
           'BEGIN { printf "[%s%6.2fs] %s\n", l, t - t0, m }'; }

# alive PIDFILE: the process named by the pid file is running
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# stop_pidfile PIDFILE: stop that process (TERM, then KILL after 15 s) and remove the file
stop_pidfile() {
  local pf=$1 p
  [ -s "$pf" ] || { rm -f "$pf"; return 0; }
  p=$(cat "$pf")
  if kill "$p" 2>/dev/null; then
    for _ in $(seq 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null
    echo "stopped pid $p ($pf)"
  fi
  rm -f "$pf"
}

# netns_down: delete the network namespaces ci/slurm-up --netns created (hpkhub, hpkn<i>)
netns_down() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^hpk(hub|n[0-9]+)$' || true); do
    ip netns del "$ns" && echo "deleted netns $ns"
  done
}

#!/bin/bash
# Entrypoint of the docker-cluster image: start munged with the cluster's shared key, then run
# one Slurm daemon in the foreground.
#   slurmctld  the controller; creates the shared munge key in /etc/munge-shared if missing
#   slurmd     a compute node named after the container's hostname (c1, c2)
#   anything else is exec'ed as is (after munged is up)
set -euo pipefail
role=${1:-slurmd}
shared=/etc/munge-shared/munge.key
if [ "$role" = slurmctld ] && [ ! -s "$shared" ]; then
  install -d -m 0700 /etc/munge-shared
  dd if=/dev/urandom of="$shared.tmp" bs=1024 count=1 status=none
  mv "$shared.tmp" "$shared"
fi
for _ in $(seq 300); do [ -s "$shared" ] && break; sleep 0.1; done
[ -s "$shared" ] || { echo "no munge key at $shared" >&2; exit 1; }
install -o munge -g munge -m 0400 "$shared" /etc/munge/munge.key
install -d -o munge -g munge -m 0755 /run/munge
runuser -u munge -- /usr/sbin/munged
# jobcomp file world-readable, as on the local clusters
touch /var/log/slurm/jobcomp.log
chown slurm:slurm /var/log/slurm/jobcomp.log; chmod 0644 /var/log/slurm/jobcomp.log
case $role in
  slurmctld) exec slurmctld -D -i ;;
  slurmd)    exec slurmd -D -N "$(hostname -s)" ;;
  *)         exec "$@" ;;
esac

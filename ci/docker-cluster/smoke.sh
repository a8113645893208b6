#!/bin/bash
# Run inside the controller container (as root): wait for the nodes, then as user hpk submit one
# job across both nodes and check that its ranks ran on two different nodes.
#   docker compose -f ci/docker-cluster/docker-compose.yml exec -T slurmctld /work/hpkctl/ci/docker-cluster/smoke.sh
set -euo pipefail
for _ in $(seq 120); do
  [ "$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)" -ge 2 ] && break; sleep 1
done
sinfo -N -o '%N %P %T %c %m'
dir=/home/hpk/smoke
install -d -o hpk -g hpk "$dir"
cat > "$dir/two.sh" <<'JOB'
#!/bin/bash
srun bash -c 'echo "rank $SLURM_PROCID on $SLURMD_NODENAME"'
JOB
chmod 755 "$dir/two.sh"
runuser -u hpk -- bash -c "cd $dir && sbatch --wait --nodes=2 --ntasks=4 -o two.out two.sh"
cat "$dir/two.out"
nodes=$(sed -n 's/^rank [0-9]* on //p' "$dir/two.out" | sort -u | wc -l)
[ "$nodes" = 2 ] || { echo "FAIL: ranks ran on $nodes node(s), want 2" >&2; exit 1; }
echo "OK: 4 ranks on 2 nodes"

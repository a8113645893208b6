"""``hpkctl run/status/logs/delete``: pods through Slurm with no control plane.

``manifest`` turns files into pods (as ``kubectl apply -f`` reads them), ``submit`` renders and
submits, ``records`` remembers runs by namespace and name (created exclusively before ``sbatch``),
``runs`` derives a run's status, deletes runs and finds jobs no record names, ``follow`` streams
logs and progress, ``signals`` makes SIGINT/SIGTERM/SIGHUP cancel a run once, ``outdir`` keeps
``render --out`` from deleting what it did not write.
"""

"""``hpkctl run/status/logs/delete``: pods through Slurm with no control plane.

``manifest`` turns files into pods (as ``kubectl apply -f`` reads them), ``submit`` renders and
submits, ``records`` remembers runs by name, ``follow`` streams logs and progress.
"""

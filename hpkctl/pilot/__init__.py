"""Pilot mode: pods run as job steps in allocations a kubelet (or ``hpkctl run --pilot``) holds.

:mod:`hpkctl.pilot.plan` decides, purely, where a pod goes and when to request or release an
allocation; :mod:`hpkctl.pilot.pool` keeps the books and acts on Slurm through ``hpkctl.jobs``.
"""

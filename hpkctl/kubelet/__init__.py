"""The hpk kubelet daemon: one virtual node whose pods run as Slurm jobs (the kubelet issue).

Reserved: the translator it uses is :mod:`hpkctl.pod`, Slurm is reached through :mod:`hpkctl.jobs`,
the API server through :mod:`hpkctl.kube`. It never imports :mod:`hpkctl.cli`.
"""

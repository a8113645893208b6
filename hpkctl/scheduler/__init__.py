"""``hpkctl scheduler``: the pass-through scheduler, which binds the pods of its scheduler names to
the hpk node (Slurm decides where they really run) unless what the pod says about placement excludes
it (:mod:`hpkctl.scheduler.fit`).

Its own package, beside the kubelet and not inside it: it runs as its own process (or on a thread
of the control-plane job) with its own identity, and shares nothing with the kubelet but the API
client and its informer machinery (:mod:`hpkctl.kube`). An import-linter contract keeps the two
from importing each other.
"""

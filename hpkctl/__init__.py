"""hpkctl: High-Performance Kubernetes in Python.

Pods become ordinary Slurm jobs whose containers run with nested Apptainer. The public surface is
small: the ``hpkctl`` command line, :func:`hpkctl.pod.render_pod` (the "show me the job script"
function) and :func:`hpkctl.sites.load_site`.
"""

__version__ = "0.1.0"

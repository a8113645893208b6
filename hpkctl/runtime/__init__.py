"""The container runtime on the submit host: the Apptainer image pull, and ``apptainer build`` of
hpkctl's own images (``build.py``, used by ``hpkctl build``).

Apart from :mod:`hpkctl.jobs` (Slurm), this is the only package that starts processes. Pods
normally pull their images inside the job (``[apptainer] pull = "job"``); sites whose compute
nodes are offline pull here, before submission, with the same protocol as the job script.
"""

from hpkctl.runtime.pull import ImageToPull, pull_images
from hpkctl.runtime.version import apptainer_version

__all__ = ["ImageToPull", "apptainer_version", "pull_images"]

"""apptainer stand-in: the subset of Apptainer 1.3's CLI that hpkctl emits, on bubblewrap.

This package is the code; ci/standin/apptainer is the executable.

Test and demo use only (Apptainer cannot be installed on the CI machines). Semantics follow
Apptainer 1.3 in its unprivileged (non-setuid) installation; every deviation is listed in
ci/standin/README.md. Standard library only: it runs as a normal user inside Slurm jobs where the
project's virtualenv is not on PATH. Start-up time matters (benchmarks compare against bare
sbatch): imports are kept minimal and lazy (`_signal` instead of `signal`, which pulls in enum).

Images come from the store built by ci/standin/build-images ($HPK_STANDIN_STORE, default
/srv/hpk-images/standin): one directory per image with `rootfs/`, `image.sif` and `image.conf`.

Its modules, in the order a command goes through them: ``main`` (global flags, commands, exec/run's
order of checks), ``flags`` (cobra/pflag's rules), ``options`` (exec/run's options, namespaces,
network), ``binds`` and ``envfile`` (what --bind and --env-file say), ``images`` (references, the
store, SIF files), ``view`` (paths inside the container), ``mounts``, ``environment``, ``overlay``
(what bubblewrap cannot do), ``process`` (running bubblewrap), ``pull``; ``common`` (logging, errors).
Loaded by path in three places, each through this package: ci/standin/apptainer (the executable),
ci/standin/imagetool.py (the store's index) and tests/standin/conftest.py (unit tests); the names
they use are imported here.
"""

from .envfile import EnvFileError, evaluate_env_file
from .binds import parse_binds
from .images import ref_name, sif_key
from .main import main

__all__ = ["EnvFileError", "evaluate_env_file", "main", "parse_binds", "ref_name", "sif_key"]

"""Helpers shared by the test packages: plain modules, imported as ``tests.support.<module>``.

Fixtures stay in the ``conftest.py`` files; nothing here is a fixture or a pytest hook.
- ``ci``: what ``ci/setup`` provides (the repository, user ``hpk``) and ``missing`` (skip, or fail under CI=true)
- ``slurm``: the two local Slurm clusters and running commands on them as ``hpk``
- ``standin``: running the Apptainer stand-in as ``hpk``
- ``hpk``: running ``hpkctl`` end to end as ``hpk``
- ``pods``: the translator's test profile, pod documents and the recording ``apptainer`` stub
- ``sbatch``: reading ``#SBATCH`` lines back the way sbatch does
"""

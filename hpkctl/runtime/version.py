"""The runtime's version, for the node's ``nodeInfo.containerRuntimeVersion``."""

from __future__ import annotations


def apptainer_version(apptainer: str, *, timeout: float = 10.0) -> str:
    """``apptainer://1.3.4`` from ``apptainer --version``; ``apptainer://unknown`` when it cannot run
    here (the login node may lack it: the jobs run it on the compute nodes)."""
    from plumbum import local  # here, not at import: the CLI imports this package for every run
    from plumbum.commands.processes import CommandNotFound, ProcessTimedOut

    try:
        rc, out, _err = local[apptainer].run(["--version"], retcode=None, timeout=timeout)
    except (OSError, ProcessTimedOut, CommandNotFound):
        return "apptainer://unknown"
    words = str(out).split()
    return f"apptainer://{words[-1]}" if rc == 0 and words else "apptainer://unknown"

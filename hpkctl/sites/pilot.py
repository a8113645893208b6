"""The ``[pilot]`` section: pods as job steps in allocations the kubelet holds (pilot mode).

At whole-node sites (JSC) a pod that asks for one CPU in a job of its own holds, and bills, a node
of 48 to 128 cores. In pilot mode the kubelet (or ``hpkctl run --pilot``) holds a few allocations of
this shape and packs pods into them as steps (``hpkctl.pilot``).
"""

from __future__ import annotations

from hpkctl.typed import Field, field_validator, model_validator

from hpkctl.sites.slurmfmt import _Section, _slurm_mem, slurm_time_to_seconds

_UNITS = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def mem_mb(value: str) -> int:
    """An sbatch ``--mem`` value (``4G``, ``512M``, ``4096``: MB) in MB; 0 for ""."""
    if not value:
        return 0
    unit = value[-1] if value[-1] in "KMGT" else ""
    return max(1, int(int(value[:-1] if unit else value) * _UNITS[unit]))


class PilotSection(_Section):
    """Pilot mode: pods run as job steps inside allocations the kubelet holds."""

    enabled: bool = Field(default=False, description="run pods as job steps in held allocations instead of one job each; "
                          "`hpkctl kubelet --pilot` and `hpkctl run --pilot` turn it on whatever this says")
    nodes: int = Field(default=0, ge=0, description="whole nodes per allocation (--exclusive --mem=0); 0: a share of one "
                       "node, as cpus, memory and gpus say")
    cpus: int = Field(default=4, ge=1, description="CPUs per allocation when nodes = 0")
    memory: str = Field(default="8G", description="memory per allocation when nodes = 0 (an sbatch --mem value)")
    gpus: int = Field(default=0, ge=0, description="GPUs per allocation when nodes = 0 (--gres=<[gpu] gres_name>:N)")
    partition: str = Field(default="", description="partition of the allocations; empty: [slurm] partition")
    time_limit: str = Field(default="04:00:00", description="--time of each allocation; a successor is requested before "
                            "it ends (renewal_margin)")
    max_allocations: int = Field(default=4, ge=1, description="the most allocations held (running or pending) at once")
    idle_release: int = Field(default=300, ge=10, description="seconds an allocation without pods is kept before it is "
                              "released (its own script releases it after twice this, if the kubelet is gone)")
    renewal_margin: int = Field(default=600, ge=0, description="seconds: no pod is placed in an allocation that ends sooner "
                                "than this (or than the pod's activeDeadlineSeconds), and a successor is requested "
                                "when the last allocation with room gets this close to its end")
    step_memory: str = Field(default="512M", description="memory of a pod's step when the pod requests none and [pods] "
                             "default_memory is empty (a step without one would take the whole allocation's)")

    @field_validator("memory", "step_memory")
    @classmethod
    def _mem(cls, v: str) -> str:
        return _slurm_mem(v)

    @field_validator("time_limit")
    @classmethod
    def _time(cls, v: str) -> str:
        slurm_time_to_seconds(v)
        return v

    @model_validator(mode="after")
    def _margin_within_limit(self) -> "PilotSection":
        if self.renewal_margin >= slurm_time_to_seconds(self.time_limit):
            raise ValueError(f"renewal_margin {self.renewal_margin} s is not shorter than time_limit "
                             f"{self.time_limit!r}: no pod could ever be placed")
        if not self.step_memory:
            raise ValueError("step_memory is empty: a step needs a memory request (e.g. '512M')")
        return self

    @property
    def time_seconds(self) -> int:
        return slurm_time_to_seconds(self.time_limit)

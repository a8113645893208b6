"""Pod resources → Slurm requests.

Kubernetes sizes a pod as max(largest init container, sum of main containers) because init
containers run one at a time before the main ones (HPK summed them all, over-asking Slurm).
A request defaults to the limit when only a limit is given (as the API server does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from hpkctl.errors import PodError
from hpkctl.pod.context import Ctx
from hpkctl.pod.quantity import ceil_int, mebibytes, parse_quantity

GPU_RESOURCE = "nvidia.com/gpu"
_IGNORED = ("hugepages-",)


@dataclass
class ContainerResources:
    cpu_request: Decimal | None = None
    cpu_limit: Decimal | None = None
    mem_request: Decimal | None = None
    mem_limit: Decimal | None = None
    eph_request: Decimal | None = None
    eph_limit: Decimal | None = None
    gres: dict[str, int] = field(default_factory=dict)


@dataclass
class PodResources:
    cpus: int
    mem_mib: int | None
    tmp_mib: int | None
    gres: dict[str, int]
    per_container: dict[str, ContainerResources]


def _quantity(ctx: Ctx, value: Any, *, where: str) -> Decimal:
    try:
        return parse_quantity(value)
    except ValueError as exc:
        raise PodError("InvalidResources", f"{where}: {exc}") from exc


def container_resources(ctx: Ctx, container: dict[str, Any], *, where: str) -> ContainerResources:
    res = container.get("resources") or {}
    requests = res.get("requests") or {}
    limits = res.get("limits") or {}
    out = ContainerResources()
    names = set(requests) | set(limits)
    for name in sorted(names):
        req = requests.get(name, limits.get(name))
        lim = limits.get(name)
        req_q = _quantity(ctx, req, where=f"{where}.resources.requests[{name}]")
        lim_q = _quantity(ctx, lim, where=f"{where}.resources.limits[{name}]") if lim is not None else None
        if name == "cpu":
            out.cpu_request, out.cpu_limit = req_q, lim_q
        elif name == "memory":
            out.mem_request, out.mem_limit = req_q, lim_q
        elif name == "ephemeral-storage":
            out.eph_request, out.eph_limit = req_q, lim_q
        elif name.startswith(_IGNORED):
            ctx.warn(f"{where}: resource {name} is not mapped to Slurm and is ignored")
        else:
            gres = ctx.profile.gpu.extended_resources.get(name)
            if gres is None and name == GPU_RESOURCE:
                gres = ctx.profile.gpu.gres_name
            if gres is None:
                raise PodError("UnsupportedResource", f"{where}: resource {name!r} has no Slurm equivalent at this site",
                               hint="remove it, or map it to a gres in the site profile's [gpu].extended_resources")
            count = ceil_int(lim_q if lim_q is not None else req_q)
            if count:
                out.gres[gres] = out.gres.get(gres, 0) + count
    return out


def _pod_total(init: list[Decimal | None], main: list[Decimal | None]) -> Decimal | None:
    if all(v is None for v in init + main):
        return None
    main_sum = sum((v or Decimal(0) for v in main), Decimal(0))
    init_max = max((v or Decimal(0) for v in init), default=Decimal(0))
    return max(main_sum, init_max)


def pod_resources(ctx: Ctx) -> PodResources:
    spec = ctx.spec
    inits = [(c, container_resources(ctx, c, where=f"spec.initContainers[{i}]"))
             for i, c in enumerate(spec.get("initContainers") or [])]
    mains = [(c, container_resources(ctx, c, where=f"spec.containers[{i}]"))
             for i, c in enumerate(spec.get("containers") or [])]
    init_r = [r for _, r in inits]
    main_r = [r for _, r in mains]

    cpu = _pod_total([r.cpu_request for r in init_r], [r.cpu_request for r in main_r])
    cpu_limit = _pod_total([r.cpu_limit for r in init_r], [r.cpu_limit for r in main_r])
    if cpu is None:
        cpu = _quantity(ctx, ctx.profile.pods.default_cpu, where="profile [pods].default_cpu")
    cpus = max(1, ceil_int(cpu))
    if cpu_limit is not None and all(r.cpu_limit is not None for r in main_r) and ceil_int(cpu_limit) > cpus:
        ctx.warn(f"CPU limits ({cpu_limit}) exceed requests ({cpu}); Slurm allocates the requested {cpus} CPU(s)")

    # Slurm's --mem is enforced (a cgroup limit), so it expresses Kubernetes limits when every
    # container has one; otherwise the pod is unbounded in Kubernetes terms and we ask for requests.
    mem_limits_all = all(r.mem_limit is not None for r in main_r) and all(
        r.mem_limit is not None or r.mem_request is None for r in init_r)
    mem = None
    if mem_limits_all and any(r.mem_limit is not None for r in main_r):
        mem = _pod_total([r.mem_limit for r in init_r], [r.mem_limit for r in main_r])
    else:
        mem = _pod_total([r.mem_request for r in init_r], [r.mem_request for r in main_r])
    if mem is None and ctx.profile.pods.default_memory:
        mem = _quantity(ctx, ctx.profile.pods.default_memory, where="profile [pods].default_memory")
    eph = _pod_total([r.eph_request for r in init_r], [r.eph_request for r in main_r])

    gres: dict[str, int] = {}
    names = {g for r in init_r + main_r for g in r.gres}
    for g in sorted(names):
        gres[g] = max(sum(r.gres.get(g, 0) for r in main_r), max((r.gres.get(g, 0) for r in init_r), default=0))

    per = {c.get("name", ""): r for c, r in inits + mains}
    return PodResources(
        cpus=cpus,
        mem_mib=mebibytes(mem) if mem else None,
        tmp_mib=mebibytes(eph) if eph else None,
        gres=gres,
        per_container=per,
    )


def resource_field(ctx: Ctx, res: PodResources, *, container: str, resource: str, divisor: Any,
                   where: str) -> str:
    """Value of a ``resourceFieldRef`` (the Downward API); unset limits mean the whole allocation."""
    r = res.per_container.get(container)
    if r is None:
        raise PodError("CreateContainerConfigError", f"{where}: no container named {container!r}")
    div = _quantity(ctx, divisor if divisor not in (None, "") else "1", where=f"{where}.divisor")
    if div == 0:
        raise PodError("CreateContainerConfigError", f"{where}.divisor: must not be zero")
    alloc_mem = Decimal(res.mem_mib * 2**20) if res.mem_mib else None
    table: dict[str, Decimal | None] = {
        "limits.cpu": r.cpu_limit if r.cpu_limit is not None else Decimal(res.cpus),
        "requests.cpu": r.cpu_request if r.cpu_request is not None else Decimal(0),
        "limits.memory": r.mem_limit if r.mem_limit is not None else alloc_mem,
        "requests.memory": r.mem_request if r.mem_request is not None else Decimal(0),
        "limits.ephemeral-storage": r.eph_limit,
        "requests.ephemeral-storage": r.eph_request if r.eph_request is not None else Decimal(0),
    }
    if resource not in table:
        raise PodError("CreateContainerConfigError", f"{where}.resource: {resource!r} is not supported",
                       hint="use one of " + ", ".join(table))
    value = table[resource]
    if value is None:
        ctx.warn(f"{where}: {resource} is unbounded here; reporting 0")
        value = Decimal(0)
    return str(max(ceil_int(value / div), 1 if resource.endswith("cpu") and value > 0 else 0))

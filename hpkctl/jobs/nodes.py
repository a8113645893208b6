"""What the cluster's nodes offer, from one ``sinfo`` call (the virtual node's capacity)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpkctl.jobs.command import Commands, failure

SINFO_FORMAT = "%N|%P|%c|%m|%G|%T"
_GPU = re.compile(r"^gpu(?::[^:(]+)?:(\d+)")


@dataclass(frozen=True)
class NodeInfo:
    name: str
    partitions: tuple[str, ...]
    cpus: int
    memory_mb: int
    gpus: int
    state: str  # idle, mixed, allocated, down, drained...


def parse_sinfo(text: str) -> list[NodeInfo]:
    """``sinfo --Node`` lines → one NodeInfo per node (a node in several partitions is one entry)."""
    nodes: dict[str, NodeInfo] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 6:
            continue
        name, partition, cpus, mem, gres, state = parts
        partition = partition.rstrip("*")
        gpus = sum(int(m.group(1)) for g in gres.split(",") if (m := _GPU.match(g.strip())))
        old = nodes.get(name)
        nodes[name] = NodeInfo(name, (old.partitions if old else ()) + (partition,),
                               int(cpus) if cpus.isdigit() else 0,
                               int(mem.rstrip("+")) if mem.rstrip("+").isdigit() else 0, gpus, state.rstrip("*~#$@^-"))
    return list(nodes.values())


def sinfo_nodes(commands: Commands, *, partition: str = "") -> list[NodeInfo]:
    args = ["--noheader", "--Node", f"--format={SINFO_FORMAT}"]
    if partition:
        args.append(f"--partition={partition}")
    done = commands.run("sinfo", args)
    if done.returncode != 0:
        raise failure(done)
    return parse_sinfo(done.stdout)

"""sbatch/runtime.sh hpk_cluster_resolv: a ClusterFirst pod's resolv.conf gets the node's search
domains after the cluster's (deduplicated, at most 32), as the kubelet writes it; every other line
is kept byte for byte. Run with the real bash on the function as the job has it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

RUNTIME = Path(__file__).resolve().parents[2] / "sbatch" / "runtime.sh"


def _function() -> str:
    text = RUNTIME.read_text()
    m = re.search(r"^hpk_cluster_resolv\(\) \{\n.*?^\}\n", text, re.S | re.M)
    assert m, "hpk_cluster_resolv is missing from sbatch/runtime.sh"
    return m.group(0)


def run(text: str, node: str, tmp: Path) -> str:
    (tmp / "resolv").write_text(node)
    r = subprocess.run(["bash", "-c", _function() + 'hpk_cluster_resolv "$1"', "t", text], capture_output=True,
                       text=True, check=True, env={"HPK_NODE_RESOLV_CONF": str(tmp / "resolv"), "PATH": "/usr/bin:/bin"})
    return r.stdout


CLUSTER = ["default.svc.cluster.local", "svc.cluster.local", "cluster.local"]
_domain = st.from_regex(r"[a-z*?\[][a-z0-9.*?\[-]{0,20}", fullmatch=True)


@settings(max_examples=40, deadline=None)
@given(node=st.lists(_domain, max_size=40), extra=st.lists(_domain, max_size=3),
       keyword=st.sampled_from(["search", "domain"]))
def test_node_domains_follow_the_cluster_ones(tmp_path_factory, node: list[str], extra: list[str],  # type: ignore[no-untyped-def]
                                              keyword: str) -> None:
    tmp = tmp_path_factory.mktemp("r")
    text = f"nameserver 10.1.2.3\nsearch {' '.join(CLUSTER + extra)}\noptions ndots:5 edns0\n"
    out = run(text, f"nameserver 9.9.9.9\n{keyword} {' '.join(node)}\n" if node else "nameserver 9.9.9.9\n", tmp)
    want: list[str] = []
    for d in CLUSTER + extra + node:
        if d not in want:
            want.append(d)
    assert out == f"nameserver 10.1.2.3\nsearch {' '.join(want[:32])}\noptions ndots:5 edns0\n"


def test_without_a_node_resolver_the_text_is_kept(tmp_path: Path) -> None:
    text = "nameserver 10.1.2.3\nsearch ns.svc.cluster.local\noptions ndots:5\n"
    r = subprocess.run(["bash", "-c", _function() + 'hpk_cluster_resolv "$1"', "t", text], capture_output=True,
                       text=True, check=True, env={"HPK_NODE_RESOLV_CONF": str(tmp_path / "missing"), "PATH": "/usr/bin:/bin"})
    assert r.stdout == text

"""The cluster part of ``hpkctl status``: its jobs from Slurm, its phase and endpoint from the state
directory, the node and its pods from the API server, each pod's job from the kubelet's records.

Split out of :mod:`hpkctl.controlplane.lifecycle`. Every source may be missing or failing (no endpoint
yet, the API server not answering, a job already gone): each becomes a row's wording
(:mod:`hpkctl.controlplane.clusterview`), never an error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpkctl.controlplane.clusterstop import recorded_jobs
from hpkctl.controlplane.clusterview import ClusterStatus, PodRow, condition, pod_row, read_json
from hpkctl.controlplane.statedir import read_endpoint
from hpkctl.errors import HpkError
from hpkctl.jobs import SlurmError
from hpkctl.kube import Kube, KubeError, KubeUnavailable
from hpkctl.kube.client import node_path

if TYPE_CHECKING:
    from hpkctl.controlplane.lifecycle import Cluster


def status(cluster: Cluster, *, pods: bool = True) -> ClusterStatus:
    """The cluster's jobs, its phase and endpoint, the API's answer about the node and (``pods``) its pods."""
    jobs = cluster.jobs()
    ep = read_endpoint(cluster.layout.root)
    st = ClusterStatus(state_dir=str(cluster.layout.root), cluster=cluster.cid, jobs=jobs,
                       phase=read_json(cluster.layout.status), endpoint=ep, api="no endpoint published",
                       node_name=cluster.node_name, node="")
    if ep is None:
        return st
    kube = None
    try:
        kube = Kube(str(cluster.layout.kubeconfig("admin")), pool_size=2)
        node = kube.get(node_path(cluster.node_name))
        st.api = "ok"
        st.node = condition(node, "Ready") or "Unknown"
        st.node = {"True": "Ready", "False": "NotReady"}.get(st.node, st.node)
        if pods:
            listed = kube.get("/api/v1/pods", query={"fieldSelector": f"spec.nodeName={cluster.node_name}"})
            st.pods = [pod_row(p) for p in listed.get("items", [])]
    except KubeError as e:
        st.api = "ok" if e.code == 404 else str(e)
        st.node = "missing" if e.code == 404 else ""
    except (KubeUnavailable, HpkError) as e:
        st.api = f"no answer: {e}"
    finally:
        if kube is not None:
            kube.close()
    if st.pods:  # job ids from the kubelet's records, not from annotations pod authors can write
        try:
            recorded = recorded_jobs(cluster)
        except SlurmError:
            recorded = {}
        st.pods = [PodRow(p.namespace, p.name, p.phase, recorded.get(p.uid, ""), uid=p.uid) for p in st.pods]
    ids = [p.job_id for p in st.pods if p.job_id]
    if ids:
        try:
            infos = cluster.slurm.query(ids)
        except SlurmError:
            infos = {}
        st.pods = [PodRow(p.namespace, p.name, p.phase, p.job_id,
                          infos[p.job_id].state if p.job_id in infos else ("gone" if p.job_id else ""),
                          infos[p.job_id].nodes if p.job_id in infos else "", uid=p.uid) for p in st.pods]
    return st


__all__ = ["status"]

"""hpkctl/pilot/launch.py: a rendered pod's step need, from its resources and the profile."""

from __future__ import annotations

from typing import Any

import pytest

from hpkctl.errors import PodError
from hpkctl.pilot.launch import need_of
from hpkctl.pod import render_pod
from hpkctl.sites.schema import SiteProfile


def _pod(resources: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "c", "image": "busybox", "command": ["true"]}
    if resources:
        c["resources"] = resources
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default", "uid": "u-1"},
            "spec": {"containers": [c], "restartPolicy": "Never", **spec}}


def _profile(**pods: Any) -> SiteProfile:
    p = SiteProfile(name="t")
    return p.model_copy(update={"pods": p.pods.model_copy(update=pods),
                                "pilot": p.pilot.model_copy(update={"enabled": True})})


def test_a_pod_without_a_memory_request_gets_the_profiles_default_memory_a_kubernetes_quantity() -> None:
    """[pods] default_memory is a quantity ("2Gi"), which the render applies: the step asks for it."""
    need = need_of(render_pod(_pod(), _profile(default_memory="2Gi"), strict=False))
    assert (need.cpus, need.memory_mb) == (1, 2048)


def test_without_default_memory_the_step_gets_step_memory_and_the_requests_win() -> None:
    assert need_of(render_pod(_pod(), _profile(), strict=False)).memory_mb == 512  # [pilot] step_memory
    asked = _pod({"requests": {"cpu": "2", "memory": "300Mi"}})
    need = need_of(render_pod(asked, _profile(default_memory="2Gi"), strict=False))
    assert (need.cpus, need.memory_mb, need.runtime) == (2, 300, 0)


def test_a_deadline_is_the_time_the_step_must_be_able_to_run() -> None:
    need = need_of(render_pod(_pod(activeDeadlineSeconds=100, terminationGracePeriodSeconds=5), _profile(),
                              strict=False))
    assert need.runtime == 100 + 5 + 10




def test_an_mpi_pod_is_refused_naming_the_fix() -> None:
    """An MPI pod starts its ranks with srun across its own job: as a pilot step it cannot, and the
    refusal says how to run it (a job of its own)."""
    mpi = _pod()
    mpi["metadata"]["annotations"] = {"slurm-job.hpk.io/mpi-flags": "--mpi=pmix"}
    with pytest.raises(PodError) as err:
        need_of(render_pod(mpi, _profile(), strict=False))
    assert err.value.reason == "PilotUnsupported"
    assert "without --pilot" in err.value.message and "[pilot] enabled = false" in err.value.message

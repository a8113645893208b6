"""Bounds a pod spec must fit before it becomes a job (issue 20): the grace period against Slurm's
--signal range and the time limit, so that no pod is stopped as it starts."""

from __future__ import annotations

from typing import Any

import pytest

from hpkctl.errors import PodError
from hpkctl.pod.translate import plan_pod
from hpkctl.sites.schema import slurm_time_to_seconds
from tests.support.pods import make_profile, pod_doc


def _pod(grace: int, **spec: Any) -> dict[str, Any]:
    return pod_doc({"restartPolicy": "Never", "terminationGracePeriodSeconds": grace, **spec,
                    "containers": [{"name": "c", "image": "busybox:1.36", "command": ["true"]}]})


def _options(doc: dict[str, Any], **slurm: str) -> dict[str, str | None]:
    plan = plan_pod(doc, make_profile(slurm=slurm))
    return {o.name: o.value for o in plan.options}


@pytest.mark.parametrize("grace", [0, 30, 500, 599, 600, 3600, 65525])
def test_the_time_limit_leaves_room_to_run_before_the_stop_sequence(grace: int) -> None:
    opts = _options(_pod(grace), default_time="00:10:00")
    signal_at = int(str(opts["--signal"]).split("@")[1])
    limit = slurm_time_to_seconds(str(opts["--time"]))
    assert signal_at == grace + 10
    assert limit - signal_at >= 120  # Slurm may signal up to 60 s early: the pod still runs a minute
    assert limit == 600 or limit - signal_at < 180  # the profile's limit unless it was too short


def test_a_grace_period_beyond_slurms_signal_range_is_refused_with_the_fix() -> None:
    with pytest.raises(PodError) as err:
        plan_pod(_pod(65526), make_profile())
    assert err.value.reason == "GracePeriodTooLong"
    assert "spec.terminationGracePeriodSeconds" in str(err.value) and "65525" in str(err.value.hint)


def test_a_grace_period_that_leaves_no_time_under_max_time_is_refused() -> None:
    with pytest.raises(PodError) as err:
        plan_pod(_pod(900), make_profile(slurm={"default_time": "00:10:00", "max_time": "00:15:00"}))
    assert err.value.reason == "GracePeriodTooLong" and "00:15:00" in str(err.value)
    assert "770" in str(err.value.hint)  # 900 s max_time - 10 s margin - 120 s of running
    opts = _options(_pod(770), default_time="00:10:00", max_time="00:15:00")
    assert slurm_time_to_seconds(str(opts["--time"])) == 900


def test_a_deadline_clamped_to_max_time_still_leaves_room_for_the_grace_period() -> None:
    with pytest.raises(PodError) as err:
        plan_pod(_pod(800, activeDeadlineSeconds=60), make_profile(slurm={"max_time": "00:15:00"}))
    assert err.value.reason == "GracePeriodTooLong"


def _host_pod(path: str) -> dict[str, Any]:
    return pod_doc({"restartPolicy": "Never", "volumes": [{"name": "h", "hostPath": {"path": path}}],
                    "containers": [{"name": "c", "image": "busybox:1.36", "command": ["true"],
                                    "volumeMounts": [{"name": "h", "mountPath": "/h"}]}]})


def _host_refusal(path: str, **pods: Any) -> PodError:
    with pytest.raises(PodError) as err:
        plan_pod(_host_pod(path), make_profile(pods={"state_dir": "/home/u/.hpk", **pods}))
    assert err.value.reason == "HostPathNotAllowed" and "spec.volumes[0].hostPath.path" in str(err.value)
    return err.value


def test_hostpath_is_refused_unless_the_profile_allows_its_prefix() -> None:
    err = _host_refusal("/etc", hostpath_allow=[])
    assert "none" in str(err) and "hostpath_allow" in str(err.hint)
    err = _host_refusal("/data-other/x", hostpath_allow=["/data"])  # a prefix is a directory, not a string
    assert "/data" in str(err)
    plan = plan_pod(_host_pod("/data/x/../y"), make_profile(pods={"hostpath_allow": ["/data"]}))
    assert plan.volumes.hostpath_roots == {"h": "/data"}


@pytest.mark.parametrize("path", ["/home/u/.hpk", "/home/u/.hpk/pods/other-uid/volumes", "/home/u", "/",
                                  "/home/u/.hpk/images", "/home/u/x/../.hpk/pods"])
def test_hpkctls_own_state_is_never_mountable_even_under_an_allowed_prefix(path: str) -> None:
    err = _host_refusal(path, hostpath_allow=["/"])
    assert "never mountable" in str(err)

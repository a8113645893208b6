"""Attacks on a pod's isolation (issue 20), end to end through ``hpkctl run`` on the real Slurm with
the Apptainer stand-in: what one container, pod or user must not reach, and bounds a spec must fit."""

from __future__ import annotations

import pytest

from tests.support.hpk import Hpk, pod, unique

pytestmark = [pytest.mark.slurm, pytest.mark.standin]
BUSYBOX = "busybox:1.36"


def c(name: str, script: str, **kw) -> dict:  # type: ignore[no-untyped-def]
    return {"name": name, "image": BUSYBOX, "command": ["sh", "-c", script], **kw}


@pytest.mark.parametrize("target", ["/", "../../.."])  # the host's root; the directory of every pod
def test_a_sub_path_an_init_container_swaps_for_a_symlink_is_not_bound(hpk: Hpk, target: str) -> None:
    """The subPath is checked as the main container starts, on the directory that is then bound: the
    init container's symlink (made after the pod's setup) leads out of the volume and is refused."""
    name = unique("subswap")
    work = [{"name": "work", "mountPath": "/work"}]
    swap = c("swap", f"mkdir -p /work/d && rm -rf /work/d && ln -s '{target}' /work/d && ls -ld /work/d",
             volumeMounts=work)
    main = c("main", "echo LISTING; ls -a /escape", volumeMounts=[{"name": "work", "mountPath": "/escape", "subPath": "d"}])
    r = hpk.run(pod(name, [main], initContainers=[swap], volumes=[{"name": "work", "emptyDir": {}}]))
    assert r.rc != 0, r.output
    assert "LISTING" not in r.stdout, r.output  # the main container never ran with the host's /
    st = hpk.status(name)["status"]
    assert st["phase"] == "Failed" and st["reason"] == "CreateContainerConfigError", st
    assert "outside its volume" in st["message"] and "volumeMount /escape" in st["message"], st


def test_a_sub_path_inside_the_volume_is_bound_after_an_init_container_made_it(hpk: Hpk) -> None:
    name = unique("subok")
    work = [{"name": "work", "mountPath": "/work"}]
    make = c("make", "mkdir -p /work/real/d && echo inside > /work/real/d/f && ln -s real /work/link", volumeMounts=work)
    main = c("main", "cat /in/f", volumeMounts=[{"name": "work", "mountPath": "/in", "subPath": "link/d"}])
    r = hpk.run(pod(name, [main], initContainers=[make], volumes=[{"name": "work", "emptyDir": {}}]))
    assert r.rc == 0, r.output
    assert r.stdout == "inside\n"


def test_a_grace_period_longer_than_the_time_limit_still_lets_the_pod_run(hpk: Hpk) -> None:
    """ci's default_time is 10 minutes: a 700 s grace period used to signal the job as it started."""
    r = hpk.run(pod(unique("grace"), [c("main", "sleep 2; echo ran")], terminationGracePeriodSeconds=700))
    assert r.rc == 0, r.output
    assert r.stdout == "ran\n" and "does not fit in the time limit" in r.stderr


def test_a_grace_period_slurm_cannot_signal_is_refused_before_submission(hpk: Hpk) -> None:
    r = hpk.run(pod(unique("grace"), [c("main", "echo never")], terminationGracePeriodSeconds=65526))
    assert r.rc != 0, r.output
    assert "spec.terminationGracePeriodSeconds" in r.stderr and "at most 65525" in r.stderr, r.output

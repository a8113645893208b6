"""hpkctl/pilot/launch.py: a rendered pod's step need, from its resources and the profile."""

from __future__ import annotations

from typing import Any

from hpkctl.pilot.launch import need_of, step_launch
from hpkctl.pod import render_pod
from hpkctl.pod.ranks import ranks_of
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




def _mpi(flags: str, mpi: str | None = "--mpi=pmi2", **kw: Any) -> dict[str, Any]:
    pod = _pod(**kw)
    pod["metadata"]["annotations"] = {"slurm-job.hpk.io/flags": flags,
                                      **({"slurm-job.hpk.io/mpi-flags": mpi} if mpi is not None else {})}
    return pod


def test_an_mpi_pods_step_needs_its_ranks_room_on_each_of_its_nodes() -> None:
    """The ranks' geometry is the job's: 4 tasks on 2 nodes are 2 a node, of the pod's CPUs each; the
    memory is per node ([pilot] step_memory without a request), as sbatch's --mem."""
    rendered = render_pod(_mpi("--nodes=2 --ntasks=4", resources={"requests": {"cpu": "2"}}), _profile(),
                          strict=False)
    need = need_of(rendered)
    assert (need.nodes, need.cpus, need.memory_mb) == (2, 4, 512)
    assert ranks_of(rendered.plan).srun_words() == ["--exact", "--nodes=2", "--ntasks=4", "--cpus-per-task=2",
                                                    "--mem=512M"]
    # the script's step starts the ranks with them, the mpi-flags after, on the nodes it was placed on
    assert ("hpk_pilot_srun --job-name=p-ranks --exact --nodes=2 --ntasks=4 --cpus-per-task=2 --mem=512M --mpi=pmi2 /bin/bash -c "
            '"$HPK_MPI_ENV" hpk-mpi') in rendered.script
    assert step_launch(True, ("7", "n1,n2"), ["job.sh"]) == ("n1", True, ["/usr/bin/env", "HPK_RANKS_NODES=n1,n2",
                                                                          "job.sh"])
    assert step_launch(False, ("7", "n1"), ["job.sh"]) == ("n1", False, ["job.sh"])


def test_tasks_without_the_mpi_annotation_and_the_flags_memory_are_honoured() -> None:
    """--ntasks=2 alone is a multi-task launch too (job-per-pod starts it with srun): one node, both
    tasks' CPUs; --ntasks-per-node gives the nodes; --mem-per-cpu counts per node."""
    need = need_of(render_pod(_mpi("--ntasks=2", mpi=None), _profile(), strict=False))
    assert (need.nodes, need.cpus, need.memory_mb) == (1, 2, 512)
    need = need_of(render_pod(_mpi("--ntasks=3 --ntasks-per-node=2 --mem-per-cpu=100M"), _profile(), strict=False))
    assert (need.nodes, need.cpus, need.memory_mb) == (2, 2, 200)
    plain = render_pod(_pod(), _profile(), strict=False)
    assert need_of(plain).nodes == 1 and "hpk_pilot_srun" not in plain.script


def test_job_per_pod_keeps_its_srun() -> None:
    p = SiteProfile(name="t")
    script = render_pod(_mpi("--nodes=2 --ntasks=4"), p, strict=False).script
    assert 'exec setsid srun --mpi=pmi2 /bin/bash -c "$HPK_MPI_ENV" hpk-mpi' in script
    assert "hpk_pilot_srun" not in script

"""hpkctl/jobs/alloc.py and steps.py without Slurm: host lists, scontrol's per-node shares, squeue's
step lines and srun's options (the real commands: test_jobs_pilot_slurm.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpkctl.jobs.alloc import NodeShare, hold_args, parse_allocation
from hpkctl.jobs.hostlist import expand_hostlist
from hpkctl.jobs.steps import check_step, parse_steps, step_args

# scontrol show job -d -o of Slurm 22.05 (cut to the fields read, in Slurm's order)
SHOW = ("JobId=77 JobName=hpk-pilot UserId=hpk(1001) JobState=RUNNING Reason=None TimeLimit=01:00:00 "
        "StartTime=2026-11-26T14:40:00 EndTime=2026-11-26T15:40:00 NodeList=n[1-2],gpu07 NumNodes=3 "
        "TRES=cpu=24,mem=15000M,node=3 Nodes=n[1-2] CPU_IDs=0-7 Mem=6600 GRES= Nodes=gpu07 CPU_IDs=0-3,6 "
        "Mem=1800 GRES=gpu:a100:2(IDX:0-1) MinCPUsNode=1 Comment=hpk-pilot kubelet=k node=hpk Exclusive=YES")


def test_host_lists_expand_as_slurm_writes_them() -> None:
    assert expand_hostlist("n[1-3,5],gpu07,a[01-02]b") == ["n1", "n2", "n3", "n5", "gpu07", "a01b", "a02b"]
    assert expand_hostlist("vm") == ["vm"] and expand_hostlist("") == []


def test_an_allocation_s_nodes_each_with_its_share() -> None:
    info = parse_allocation(SHOW, "77")
    assert info is not None and info.state == "RUNNING" and info.end is not None
    assert info.nodes == {"n1": NodeShare(8, 6600), "n2": NodeShare(8, 6600), "gpu07": NodeShare(5, 1800, 2)}
    assert info.comment == "hpk-pilot kubelet=k node=hpk"
    assert parse_allocation(SHOW, "78") is None


def test_a_pending_allocation_has_no_nodes_yet() -> None:
    info = parse_allocation("JobId=9 JobState=PENDING EndTime=Unknown NodeList=(null) Comment=x", "9")
    assert info is not None and info.nodes == {} and info.end is None and info.state == "PENDING"


def test_step_lines_leave_out_batch_and_extern_and_keep_names_whole() -> None:
    text = "12.0|vm|2026-11-26T14:40:01|pod|a b\n12.batch|vm|2026-11-26T14:40:00|batch\n12.extern|vm|N/A|extern\n"
    [s] = parse_steps(text)
    assert (s.step_id, s.job_id, s.nodes, s.name) == ("12.0", "12", "vm", "pod|a b")


def test_srun_options_bound_the_step() -> None:
    args = step_args("12", name="web", node="n2", cpus=2, memory_mb=512, gpus=1, gres_name="gpu",
                     output=Path("/p/logs/slurm.out"), workdir=Path("/p"), immediate=30)
    assert args[:9] == ["--jobid=12", "--job-name=web", "--exact", "--nodes=1", "--ntasks=1", "--cpus-per-task=2",
                        "--mem=512M", "--immediate=30", "--quiet"]
    assert "--nodelist=n2" in args and "--gres=gpu:1" in args
    with pytest.raises(ValueError):
        step_args("12", name="x", node="", cpus=0, memory_mb=1, output=Path("/o"), workdir=Path("/w"), immediate=1)
    with pytest.raises(ValueError):
        check_step("12.batch")


def test_holder_options_whole_nodes_or_a_share() -> None:
    whole = hold_args(name="h", comment="c", partition="p", time_limit="60", nodes=2, cpus=0, memory_mb=0,
                      gpus=0, gres_name="gpu", output=Path("/o"))
    assert {"--nodes=2", "--exclusive", "--mem=0", "--partition=p"} <= set(whole)
    share = hold_args(name="h", comment="c", partition="", time_limit="60", nodes=0, cpus=8, memory_mb=4096,
                      gpus=1, gres_name="gpu", output=Path("/o"))
    assert {"--nodes=1", "--cpus-per-task=8", "--mem=4096M", "--gres=gpu:1"} <= set(share)
    assert not any(a.startswith("--partition") for a in share)


def test_step_shares_from_scontrol_show_step() -> None:
    """``scontrol show step -o`` (Slurm 22.05, as measured): numbered steps with their node, CPUs,
    memory and GPUs; the batch step is not a pod's; a step across nodes (an MPI pod's ranks) holds an
    even share of Slurm's totals on each of its nodes."""
    from hpkctl.jobs.steps import StepShare, parse_step_shares

    text = (
        "StepId=32296.batch UserId=1001 StartTime=2026-11-26T18:07:17 TimeLimit=UNLIMITED State=RUNNING "
        "Partition=debug NodeList=vm Nodes=1 CPUs=0 Tasks=1 Name=batch Network=(null) TRES=(null) "
        "ResvPorts=(null) CPUFreqReq=Default SrunHost:Pid=(null):0\n"
        "StepId=32296.0 UserId=1001 StartTime=2026-11-26T18:07:19 TimeLimit=UNLIMITED State=RUNNING "
        "Partition=debug NodeList=vm Nodes=1 CPUs=1 Tasks=1 Name=my pod Network=(null) "
        "TRES=cpu=1,mem=200M,node=1 ResvPorts=(null) CPUFreqReq=Default Dist=Cyclic SrunHost:Pid=vm:14034\n"
        "StepId=40.3 UserId=1001 StartTime=2026-11-26T18:07:19 TimeLimit=UNLIMITED State=RUNNING "
        "Partition=debug NodeList=n2 Nodes=1 CPUs=4 Tasks=1 Name=g TRES=cpu=4,mem=2G,node=1,gres/gpu=2\n"
        "StepId=41.0 UserId=1001 State=RUNNING NodeList=n[1-2] Nodes=2 CPUs=8 Name=wide TRES=cpu=8,mem=1G,node=2\n")
    assert parse_step_shares(text) == [StepShare("32296.0", "32296", "vm", 1, 200, 0, "my"),
                                       StepShare("40.3", "40", "n2", 4, 2048, 2, "g"),
                                       StepShare("41.0", "41", "n1,n2", 4, 512, 0, "wide")]

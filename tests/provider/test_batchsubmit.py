"""Group commit of sbatch (hpkctl/provider/batchsubmit.py): a pod that finds no sbatch of its kind
running goes alone at once; pods that arrive while one runs go next as one array; a refused batch
becomes single submissions, a timed-out one tells each pod that its job may exist."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from hpkctl.jobs import ResourcesUnavailable, SlurmTimeout, SlurmUnavailable, SubmitError
from hpkctl.pod import render_pod
from hpkctl.provider.batchsubmit import BatchSubmitter
from tests.support.pods import make_profile, pod_doc
from tests.support.waiting import wait_for


class GatedSlurm:
    """sbatch that holds its first call until the test opens the gate; records what it was given."""

    def __init__(self, *, refuse_arrays: bool = False, time_out_arrays: bool = False,
                 unclear_arrays: bool = False, refuse_options: bool = False) -> None:
        self.gate = threading.Event()
        self.calls: list[tuple[str, str]] = []  # (script name, its text)
        self.entered = threading.Event()
        self.refuse_arrays, self.time_out_arrays, self.unclear = refuse_arrays, time_out_arrays, unclear_arrays
        self.refuse_options = refuse_options  # every job, alone or an array: the pods ask too much
        self.lock = threading.Lock()

    def submit(self, script: Path, *, extra_args: Any = (), workdir: Any = None) -> str:
        text = Path(script).read_text()
        with self.lock:
            self.calls.append((Path(script).name, text))
            n = len(self.calls)
        if n == 1:
            self.entered.set()
            assert self.gate.wait(30)
        if self.refuse_options:
            raise ResourcesUnavailable("sbatch refused the job: Requested node configuration is not available")
        if "--array=" in text and self.refuse_arrays:
            raise SubmitError("sbatch refused the job: no arrays here")
        if "--array=" in text and self.time_out_arrays:
            raise SlurmTimeout("sbatch timed out")
        if "--array=" in text and self.unclear:
            raise SlurmUnavailable("sbatch: error: Socket timed out on send/recv operation")
        return str(100 + n)


def _plan(tmp_path: Path, i: int, cpu: str = "1"):  # type: ignore[no-untyped-def]
    spec = {"containers": [{"name": "c", "image": "busybox", "command": ["true"],
                            "resources": {"requests": {"cpu": cpu}}}]}
    profile = make_profile(tmp_path)
    plan = render_pod(pod_doc(spec, name=f"p{i}", uid=f"00000000-0000-0000-0000-0000000000{i:02d}"), profile).plan
    (Path(plan.pod_dir) / "job").mkdir(parents=True, exist_ok=True)
    (Path(plan.pod_dir) / "job" / "job.sh").write_text("#!/bin/bash\n")
    return plan


def _run(sub: BatchSubmitter, plans: list[Any]) -> tuple[dict[str, Any], list[threading.Thread]]:
    got: dict[str, Any] = {}

    def one(p: Any) -> None:
        try:
            got[p.uid] = sub.submit(p, deadline=0, partition="")
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            got[p.uid] = exc

    threads = [threading.Thread(target=one, args=(p,)) for p in plans]
    for t in threads:
        t.start()
    return got, threads


def _queued(sub: BatchSubmitter, n: int) -> bool:
    with sub._cv:
        return sum(len(q) for q in sub._waiting.values()) == n


def _behind_a_held_sbatch(sub: BatchSubmitter, slurm: GatedSlurm, first: Any,
                           others: list[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``first`` submitted alone and held in sbatch; ``others`` submitted meanwhile, each waiting
    behind it; then the sbatch let go: what each got."""
    got, threads = _run(sub, [first])
    assert slurm.entered.wait(30)  # the first pod went alone, at once
    got2, threads2 = _run(sub, others)
    wait_for(f"{len(others)} pods to wait behind the running sbatch", lambda: _queued(sub, len(others)),
             timeout=30, every=0.01)
    slurm.gate.set()
    for t in threads + threads2:
        t.join(30)
    return got, got2


def test_pods_arriving_during_an_sbatch_go_next_as_one_array(tmp_path: Path) -> None:
    slurm = GatedSlurm()
    sizes: list[int] = []
    sub = BatchSubmitter(slurm, on_batch=sizes.append)  # type: ignore[arg-type]
    first, others = _plan(tmp_path, 0), [_plan(tmp_path, i) for i in range(1, 4)]
    got, got2 = _behind_a_held_sbatch(sub, slurm, first, others)
    assert got[first.uid] == ("101", 0)
    assert [got2[p.uid] for p in others] == [("102_0", 0), ("102_1", 0), ("102_2", 0)]
    assert sizes == [3]
    name, text = slurm.calls[1]
    assert name.startswith(".batch-") and "--array=0-2" in text and "--job-name=hpk-pods" in text
    assert text.index(others[0].pod_dir) < text.index(others[1].pod_dir) < text.index(others[2].pod_dir)
    assert not list(Path(first.pod_dir).parent.glob(".batch-*"))  # the script is gone after its sbatch


def test_other_options_make_another_queue(tmp_path: Path) -> None:
    slurm = GatedSlurm()
    sub = BatchSubmitter(slurm)  # type: ignore[arg-type]
    got, threads = _run(sub, [_plan(tmp_path, 0)])
    assert slurm.entered.wait(30)
    big = _plan(tmp_path, 1, cpu="2")
    got2, threads2 = _run(sub, [big])  # nothing of its kind runs: it goes at once, alone
    for t in threads2:
        t.join(30)
    assert got2[big.uid] == ("102", 0)
    slurm.gate.set()
    for t in threads:
        t.join(30)


@pytest.mark.parametrize("kind", ["refused", "timed out", "no clear answer"])
def test_a_batch_that_fails(tmp_path: Path, kind: str) -> None:
    slurm = GatedSlurm(refuse_arrays=kind == "refused", time_out_arrays=kind == "timed out",
                       unclear_arrays=kind == "no clear answer")
    sub = BatchSubmitter(slurm)  # type: ignore[arg-type]
    others = [_plan(tmp_path, i) for i in range(1, 3)]
    _, got2 = _behind_a_held_sbatch(sub, slurm, _plan(tmp_path, 0), others)
    if kind == "refused":  # each pod alone, with its own answer
        assert sorted(got2[p.uid] for p in others) == [("103", 0), ("104", 0)]
        assert len(slurm.calls) == 4
    else:  # the array may exist: each pod is told (never submitted again blindly), and looks for it by uid
        kind_of = SlurmTimeout if kind == "timed out" else SlurmUnavailable
        assert all(type(got2[p.uid]) is kind_of for p in others)
        assert len(slurm.calls) == 2


def test_an_array_names_no_more_pods_than_its_comment_can_hold(tmp_path: Path) -> None:
    """Slurm refuses a --comment over 1,024 characters: 27 uids of 36 fit."""
    slurm = GatedSlurm()
    sizes: list[int] = []
    sub = BatchSubmitter(slurm, on_batch=sizes.append)  # type: ignore[arg-type]
    others = [_plan(tmp_path, i) for i in range(1, 31)]
    _, got2 = _behind_a_held_sbatch(sub, slurm, _plan(tmp_path, 0), others)
    assert sizes == [27, 3] and sorted(got2[p.uid] for p in others[27:]) == [("103_0", 0), ("103_1", 0), ("103_2", 0)]
    assert max(len(line) for _, text in slurm.calls for line in text.splitlines()
               if line.startswith("#SBATCH --comment=")) <= len("#SBATCH --comment=") + 1024


def test_an_unexpected_error_of_the_leader_reaches_every_pod_of_its_batch(tmp_path: Path) -> None:
    slurm = GatedSlurm()
    sub = BatchSubmitter(slurm)  # type: ignore[arg-type]

    def broken(*a: Any, **kw: Any) -> Any:
        raise RuntimeError("a bug")

    import hpkctl.provider.batchsubmit as mod
    others = [_plan(tmp_path, i) for i in range(1, 3)]
    real, mod.render_batch = mod.render_batch, broken  # type: ignore[assignment]
    try:
        _, got2 = _behind_a_held_sbatch(sub, slurm, _plan(tmp_path, 0), others)
    finally:
        mod.render_batch = real  # type: ignore[assignment]
    assert all(isinstance(got2[p.uid], RuntimeError) for p in others)
    assert not sub._waiting and not sub._busy and len(slurm.calls) == 1


def test_arrays_refused_in_a_row_turn_batching_off(tmp_path: Path) -> None:
    """A site that refuses arrays pays REFUSED_LIMIT refused sbatch calls, not one per batch for ever."""
    from hpkctl.provider.batchsubmit import REFUSED_LIMIT

    slurm = GatedSlurm(refuse_arrays=True)
    sub = BatchSubmitter(slurm)  # type: ignore[arg-type]
    sub._refused = REFUSED_LIMIT - 1
    others = [_plan(tmp_path, i) for i in range(1, 3)]
    _behind_a_held_sbatch(sub, slurm, _plan(tmp_path, 0), others)
    assert sub._refused == REFUSED_LIMIT
    n = len(slurm.calls)
    later = [_plan(tmp_path, i) for i in range(3, 6)]
    got, threads = _run(sub, later)
    for t in threads:
        t.join(30)
    assert all(isinstance(got[p.uid], tuple) for p in later)
    assert all("--array=" not in text for _, text in slurm.calls[n:]) and len(slurm.calls) == n + 3


def test_arrays_refused_for_the_pods_own_options_do_not_turn_batching_off(tmp_path: Path) -> None:
    """A Deployment asking for more than a node has is refused as an array and each pod alone alike: its
    batches must not switch arrays off for every later pod (review of stop 32)."""
    from hpkctl.provider.batchsubmit import REFUSED_LIMIT

    slurm = GatedSlurm(refuse_options=True)
    sub = BatchSubmitter(slurm)  # type: ignore[arg-type]
    for round_ in range(REFUSED_LIMIT + 1):
        slurm.gate.clear(), slurm.entered.clear()
        with slurm.lock:
            slurm.calls.clear()
        others = [_plan(tmp_path, 10 * round_ + i) for i in range(1, 3)]
        got, got2 = _behind_a_held_sbatch(sub, slurm, _plan(tmp_path, 10 * round_), others)
        assert all(isinstance(g, ResourcesUnavailable) for g in (*got.values(), *got2.values()))
        assert any("--array=" in text for _, text in slurm.calls)  # still tried as an array
    assert sub._refused == 0


def test_a_failing_on_batch_hook_leaves_every_pod_its_element(tmp_path: Path) -> None:
    slurm = GatedSlurm()

    def hook(n: int) -> None:
        raise RuntimeError("hook")

    sub = BatchSubmitter(slurm, on_batch=hook)  # type: ignore[arg-type]
    others = [_plan(tmp_path, i) for i in range(1, 3)]
    _, got2 = _behind_a_held_sbatch(sub, slurm, _plan(tmp_path, 0), others)
    assert [got2[p.uid] for p in others] == [("102_0", 0), ("102_1", 0)]

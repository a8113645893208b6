"""``sbatch`` with group commit: pods ready at the same moment go to Slurm as one job array.

Why: in a backlog (a kubelet restarted with N bound pods, a Job's fan-out) the kubelet's workers
each reached ``sbatch`` at once, N process starts and N RPCs that slurmctld serves one by one; with
2 cores that, not Kubernetes, bounded how fast pods started (issue 23). A database's log does the
same with its flushes: while one ``sbatch`` runs, the pods that arrive meanwhile wait, and the next
``sbatch`` takes all of them as the elements of one array (:mod:`hpkctl.pod.batch`). A pod that finds
no ``sbatch`` of its kind running is submitted at once, alone, exactly as before: nothing waits for a
batch to fill, so a single pod's start is not delayed, and a pod alone keeps its own job and name.

A batch that Slurm refuses, or that cannot be written, is not retried as a whole: each of its pods
is submitted alone instead, so each gets its own answer (its error, or its time limit lowered to the
partition's). A batch whose ``sbatch`` timed out may exist: each of its pods is told so
(``SlurmTimeout``), and its next create finds its element by the uid list in the array's comment.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hpkctl.jobs import Slurm, SlurmError, SlurmTimeout
from hpkctl.pod.batch import batch_key, render_batch
from hpkctl.pod.plan import PodPlan
from hpkctl.provider.slurmjobs import submit_job

log = logging.getLogger("hpkctl.provider.batchsubmit")

#: the most pods in one array (Slurm's default MaxArraySize is 1001; the comment lists every uid)
MAX_BATCH = 64


@dataclass(eq=False)
class _Pending:
    plan: PodPlan
    deadline: int
    partition: str
    result: tuple[str, int] | None = None
    error: BaseException | None = None
    alone: bool = False  # its batch was refused: it goes to Slurm on its own
    done: threading.Event = field(default_factory=threading.Event)


class BatchSubmitter:
    """Submits pods' job scripts (``<pod dir>/job/job.sh``), many at once as one array when they
    arrive together. An array's script is written for its ``sbatch`` (and removed after it) in the
    pods' parent directory, which outlives any one pod: the array runs from there too."""

    def __init__(self, slurm: Slurm, *, max_batch: int = MAX_BATCH,
                 on_batch: Callable[[int], None] | None = None) -> None:
        self.slurm = slurm
        self.max_batch = max_batch
        self.on_batch = on_batch  # for tests and bench: called with each batch's size
        self._cv = threading.Condition()
        self._waiting: dict[tuple[str, ...], list[_Pending]] = {}
        self._busy: set[tuple[str, ...]] = set()

    def submit(self, plan: PodPlan, *, deadline: int, partition: str) -> tuple[str, int]:
        """(job id, lowered time limit or 0) of pod ``plan``'s job, as :func:`submit_job` says; an
        element's id is ``ARRAY_I``. Raises as ``submit_job`` does."""
        key = batch_key(plan)
        if key is None:
            return self._alone(plan, deadline, partition)
        me = _Pending(plan, deadline, partition)
        with self._cv:
            self._waiting.setdefault(key, []).append(me)
        while True:
            with self._cv:
                while key in self._busy and not me.done.is_set():
                    self._cv.wait()
                if me.done.is_set():
                    break
                queue = self._waiting[key]
                batch, queue[:] = queue[:self.max_batch], queue[self.max_batch:]
                self._busy.add(key)
            try:
                self._run(batch)
            finally:
                with self._cv:
                    self._busy.discard(key)
                    if not self._waiting.get(key):
                        self._waiting.pop(key, None)
                    self._cv.notify_all()
        if me.alone:
            return self._alone(plan, deadline, partition)
        if me.error is not None:
            raise me.error
        assert me.result is not None
        return me.result

    def _alone(self, plan: PodPlan, deadline: int, partition: str) -> tuple[str, int]:
        root = Path(plan.pod_dir)
        return submit_job(self.slurm, root / "job" / "job.sh", workdir=root, deadline=deadline, partition=partition)

    def _run(self, batch: list[_Pending]) -> None:
        """One ``sbatch`` for ``batch``; every member is done afterwards, whatever happened."""
        try:
            if len(batch) == 1:
                one = batch[0]
                try:
                    one.result = self._alone(one.plan, one.deadline, one.partition)
                except BaseException as exc:  # noqa: BLE001 - its own thread raises it
                    one.error = exc
                return
            self._array(batch)
        finally:
            for p in batch:
                p.done.set()

    def _array(self, batch: list[_Pending]) -> None:
        workdir = Path(batch[0].plan.pod_dir).parent
        script = workdir / f".batch-{uuid.uuid4().hex}.sh"
        try:
            text = render_batch([p.plan for p in batch], str(workdir))
            fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
            try:
                array = self.slurm.submit(script)
            finally:
                script.unlink(missing_ok=True)
        except SlurmTimeout as exc:
            log.warning("sbatch of %d pods as one array timed out; the array may exist: its pods look for "
                        "their element by uid next", len(batch))
            for p in batch:
                p.error = exc
            return
        except (SlurmError, OSError, ValueError) as exc:
            log.warning("%d pods could not go to Slurm as one array (%s): each is submitted alone", len(batch), exc)
            for p in batch:
                p.alone = True
            return
        log.info("submitted %d pods as job array %s", len(batch), array)
        if self.on_batch is not None:
            self.on_batch(len(batch))
        for i, p in enumerate(batch):
            p.result = (f"{array}_{i}", 0)


__all__ = ["MAX_BATCH", "BatchSubmitter"]

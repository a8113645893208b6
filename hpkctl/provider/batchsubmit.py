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
partition's). A batch whose ``sbatch`` timed out or gave no clear answer may exist: each of its pods is told so
(``SlurmTimeout``, ``SubmitUnclear``), and its next create finds its element by the uid list in the array's comment.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hpkctl.jobs import Slurm, SlurmError, SubmitError
from hpkctl.pod.batch import COMMENT_MAX, NOTICES_DIR, batch_comment, batch_key, notices_file, render_batch
from hpkctl.pod.plan import PodPlan
from hpkctl.pod.poddir import write_new
from hpkctl.provider.slurmjobs import submit_job

log = logging.getLogger("hpkctl.provider.batchsubmit")

#: the most pods in one array (Slurm's default MaxArraySize is 1001); the array's comment, which lists
#: every uid, must also fit Slurm's 1,024 characters (27 pod uids)
MAX_BATCH = 64
#: arrays Slurm refused in a row after which this process submits every pod alone (a site that
#: forbids arrays, or limits them below a batch, would otherwise cost a refused sbatch per batch); a
#: refusal of the pods' own options (partition, account, QOS, time, resources) does not count: each pod
#: alone gets the same answer, and a later batch of other pods may well be taken
REFUSED_LIMIT = 3


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
        self._refused = 0  # arrays refused in a row

    def submit(self, plan: PodPlan, *, deadline: int, partition: str) -> tuple[str, int]:
        """(job id, lowered time limit or 0) of pod ``plan``'s job, as :func:`submit_job` says; an
        element's id is ``ARRAY_I``. Raises as ``submit_job`` does."""
        key = batch_key(plan) if self._refused < REFUSED_LIMIT else None
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
                batch = self._take(queue)
                self._busy.add(key)
            try:
                self._run(batch)
            except BaseException:
                with self._cv:  # the caller gets the error: its pod must not go to Slurm later as well
                    if me in self._waiting.get(key, ()):
                        self._waiting[key].remove(me)
                raise
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

    def _take(self, queue: list[_Pending]) -> list[_Pending]:
        """The next batch from the head of ``queue`` (removed from it): at most ``max_batch`` pods, and
        no more than the array's comment can name."""
        n = 0
        while n < min(len(queue), self.max_batch) and (
                n == 0 or len(batch_comment([p.plan.uid for p in queue[:n + 1]])) <= COMMENT_MAX):
            n += 1
        batch = queue[:n]
        del queue[:n]
        return batch

    def _alone(self, plan: PodPlan, deadline: int, partition: str) -> tuple[str, int]:
        root = Path(plan.pod_dir)
        return submit_job(self.slurm, root / "job" / "job.sh", workdir=root, deadline=deadline, partition=partition)

    def _run(self, batch: list[_Pending]) -> None:
        """One ``sbatch`` for ``batch``; every member is done afterwards, whatever happened (an error
        that escapes here is every member's without an answer, and the caller's)."""
        try:
            if len(batch) == 1:
                one = batch[0]
                try:
                    one.result = self._alone(one.plan, one.deadline, one.partition)
                except BaseException as exc:  # noqa: BLE001 - its own thread raises it
                    one.error = exc
                return
            self._array(batch)
        except BaseException as exc:
            for p in batch:
                if p.result is None and p.error is None and not p.alone:
                    p.error = exc
            raise
        finally:
            for p in batch:
                p.done.set()

    def _array(self, batch: list[_Pending]) -> None:
        workdir = Path(batch[0].plan.pod_dir).parent
        script = workdir / f".batch-{uuid.uuid4().hex}.sh"
        try:
            text = render_batch([p.plan for p in batch], str(workdir))
            (workdir / NOTICES_DIR).mkdir(mode=0o700, exist_ok=True)  # Slurm opens the elements' files there
            write_new(str(script), text.encode(), 0o600)  # (removed again if the write fails half-way)
        except (OSError, ValueError) as exc:  # nothing went to Slurm
            self._each_alone(batch, exc)
            return
        try:
            array = self.slurm.submit(script)
        except SubmitError as exc:  # refused: Slurm made no job
            if type(exc) is SubmitError:  # not one of the pods' own options (see REFUSED_LIMIT)
                self._count_refusal(exc)
            self._each_alone(batch, exc)
            return
        except SlurmError as exc:
            # timed out, or no clear answer ("Socket timed out on send/recv", no job id printed): the
            # array may exist, so no pod goes again blindly; each one's next create looks for its element
            log.warning("sbatch of %d pods as one array gave no clear answer (%s); the array may exist: its "
                        "pods look for their element by uid next", len(batch), exc)
            for p in batch:
                p.error = exc
            return
        finally:
            try:
                script.unlink(missing_ok=True)
            except OSError as exc:  # Slurm has its own copy: a file left behind is only untidy
                log.warning("array script %s not removed: %s", script, exc)
        for i, p in enumerate(batch):  # first: nothing below may leave an element its pod does not know
            p.result = (f"{array}_{i}", 0)
        with self._cv:
            if self._refused < REFUSED_LIMIT:  # in a row: once off, arrays stay off
                self._refused = 0
        log.info("submitted %d pods as job array %s", len(batch), array)
        if self.on_batch is not None:
            try:
                self.on_batch(len(batch))
            except Exception:  # noqa: BLE001 - a test's or bench's hook
                log.exception("the on_batch hook failed")

    def _count_refusal(self, exc: SubmitError) -> None:
        """One more array refused in a row; at REFUSED_LIMIT, arrays are off (said once)."""
        with self._cv:
            self._refused += 1
            now_off = self._refused == REFUSED_LIMIT
        if now_off:
            log.warning("Slurm refused %d job arrays in a row (the last: %s): every pod is submitted alone "
                        "from now on, until the kubelet restarts; if the site limits arrays (MaxArraySize, "
                        "a QOS's job limits), ask its admins", REFUSED_LIMIT, exc)

    @staticmethod
    def _each_alone(batch: list[_Pending], why: BaseException) -> None:
        log.warning("%d pods could not go to Slurm as one array (%s): each is submitted alone", len(batch), why)
        for p in batch:
            p.alone = True


def forget_notices(pod_dir: str, job_id: str) -> None:
    """Remove Slurm's notices of a batched pod's element (``A_i``) with its pod directory."""
    if "_" in job_id and pod_dir:
        with contextlib.suppress(OSError):
            os.unlink(notices_file(os.path.dirname(pod_dir), job_id))


__all__ = ["MAX_BATCH", "BatchSubmitter", "forget_notices"]

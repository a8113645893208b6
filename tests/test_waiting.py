"""tests/support/waiting.py's wait_for: a deadline, moved on only while Slurm says the job waits for capacity."""

from __future__ import annotations

import pytest

from tests.support import waiting
from tests.support.waiting import wait_for


def test_the_deadline_moves_on_only_while_the_job_is_queued_for_capacity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waiting, "QUEUED_STEP", 0.05)
    asked: list[int] = []

    def queued() -> str:
        asked.append(1)
        return "42 (Priority)" if len(asked) <= 3 else ""
    with pytest.raises(AssertionError, match=r"waiting for x \(queued for capacity at some point: 42 \(Priority\)\)"):
        wait_for("x", lambda: None, timeout=0.05, every=0.01, queued=queued)
    assert len(asked) == 4  # asked at each passed deadline; the fourth answer (not queued) ends the wait
    tries = iter(range(1000))
    assert wait_for("y", lambda: next(tries) >= 20 or None, timeout=0.01, every=0.01, queued=lambda: "7 (Resources)")


def test_queued_time_is_bounded_and_without_queued_the_deadline_is_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waiting, "QUEUED_STEP", 0.01)
    with pytest.raises(AssertionError, match="queued for capacity"):
        wait_for("z", lambda: None, timeout=0.01, every=0.01, queued=lambda: "7 (Resources)", queued_limit=0.1)
    with pytest.raises(AssertionError, match=r"waiting for w; last: 0"):
        wait_for("w", lambda: 0, timeout=0.01, every=0.01)

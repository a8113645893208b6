"""The status loop's pause (hpkctl/kubelet/wake.py): a pod's announced change ends it, stop ends it,
and a poke during a round is kept for the next pause (no change is slept through)."""

from __future__ import annotations

import threading

from hpkctl.kubelet.wake import Wake


def test_a_poke_ends_the_pause_that_would_last_an_hour() -> None:
    wake = Wake(threading.Event(), least=0.0)
    began = wake.begin()
    threading.Timer(0.05, wake.poke).start()
    wake.pause(3600, began)  # returns: the poke ended it (a hang is pytest-timeout's)
    assert wake.pokes == 1


def test_a_poke_during_the_round_counts_for_the_next_pause() -> None:
    wake = Wake(threading.Event(), least=0.0)
    began = wake.begin()
    wake.poke()  # a pod wrote while the round read the change log
    wake.pause(3600, began)


def test_stop_ends_the_pause() -> None:
    stop = threading.Event()
    wake = Wake(stop, least=3600)
    began = wake.begin()
    threading.Timer(0.05, stop.set).start()
    wake.pause(3600, began)


def test_a_pause_without_a_poke_lasts_until_the_next_round() -> None:
    wake = Wake(threading.Event(), least=0.0)
    began = wake.begin()
    wake.pause(0.05, began)
    assert wake.pokes == 0

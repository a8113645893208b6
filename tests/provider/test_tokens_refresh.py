"""tokens.refresh without an API server: what it asks for, and when it asks for nothing."""

from __future__ import annotations

import logging
import stat
from pathlib import Path
from typing import Any

import pytest

from hpkctl.provider.tokens import ONE_WRITE, refresh

POD: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
    "spec": {"serviceAccountName": "sa", "volumes": [{"name": "tok", "projected": {"defaultMode": 0o640, "sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]}}]}}


class Source:
    """A TokenSource that counts its TokenRequests and records what the token file held meanwhile."""

    def __init__(self, token: bytes | None = b"t0k", fail: bool = False) -> None:
        self.token, self.fail = token, fail
        self.asked: list[tuple[str, str]] = []
        self.seen: list[bytes | None] = []  # the token file's content while the request was in flight
        self.path: Path | None = None

    def service_account_token(self, namespace: str, service_account: str, *, audience: str | None,
                              expiration_seconds: int | None) -> bytes | None:
        self.asked.append((namespace, service_account))
        if self.path is not None:
            self.seen.append(self.path.read_bytes() if self.path.exists() else None)
        if self.fail:
            raise OSError("TokenRequest failed")
        return self.token


def test_a_pod_directory_removed_by_hand_costs_no_token_request_and_one_log_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = Source()
    caplog.set_level(logging.INFO, logger="hpkctl.provider.tokens")
    for _ in range(3):  # the first write, then two renewals
        assert refresh(source, POD, tmp_path / "gone") == 0
    assert source.asked == []
    assert not (tmp_path / "gone").exists()
    said = [r for r in caplog.records if "not requested" in r.getMessage()]
    assert len(said) == 1 and str(tmp_path / "gone" / "volumes" / "tok") in said[0].getMessage()


def test_the_first_write_makes_the_empty_file_the_job_waits_on_then_fills_it(tmp_path: Path) -> None:
    (tmp_path / "volumes" / "tok").mkdir(parents=True)
    source = Source()
    source.path = tmp_path / "volumes" / "tok" / "token"
    assert refresh(source, POD, tmp_path) == 1
    assert source.asked == [("ns", "sa")] and source.seen == [b""]  # hpk_wait_token waits for a non-empty file
    assert source.path.read_bytes() == b"t0k" and stat.S_IMODE(source.path.stat().st_mode) == 0o640
    source.token = b"n3w"
    assert refresh(source, POD, tmp_path) == 1  # a renewal
    assert source.seen[-1] == b"t0k" and source.path.read_bytes() == b"n3w"
    assert sorted(p.name for p in source.path.parent.iterdir()) == ["token"]


@pytest.mark.parametrize("source", [Source(fail=True), Source(token=None)], ids=["request-failed", "no-token"])
def test_a_first_write_without_a_token_leaves_no_file(tmp_path: Path, source: Source) -> None:
    (tmp_path / "volumes" / "tok").mkdir(parents=True)
    if source.fail:
        with pytest.raises(OSError, match="TokenRequest failed"):
            refresh(source, POD, tmp_path)
    else:
        assert refresh(source, POD, tmp_path) == 0
    assert list((tmp_path / "volumes" / "tok").iterdir()) == []


def test_a_long_first_token_is_renamed_over_never_seen_half_written(tmp_path: Path) -> None:
    (tmp_path / "volumes" / "tok").mkdir(parents=True)
    long = b"t" * (ONE_WRITE + 1)
    assert refresh(Source(token=long), POD, tmp_path) == 1
    path = tmp_path / "volumes" / "tok" / "token"
    assert path.read_bytes() == long and stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(p.name for p in path.parent.iterdir()) == ["token"]

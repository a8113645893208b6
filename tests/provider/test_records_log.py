"""The kubelet's records as one append-only log (hpkctl/provider/records.py, recordlog.py): a line per
save, the last line of a uid winning, tombstones, torn lines, compaction (also by another process
while this one appends), the migration of an earlier version's ``pods/<uid>.json`` files, which states
are flushed, and a property test against a dict."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpkctl.provider import recordlog, records
from hpkctl.provider.records import (FAILED, STOPPED, SUBMITTED, SUBMITTING, PodRecord, Records, node_record_uids,
                                     node_records)
from hpkctl.sites import load_site


def _rec(uid: str, state: str = SUBMITTED, job: str = "") -> PodRecord:
    return PodRecord(uid=uid, namespace="ns", name=f"p-{uid}", pod_dir=f"/x/{uid}", state=state, job_id=job,
                     submitted=1.5)


def _lines(recs: Records) -> list[bytes]:
    return recs.log.path.read_bytes().splitlines()


def test_round_trip_last_line_wins_and_garbage_is_skipped(tmp_path: Path) -> None:
    recs = Records(tmp_path)
    a = _rec("u-1", SUBMITTING)
    recs.save(a)
    a.state, a.job_id = SUBMITTED, "77"
    recs.save(a)
    assert [sorted(json.loads(line)) for line in _lines(recs)] == [sorted([*a.__dict__, "saved"])] * 2  # when: bench/
    with open(recs.log.path, "ab") as fh:  # a line of a newer version, and garbage
        fh.write(json.dumps({**a.__dict__, "uid": "u-2", "future_field": 1}).encode() + b"\n{not json\n[1]\n")
    recs.save(_rec("u-3"))
    loaded = Records(tmp_path).load_all()
    assert loaded["u-1"] == a
    assert loaded["u-2"].uid == "u-2"  # unknown fields of a newer version are ignored
    assert sorted(loaded) == ["u-1", "u-2", "u-3"]
    assert [p.name for p in tmp_path.iterdir()] == ["records.log"]  # no file per record, no temporary file
    assert oct(recs.log.path.stat().st_mode & 0o777) == oct(0o600)
    for bad in ("../escape", "", ".hidden", "a\nb"):
        with pytest.raises(ValueError):
            recs.save(_rec(bad))


def test_a_torn_last_line_is_skipped_and_the_next_save_starts_a_new_line(tmp_path: Path) -> None:
    recs = Records(tmp_path)
    recs.save(_rec("u-1", SUBMITTED, "5"))
    whole = recs.log.path.read_bytes()
    recs.log.close()
    recs.log.path.write_bytes(whole + record_prefix(_rec("u-2")))  # a crash in the middle of a write
    again = Records(tmp_path)
    assert sorted(again.load_all()) == ["u-1"]
    again.save(_rec("u-3", SUBMITTED, "6"))
    assert sorted(Records(tmp_path).load_all()) == ["u-1", "u-3"]


def record_prefix(rec: PodRecord) -> bytes:
    return records.record_json(rec)[:40]


def test_a_write_cut_short_in_this_process_does_not_swallow_the_next_line(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    recs = Records(tmp_path)
    recs.save(_rec("u-1"))
    real_write = os.write
    monkeypatch.setattr(recordlog.os, "write", lambda fd, data: real_write(fd, data[:10]))  # the disk filled up
    with pytest.raises(OSError):
        recs.save(_rec("u-2"))
    monkeypatch.setattr(recordlog.os, "write", real_write)
    recs.save(_rec("u-3"))
    assert sorted(Records(tmp_path).load_all()) == ["u-1", "u-3"]


def test_remove_appends_a_tombstone(tmp_path: Path) -> None:
    recs = Records(tmp_path)
    recs.save(_rec("u-1"))
    recs.save(_rec("u-2"))
    recs.remove("u-1")
    recs.remove("never-saved")
    assert _lines(recs)[-2:] == [b'{"removed":"u-1"}', b'{"removed":"never-saved"}']
    assert sorted(Records(tmp_path).load_all()) == ["u-2"]


def test_the_intent_and_the_end_are_flushed_the_job_id_is_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One fdatasync per durable save (no rename, no directory sync); none for ``submitted`` or a removal."""
    synced: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(recordlog.os, "fdatasync", lambda fd: (synced.append(fd), real(fd))[1])
    recs = Records(tmp_path)
    expected = {SUBMITTING: 1, SUBMITTED: 0, FAILED: 1, STOPPED: 1}
    for state, flushes in expected.items():
        synced.clear()
        recs.save(_rec("u-1", state))
        assert len(synced) == flushes, state
    synced.clear()
    recs.remove("u-1")
    assert synced == []


def test_concurrent_saves_give_one_whole_line_each(tmp_path: Path) -> None:
    recs = Records(tmp_path)
    start = threading.Barrier(8)

    def worker(t: int) -> None:
        start.wait(timeout=30)
        for i in range(50):
            recs.save(_rec(f"u-{t}-{i}", SUBMITTING if i % 2 else SUBMITTED, str(i)))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    lines = _lines(recs)
    assert len(lines) == 400
    assert sorted(json.loads(line)["uid"] for line in lines) == sorted(f"u-{t}-{i}" for t in range(8) for i in range(50))


def test_a_compaction_the_disk_cuts_short_leaves_the_log_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recs = Records(tmp_path)
    for i in range(60):
        recs.save(_rec(f"u-{i}", SUBMITTED, str(i)))
    (tmp_path / ".records.log.0123abcd").write_bytes(b"a compaction killed midway left this")
    real_write = os.write
    calls: list[int] = []

    def full_disk(fd: int, data: bytes) -> int:  # the first write lands in part, then nothing fits
        calls.append(len(data))
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        return real_write(fd, bytes(data[:1000]))

    monkeypatch.setattr(recordlog.os, "write", full_disk)
    with pytest.raises(OSError):
        recs.log.compact("uid")
    monkeypatch.setattr(recordlog.os, "write", real_write)
    assert calls[0] > 1000  # the whole live set was asked for in one write, and cut
    assert len(Records(tmp_path).load_all()) == 60
    assert [p.name for p in tmp_path.iterdir()] == ["records.log"]


def test_compaction_keeps_the_live_records_and_shrinks_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "COMPACT_SLACK", 10)
    recs = Records(tmp_path)
    inode = recs.log.path.stat().st_ino if recs.log.path.exists() else None
    for i in range(30):
        recs.save(_rec(f"u-{i % 3}", SUBMITTED, str(i)))
    assert recs.log.path.stat().st_ino != inode
    assert len(_lines(recs)) < 30
    loaded = Records(tmp_path).load_all()
    assert {u: r.job_id for u, r in loaded.items()} == {"u-0": "27", "u-1": "28", "u-2": "29"}
    assert [p.name for p in tmp_path.iterdir()] == ["records.log"]


def test_no_process_compacts_the_log_while_another_appends_to_it(tmp_path: Path) -> None:
    """``hpkctl status`` loads the records while the kubelet appends: it does not compact the log under
    the kubelet (a line would land in a file already copied); the kubelet does once it alone has the
    log open, and waits for a later chance while another process appends too. No line is lost."""
    kubelet = Records(tmp_path)
    for i in range(5):
        kubelet.save(_rec(f"u-{i}", SUBMITTING))
        kubelet.save(_rec(f"u-{i}", SUBMITTED, str(i)))
    status = Records(tmp_path)
    assert len(status.load_all()) == 5
    assert status.log.compact("uid") is None
    kubelet.save(_rec("u-9", SUBMITTED, "9"))
    kubelet.remove("u-0")
    inode = kubelet.log.path.stat().st_ino
    assert kubelet.log.compact("uid") is not None  # the reader appended nothing: it holds no lock
    assert kubelet.log.path.stat().st_ino != inode
    stopper = Records(tmp_path)
    stopper.save(_rec("u-8", STOPPED, "8"))  # a second process that appends
    assert kubelet.log.compact("uid") is None
    kubelet.save(_rec("u-7", SUBMITTED, "7"))
    stopper.save(_rec("u-6", STOPPED, "6"))
    assert {u: r.job_id for u, r in Records(tmp_path).load_all().items()} == {
        "u-1": "1", "u-2": "2", "u-3": "3", "u-4": "4", "u-6": "6", "u-7": "7", "u-8": "8", "u-9": "9"}


def _old_file(node: Path, rec: PodRecord, mtime_ns: int | None = None) -> Path:
    (node / "pods").mkdir(parents=True, exist_ok=True)
    p = node / "pods" / f"{rec.uid}.json"
    p.write_bytes(records.record_json(rec))
    if mtime_ns is not None:
        os.utime(p, ns=(mtime_ns, mtime_ns))
    return p


def test_an_earlier_versions_files_are_migrated_into_the_log_and_removed(tmp_path: Path) -> None:
    """An upgrade mid-run adopts everything: the files are read, written into the log, removed."""
    node = tmp_path / "kubelet" / "n1"
    _old_file(node, _rec("u-1", SUBMITTED, "11"))
    _old_file(node, _rec("u-2", SUBMITTING))
    (node / "pods" / "broken.json").write_text("{not json")
    profile = load_site("ci")
    profile = profile.model_copy(update={"pods": profile.pods.model_copy(update={"state_dir": str(tmp_path)})})
    assert node_record_uids(profile) == {"u-1", "u-2"}  # read only: before the migration
    loaded = Records(node).load_all()
    assert {u: (r.state, r.job_id) for u, r in loaded.items()} == {"u-1": (SUBMITTED, "11"), "u-2": (SUBMITTING, "")}
    assert not (node / "pods").exists()
    assert sorted(json.loads(line)["uid"] for line in (node / "records.log").read_bytes().splitlines()) == ["u-1", "u-2"]
    assert node_record_uids(profile) == {"u-1", "u-2"}
    assert node_records(node) == loaded


def test_a_first_save_migrates_before_it_appends(tmp_path: Path) -> None:
    _old_file(tmp_path, _rec("u-1", SUBMITTED, "11"))
    recs = Records(tmp_path)
    recs.save(_rec("u-2", SUBMITTING))
    assert not (tmp_path / "pods").exists()
    assert sorted(Records(tmp_path).load_all()) == ["u-1", "u-2"]


def test_the_log_wins_over_a_file_older_than_it_and_a_newer_file_wins(tmp_path: Path) -> None:
    """A file still there after a migration cut short is older than the log (its line, or its later
    removal, stands); one an earlier version wrote after this one ran is newer than the log."""
    recs = Records(tmp_path)
    recs.save(_rec("u-1", SUBMITTED, "new"))
    recs.remove("u-2")
    recs.save(_rec("u-3", SUBMITTED, "log"))
    log_mtime = recs.log.path.stat().st_mtime_ns
    _old_file(tmp_path, _rec("u-1", SUBMITTING), log_mtime - 10**9)
    _old_file(tmp_path, _rec("u-2", SUBMITTED, "removed since"), log_mtime - 10**9)
    _old_file(tmp_path, _rec("u-3", STOPPED, "log"), log_mtime + 10**9)
    loaded = Records(tmp_path).load_all()
    assert {u: (r.state, r.job_id) for u, r in loaded.items()} == {"u-1": (SUBMITTED, "new"), "u-3": (STOPPED, "log")}
    assert not (tmp_path / "pods").exists()


_UIDS = st.sampled_from(["a", "b", "c", "d"])
_OPS = st.lists(st.one_of(
    st.tuples(st.just("save"), _UIDS, st.sampled_from([SUBMITTING, SUBMITTED, FAILED, STOPPED]),
              st.text("0123456789", max_size=3)),
    st.tuples(st.just("remove"), _UIDS, st.just(""), st.just("")),
    st.tuples(st.just("reopen"), st.just(""), st.just(""), st.just("")),  # a restart: load_all, maybe compacting
), max_size=40)


@settings(max_examples=60, deadline=None)
@given(ops=_OPS, slack=st.sampled_from([0, 2, 512]))
def test_any_saves_and_removes_load_as_a_dict_would_hold_them(tmp_path_factory: pytest.TempPathFactory,
                                                              ops: list[tuple[str, str, str, str]], slack: int) -> None:
    node = tmp_path_factory.mktemp("node")
    model: dict[str, PodRecord] = {}
    saved = records.COMPACT_SLACK
    records.COMPACT_SLACK = slack  # 0 and 2: compactions between the saves
    try:
        recs = Records(node)
        for op, uid, state, job in ops:
            if op == "save":
                model[uid] = _rec(uid, state, job)
                recs.save(_rec(uid, state, job))
            elif op == "remove":
                model.pop(uid, None)
                recs.remove(uid)
            else:
                recs.log.close()
                recs = Records(node)
                assert recs.load_all() == model
        assert Records(node).load_all() == model
    finally:
        records.COMPACT_SLACK = saved

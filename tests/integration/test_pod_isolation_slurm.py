"""Attacks on a pod's isolation (issue 20), end to end through ``hpkctl run`` on the real Slurm with
the Apptainer stand-in: what one container, pod or user must not reach, and bounds a spec must fit."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.ci import HPK_USER, missing
from tests.support.hpk import Hpk, pod, unique

pytestmark = [pytest.mark.slurm, pytest.mark.standin]
BUSYBOX = "busybox:1.36"
OTHER_USER = "hpk2"  # the second user of the node (issue 20's attacker)


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
    assert "resolves outside its volume" in st["message"] and st["message"].endswith("/volumes/work"), st
    assert "volumeMount /escape" in st["message"], st


def test_a_sub_path_inside_the_volume_is_bound_after_an_init_container_made_it(hpk: Hpk) -> None:
    """... and the container holds no descriptor of a host directory (the job's check opened one:
    through /proc/self/fd/N/.. the container would reach the host's file system)."""
    name = unique("subok")
    work = [{"name": "work", "mountPath": "/work"}]
    make = c("make", "mkdir -p /work/real/d && echo inside > /work/real/d/f && ln -s real /work/link", volumeMounts=work)
    dir_fds = 'for f in /proc/self/fd/*; do [ ! -d "$f" ] || echo "directory descriptor $f"; done'
    main = c("main", f"cat /in/f; {dir_fds}", volumeMounts=[{"name": "work", "mountPath": "/in", "subPath": "link/d"}])
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


@pytest.mark.parametrize("site", ["ci", "ci-cni"])
def test_a_container_sees_its_pods_own_dev_shm_not_the_nodes(hpk: Hpk, site: str) -> None:
    """Every container used to get the node's /dev, so any pod could read and write every pod's
    Memory emptyDirs under /dev/shm/hpk-<uid>. Now /dev is Apptainer's minimal one (--contain) with
    the pod's own directory at /dev/shm, shared by its containers only."""
    marker = Path("/dev/shm") / unique("hpk-other-pod")
    marker.mkdir(mode=0o755)
    try:
        # the documentation's termination-message example writes /dev/termination-log: no longer
        # "Permission denied" (the minimal /dev is the container's user's; the message is not collected)
        first = c("first", "echo mine > /dev/shm/note; ls -a /dev/shm; echo DEV; ls /dev; "
                           "echo Sleep expired > /dev/termination-log")
        second = c("second", "i=0; until [ -e /dev/shm/note ] || [ $i -ge 300 ]; do sleep 0.1; i=$((i+1)); done; "
                             "grep -qx mine /dev/shm/note")  # the pod's containers share it
        r = hpk.run(pod(unique("shm"), [first, second]), site=site)
        assert r.rc == 0, r.output
        out = r.stdout.replace("[first] ", "")  # several containers: hpkctl run prefixes their lines
        shm, dev = out.split("DEV\n")
        assert marker.name not in r.stdout and "hpk-" not in shm, r.stdout
        assert sorted(shm.split()) == [".", "..", "note"], shm
        assert "null" in dev.split() and "tty0" not in dev.split() and "mem" not in dev.split(), dev
        assert "termination-log" not in dev.split()  # listed before it was written: no file is bound there
        assert not (Path("/dev/shm") / "note").exists()
    finally:
        marker.rmdir()


def _second_user() -> str:
    """A second Unix user of the node (created here, as root, when absent)."""
    if os.geteuid() != 0:
        missing("a second Unix user needs root to create", fix="run the tests as root, as .ci/run does")
    try:
        pwd.getpwnam(OTHER_USER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", OTHER_USER], check=True, capture_output=True, timeout=30)
    return OTHER_USER


def test_another_user_cannot_plant_the_pods_memory_directory(hpk: Hpk) -> None:
    """The pod's uid is in squeue for every user; a predictable /dev/shm/hpk-<uid> made first by
    someone else was accepted. Now the job never uses a parent that is not its user's own 0700
    directory (the pod's directory is then a fresh mktemp -d beside it), and the pod still runs."""
    other = _second_user()
    root = Path(tempfile.mkdtemp(prefix="hpk-shm-", dir="/dev/shm"))  # a world-writable tmpfs of the test's own
    root.chmod(0o1777)
    try:
        profile = hpk.workdir / "shm.toml"
        profile.write_text(f'extends = "ci"\n[pods]\nmemory_dir = "{root}"\n')
        profile.chmod(0o644)
        planted = root / f"hpk-{pwd.getpwnam(HPK_USER).pw_uid}"
        subprocess.run(["runuser", "-u", other, "--", "mkdir", "-m", "0777", str(planted)], check=True, timeout=30)
        vols = [{"name": "cache", "emptyDir": {"medium": "Memory"}}]
        writer = c("writer", "echo secret > /cache/data; echo wrote", volumeMounts=[{"name": "cache", "mountPath": "/cache"}])
        name = unique("plant")
        r = hpk.run(pod(name, [writer], volumes=vols), site=str(profile))
        assert r.rc == 0 and r.stdout == "wrote\n", r.output
        assert list(planted.iterdir()) == []  # nothing of the pod's reached the other user's directory
        assert sorted(p.name for p in root.iterdir()) == [planted.name]  # its own one went with the job
        planted.rmdir()
        r = hpk.run(pod(unique("plant"), [writer], volumes=vols), site=str(profile))
        assert r.rc == 0 and r.stdout == "wrote\n", r.output
        mine = root / f"hpk-{pwd.getpwnam(HPK_USER).pw_uid}"
        assert (mine.stat().st_uid, mine.stat().st_mode & 0o7777) == (pwd.getpwnam(HPK_USER).pw_uid, 0o700)
        assert list(mine.iterdir()) == []  # the pod's own directory went with the job
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_hostpath_is_allowed_only_below_the_profiles_prefixes_and_never_into_hpkctls_state(hpk: Hpk) -> None:
    """ci allows /tmp. /etc is refused before submission; a symlink under /tmp that leads into the
    pods' directories (other pods' Secrets) passes that check and is refused by the job, resolved."""
    mount = [{"name": "h", "mountPath": "/h"}]
    r = hpk.run(pod(unique("hostetc"), [c("main", "ls /h", volumeMounts=mount)],
                    volumes=[{"name": "h", "hostPath": {"path": "/etc"}}]))
    assert r.rc != 0 and "spec.volumes[0].hostPath.path" in r.stderr and "hostpath_allow" in r.stderr, r.output
    # a symlink under /tmp into the pods' directories: outside /tmp once resolved
    link = hpk.workdir / "to-state"
    link.symlink_to(hpk.home / ".hpk" / "pods")
    name = unique("hostlink")
    r = hpk.run(pod(name, [c("main", "echo LISTING; ls /h", volumeMounts=mount)],
                    volumes=[{"name": "h", "hostPath": {"path": str(link), "type": "Directory"}}]))
    assert r.rc != 0 and "LISTING" not in r.stdout, r.output
    st = hpk.status(name)["status"]
    assert st["reason"] == "CreateContainerConfigError" and st["message"].endswith("prefix) /tmp"), st
    # a profile that allows the home directory: a symlink there into ~/.hpk is still refused
    profile = hpk.workdir / "home.toml"
    profile.write_text(f'extends = "ci"\n[pods]\nhostpath_allow = ["{hpk.home}"]\n')
    profile.chmod(0o644)
    home_link = hpk.home / unique("to-state")
    home_link.symlink_to(hpk.home / ".hpk")
    try:
        name = unique("hostlink")
        r = hpk.run(pod(name, [c("main", "echo LISTING; ls /h", volumeMounts=mount)],
                        volumes=[{"name": "h", "hostPath": {"path": str(home_link)}}]), site=str(profile))
        assert r.rc != 0 and "LISTING" not in r.stdout, r.output
        st = hpk.status(name, site=str(profile))["status"]
        assert st["reason"] == "CreateContainerConfigError" and "hpkctl's state" in st["message"], st
    finally:
        home_link.unlink()


def test_ephemeral_storage_limits_and_size_limits_evict_the_pod(hpk: Hpk) -> None:
    """What a tenant writes to its container's /tmp or an emptyDir lands on the state disk: over the
    container's ephemeral-storage limit or the emptyDir's sizeLimit, the pod is evicted, as the
    kubelet does (checked every [pods] size_check_interval seconds, here 1)."""
    profile = hpk.workdir / "sizes.toml"
    profile.write_text('extends = "ci"\n[pods]\nsize_check_interval = 1\n')
    profile.chmod(0o644)
    fill = "dd if=/dev/zero of={} bs=1024 count=4096 2>/dev/null; echo filled; sleep 60"
    tmp_hog = c("tmphog", fill.format("/tmp/fill"), resources={"limits": {"ephemeral-storage": "2Mi"}})
    name = unique("evict")
    # the ci profile's request_tmp = false: no --tmp, which these nodes (TmpDisk=0) cannot give
    r = hpk.run(pod(name, [tmp_hog]), site=str(profile))
    assert r.rc != 0, r.output
    st = hpk.status(name, site=str(profile))["status"]
    assert (st["reason"], st["message"]) == ("Evicted", 'Container tmphog exceeded its local ephemeral storage '
                                                         'limit "2Mi". '), st
    vol_hog = c("volhog", fill.format("/scratch/fill"), volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}])
    name = unique("evict")
    r = hpk.run(pod(name, [vol_hog], volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}]), site=str(profile))
    assert r.rc != 0, r.output
    st = hpk.status(name, site=str(profile))["status"]
    assert (st["reason"], st["message"]) == ("Evicted", 'Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". '), st

"""The compiled job-script templates are kept between processes (hpkctl.pod.template), and a cache
that cannot be used only costs time: a render never fails because of it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.ci import REPO

PROBE = ("from hpkctl.pod.template import environment; "
         "t = environment().get_template('pod.sh.j2'); print(t.filename)")


def probe(tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "TMPDIR": str(tmp), "PATH": "/usr/bin:/bin"})


def test_the_compiled_template_is_cached_per_user(tmp_path: Path) -> None:
    r = probe(tmp_path)
    assert r.returncode == 0, r.stderr
    cache = tmp_path / f"_jinja2-cache-{os.getuid()}"
    entries = list(cache.glob("__jinja2_*.cache"))
    assert len(entries) == 1 and entries[0].stat().st_size > 0
    assert (cache.stat().st_mode & 0o777) == 0o700
    before = entries[0].stat().st_mtime_ns
    r = probe(tmp_path)  # read, not written again
    assert r.returncode == 0, r.stderr
    assert [e.stat().st_mtime_ns for e in cache.glob("__jinja2_*.cache")] == [before]


def test_an_unusable_cache_still_renders(tmp_path: Path) -> None:
    (tmp_path / f"_jinja2-cache-{os.getuid()}").write_text("not a directory")
    r = probe(tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("pod.sh.j2")
    ro = tmp_path / "ro"
    (ro / f"_jinja2-cache-{os.getuid()}").mkdir(parents=True, mode=0o700)
    (ro / f"_jinja2-cache-{os.getuid()}").chmod(0o500)  # cannot write (the test may run as root: then it can)
    r = probe(ro)
    assert r.returncode == 0, r.stderr

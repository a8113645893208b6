"""What the CLI imports, per command (issue 23.2: ``hpkctl run`` within +0.2 s of bare sbatch).

Each command runs in a fresh interpreter under ``python -X importtime``; the slowest imports are
PRINTED to the terminal (shown with ``-s``, or in the report with ``-rA``), never asserted on:
speed is measured by bench/, against bare sbatch in the same run, and a printing test fails only when
its measurement does (the command failed, or printed no import times). What other tests assert on the
same measurements is which modules a command pulls in at all: ``--help`` needs none of the heavy
libraries, ``run --detach`` none of what follows a run, and importing the Slurm layer does not bring
asyncio (only exec and attach start steps).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.ci import REPO

HEAVY = ("pydantic", "plumbum", "jinja2", "yaml", "asyncio", "kubernetes")
LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)$")


def importtime(args: list[str], cwd: Path, *, path: str = "/usr/bin:/bin",
               ) -> tuple[subprocess.CompletedProcess[str], list[tuple[int, int, int, str]]]:
    """Run ``python -X importtime ARGS``; its result and (self µs, cumulative µs, depth, module) per import."""
    r = subprocess.run([sys.executable, "-X", "importtime", *args], cwd=cwd, capture_output=True, text=True,
                       timeout=120, env={"PATH": path, "PYTHONPATH": str(REPO), "HOME": str(cwd)})
    rows = [(int(m[1]), int(m[2]), len(m[3]) // 2, m[4]) for m in map(LINE.match, r.stderr.splitlines()) if m]
    return r, rows


def fresh(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -c CODE`` in a fresh interpreter (nothing imported yet), with this checkout on the path."""
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO)})


def report(title: str, rows: list[tuple[int, int, int, str]], top: int = 12) -> None:
    total = sum(s for s, _, _, _ in rows)
    lines = [f"-X importtime: {title}: {len(rows)} modules, {total / 1e6:.3f} s of imports (self times summed)"]
    lines += ["  top by cumulative (module and what it imports):"]
    lines += [f"    {c / 1e6:7.3f} s  {m}" for _, c, _, m in sorted(rows, key=lambda r: -r[1])[:top]]
    lines += ["  top by self time:"]
    lines += [f"    {s / 1e6:7.3f} s  {m}" for s, _, _, m in sorted(rows, key=lambda r: -r[0])[:top]]
    print("\n".join(lines))  # on the terminal with -s, in the report's PASSES section with -rA


def loaded(rows: list[tuple[int, int, int, str]]) -> set[str]:
    return {m.split(".")[0] for _, _, _, m in rows}


@pytest.fixture(scope="module")
def help_rows(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[int, int, int, str]]:
    """``-X importtime`` of ``hpkctl run --help``; the measurement fails if the command does."""
    r, rows = importtime(["-m", "hpkctl", "run", "--help"], tmp_path_factory.mktemp("help"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert rows, "no -X importtime lines: " + r.stderr[-2000:]
    return rows


def test_help_prints_the_slowest_imports(help_rows: list[tuple[int, int, int, str]]) -> None:
    """Printed, never asserted on: fails only when the measurement does (in the fixture)."""
    report("hpkctl run --help", help_rows)


def test_help_imports_no_heavy_library(help_rows: list[tuple[int, int, int, str]]) -> None:
    assert not loaded(help_rows) & set(HEAVY), \
        "hpkctl run --help imports " + ", ".join(sorted(loaded(help_rows) & set(HEAVY)))


#: what ``hpkctl run --detach`` of a plain Pod never needs: the Kubernetes client, pydantic (the pod's and the
#: profile's models are hpkctl.typed's; its import and schema build were most of run's CPU before sbatch), what
#: urllib.request brings (http.client, email, ssl: plumbum imports it, hpkctl.jobs.scrubbed defers it), asyncio (exec/attach of
#: steps), the YAML parser (its manifest is JSON), the code of workloads (job arrays), pilot mode (its held
#: allocations too) and the daemons, what follows a run after its submit (the follow, the provider's status
#: rounds, a delete: --replace imports it when it deletes) and the other commands' CLI modules
NOT_FOR_A_POD = ("kubernetes", "pydantic", "pydantic_core", "asyncio", "yaml", "http.client", "email", "ssl", "hpkctl.kube", "hpkctl.kubelet", "hpkctl.scheduler", "hpkctl.controlplane",
                 "hpkctl.pilot", "hpkctl.jobs.alloc", "hpkctl.local.arrays", "hpkctl.local.workload", "hpkctl.local.pilotrun",
                 "hpkctl.local.arrayfollow", "hpkctl.provider.pilotpod", "hpkctl.local.follow", "hpkctl.provider.jobpod",
                 "hpkctl.provider.jobstatus", "hpkctl.local.runs", "hpkctl.provider.runstatus", "hpkctl.pod.status",
                 "hpkctl.provider.tokens", "hpkctl.provider.api", "hpkctl.provider.stopwait",
                 "hpkctl.provider.workloads", "hpkctl.cli.build", "hpkctl.cli.cluster", "hpkctl.cli.launch",
                 "hpkctl.cli.controlplane", "hpkctl.cli.render", "hpkctl.cli.pull", "hpkctl.cli.sites")


@pytest.fixture(scope="module")
def detach_rows(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[int, int, int, str]]:
    """``-X importtime`` of ``hpkctl run --detach`` of a one-container Pod, as bench/run times it, up to and
    after its sbatch (a stand-in ``sbatch`` on PATH prints a job id, so no Slurm is needed). The
    measurement fails if the run does not submit exactly once."""
    tmp_path = tmp_path_factory.mktemp("detach")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "imports"},
           "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36", "command": ["true"]}]}}
    (tmp_path / "pod.json").write_text(json.dumps(pod))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text('#!/bin/sh\necho "$@" >> "$HOME/sbatch.calls"\necho 4242\n')
    (bin_dir / "sbatch").chmod(0o755)
    r, rows = importtime(["-m", "hpkctl", "run", "--detach", "-q", "-f", "pod.json", "--site", "ci"], tmp_path,
                         path=f"{bin_dir}:/usr/bin:/bin")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "4242"
    assert len((tmp_path / "sbatch.calls").read_text().splitlines()) == 1
    assert rows, "no -X importtime lines: " + r.stderr[-2000:]
    return rows


def test_run_detach_of_a_pod_prints_the_slowest_imports(detach_rows: list[tuple[int, int, int, str]]) -> None:
    """Printed, never asserted on (bench/run measures the speed): fails only when the measurement does."""
    report("hpkctl run --detach -f pod.json --site ci (a plain Pod)", detach_rows, top=15)


def test_run_detach_of_a_pod_imports_only_what_it_needs(detach_rows: list[tuple[int, int, int, str]]) -> None:
    modules = {m for _, _, _, m in detach_rows}
    pulled = sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in NOT_FOR_A_POD))
    assert not pulled, f"hpkctl run --detach of a Pod imports {pulled}"


def test_render_imports_print_the_slowest(tmp_path: Path) -> None:
    """``hpkctl render`` of a one-container pod: the profile, the pod model and the template, the same
    imports and work as ``hpkctl run`` up to its sbatch; twice, so the second shows the warm caches
    (the compiled template is kept between processes)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "imports"},
           "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36", "command": ["true"]}]}}
    (tmp_path / "pod.json").write_text(json.dumps(pod))
    for round_ in ("first", "second"):
        r, rows = importtime(["-m", "hpkctl", "render", "-f", "pod.json", "--site", "ci"], tmp_path)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "#SBATCH" in r.stdout
        report(f"hpkctl render --site ci ({round_} run)", rows)
        # issue 23.2: the pod and the profile are validated by hpkctl.typed, not pydantic
        assert not loaded(rows) & {"pydantic", "pydantic_core", "kubernetes"}, sorted(loaded(rows))


def test_the_slurm_layer_does_not_import_asyncio_or_plumbum(tmp_path: Path) -> None:
    """Importing the Slurm layer does not import plumbum (it brings urllib, http.client, ssl and email):
    it comes with the first Slurm command (hpkctl.jobs.scrubbed), or the image pull when it pulls."""
    r = fresh("import sys, hpkctl.jobs, hpkctl.local.submit; "
              "print(sorted(m for m in ('asyncio', 'pty', 'termios', 'plumbum') if m in sys.modules))", tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
    r = fresh("from hpkctl.jobs import Step; print(Step.__module__)", tmp_path)
    assert r.stdout.strip() == "hpkctl.jobs.step", r.stderr


def test_plumbum_loads_urllib_request_only_when_read(tmp_path: Path) -> None:
    """plumbum imports urllib.request (http.client, email, ssl: ~7% of `hpkctl run`'s instructions) for a
    method hpkctl never calls: the first Slurm command's import of plumbum leaves it unloaded, and whoever
    reads it later (plumbum's as_uri, a `from urllib.request import` elsewhere) gets the real module."""
    code = ("import sys, hpkctl.jobs.scrubbed\n"
            "print(sorted(m for m in ('http.client', 'email.parser', 'ssl') if m in sys.modules))\n"
            "from plumbum.path.local import LocalPath\n"
            "print(LocalPath('/a b').as_uri())\n"
            "from urllib.request import pathname2url, getproxies\n"
            "import urllib.request\n"
            "print(pathname2url('/c d'), callable(getproxies), urllib.request.__file__.endswith('request.py'))\n")
    r = fresh(code, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["[]", "file:///a%20b", "/c%20d True True"]


def test_the_deferred_urllib_request_is_found_as_an_attribute_and_imported_once_by_racing_threads(
        tmp_path: Path) -> None:
    """``import urllib.request`` then ``urllib.request.NAME`` (the plain style) finds the deferred module
    through its package; threads that read it at the same moment all get the one real module, which
    ends up in ``sys.modules`` and on the package (found in review: the package had no attribute, and
    two threads could each import their own copy)."""
    code = ("import sys, threading, hpkctl.jobs.scrubbed\n"
            "import urllib.request\n"
            "stub = urllib.request\n"
            "gate, got = threading.Barrier(8), []\n"
            "def read():\n"
            "    gate.wait()\n"
            "    got.append(stub.pathname2url)\n"
            "threads = [threading.Thread(target=read) for _ in range(8)]\n"
            "[t.start() for t in threads]; [t.join() for t in threads]\n"
            "real = sys.modules['urllib.request']\n"
            "print(len(got), len(set(map(id, got))), real is urllib.request, real.pathname2url is got[0],\n"
            "      type(real).__name__, urllib.request.pathname2url('/e f'))\n")
    r = fresh(code, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["8", "1", "True", "True", "module", "/e%20f"]


def test_plumbum_is_imported_without_starting_uname_and_processor_still_answers(tmp_path: Path) -> None:
    """plumbum's ``LocalMachine`` reads ``platform.uname()[0]``, which ran ``uname -p`` (a fork and exec,
    ~6 ms of ``hpkctl run --detach``): the first Slurm command's import of plumbum starts no process, and
    ``platform.processor()`` asked afterwards is still ``uname -p``'s answer, not a blank left behind."""
    code = ("import sys, subprocess\n"
            "started = []\n"
            "sys.addaudithook(lambda ev, args: started.append(args[1]) if ev == 'subprocess.Popen' else None)\n"
            "import hpkctl.jobs.scrubbed, platform\n"
            "print(started)\n"
            "print(repr(platform.processor()), started)\n")
    r = fresh(code, tmp_path)
    assert r.returncode == 0, r.stderr
    before, after = r.stdout.splitlines()
    assert before == "[]"
    answer = subprocess.run(["uname", "-p"], capture_output=True, text=True, check=True).stdout.strip()
    blank = "" if answer == "unknown" else answer
    assert after == f"{blank!r} [['uname', '-p']]"


def test_the_provider_package_imports_its_interface_when_a_name_is_read(tmp_path: Path) -> None:
    """``import hpkctl.provider`` (a run's records) brings no interface module; each exported name is the
    interface's own object when read, ``from hpkctl.provider import X`` included; a wrong name fails."""
    code = ("import sys, hpkctl.provider as p, hpkctl.provider.api as api, hpkctl.provider.stopwait as sw\n"
            "from hpkctl.provider import PodRef, delete_and_wait\n"
            "print(PodRef is api.PodRef, delete_and_wait is sw.delete_and_wait,\n"
            "      all(getattr(p, n) is getattr(api if n != 'delete_and_wait' else sw, n) for n in p.__all__))\n"
            "try:\n"
            "    p.Nope\n"
            "except AttributeError as exc:\n"
            "    print(exc)\n")
    r = fresh("import sys, hpkctl.provider; print(sorted(m for m in sys.modules if m.startswith('hpkctl.provider')))",
              tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['hpkctl.provider']"
    r = fresh(code, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["True True True", "module 'hpkctl.provider' has no attribute 'Nope'"]


def test_the_program_freezes_what_is_left_for_a_quick_exit_and_main_does_not(tmp_path: Path) -> None:
    """``hpkctl`` (console script and ``python -m hpkctl``) ends with every object frozen, so the exit's
    collections skip them (~17 ms of a run); ``main()``, which tests call in their own process, does not."""
    code = ("import gc, sys\n"
            "import hpkctl.cli as cli\n"
            "sys.argv = ['hpkctl', 'sites', 'list']\n"
            "objects = len(gc.get_objects())\n"
            "print('result', cli.main(), gc.get_freeze_count())\n"
            "print('result', cli.entry(), gc.get_freeze_count() >= objects)\n")
    r = fresh(code, tmp_path)
    assert r.returncode == 0, r.stderr
    assert [line for line in r.stdout.splitlines() if line.startswith("result ")] == ["result 0 0", "result 0 True"]
    assert 'hpkctl = "hpkctl.cli:entry"' in (REPO / "pyproject.toml").read_text()
    assert "entry()" in (REPO / "hpkctl" / "__main__.py").read_text()


def test_a_command_s_imports_pause_collection_and_leave_it_as_found() -> None:
    """``no_collections`` (around ``hpkctl run``'s imports) turns collection off inside and back to what it
    was after, exceptions included; outside the program it freezes nothing (tests call main() in-process)."""
    import gc

    from hpkctl.cli.common import PROGRAM, no_collections

    assert not PROGRAM
    frozen = gc.get_freeze_count()
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            with pytest.raises(RuntimeError), no_collections():
                assert not gc.isenabled()
                raise RuntimeError
            assert gc.isenabled() is enabled
        finally:
            gc.enable()
    assert gc.get_freeze_count() == frozen


def test_the_program_freezes_a_command_s_imports_when_they_are_done(tmp_path: Path) -> None:
    """In the program, what the block imported is frozen at its end (frozen objects leave gc.get_objects()):
    all that was tracked then, the block's own classes included; not at its start."""
    code = ("import gc\n"
            "from hpkctl.cli import common\n"
            "common.PROGRAM = True\n"
            "with common.no_collections():\n"
            "    before = len(gc.get_objects())\n"
            "    import hpkctl.sites.schema as schema\n"
            "    inside = gc.get_freeze_count()\n"
            "print(gc.isenabled(), inside == 0, gc.get_freeze_count() > before,\n"
            "      any(o is schema.SiteProfile for o in gc.get_objects()))\n")
    r = fresh(code, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True True True False"

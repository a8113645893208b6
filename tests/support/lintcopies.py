"""``lint-imports`` on many copies of hpkctl in one process (tests/test_architecture.py).

Each import contract is shown to fail on a copy of the package with a throwaway module. One
``lint-imports`` process per copy spends most of its ~0.2 s of CPU starting Python and import-linter;
here one process checks every copy in turn, ~0.05 s each. Run as a script (``python lintcopies.py
CACHE_DIR COPY...``), it imports no hpkctl of its own: before each copy it forgets the previous one's
modules and puts the copy first on ``sys.path``, as ``lint-imports`` run in that directory would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_END = "<<<hpk-lint-copy-done {ok}>>>"


def lint_copies(copies: list[Path], cache: Path, timeout: float = 300) -> list[tuple[bool, str]]:
    """Per copy (a directory with ``hpkctl/`` and ``pyproject.toml``): whether every contract is kept,
    and lint-imports' report."""
    env = {**os.environ, "COLUMNS": "500", "NO_COLOR": "1"}
    r = subprocess.run([sys.executable, __file__, str(cache), *map(str, copies)], env=env, text=True,
                       capture_output=True, timeout=timeout, check=False)
    parts = r.stdout.split("\n<<<hpk-lint-copy-done ")
    assert r.returncode == 0 and len(parts) == len(copies) + 1, r.stdout + r.stderr
    results = []
    for report, tail in zip(parts, parts[1:]):
        verdict = tail.partition(">>>")[0]
        assert verdict in ("True", "False"), tail
        results.append((verdict == "True", report.rpartition(">>>\n")[2]))
    return results


def _main(cache: str, copies: list[str]) -> None:
    import importlib

    from importlinter.application.use_cases import lint_imports
    from importlinter.configuration import configure

    configure()
    for copy in copies:
        for name in [m for m in sys.modules if m == "hpkctl" or m.startswith("hpkctl.")]:
            del sys.modules[name]
        os.chdir(copy)
        sys.path.insert(0, copy)
        importlib.invalidate_caches()
        try:
            ok = lint_imports(cache_dir=cache)
        finally:
            sys.path.remove(copy)
        print("\n" + _END.format(ok=bool(ok)), flush=True)


if __name__ == "__main__":
    sys.path.pop(0)  # this script's directory (tests/support) is no place to import from
    _main(sys.argv[1], sys.argv[2:])

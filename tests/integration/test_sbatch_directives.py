"""Values in generated ``#SBATCH`` lines are read back by the real sbatch exactly."""

from __future__ import annotations

import re
import subprocess

import pytest

from hpkctl.pod.flags import sbatch_directive_word
from tests.support.hpk import Hpk

pytestmark = pytest.mark.slurm


@pytest.mark.parametrize("value", ['a "quoted" #value', "it's \\ back\\slash", "plain-value", "ünïcode & spaces"])
def test_real_sbatch_reads_directive_values_back(hpk_slurm_only: Hpk, value: str) -> None:
    hpk = hpk_slurm_only
    script = hpk.workdir / "job.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH --comment={sbatch_directive_word(value)}\n#SBATCH --hold\ntrue\n")
    script.chmod(0o644)
    run = ["runuser", "-u", "hpk", "--", "sbatch", "--parsable", "--output=/dev/null", str(script)]
    job = subprocess.run(run, capture_output=True, text=True, check=True, cwd=hpk.workdir).stdout.strip().split(";")[0]
    try:
        show = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, check=True).stdout
        m = re.search(r"^\s*Comment=(.*)$", show, re.M)
        assert m and m.group(1).rstrip(" ") == value, show  # scontrol pads lines with a space
    finally:
        subprocess.run(["scancel", job], check=False)

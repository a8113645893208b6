"""The [pilot] section: its checks, and the shapes the built-in profiles give."""

from __future__ import annotations

import pytest
from hpkctl.typed import ValidationError

from hpkctl.sites import load_site
from hpkctl.sites.pilot import PilotSection, mem_mb


def test_a_margin_as_long_as_the_allocation_is_refused() -> None:
    with pytest.raises(ValidationError, match="renewal_margin 3600 s is not shorter than time_limit"):
        PilotSection(time_limit="01:00:00", renewal_margin=3600)
    with pytest.raises(ValidationError, match="not an sbatch --mem value"):
        PilotSection(memory="8 GB")


def test_memory_values_in_mb() -> None:
    assert [mem_mb(v) for v in ("8G", "512M", "4096", "", "1T")] == [8192, 512, 4096, 0, 1048576]


def test_builtin_shapes() -> None:
    assert load_site("jsc", expand=False).pilot.nodes == 1  # whole nodes where every job takes one
    ci = load_site("ci", expand=False).pilot
    assert (ci.enabled, ci.nodes, ci.cpus, ci.time_seconds) == (False, 0, 4, 1800)

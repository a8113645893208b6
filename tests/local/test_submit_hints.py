"""A refused submission names where the refused option came from in the pod's terms."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from hpkctl.jobs import InvalidAccount, InvalidPartition, ResourcesUnavailable, SubmitError, TimeLimitTooLong
from hpkctl.local.submit import submit_pod
from hpkctl.sites.schema import SiteProfile

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
       "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36", "command": ["true"]}]}}

CASES = [
    ("Invalid partition name specified", InvalidPartition,
     ["slurm-job.hpk.io/flags", "--partition=NAME", "[slurm] partition", "hpkctl sites show t"]),
    ("Invalid account or account/partition combination specified", InvalidAccount,
     ["slurm-job.hpk.io/flags", "--account=NAME", "[slurm] account"]),
    ("Requested time limit is invalid (missing or exceeds some limit)", TimeLimitTooLong,
     ["spec.activeDeadlineSeconds", "--time"]),
    ("Requested node configuration is not available", ResourcesUnavailable,
     ["resources", "--cpus-per-task", "--mem"]),
    ("Something Slurm has never said before", SubmitError, ["resources", "slurm-job.hpk.io/flags", "site profile t"]),
]


@pytest.mark.parametrize(("slurm_says", "kind", "words"), CASES)
def test_submit_error_hint_names_the_pod_field_and_the_manifest(  # type: ignore[no-untyped-def]
        fp, tmp_path: Path, slurm_says: str, kind: type[SubmitError], words: list[str]) -> None:
    profile = SiteProfile.model_validate({"name": "t", "slurm": {"bin_dir": "/fake/bin", "use_sacct": "no"},
                                          "pods": {"state_dir": str(tmp_path / "state")}})
    fp.register(["/fake/bin/sbatch", fp.any()], returncode=1,
                stderr=f"sbatch: error: Batch job submission failed: {slurm_says}\n")
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(POD))
    with pytest.raises(SubmitError) as err:
        submit_pod(profile, str(manifest), out=io.StringIO())
    assert type(err.value) is kind
    hint = err.value.hint
    assert str(manifest) in hint and f"hpkctl render -f {manifest} --site t" in hint
    for word in words:
        assert word in hint, (word, hint)


def test_hint_names_no_file_of_the_removed_pod_directory(fp, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """sbatch's own "reproduce with: sbatch ... <pod dir>/job/job.sh" would name a deleted file."""
    profile = SiteProfile.model_validate({"name": "t", "slurm": {"bin_dir": "/fake/bin", "use_sacct": "no"},
                                          "pods": {"state_dir": str(tmp_path / "state")}})
    fp.register(["/fake/bin/sbatch", fp.any()], returncode=1,
                stderr="sbatch: error: Batch job submission failed: Something Slurm has never said before\n")
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(POD))
    with pytest.raises(SubmitError) as err:
        submit_pod(profile, str(manifest), out=io.StringIO())
    assert str(tmp_path / "state" / "pods") not in str(err.value), str(err.value)
    assert not list((tmp_path / "state" / "pods").iterdir())
    assert f"hpkctl render -f {manifest} --site t" in err.value.hint and "--out DIR" in err.value.hint

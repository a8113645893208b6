"""The API stand-in models the kube-apiserver release the control-plane image pins, and the kubelet's
version strings follow it: "passes against the stand-in" must speak of the server `hpkctl start` gives.
Bumping hpkctl/controlplane/versions.py without the stand-in (or the other way round) fails here."""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate

from ci.standin.kubeapi.resources import SCHEMA_VERSION, VERSION
from hpkctl.controlplane.versions import KUBERNETES
from hpkctl.kubelet.node import KUBE_VERSION
from hpkctl.pod.probes import USER_AGENT
from tests.support.ci import REPO


def _minor(version: str) -> tuple[str, str]:
    m = re.fullmatch(r"v?(\d+)\.(\d+)\.\d+(-[\w.]+)?", version)
    assert m, f"not a release version: {version!r}"
    return m[1], m[2]


IMAGE = _minor(KUBERNETES)


def test_the_standin_reports_and_validates_as_the_images_kube_apiserver() -> None:
    assert (VERSION["major"], VERSION["minor"]) == IMAGE, (VERSION, KUBERNETES)
    assert (VERSION["emulationMajor"], VERSION["emulationMinor"]) == IMAGE
    assert _minor(VERSION["gitVersion"]) == IMAGE
    assert _minor(SCHEMA_VERSION) == IMAGE
    schemas = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{SCHEMA_VERSION}-local"
    assert (schemas / "_definitions.json").is_file(), f"kubernetes-validate has no {SCHEMA_VERSION} schemas"
    readme = (REPO / "ci" / "standin" / "kubeapi" / "README.md").read_text()
    assert f"## Known differences from kube-apiserver {'.'.join(IMAGE)}\n" in readme


def test_the_kubelet_and_its_probes_speak_the_images_version() -> None:
    assert _minor(KUBE_VERSION) == IMAGE
    assert USER_AGENT == f"kube-probe/{'.'.join(IMAGE)}"
    runtime = (REPO / "sbatch" / "runtime.sh").read_text()
    assert re.findall(r"^HPK_PROBE_AGENT=(.*)$", runtime, re.M) == [USER_AGENT]

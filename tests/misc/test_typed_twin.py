"""Property tests: hpkctl.typed gives every document the errors pydantic gives it (type, location, message,
context, input), for the pod's models and the site profile's (tests/support/pydantic_twin.py builds the
pydantic twin of each from the same annotations and rule functions). The messages users see are built from
these errors (hpkctl/pod/validation.py, hpkctl/sites/validation.py) and were written against pydantic's."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hpkctl.pod.model import ConfigMapObject, Pod, SecretObject, ServiceObject
from hpkctl.sites.schema import SiteProfile
from tests.support.pods import PODS, load_pod
from tests.support.pydantic_twin import errors_of, twin

#: Values put anywhere in a document: every JSON/YAML/TOML type, edge numbers, strings rules refuse.
ODD = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from([-1, 0, 1, 65535, 65536, 511, 512, 2**31, 2**63]),
    st.floats(allow_nan=False, allow_infinity=False, width=32), st.sampled_from([1.0, 1.5, -0.5]),
    st.sampled_from(["", "x", "A B", "/abs", "rel/x", "..", "../x", "a\0b", "a\nb", "a:b", "80", "http", "TCP",
                     "Always", "1Gi", "-1", "500m", "1e3", "a" * 64, "web", "--x", "10.0.0.1", "YWJj", "@@"]),
    st.just([]), st.just({}), st.just(["a", 1]), st.just({"a": 1}), st.just({1: "x"}), st.just([{}]),
)


def _paths(doc: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*at, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*at, i))
    return out


@st.composite
def mutated(draw: st.DrawFn, docs: list[dict[str, Any]]) -> dict[str, Any]:
    doc = copy.deepcopy(draw(st.sampled_from(docs)))
    paths = [p for p in _paths(doc) if p]
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(paths))
        parent: Any = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            if draw(st.booleans()) and isinstance(parent, dict) and draw(st.integers(0, 9)) == 0:
                del parent[path[-1]]
            else:
                parent[path[-1]] = draw(ODD)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier mutation replaced the way there
    return doc


POD_DOCS = [load_pod(path.name)[0] for path in sorted(PODS.glob("*.yaml"))]
OBJECTS = [{"kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a.txt": "x"}, "binaryData": {"b": "YWJj"}},
           {"kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}, "data": {"pw": "aHVudGVyMg=="},
            "stringData": {"k": "v"}},
           {"kind": "Service", "metadata": {"name": "web"}, "spec": {"clusterIP": "None", "ports": [
               {"port": 80, "name": "http", "protocol": "TCP"}]}}]


@settings(max_examples=400, deadline=None)
@given(mutated(POD_DOCS))
def test_pod_errors_are_pydantics(doc: dict[str, Any]) -> None:
    assert errors_of(Pod, doc) == errors_of(twin(Pod), doc)


@settings(max_examples=150, deadline=None)
@given(mutated(OBJECTS))
def test_object_errors_are_pydantics(doc: dict[str, Any]) -> None:
    cls = {"ConfigMap": ConfigMapObject, "Service": ServiceObject}.get(str(doc.get("kind")), SecretObject)
    assert errors_of(cls, doc) == errors_of(twin(cls), doc)


PROFILES = [SiteProfile(name="p").model_dump(),
            {"name": "q", "slurm": {"default_time": "02:00:00", "max_time": "1-00:00:00", "extra_directives": ["--x"]},
             "apptainer": {"network": "cni", "parent_image": "docker://p"}, "gpu": {"extended_resources": {"a": "b"}},
             "controlplane": {"service_cidr": "10.96.0.0/12,fd00::/108", "dns_upstream": ["1.1.1.1:53", "/r"]},
             "site": {"hostnames": ["login*"]}, "pilot": {"enabled": True, "nodes": 1}}]


@settings(max_examples=300, deadline=None)
@given(mutated(PROFILES))
def test_profile_errors_are_pydantics(doc: dict[str, Any]) -> None:
    assert errors_of(SiteProfile, doc) == errors_of(twin(SiteProfile), doc)

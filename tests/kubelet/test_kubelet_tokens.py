"""Projected service-account tokens: issued through TokenRequest, renewed in place (stand-in API)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpkctl.kube import Kube
from hpkctl.kubelet.objects import ApiObjects
from hpkctl.provider.tokens import refresh, refresh_after, token_files
from tests.support import kubeapi

pytestmark = pytest.mark.standin


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kubeapi.KubeApi]:
    a = kubeapi.start(tmp_path_factory.mktemp("tok") / "state")
    yield a
    a.stop()


def _claims(token: bytes) -> dict[str, object]:
    body = token.split(b".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(body + b"=" * (-len(body) % 4))))


def test_token_files_only_inside_the_volume() -> None:
    pod = {"spec": {"volumes": [
        {"name": "a", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "expirationSeconds": 600}},
                                                {"configMap": {"name": "x"}}]}},
        {"name": "b", "projected": {"sources": [{"serviceAccountToken": {"path": "../../escape"}}]}}]}}
    assert token_files(pod) == [("volumes/a/t", None, 600)]
    assert refresh_after(pod) == 480
    assert refresh_after({"spec": {}}) is None


def test_refresh_replaces_the_token_with_a_new_one_bound_to_the_pod(api: kubeapi.KubeApi, tmp_path: Path) -> None:
    code, pod = api.post("/api/v1/namespaces/default/pods", kubeapi.pod("tokpod", node="hpk"))
    assert code == 201, pod
    vol = next(v for v in pod["spec"]["volumes"] if v["name"].startswith("kube-api-access-"))
    tok = tmp_path / "volumes" / vol["name"] / "token"
    tok.parent.mkdir(parents=True)
    tok.write_bytes(b"old")
    tok.chmod(0o640)
    objects = ApiObjects(Kube(str(api.kubeconfig)), pod=pod)
    assert refresh(objects, pod, tmp_path) == 1
    new = tok.read_bytes()
    assert new != b"old" and oct(tok.stat().st_mode & 0o777) == "0o640"
    claims = _claims(new)
    assert claims["sub"] == "system:serviceaccount:default:default"
    assert objects.token_expiry is not None
    assert not [p for p in tok.parent.iterdir() if p.name.startswith(".token-")]

"""imagePullSecrets → credentials: a malformed secret is a warning, never a crash (found by mypy --strict)."""

from __future__ import annotations

import base64
import json

import pytest

from hpkctl.pod.context import Ctx
from hpkctl.pod.objects import StaticObjects
from hpkctl.pod.pullsecrets import pull_credentials
from hpkctl.sites.schema import SiteProfile


def _ctx(data: dict[str, str]) -> Ctx:
    secret = {"kind": "Secret", "metadata": {"name": "regcred"},
              "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
    pod = {"metadata": {"name": "p"}, "spec": {"imagePullSecrets": [{"name": "regcred"}]}}
    return Ctx(pod=pod, profile=SiteProfile(name="t"), objects=StaticObjects.of([secret]), pod_dir="/x", strict=True)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize("data", [
    {".dockerconfigjson": json.dumps({"auths": {"ghcr.io": {"username": "u", "password": "pw"}}})},
    {".dockerconfigjson": json.dumps({"auths": {"https://ghcr.io/v1/": {"auth": _b64("u:pw")}}})},
    {".dockercfg": json.dumps({"ghcr.io": {"auth": _b64("u:pw")}})},
])
def test_credentials_from_docker_config(data: dict[str, str]) -> None:
    ctx = _ctx(data)
    assert pull_credentials(ctx, ["ghcr.io"]) == {"ghcr.io": ("u", "pw")}
    assert ctx.warnings == []


@pytest.mark.parametrize("data", [
    {".dockercfg": "[1, 2]"},                                  # JSON, but not an object
    {".dockerconfigjson": "[]"},
    {".dockerconfigjson": json.dumps({"auths": ["ghcr.io"]})},  # auths not an object
    {".dockerconfigjson": "{not json"},
])
def test_malformed_docker_config_is_a_warning(data: dict[str, str]) -> None:
    ctx = _ctx(data)
    assert pull_credentials(ctx, ["ghcr.io"]) == {}
    assert ctx.warnings == ["spec.imagePullSecrets[0]: secret 'regcred' is not valid docker config JSON; ignored"]


def test_secret_without_docker_config_key_is_a_warning() -> None:
    ctx = _ctx({"token": "x"})
    assert pull_credentials(ctx, ["ghcr.io"]) == {}
    assert ctx.warnings == ["spec.imagePullSecrets[0]: secret 'regcred' has no .dockerconfigjson or .dockercfg key; ignored"]

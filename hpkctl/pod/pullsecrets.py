"""``imagePullSecrets`` → registry credentials for ``apptainer pull``.

Apptainer reads registry credentials from ``APPTAINER_DOCKER_USERNAME``/``_PASSWORD``. They are
written to a 0600 file in the pod directory and read only by the pull (never put in the job
script, which Slurm keeps and shows to administrators). A missing secret is a warning, as in
Kubernetes: the pull is tried anonymously.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from typing import Any

from hpkctl.pod.context import Ctx
from hpkctl.pod.env import decode

_DOCKER_HUB = {"docker.io", "index.docker.io", "registry-1.docker.io"}


def registry_host(key: str) -> str:
    """``https://index.docker.io/v1/`` → ``docker.io``; ``ghcr.io/org`` → ``ghcr.io``."""
    host = key.split("://", 1)[-1].split("/", 1)[0].lower()
    return "docker.io" if host in _DOCKER_HUB else host


def _auths(ctx: Ctx, name: str, where: str) -> dict[str, Any]:
    """The secret's ``registry key → entry`` map (entries are checked by the caller)."""
    data = ctx.objects.secret(ctx.namespace, name)
    if data is None:
        ctx.warn(f"{where}: secret {name!r} not found; images are pulled without credentials")
        return {}
    auths: Any
    try:
        if ".dockerconfigjson" in data:
            auths = json.loads(decode(data[".dockerconfigjson"])).get("auths") or {}
        elif ".dockercfg" in data:
            auths = json.loads(decode(data[".dockercfg"]))
        else:
            ctx.warn(f"{where}: secret {name!r} has no .dockerconfigjson or .dockercfg key; ignored")
            return {}
    except (ValueError, AttributeError):
        auths = None
    if not isinstance(auths, dict):
        ctx.warn(f"{where}: secret {name!r} is not valid docker config JSON; ignored")
        return {}
    return auths


def pull_credentials(ctx: Ctx, registries: Iterable[str]) -> dict[str, tuple[str, str]]:
    """Credentials per registry host for the images of the pod (first matching secret wins)."""
    wanted = set(registries)
    found: dict[str, tuple[str, str]] = {}
    for i, ref in enumerate(ctx.spec.get("imagePullSecrets") or []):
        where = f"spec.imagePullSecrets[{i}]"
        for key, entry in _auths(ctx, ref.get("name", ""), where).items():
            host = registry_host(key)
            if host not in wanted or host in found or not isinstance(entry, dict):
                continue
            user, password = entry.get("username"), entry.get("password")
            if (user is None or password is None) and entry.get("auth"):
                try:
                    user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
                except (binascii.Error, UnicodeDecodeError):
                    ctx.warn(f"{where}: the auth of {key!r} is not base64 'user:password'; ignored")
                    continue
            if user is not None and password is not None:
                found[host] = (str(user), str(password))
    return found

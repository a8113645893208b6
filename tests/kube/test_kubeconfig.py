"""hpkctl.kube.kubeconfig: what ordinary kubeconfigs hold, read without the ``kubernetes`` package and
with its semantics (``-data`` over the file, files relative to the kubeconfig, ``token`` over
``tokenFile``, contexts), checked against the package's own loader on the same files; an ``exec``
plugin handed to the package; and errors that name the file."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpkctl.errors import HpkError
from hpkctl.kube import kubeconfig
from hpkctl.kube.kubeconfig import Settings
from tests.support.ci import REPO

CA, CERT, KEY = b"-----CA-----\n", b"-----CERT-----\n", b"-----KEY-----\n"


def write(path: Path, clusters: list[dict[str, Any]], users: list[dict[str, Any]],
          contexts: list[dict[str, Any]], current: str | None) -> Path:
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "clusters": clusters, "users": users,
                           "contexts": contexts}
    if current is not None:
        doc["current-context"] = current
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def one(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    return write(path, [{"name": "c", "cluster": cluster}], [{"name": "u", "user": user}],
                 [{"name": "x", "context": {"cluster": "c", "user": "u"}}], "x")


def package(path: Path, context: str | None = None) -> tuple[Any, ...]:
    """What the kubernetes package's loader makes of the same file (host, files' contents, TLS, header)."""
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    cfg = k8s_client.Configuration()
    k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(path), context=context, client_configuration=cfg)
    bearer: Any = dict(cfg.auth_settings()).get("BearerToken") or {}
    return summary(Settings(host=cfg.host, ca_file=cfg.ssl_ca_cert, cert_file=cfg.cert_file, key_file=cfg.key_file,
                            verify_tls=bool(cfg.verify_ssl), tls_server_name=cfg.tls_server_name,
                            authorization=lambda: bearer.get("value")))


def summary(s: Settings) -> tuple[Any, ...]:
    def content(f: str | None) -> bytes | None:
        return Path(f).read_bytes() if f else None
    return (s.host, content(s.ca_file), content(s.cert_file), content(s.key_file), s.verify_tls,
            s.tls_server_name, (s.authorization() or "").strip())


@pytest.mark.parametrize("form", ["data", "files"])
def test_certificates_as_data_or_relative_files_read_as_the_package_reads_them(tmp_path: Path, form: str) -> None:
    (tmp_path / "pki").mkdir()
    for name, data in (("ca.crt", CA), ("u.crt", CERT), ("u.key", KEY)):
        (tmp_path / "pki" / name).write_bytes(data)
    if form == "data":
        cluster = {"server": "https://api:6443/", "certificate-authority-data": b64(CA)}
        user = {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)}
    else:  # relative to the kubeconfig's directory, not the current one
        cluster = {"server": "https://api:6443/", "certificate-authority": "../pki/ca.crt"}
        user = {"client-certificate": "../pki/u.crt", "client-key": str(tmp_path / "pki" / "u.key")}
    path = one(tmp_path / "conf" / "kc", cluster, user)
    got = kubeconfig.load(str(path))
    assert summary(got) == ("https://api:6443", CA, CERT, KEY, True, None, "") == package(path)
    if form == "data":  # private copies: a client key is in one
        assert stat.S_IMODE(os.stat(got.key_file or "").st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(got.key_file or "")).st_mode) == 0o700
        assert kubeconfig.load(str(path)).key_file == got.key_file, "written once per process"


def test_data_wins_over_the_file_and_token_over_token_file(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-file\n")
    path = one(tmp_path / "kc", {"server": "https://api", "certificate-authority": "missing.crt",
                                 "certificate-authority-data": b64(CA)}, {"token": "inline", "tokenFile": "token"})
    assert summary(kubeconfig.load(str(path)))[1::5] == (CA, "Bearer inline") == package(path)[1::5]
    path = one(tmp_path / "kc2", {"server": "https://api", "certificate-authority-data": b64(CA)},
               {"tokenFile": "token"})
    assert kubeconfig.load(str(path)).authorization() == "Bearer from-file"  # the package keeps the newline


def test_skip_verify_server_name_basic_auth_and_plain_http(tmp_path: Path) -> None:
    path = one(tmp_path / "kc", {"server": "https://10.0.0.1:6443", "insecure-skip-tls-verify": True,
                                 "tls-server-name": "kubernetes"}, {"username": "ann", "password": "pw:1"})
    got = kubeconfig.load(str(path))
    assert summary(got) == package(path)
    assert (got.verify_tls, got.tls_server_name, got.authorization()) == (
        False, "kubernetes", "Basic " + b64(b"ann:pw:1"))
    path = one(tmp_path / "kc2", {"server": "http://127.0.0.1:8080", "certificate-authority-data": b64(CA)},
               {"client-key-data": b64(KEY)})
    assert summary(kubeconfig.load(str(path))) == ("http://127.0.0.1:8080", None, None, None, True, None, "")


def test_the_context_picks_the_cluster_and_user(tmp_path: Path) -> None:
    path = write(tmp_path / "kc",
                 [{"name": "a", "cluster": {"server": "https://a"}}, {"name": "b", "cluster": {"server": "https://b"}}],
                 [{"name": "ua", "user": {"token": "ta"}}, {"name": "ub", "user": {"token": "tb"}}],
                 [{"name": "ca", "context": {"cluster": "a", "user": "ua"}},
                  {"name": "cb", "context": {"cluster": "b", "user": "ub"}},
                  {"name": "nouser", "context": {"cluster": "b"}}], "ca")
    for context, want in ((None, ("https://a", "Bearer ta")), ("cb", ("https://b", "Bearer tb")),
                          ("nouser", ("https://b", ""))):
        got = summary(kubeconfig.load(str(path), context))
        assert got[::6] == want == package(path, context)[::6]


@pytest.mark.parametrize(("doc", "says"), [
    (None, "No such file"),
    ("- a list\n", "not a kubeconfig"),
    ("clusters: []\ncontexts: []\nusers: []\n", "current-context"),
    ("current-context: x\ncontexts: [{name: y, context: {cluster: c}}]\n", "name x in contexts"),
    ("current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: []\n", "name c in clusters"),
    ("current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
     "clusters: [{name: c, cluster: {server: 'https://a', certificate-authority: nope.crt}}]\n", "nope.crt"),
])
def test_errors_name_the_file_and_what_is_wrong(tmp_path: Path, doc: str | None, says: str) -> None:
    path = tmp_path / "kc"
    if doc is not None:
        path.write_text(doc)
    with pytest.raises(HpkError) as e:
        kubeconfig.load(str(path))
    assert str(e.value).startswith(f"cannot load kubeconfig {path}: ") and says in str(e.value)
    assert "--kubeconfig" in (e.value.hint or "")


def test_an_exec_plugin_goes_to_the_kubernetes_package(tmp_path: Path) -> None:
    """An exec credential plugin is the package's to run (and refresh): its token is what is sent. In a
    fresh interpreter, to see that only this kubeconfig, not the ordinary one, imported the package."""
    plugin = tmp_path / "cred"
    plugin.write_text('#!/bin/sh\necho \'{"apiVersion": "client.authentication.k8s.io/v1", '
                      '"kind": "ExecCredential", "status": {"token": "from-exec"}}\'\n')
    plugin.chmod(0o755)
    plain = one(tmp_path / "plain", {"server": "https://api"}, {"token": "t"})
    execd = one(tmp_path / "exec", {"server": "https://api"},
                {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
                          "interactiveMode": "Never"}})
    code = ("import sys\nfrom hpkctl.kube import Kube\n"
            f"print(Kube({str(plain)!r}).authorization, 'kubernetes' in sys.modules)\n"
            f"print(Kube({str(execd)!r}).authorization, 'kubernetes' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["Bearer t False", "Bearer from-exec True"]


def test_relative_files_of_a_symlinked_kubeconfig_are_read_beside_the_link(tmp_path: Path) -> None:
    """kubectl and the package resolve them from the directory that names the kubeconfig, not its target's."""
    real = one(tmp_path / "real" / "config", {"server": "https://a", "certificate-authority": "ca.crt"}, {"token": "t"})
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / "ca.crt").write_bytes(CA)
    (tmp_path / "link" / "config").symlink_to(real)
    got = kubeconfig.load(str(tmp_path / "link" / "config"))
    assert summary(got) == package(tmp_path / "link" / "config")
    assert got.ca_file == str(tmp_path / "link" / "ca.crt")


@pytest.mark.parametrize(("cluster", "user", "says"), [
    ({"insecure-skip-tls-verify": "false"}, {"token": "t"}, "must be true or false"),
    ({"insecure-skip-tls-verify": True, "certificate-authority-data": b64(CA)}, {"token": "t"}, "insecure flag"),
    ({}, {"client-certificate-data": b64(CERT)}, "client-key-data or client-key must be specified"),
])
def test_what_kubectl_refuses_is_refused_not_read_as_less_secure(tmp_path: Path, cluster: dict[str, Any],
                                                                 user: dict[str, Any], says: str) -> None:
    path = one(tmp_path / "kc", {"server": "https://a", **cluster}, user)
    with pytest.raises(HpkError) as e:
        kubeconfig.load(str(path))
    assert says in str(e.value)


def test_no_proxy_holds_for_a_kubeconfig_the_package_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = tmp_path / "cred"
    plugin.write_text('#!/bin/sh\necho \'{"apiVersion": "client.authentication.k8s.io/v1", '
                      '"kind": "ExecCredential", "status": {"token": "from-exec"}}\'\n')
    plugin.chmod(0o755)
    path = one(tmp_path / "exec", {"server": "https://127.0.0.1:6443"},
               {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
                         "interactiveMode": "Never"}})
    monkeypatch.setenv("https_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    assert kubeconfig.load(str(path)).proxy is None
    monkeypatch.setenv("no_proxy", "example.org")
    assert kubeconfig.load(str(path)).proxy == "http://127.0.0.1:9"

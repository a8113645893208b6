"""What the control-plane image holds: the one place for its versions, download URLs and checksums.

``apptainer/defs/controlplane.def.j2`` is rendered from this table (``hpkctl.controlplane.image``);
nothing else names a version. Every download is verified in the image build against the checksum
pinned here, and a download without a pinned checksum is refused (the build fails before it starts,
and the rendered ``%post`` fails at that line too), so nothing enters the image unchecked.

Where each checksum comes from (recorded here so a reviewer can check it, and a maintainer knows
where to look when bumping a version):

* Kubernetes v1.36.0 server binaries: the SHA-512 of ``kubernetes-server-linux-<arch>.tar.gz`` in
  the "Server Binaries" table of ``CHANGELOG/CHANGELOG-1.36.md`` in kubernetes/kubernetes (commit
  008b3652959ca58af8be3fb5b6ecfe9ae7638282), the release's own published hashes. The changelog
  publishes tarball hashes only (no per-binary SHA-256), so the image takes kube-apiserver,
  kube-controller-manager and kubectl out of that one verified tarball.
* etcd v3.6.14: SHA-256 from etcd's release file ``SHA256SUMS`` as copied mechanically by
  kubernetes-sigs/kubespray's hash updater into ``roles/kubespray_defaults/vars/main/checksums.yml``
  (commit 46dbdd3994b32640bcd806b0097f50e8fdf1d514). Being a copy, the build also downloads etcd's
  own ``SHA256SUMS`` and requires the pinned line in it (``cross_check``), besides checking the file.
* CoreDNS 1.14.2 (kubespray's CoreDNS for Kubernetes 1.36): CoreDNS publishes one ``.sha256`` file
  per release asset (``coredns_1.14.2_linux_<arch>.tgz.sha256``, written by its release make target);
  the amd64 value pinned here is a third-party copy of it (the ``coredns`` bundle defaults of a
  bundlewrap repository), so, as for etcd, the build also downloads CoreDNS's own ``.sha256`` and
  requires it to name the pinned digest (``cross_check``). No arm64 value was found: an arm64 build
  refuses to start until one is filled in (see :func:`missing_checksums`).

Bumping a version: change it here, take the checksums from the release's own published files, run
``pytest tests/controlplane/test_controlplane_build.py --snapshot-update`` and review the diff.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: The Kubernetes release of kube-apiserver, kube-controller-manager and kubectl in the image (>= 1.36:
#: the API server passes ``exec`` WebSockets through to the kubelet).
KUBERNETES = "v1.36.0"
ETCD = "v3.6.14"
COREDNS = "1.14.2"

#: The image's base: Debian 12 "bookworm", slim variant (~30 MB compressed). Its python3 is 3.11, the
#: interpreter hpkctl is tested with (Debian 12 is also what CI runs), so the wheels of
#: ``controlplane-requirements.txt`` (cp311, glibc) fit; apt's signed archive gives security updates
#: at build time. Distroless images have no shell or package manager for ``%post`` and no Python to
#: build on; Alpine's musl cannot use the glibc wheels.
BASE_IMAGE = "debian:bookworm-slim"

#: The pod parent container's base (cni mode): Alpine 3.23, whose signed community repository has
#: Apptainer 1.4 (Debian 12 has none), plus bash and the tools ``sbatch/runtime.sh`` uses.
PARENT_BASE_IMAGE = "alpine:3.23"

#: ``uname -m`` → the architecture name in release file names.
ARCHES = {"x86_64": "amd64", "aarch64": "arm64"}

_HEX = {"sha256": 64, "sha512": 128}


@dataclass(frozen=True)
class Artifact:
    """One download of the image build: a release file, its checksum per architecture."""

    name: str  # what it is, in messages and build step markers ("kubernetes", "etcd", "coredns")
    version: str
    url: str  # with {arch} (amd64/arm64)
    algorithm: str  # "sha256" | "sha512"
    checksums: dict[str, str]  # arch → hex digest; missing or "" = not pinned: the build refuses
    source: str  # where the checksums were taken from (shown in --dry-run and %help)
    members: dict[str, str] = field(default_factory=dict)  # path in the tarball → installed as /opt/hpk/bin/NAME
    cross_check: str = ""  # upstream checksum list (with {arch}) that must contain the pinned line

    def file_url(self, arch: str) -> str:
        return self.url.format(arch=arch)

    def file_name(self, arch: str) -> str:
        return self.file_url(arch).rsplit("/", 1)[1]

    def checksum(self, arch: str) -> str:
        """The pinned hex digest for ``arch``, or "" when none is pinned."""
        value = self.checksums.get(arch, "")
        if value and not re.fullmatch(rf"[0-9a-f]{{{_HEX[self.algorithm]}}}", value):
            raise ValueError(f"{self.name} {self.version}: {self.algorithm} for {arch} is not "
                             f"{_HEX[self.algorithm]} lowercase hex digits")
        return value


ARTIFACTS: tuple[Artifact, ...] = (
    Artifact(
        name="kubernetes",
        version=KUBERNETES,
        url=f"https://dl.k8s.io/{KUBERNETES}/kubernetes-server-linux-{{arch}}.tar.gz",
        algorithm="sha512",
        checksums={
            "amd64": "1c64da92575451c2c7ff97c79b772e603995f8e76da1371a6b0746aaa27b65dc"
                     "e81c4d734cbb50f40e71486a8e08df36f14e12974f97d4d29e41f23a172a6a25",
            "arm64": "7f95e451baedd9368a2fa637afa84c9ed1b958736540ca27a379e5e292e1a10c"
                     "5d9a29539f833047574bf5d3b6f907f32dee5735acecc11aa4686f078108dcf8",
        },
        source="kubernetes/kubernetes CHANGELOG/CHANGELOG-1.36.md, v1.36.0 Server Binaries (sha512)",
        members={
            "kubernetes/server/bin/kube-apiserver": "kube-apiserver",
            "kubernetes/server/bin/kube-controller-manager": "kube-controller-manager",
            "kubernetes/server/bin/kubectl": "kubectl",
        },
    ),
    Artifact(
        name="etcd",
        version=ETCD,
        url=f"https://github.com/etcd-io/etcd/releases/download/{ETCD}/etcd-{ETCD}-linux-{{arch}}.tar.gz",
        algorithm="sha256",
        checksums={
            "amd64": "ffe840ff9295808e88cce2794a18a5ac87f12a5203c8314d0bf6aa119b41bac5",
            "arm64": "fa1b80565ee6fc2df1ae6f57a508b221f3ecc7d591c317c581cd8281b0842b3e",
        },
        source="etcd release SHA256SUMS, as copied into kubernetes-sigs/kubespray checksums.yml (46dbdd3)",
        members={
            f"etcd-{ETCD}-linux-{{arch}}/etcd": "etcd",
            f"etcd-{ETCD}-linux-{{arch}}/etcdctl": "etcdctl",
            f"etcd-{ETCD}-linux-{{arch}}/etcdutl": "etcdutl",
        },
        cross_check=f"https://github.com/etcd-io/etcd/releases/download/{ETCD}/SHA256SUMS",
    ),
    Artifact(
        name="coredns",
        version=COREDNS,
        url=f"https://github.com/coredns/coredns/releases/download/v{COREDNS}/coredns_{COREDNS}_linux_{{arch}}.tgz",
        algorithm="sha256",
        checksums={"amd64": "2f08896df9d28ea0cd2294037e6d66e82f996b504e4901b791be8a3ae042029b"},
        source=f"CoreDNS's release asset coredns_{COREDNS}_linux_amd64.tgz.sha256, as copied into a third-party "
               "bundlewrap bundle; cross-checked against CoreDNS's own file at build time (arm64: none pinned)",
        members={"coredns": "coredns"},
        cross_check=f"https://github.com/coredns/coredns/releases/download/v{COREDNS}/"
                    f"coredns_{COREDNS}_linux_{{arch}}.tgz.sha256",
    ),
)


def missing_checksums(arch: str) -> list[str]:
    """One line per download of ``arch`` without a pinned checksum: what to fill in, and where from."""
    lines = []
    for a in ARTIFACTS:
        if not a.checksum(arch):
            lines.append(f"{a.name} {a.version}: no pinned {a.algorithm} for {a.file_name(arch)}; fill in "
                         f"checksums {arch} of the {a.name} entry in hpkctl/controlplane/versions.py with the value "
                         f"the project publishes ({a.file_url(arch)}.{a.algorithm}), checked by a maintainer: "
                         "the build never trusts a checksum it downloads itself")
    return lines


__all__ = ["ARCHES", "ARTIFACTS", "Artifact", "BASE_IMAGE", "COREDNS", "ETCD", "KUBERNETES",
           "PARENT_BASE_IMAGE", "missing_checksums"]

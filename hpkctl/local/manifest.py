"""Manifests from files: pick the pod (or a workload's pod template) and the objects it uses.

A file is read as ``kubectl apply -f`` reads it: one or more YAML documents, ``List`` objects
flattened. A pod taken from a file lacks what the API server would add (uid, defaults), so
:func:`pod_from_manifest` fills those in the same way, and the translator sees one shape of pod.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
import secrets
import sys
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpkctl.errors import ManifestError
from hpkctl.pod.objects import StaticObjects
from hpkctl.pod.validation import describe, validate_object, validate_pod

#: JSON's own whitespace (RFC 8259), between the documents of a JSON stream
_JSON_SPACE = re.compile(r"[ \t\n\r]*")

_TEMPLATE_KINDS = {
    "Job": ("spec", "template"),
    "Deployment": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}


@dataclass
class Manifest:
    path: str
    pods: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (description, pod)
    objects: StaticObjects = field(default_factory=StaticObjects)
    services: list[dict[str, Any]] = field(default_factory=list)
    #: per entry of ``pods``: where it is ("m.yaml: document 2 (Job train)"), the pod's field path
    #: prefix in that document ("spec.template."), and warnings about the workload's own fields
    origins: list[tuple[str, str, list[str]]] = field(default_factory=list)
    #: per entry of ``pods``: the workload it is the template of (kind, the whole document), or None
    owners: list[tuple[str, dict[str, Any]] | None] = field(default_factory=list)

    def owner(self, pod: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """The workload (kind, document) whose template ``pod`` is; None for a Pod."""
        for (_, p), owner in zip(self.pods, self.owners):
            if p is pod:
                return owner
        return None

    def origin(self, pod: Mapping[str, Any]) -> tuple[str, str, list[str]]:
        """Where ``pod`` (one of :attr:`pods`, as :func:`select_pod` returned it) comes from."""
        for (_, p), origin in zip(self.pods, self.origins):
            if p is pod:
                return origin
        return (self.path, "", [])


def _name_of(doc: Mapping[str, Any]) -> str:
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


# k8s.io/apiserver/pkg/storage/names: SimpleNameGenerator, utilrand's alphabet (no vowels, no 0/1/3)
GENERATED_SUFFIX = 5
MAX_GENERATED_PREFIX = 63 - GENERATED_SUFFIX
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def generate_name(prefix: str, *, seed: str | None = None) -> str:
    """The name the API server makes from ``metadata.generateName``: the prefix cut to 58
    characters, then 5 random characters of its alphabet. ``seed`` (a dry run) derives them from
    the seed instead, so rendering one file twice prints the same script."""
    if seed is None:
        suffix = "".join(secrets.choice(_NAME_ALPHABET) for _ in range(GENERATED_SUFFIX))
    else:
        digest = hashlib.sha256(seed.encode()).digest()
        suffix = "".join(_NAME_ALPHABET[b % len(_NAME_ALPHABET)] for b in digest[:GENERATED_SUFFIX])
    return prefix[:MAX_GENERATED_PREFIX] + suffix


def _name_generated(doc: dict[str, Any], *, dry_run: bool) -> None:
    """``metadata.name`` from ``metadata.generateName`` when the object has no name, as at creation."""
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or meta.get("name") or not isinstance(meta.get("generateName"), str):
        return
    seed = json.dumps(doc, sort_keys=True, default=str) if dry_run else None
    meta["name"] = generate_name(meta["generateName"], seed=seed)


#: the most a manifest may hold: far above any real one (kube-apiserver takes 3 MB per request; a large
#: ``helm template`` output is a few MB), and small enough that ``-f /dev/zero`` or an endless stdin
#: ends in a clear error instead of a MemoryError (issue 20.16)
MAX_MANIFEST = 32 * 1024 * 1024


def read_manifest_text(path: str | Path) -> str:
    """The text of the manifest at ``path`` (``-``: stdin), at most ``MAX_MANIFEST`` bytes of UTF-8."""
    try:
        if str(path) == "-":
            data = sys.stdin.buffer.read(MAX_MANIFEST + 1)
        else:
            with open(path, "rb") as fh:
                data = fh.read(MAX_MANIFEST + 1)
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror or exc}", hint="check the path given to -f") from exc
    if len(data) > MAX_MANIFEST:
        raise ManifestError(f"{path}: larger than {MAX_MANIFEST // (1024 * 1024)} MiB, which no manifest is "
                            "(an endless input such as /dev/zero?)",
                            hint="give a file of Kubernetes objects (YAML or JSON), or split a larger one")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})",
                            hint="save the manifest as UTF-8") from exc


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json_space_end(text: str, i: int) -> int:
    m = _JSON_SPACE.match(text, i)
    return m.end() if m else i


def _json_documents(text: str) -> list[Any] | None:
    """The objects of a JSON manifest (one, or several one after another, as ``kubectl`` reads a stream
    that starts with ``{``); None when ``text`` is not JSON, to be read as YAML. Read by ``json``, so a
    JSON manifest never imports the YAML parser (issue 23.2): what it reads is what YAML would, except
    where kubectl's JSON decoder and YAML 1.1 disagree (``1e3`` is a number, as kubectl reads it)."""
    if not text.lstrip(" \t\r\n").startswith("{"):
        return None
    decoder = json.JSONDecoder(parse_constant=_not_json)  # NaN and Infinity: Python's, not JSON's
    docs, i = [], 0
    try:
        while (i := _json_space_end(text, i)) < len(text):
            doc, i = decoder.raw_decode(text, i)
            docs.append(doc)
    except ValueError:
        return None  # YAML's flow style ({a: 1}), or broken: the YAML parser says where
    return docs


def _yaml_documents(text: str, path: str | Path) -> list[Any]:
    """The documents of a YAML manifest; a syntax error names the file, line and column."""
    import yaml  # here, not at import: a JSON manifest (bench/run's, a generated one) never needs it

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's C parser when present: several times faster
    try:
        return list(yaml.load_all(text, Loader=loader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ManifestError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}",
                            hint="check indentation and quoting at that line") from exc


def load_manifest(path: str | Path, *, dry_run: bool = False) -> Manifest:
    """The pods, objects and services of the file at ``path`` (``-``: stdin). Objects with only
    ``metadata.generateName`` get a name as the API server would give them (``dry_run``: a name
    derived from the object's content)."""
    text = read_manifest_text(path)
    try:
        docs = [d for d in _json_documents(text) or _yaml_documents(text, path) if d is not None]
    except RecursionError as exc:
        raise ManifestError(f"{path}: nested too deeply to be a Kubernetes object") from exc
    manifest = Manifest(path=str(path))
    flat: list[tuple[str, str, Any]] = []  # (document label, field prefix, object)
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise ManifestError(f"{path}: document {i + 1} is not a Kubernetes object (a mapping)",
                                hint="each YAML document needs kind:, metadata: and spec: keys")
        kind = doc.get("kind")
        if isinstance(kind, str) and kind.endswith("List"):
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise ManifestError(f"{path}: document {i + 1}: items: must be a list")
            flat += [(f"document {i + 1}", f"items[{k}].", item) for k, item in enumerate(items)]
        else:
            flat.append((f"document {i + 1}", "", doc))
    for label, at, doc in flat:
        if not isinstance(doc, dict):
            raise ManifestError(f"{path}: {label}: {at.rstrip('.')}: not a Kubernetes object (a mapping)")
        kind = doc.get("kind")
        if isinstance(kind, str) and (kind == "Pod" or kind in _TEMPLATE_KINDS):
            _name_generated(doc, dry_run=dry_run)
        name = _name_of(doc)
        source = f"{path}: {label} ({kind} {name!r})"
        if not kind:
            raise ManifestError(f"{path}: {label}: {at}kind: missing", hint="add kind: Pod (or Job, Deployment...)")
        if not isinstance(kind, str):
            raise ManifestError(f"{path}: {label}: {at}kind: must be a string, got {describe(kind)}")
        if kind == "Pod":
            manifest.pods.append((f"Pod {name}", doc))
            manifest.origins.append((source, at, []))
            manifest.owners.append(None)
        elif kind in _TEMPLATE_KINDS:
            node: Any = doc
            for key in _TEMPLATE_KINDS[kind]:
                node = node.get(key) if isinstance(node, dict) else None
            if not isinstance(node, dict):
                raise ManifestError(f"{source}: {at}{'.'.join(_TEMPLATE_KINDS[kind])}: no pod template (a mapping)",
                                    hint=f"a {kind} needs its pod under {'.'.join(_TEMPLATE_KINDS[kind])}")
            template_at = at + "".join(f"{k}." for k in _TEMPLATE_KINDS[kind])
            manifest.pods.append((f"{kind} {name}", _pod_from_template(doc, node, kind=kind)))
            manifest.origins.append((source, template_at, workload_warnings(doc, kind=kind, at=at)))
            manifest.owners.append((kind, doc))
        elif kind in ("ConfigMap", "Secret"):
            validate_object(doc, source=source)
            manifest.objects.add(doc)
        elif kind == "Service":
            validate_object(doc, source=source)
            manifest.services.append(doc)
    return manifest


#: Workload fields hpkctl does not act on: (kind, path below the object, when to warn, why).
#: (A Job's completions, parallelism, completionMode, backoff limits and activeDeadlineSeconds and
#: the replicas of a Deployment, ReplicaSet or StatefulSet are honoured: hpkctl.local.workload.)
_WORKLOAD_FIELDS: tuple[tuple[tuple[str, ...], tuple[str, ...], Any, str], ...] = (
    (("Job", "CronJob"), ("spec", "ttlSecondsAfterFinished"), None, "finished runs stay until 'hpkctl delete'"),
    (("Job",), ("spec", "podFailurePolicy"), None, "every failed pod counts against the backoff limit"),
    (("Job",), ("spec", "successPolicy"), None, "the Job succeeds when every index has succeeded"),
    (("Job",), ("spec", "suspend"), False, "hpkctl run refuses a suspended Job (no controller would resume it)"),
    (("Job",), ("spec", "podReplacementPolicy"), None, "a failed pod runs again once it has ended"),
    (("StatefulSet",), ("spec", "podManagementPolicy"), "Parallel",
     "the pods start together as Slurm schedules them (Parallel), not one after another"),
    (("StatefulSet",), ("spec", "updateStrategy"), None, "there are no updates: delete and run again"),
    (("Deployment",), ("spec", "strategy"), None, "there are no updates: delete and run again"),
    (("CronJob",), ("spec", "jobTemplate", "spec", "podFailurePolicy"), None,
     "every failed pod counts against the backoff limit"),
    (("DaemonSet",), ("spec",), None, "one pod runs, not one per node"),
)


def refuse_suspended(manifest: Manifest, pod: Mapping[str, Any]) -> None:
    """``ManifestError`` when ``pod`` is the template of a Job with ``spec.suspend: true`` (or a
    CronJob whose jobTemplate says so): Kubernetes starts no pod of it until it is resumed, and
    without a control plane nothing could resume it, so it is not submitted."""
    owner = manifest.owner(pod)
    if owner is None or owner[0] not in ("Job", "CronJob"):
        return
    kind, doc = owner
    keys = ("spec",) if kind == "Job" else ("spec", "jobTemplate", "spec")
    node: Any = doc
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict) and node.get("suspend") is True:
        where = ".".join(keys)
        raise ManifestError(f"{manifest.origin(pod)[0]}: {where}.suspend: true: a suspended Job starts no pod until "
                            "it is resumed, and hpkctl run has no Job controller to resume it later",
                            hint=f"remove {where}.suspend (or set it to false) and run the file when the Job should "
                                 "start")


def workload_warnings(doc: Mapping[str, Any], *, kind: str, at: str = "") -> list[str]:
    """Warnings for the fields of a Job/Deployment/... that ``hpkctl run`` does not act on."""
    out = []
    for kinds, keys, harmless, why in _WORKLOAD_FIELDS:
        if kind not in kinds:
            continue
        node: Any = doc
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        if node is None or (harmless is not None and node == harmless):
            continue
        if keys == ("spec",):
            out.append(f"{kind} {_name_of(doc)!r}: runs as a single pod: {why}")
        else:
            out.append(f"{at}{'.'.join(keys)}: {describe(node)} is not honoured: {why}")
    return out


def _pod_from_template(owner: Mapping[str, Any], template: Mapping[str, Any], *, kind: str) -> dict[str, Any]:
    tmeta, tspec = template.get("metadata"), template.get("spec")
    if tmeta is not None and not isinstance(tmeta, dict):  # left as it is, for validation to name it
        return {"apiVersion": "v1", "kind": "Pod", "metadata": tmeta, "spec": tspec}
    meta = dict(tmeta or {})
    owner_meta = owner.get("metadata")
    if isinstance(owner_meta, dict):
        meta.setdefault("name", owner_meta.get("name", "pod"))
        meta.setdefault("namespace", owner_meta.get("namespace"))
    else:
        meta.setdefault("name", "pod")
    spec: Any = dict(tspec) if isinstance(tspec, dict) else tspec
    if kind in ("Job", "CronJob") and isinstance(spec, dict) and not spec.get("restartPolicy"):
        spec["restartPolicy"] = "Never"  # the API server requires Never/OnFailure for Job pods
    owner_spec = owner.get("spec")
    if kind == "StatefulSet" and isinstance(spec, dict) and isinstance(owner_spec, dict):
        # the StatefulSet controller adds a volume per claim template (hpkctl.local.workload names
        # each ordinal's claim); the template alone would fail "no volume of that name"
        volumes = [v for v in spec.get("volumes") or [] if isinstance(v, dict)]
        have = {v.get("name") for v in volumes}
        for claim in owner_spec.get("volumeClaimTemplates") or []:
            cname = (claim.get("metadata") or {}).get("name") if isinstance(claim, dict) else None
            if isinstance(cname, str) and cname not in have:
                volumes.append({"name": cname, "persistentVolumeClaim": {"claimName": f"{cname}-{meta['name']}-0"}})
        if volumes:
            spec["volumes"] = volumes
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def select_pod(manifest: Manifest, name: str | None = None) -> dict[str, Any]:
    if not manifest.pods:
        raise ManifestError(f"{manifest.path}: no Pod, Job, Deployment or other pod template found",
                            hint="the file needs a document with kind: Pod (or a workload with a pod template)")
    if name is None:
        if len(manifest.pods) > 1:
            names = ", ".join(d for d, _ in manifest.pods)
            raise ManifestError(f"{manifest.path}: holds several pods ({names})", hint="choose one with --pod NAME")
        return _validated(manifest, manifest.pods[0][1])
    for desc, pod in manifest.pods:
        if _name_of(pod) == name or desc.split(" ", 1)[1] == name:
            return _validated(manifest, pod)
    raise ManifestError(f"{manifest.path}: no pod named {name!r}",
                        hint="choose one of " + ", ".join(d for d, _ in manifest.pods))


def _validated(manifest: Manifest, pod: dict[str, Any]) -> dict[str, Any]:
    source, at, _ = manifest.origin(pod)
    validate_pod(pod, source=source, prefix=at)
    return pod


def pod_warnings(manifest: Manifest, pod: Mapping[str, Any]) -> list[str]:
    """Warnings about the fields of the workload ``pod`` came from (``Job.spec.backoffLimit``...)."""
    return list(manifest.origin(pod)[2])


def _container_defaults(c: dict[str, Any]) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    image = str(c.get("image") or "")
    last = image.rsplit("/", 1)[-1]
    if "imagePullPolicy" not in c:
        c["imagePullPolicy"] = "Always" if (":" not in last and "@" not in image) or last.endswith(":latest") \
            else "IfNotPresent"
    c.setdefault("resources", {})
    for port in c.get("ports") or []:
        port.setdefault("protocol", "TCP")


#: Namespace of the uids a dry run derives from a pod's content (uuid5).
_DRY_RUN_UIDS = uuid.UUID("5b0c1f7e-7d1e-4c55-9a59-6f1c2b1e0d42")


def with_api_defaults(pod: Mapping[str, Any], *, namespace: str | None = None, create: bool = False) -> dict[str, Any]:
    """Fill in what the API server adds when a pod is created (uid, namespace, spec defaults).

    ``create=True`` is a real creation: like the API server, it ignores the system fields a file
    may carry from ``kubectl get -o yaml`` (uid, resourceVersion, status...) and assigns a new uid,
    so two runs of one file never share a pod directory. A dry run keeps a given uid, or derives one
    from the pod's content, so rendering one file twice prints the same script.
    """
    out = copy.deepcopy(dict(pod))
    content_uid = str(uuid.uuid5(_DRY_RUN_UIDS, json.dumps(out, sort_keys=True, default=str)))
    meta = out.setdefault("metadata", {})
    if create:
        for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation",
                    "deletionTimestamp", "selfLink"):
            meta.pop(key, None)
        out.pop("status", None)
    if meta.get("namespace") is None:
        meta["namespace"] = namespace or "default"
    meta.setdefault("uid", str(uuid.uuid4()) if create else content_uid)
    meta.setdefault("creationTimestamp", dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    spec = out.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            if isinstance(c, dict):
                _container_defaults(c)
    return out


def validate_pod_shape(pod: Mapping[str, Any], *, source: str) -> None:
    """The API server's checks (:func:`hpkctl.pod.validation.validate_pod`), errors naming ``source``."""
    validate_pod(pod, source=source)

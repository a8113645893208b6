"""The stand-in's quick validity walk (ci/standin/kubeapi/fastcheck.py) against jsonschema, which it
stands before: over objects the stand-in stored and thousands of mutants of them (a field removed,
added, or replaced by a value of another type), it may call an object valid only where jsonschema
finds no error, and must call every stored (valid) object valid, or it saves nothing."""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from typing import Any

import pytest

from ci.standin.kubeapi import nodeauth, subresources
from ci.standin.kubeapi.api import Api
from ci.standin.kubeapi.resources import TYPES, ResourceType, find
from ci.standin.kubeapi.schema import _KNOWN, _known, schemas
from ci.standin.kubeapi.store import Store

pytestmark = pytest.mark.standin
VALUES: list[Any] = [None, 1, 1.5, True, "x", [], {}, [1], {"a": 1}, "Always", -3, 2**40, ["a"], [{"name": "x"}]]


class _Srv:
    def __init__(self, api: Api) -> None:
        self.api = api


def _stored() -> list[tuple[ResourceType, dict[str, Any]]]:
    """A namespace's objects, a node, a bound pod with a full status, an event: as the stand-in stores them."""
    api = Api(Store(), schemas(), ca_pem="ca", server="127.0.0.1:6443")
    api.bootstrap()
    pods, nodes, events = find("", "v1", "pods"), find("", "v1", "nodes"), find("", "v1", "events")
    assert pods and nodes and events
    nodeauth.CURRENT.set(("kubernetes-admin", ("system:masters",)))
    api.create(nodes, "", {"metadata": {"name": "hpk", "labels": {"a": "b"}}, "spec": {"taints": [
        {"key": "k", "value": "v", "effect": "NoSchedule"}]}})
    api.create(pods, "default", {"metadata": {"name": "p", "labels": {"app": "x"}}, "spec": {
        "restartPolicy": "Never", "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "c", "image": "busybox", "command": ["true"], "ports": [{"containerPort": 80}],
                        "resources": {"limits": {"cpu": "1", "memory": 1024}}, "env": [{"name": "A", "value": "1"}]}]}})
    subresources.bind(_Srv(api), "default", "p", {"target": {"name": "hpk"}})  # type: ignore[arg-type]
    api.patch(pods, "default", "p", b'{"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],'
              b' "containerStatuses": [{"name": "c", "image": "busybox", "imageID": "", "ready": true, "restartCount": 0,'
              b' "state": {"running": {"startedAt": "2026-11-27T06:00:00Z"}}}]}}',
              "application/strategic-merge-patch+json", sub="status")
    api.create(events, "default", {"metadata": {"name": "p.1"}, "involvedObject": {"kind": "Pod", "name": "p"},
                                   "reason": "Started", "message": "m", "type": "Normal", "count": 1,
                                   "firstTimestamp": "2026-11-27T06:00:00Z"})
    kinds = {t.key: t for t in TYPES if t.group != "events.k8s.io"}
    return [(kinds[key], o) for key, items in api.store.objects.items() if key in kinds for o in items.values()]


def _paths(x: Any, p: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield p
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _paths(v, (*p, k))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _paths(v, (*p, i))


def _mutant(obj: dict[str, Any], rnd: random.Random) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    path = rnd.choice([p for p in _paths(out) if p])
    parent: Any = out
    for k in path[:-1]:
        parent = parent[k]
    r = rnd.random()
    if r < 0.3 and isinstance(parent, dict):
        del parent[path[-1]]
    elif r < 0.45 and isinstance(parent, dict):
        parent[f"{path[-1]}x"] = copy.deepcopy(rnd.choice(VALUES))
    else:
        parent[path[-1]] = copy.deepcopy(rnd.choice(VALUES))
    return out


def test_fastcheck_calls_valid_only_what_jsonschema_finds_valid() -> None:
    s = schemas()
    rnd = random.Random(23)
    stored = _stored()
    assert {rt.kind for rt, _ in stored} >= {"Pod", "Node", "Event", "Namespace", "ServiceAccount", "ConfigMap"}
    said_valid = wrong = 0
    for rt, obj in stored:
        root = s.defs[s.by_gvk[(rt.group, rt.version, rt.kind)]]
        full = s._validator(rt)
        assert full is not None
        assert not list(full.iter_errors(obj)) and s._fast.valid(root, obj, frozenset()), f"{rt.kind} stored"
        for _ in range(120):
            m = _mutant(obj, rnd)
            if s._fast.valid(root, m, frozenset()):
                said_valid += 1
                wrong += bool(list(full.iter_errors(m)))
    assert wrong == 0
    assert said_valid > 100  # mutants that stay valid (a label's value changed...) take the quick path


def _retyped_or_aliased(obj: dict[str, Any], rnd: random.Random) -> dict[str, Any]:
    """A copy of ``obj`` with one scalar given Python's equal value of another JSON type (true -> 1,
    0 -> false, 1 -> 1.0), or one value replaced by another of its dicts or lists (a YAML alias)."""
    out = copy.deepcopy(obj)
    paths = [p for p in _paths(out) if p]
    path = rnd.choice(paths)
    parent: Any = out
    for k in path[:-1]:
        parent = parent[k]
    value = parent[path[-1]]
    if rnd.random() < 0.5 and isinstance(value, (bool, int, float)) and value in (0, 1):
        parent[path[-1]] = rnd.choice([x for x in (True, False, 1, 0, 1.0, 0.0) if x == value and type(x) is not type(value)])
    else:
        shared = [p for p in paths if p[:len(path)] != path and path[:len(p)] != p]
        source: Any = out
        for k in rnd.choice(shared) if shared else ():
            source = source[k]
        parent[path[-1]] = source if isinstance(source, (dict, list)) else value
    return out


def test_parts_equal_to_the_stored_ones_are_skipped_only_where_that_keeps_the_verdict() -> None:
    """What an update skips (``schema._known``: parts the same as the stored object's at the same path)
    never changes the verdict: over retyped and aliased mutants of stored objects, the quick walk and
    jsonschema with the skips find an error exactly where jsonschema without them does."""
    s = schemas()
    rnd = random.Random(30)
    skipped = errors = 0
    for rt, obj in _stored():
        root = s.defs[s.by_gvk[(rt.group, rt.version, rt.kind)]]
        full = s._validator(rt)
        assert full is not None
        for _ in range(80):
            m = _retyped_or_aliased(obj, rnd)
            known = _known(m, obj)
            skipped += bool(known)
            bad = bool(list(full.iter_errors(m)))
            errors += bad
            token = _KNOWN.set(known)
            try:
                assert bool(list(full.iter_errors(m))) == bad, (rt.kind, m)
            finally:
                _KNOWN.reset(token)
            assert not (bad and s._fast.valid(root, m, known)), (rt.kind, m)
    assert skipped > 300 and errors > 100  # both sides are exercised


def test_an_alias_that_reuses_a_changed_part_holding_an_unchanged_one_is_checked_whole() -> None:
    """A YAML update whose ``env: &e [A]`` differs from the stored ``[A, B]`` but holds ``A`` unchanged,
    reused as ``ports: *e``: ``A`` is no valid port, and the update is refused as the same body without
    the stored object is (found in review: the skip of ``A`` at its first path held at the second)."""
    import yaml

    from ci.standin.kubeapi.resources import TYPES

    s = schemas()
    rt = next(t for t in TYPES if t.kind == "Deployment")
    ctr = {"name": "c", "image": "busybox", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}
    stored = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
              "spec": {"selector": {"matchLabels": {"app": "x"}},
                       "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [ctr]}}}}
    body = ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: default}\nspec:\n"
            "  selector: {matchLabels: {app: x}}\n  template:\n    metadata: {labels: {app: x}}\n    spec:\n"
            "      containers:\n      - name: c\n        image: busybox\n"
            "        env: &e [{name: A, value: \"1\"}]\n        ports: *e\n")
    answers = []
    for old in (None, stored):
        try:
            answers.append(repr(s.validate(rt, yaml.safe_load(body), field_validation="Strict", name="d", stored=old)))
        except Exception as e:  # noqa: BLE001 - the refusal, whatever its class, is compared
            answers.append(f"{type(e).__name__}: {e}")
    assert "ports[0].value" in answers[0], answers
    assert answers[1] == answers[0]

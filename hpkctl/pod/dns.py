"""A pod's ``/etc/resolv.conf``: ``spec.dnsPolicy`` and ``spec.dnsConfig`` as the kubelet applies them
(ClusterFirst with the site's cluster DNS, the node's own for Default, only dnsConfig for None), each
list capped where the kubelet caps it (3 nameservers, 32 search domains).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hpkctl.errors import PodError
from hpkctl.pod.context import Ctx


def resolv_conf(ctx: Ctx) -> tuple[str, str]:
    """The pod's DNS mode and its resolv.conf (see :attr:`hpkctl.pod.plan.PodPlan.dns_mode`), from
    ``spec.dnsPolicy`` and ``spec.dnsConfig`` as the kubelet builds them."""
    spec = ctx.spec
    policy = spec.get("dnsPolicy") or "ClusterFirst"
    if policy == "ClusterFirst" and spec.get("hostNetwork"):
        policy = "Default"  # the kubelet's rule: a hostNetwork pod needs ClusterFirstWithHostNet for it
    cfg = spec.get("dnsConfig") or {}
    profile = ctx.profile
    if policy not in ("ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"):
        raise PodError("InvalidPod", f"spec.dnsPolicy: {policy!r} is not a DNS policy",
                       hint="use ClusterFirst, ClusterFirstWithHostNet, Default or None")
    nameservers: list[str] = []
    searches: list[str] = []
    options: list[str] = []
    if policy.startswith("ClusterFirst") and profile.pods.dns_server:
        domain = profile.pods.cluster_domain
        nameservers = [profile.pods.dns_server]
        searches = [f"{ctx.namespace}.svc.{domain}", f"svc.{domain}", domain]
        options = ["ndots:5"]
    elif policy != "None" and not cfg:
        return "host", ""
    elif policy != "None":
        if policy.startswith("ClusterFirst"):
            ctx.warn("dnsPolicy ClusterFirst: this site has no cluster DNS ([pods].dns_server); using the node's")
        return "host+custom", _dns_extra(cfg)
    nameservers += [n for n in cfg.get("nameservers") or [] if n not in nameservers]
    searches += [s for s in cfg.get("searches") or [] if s not in searches]
    for opt in cfg.get("options") or []:
        text = opt.get("name", "") + (f":{opt['value']}" if opt.get("value") not in (None, "") else "")
        options = [o for o in options if o.split(":")[0] != opt.get("name")] + [text]
    lines = [f"nameserver {n}" for n in nameservers[:3]]
    if searches:
        lines.append("search " + " ".join(searches[:32]))
    if options:
        lines.append("options " + " ".join(options))
    for line in lines:
        if "\n" in line:
            raise PodError("InvalidPod", "spec.dnsConfig: values must not contain line breaks")
    return ("cluster" if policy.startswith("ClusterFirst") else "custom"), "".join(f"{line}\n" for line in lines)


def _dns_extra(cfg: Mapping[str, Any]) -> str:
    """dnsConfig lines to add to the node's resolv.conf (policy Default or no cluster DNS)."""
    lines = [f"nameserver {n}" for n in cfg.get("nameservers") or []]
    if cfg.get("searches"):
        lines.append("search " + " ".join(cfg["searches"]))
    opts = [o.get("name", "") + (f":{o['value']}" if o.get("value") not in (None, "") else "")
            for o in cfg.get("options") or []]
    if opts:
        lines.append("options " + " ".join(opts))
    if any("\n" in line for line in lines):
        raise PodError("InvalidPod", "spec.dnsConfig: values must not contain line breaks")
    return "".join(f"{line}\n" for line in lines)


__all__ = ["resolv_conf"]

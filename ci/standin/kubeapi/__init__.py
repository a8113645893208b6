"""A strict stand-in for kube-apiserver 1.36, for tests and demos only (issue 10).

No real kube-apiserver can be installed on the project's machines, yet the kubelet and scheduler
must be proven against the semantics a real one enforces (``../shared/notes/kubelet-api.md``
§4.1). This package serves them over HTTPS on loopback: one global resourceVersion, optimistic
concurrency, watch with bookmarks and in-stream 410, field/label selectors, status subresources,
JSON/merge/strategic-merge patch driven by the kubernetes-validate schemas, graceful deletion,
pod defaulting and service-account admission, binding, TokenRequest, Table output and the
log/exec/node proxies to a kubelet. The product (``hpkctl/``) never imports it.

Modules: ``errors`` (Status objects), ``resources`` (the served types, discovery),
``schema`` (validation, SMP metadata), ``patch``, ``matching`` (selectors), ``store`` (objects, revisions,
watch history, snapshot), ``strategies`` / ``pods`` / ``admission`` (per-kind rules),
``deletion``, ``tables``, ``handlers`` / ``watch`` / ``subresources`` / ``proxy`` (HTTP),
``certs`` (CA, certificates, kubeconfigs, service-account tokens), ``main`` (command line).
"""

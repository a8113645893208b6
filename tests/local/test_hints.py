"""No message or hint of hpkctl tells a user without a control plane to run ``kubectl apply``."""

from __future__ import annotations

import ast

from tests.support.ci import REPO


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants that reach users: every one except docstrings."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_no_string_of_hpkctl_says_kubectl_apply() -> None:
    found = [f"{path.relative_to(REPO)}:{line}: {text!r}"
             for path in sorted((REPO / "hpkctl").rglob("*.py"))
             for line, text in _strings(ast.parse(path.read_text()))
             if "kubectl apply" in text]
    assert not found, "\n".join(found)


def test_service_variable_warnings_name_the_container_and_variables() -> None:
    from hpkctl.local.submit import service_variable_warnings

    pod = {"spec": {"initContainers": [{"name": "wait", "args": ["until nc -z $(KUBERNETES_SERVICE_HOST) 443"]}],
                    "containers": [{"name": "app", "command": ["sh"], "env": [
                        {"name": "API", "value": "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"},
                        {"name": "KUBERNETES_SERVICE_PORT", "value": "443"}]},
                        {"name": "plain", "command": ["true"]}]}}
    got = service_variable_warnings(pod)
    assert len(got) == 2
    assert got[0].startswith("container 'wait' uses KUBERNETES_SERVICE_HOST:")
    assert got[1].startswith("container 'app' uses KUBERNETES_SERVICE_HOST:")  # the PORT it sets itself

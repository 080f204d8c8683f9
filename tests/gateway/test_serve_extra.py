"""The ``serve`` extra holds every package the gateway imports beyond the standard library and
the core install, and dev pulls it (tests/test_install.py checks dev pulls every extra)."""

from __future__ import annotations

import ast
import sys
import tomllib

from packaging.requirements import Requirement
from tests.conftest import REPO

GATEWAY = REPO / "src" / "ctxbudget" / "gateway"


def _imported_packages() -> set[str]:
    """The top-level names the gateway's modules import (``prometheus_client`` -> its
    distribution's name, ``prometheus-client``)."""
    names: set[str] = set()
    for path in GATEWAY.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    third_party = names - set(sys.stdlib_module_names) - {"ctxbudget", "__future__"}
    return {name.replace("_", "-") for name in third_party}


def test_the_serve_extra_holds_every_package_the_gateway_imports() -> None:
    with (REPO / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    serve = {Requirement(r).name for r in project["optional-dependencies"]["serve"]}
    core = {Requirement(r).name for r in project["dependencies"]}
    imported = _imported_packages()
    assert {"starlette", "uvicorn", "httpx", "orjson", "prometheus-client"} <= imported
    assert imported - core <= serve
    assert any("serve" in r for r in project["optional-dependencies"]["dev"][:1])

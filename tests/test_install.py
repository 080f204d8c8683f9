"""The light core install: `import ctxbudget` loads no heavy package, plots are the `plot` extra,
and a missing extra is one line naming it."""

from __future__ import annotations

import tomllib

import pytest
from tests.child import CLI, one_line_error, run_python
from tests.conftest import REPO, data_file

HEAVY = ("jinja2", "matplotlib", "numpy")
"""Loaded when first needed (a Jinja template, a plot, an estimate), never by the import."""

_LOADED = "import sys, {what}; print(' '.join(m for m in {heavy!r} if m in sys.modules))"


def _loaded_after(what: str) -> set[str]:
    run = run_python(_LOADED.format(what=what, heavy=HEAVY))
    assert run.returncode == 0, run.stderr[-2000:]
    return set(run.stdout.split())


def test_import_ctxbudget_loads_no_heavy_package() -> None:
    assert _loaded_after("ctxbudget") == set()


SERVE_ONLY = ("orjson", "starlette", "uvicorn", "prometheus_client", "redis")
"""The ``serve`` (and ``redis``) extras' packages: a core install has none of them."""


def test_the_core_library_imports_nothing_from_the_serve_extra() -> None:
    # The whole public API and a budgeted step of the agent loop on the mock model: a core
    # module that imported one of these would fail on `pip install ctxbudget` (make demo did,
    # when the depth memo's orjson import sat in messages/jsondepth.py).
    code = (
        "ctxbudget; from ctxbudget import *; from ctxbudget.agent.loop import Agent; "
        "import ctxbudget.cli.main, ctxbudget.integrations._view"
    )
    run = run_python(_LOADED.format(what=code, heavy=SERVE_ONLY))
    assert run.returncode == 0, run.stderr[-2000:]
    assert set(run.stdout.split()) == set()


def test_counting_with_a_built_in_scheme_loads_no_jinja() -> None:
    code = (
        "ctxbudget; from ctxbudget import Request, Message, RequestCounter; "
        "RequestCounter('qwen3').count(Request(messages=(Message(role='user', content='hi'),)))"
    )
    assert "jinja2" not in _loaded_after(code)


def test_a_jinja_template_still_loads_it() -> None:
    # The lazy import is real: a template's count does reach Jinja.
    code = (
        "ctxbudget; from ctxbudget import Request, Message, RequestCounter; "
        "RequestCounter('qwen3.6').count(Request(messages=(Message(role='user', content='hi'),)))"
    )
    assert "jinja2" in _loaded_after(code)


BLOCK_MATPLOTLIB = "import sys; sys.modules['matplotlib'] = None; " + CLI
"""The CLI as it runs where matplotlib is not installed (None in sys.modules: ImportError)."""


@pytest.mark.parametrize(
    "args",
    [
        ("thresholds", "--window", "32768", "--plot", "{out}"),
        ("estimators", str(data_file("estimators", "markdown.txt")), "--plot", "{out}"),
        ("replay", str(next(data_file("traces").glob("*.jsonl"))), "--plot", "{out}"),
    ],
    ids=lambda args: args[0],
)
def test_a_plot_without_matplotlib_names_the_plot_extra(
    tmp_path: pytest.TempPathFactory, args: tuple[str, ...]
) -> None:
    out = str(tmp_path / "out.png")  # type: ignore[operator]
    run = run_python(BLOCK_MATPLOTLIB, *(a.format(out=out) for a in args))
    line = one_line_error(run)
    assert "ctxbudget[plot]" in line and "--plot" in line, line


def _pyproject() -> dict[str, object]:
    with (REPO / "pyproject.toml").open("rb") as f:
        project: dict[str, object] = tomllib.load(f)["project"]
    return project


def test_the_core_install_has_no_plotting_and_dev_pulls_every_extra() -> None:
    project = _pyproject()
    core = " ".join(project["dependencies"])  # type: ignore[arg-type]
    assert "matplotlib" not in core
    extras: dict[str, list[str]] = project["optional-dependencies"]  # type: ignore[assignment]
    assert any(r.startswith("matplotlib") for r in extras["plot"])
    pulled = {
        name.strip()
        for r in extras["dev"]
        if r.startswith("ctxbudget[")
        for name in r[len("ctxbudget[") : r.index("]")].split(",")
    }
    # bench (litellm, a large install) is installed by `make bench` alone.
    assert pulled == set(extras) - {"dev", "bench"}

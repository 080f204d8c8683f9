"""Test set-up: Hypothesis profiles, the fixtures under tests/data, the browser switch."""

from __future__ import annotations

import gzip
import importlib.util
import os
import shutil
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# "dev" (default) and "ci": quick; "fuzz" (make fuzz): at least 10,000 examples per target;
# "fuzz-ci" (CI's make fuzz, FUZZ_PROFILE=fuzz-ci): every fuzz target at 2,000, a fifth of the
# time (10,000 each: 43 min on the shared 2-core machine; CI has 90 min for every tier).
settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile(
    "ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "fuzz", max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.register_profile("fuzz-ci", settings.get_profile("fuzz"), max_examples=2_000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"

# Under CTXBUDGET_REQUIRE_BROWSER=1 (.ci/run sets it) a missing Chromium fails the browser tests;
# elsewhere they are skipped with this one reason.
BROWSER_PACKAGES = "chromium chromium-driver"


def load_bench(name: str) -> ModuleType:
    """bench/NAME.py as a module, for tests of the benchmarks themselves. It is registered in
    ``sys.modules`` (dataclasses look their module up there) and bench/ is on ``sys.path`` while
    it loads (the scripts import their helpers, blocks.py and collect.py, from beside them)."""
    bench = REPO / "bench"
    spec = importlib.util.spec_from_file_location(f"ctxbudget_bench_{name}", bench / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    sys.path.insert(0, str(bench))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(bench))
    return module


@pytest.fixture(scope="module")
def blocks() -> ModuleType:
    """bench/blocks.py, the benchmarks' block writer."""
    return load_bench("blocks")


def data_file(*parts: str) -> Path:
    """A file the repo carries under tests/data; a missing one fails with its path."""
    path = DATA.joinpath(*parts)
    assert path.exists(), f"test data missing: {path.relative_to(REPO)} (it ships with the repo)"
    return path


def hf_folder_at(name: str, into: Path) -> Path:
    """Unpack tests/data/hf/NAME (tokenizer.json is stored gzipped) into ``into``/NAME."""
    source = data_file("hf", name)
    target = into / name
    if not (target / "tokenizer.json").is_file():
        target.mkdir(parents=True, exist_ok=True)
        for item in source.iterdir():
            if item.name.endswith(".gz"):
                with gzip.open(item, "rb") as packed:
                    (target / item.name[:-3]).write_bytes(packed.read())
            else:
                shutil.copyfile(item, target / item.name)
    return target


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fuzz: property tests run with 10,000 examples by make fuzz")


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The real recorded sessions the repo carries (tests/data/traces, see its SOURCES.md)."""
    return data_file("traces")


@pytest.fixture(scope="session")
def templates_dir() -> Path:
    """Real chat templates (tests/data/chat_templates, see its SOURCES.md)."""
    return data_file("chat_templates")


@pytest.fixture(scope="session")
def hf_folder(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``hf_folder("qwen2.5")``: a model folder from tests/data/hf, unpacked once per session."""
    root = tmp_path_factory.mktemp("hf")
    return lambda name: hf_folder_at(name, root)


def require_browser() -> tuple[str, str]:
    """Chromium and chromedriver; skip if absent (fail under CTXBUDGET_REQUIRE_BROWSER=1)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    reason = f"headless Chromium not installed (apt-get install -y {BROWSER_PACKAGES})"
    if os.environ.get("CTXBUDGET_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason}; CTXBUDGET_REQUIRE_BROWSER=1 makes this a failure")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium through selenium, one per test module (see `require_browser`)."""
    chromium, driver_path = require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def free_port() -> int:
    """A loopback port nobody listens on now (the socket that found it is closed again)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])

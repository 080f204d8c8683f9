"""Shared test set-up: Hypothesis profiles and the path to the shared fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# "dev" (default) and "ci": quick; "fuzz" (make fuzz): at least 10,000 examples per target.
settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile(
    "ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "fuzz", max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fuzz: property tests run with 10,000 examples by make fuzz")


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """``../shared`` beside the checkout (CI lays a copy there); fails loudly if absent."""
    assert SHARED.is_dir(), f"expected the shared fixtures at {SHARED}"
    return SHARED


@pytest.fixture(scope="session")
def traces_dir(shared_dir: Path) -> Path:
    return shared_dir / "traces"


@pytest.fixture(scope="session")
def templates_dir(shared_dir: Path) -> Path:
    return shared_dir / "reference" / "chat_templates"

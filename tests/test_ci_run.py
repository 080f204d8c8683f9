""".ci/run runs the heavy tiers too: make fuzz, on a Hypothesis profile that keeps every fuzz
target at a large example count, and make bench-quick. Nothing is run here: the files are read."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]


def _commands() -> list[str]:
    """.ci/run's lines that are not comments, stripped."""
    lines = (ROOT / ".ci" / "run").read_text("utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def test_ci_runs_the_fuzz_and_bench_tiers_after_the_others() -> None:
    commands = _commands()
    makes = [c for c in commands if c.startswith("make ")]
    fuzz = [c for c in makes if c.split()[1] == "fuzz"]
    assert len(fuzz) == 1, f".ci/run runs make fuzz once: {makes}"
    assert "make bench-quick" in makes, ".ci/run runs the benchmarks on small sizes"
    assert "make bench" not in makes, "CI must not write the record (bench/*.md)"
    last_of_the_rest = max(makes.index(c) for c in makes if c not in (fuzz[0], "make bench-quick"))
    assert makes.index(fuzz[0]) > last_of_the_rest
    assert makes.index("make bench-quick") > last_of_the_rest


def test_ci_fuzz_profile_keeps_every_target_large() -> None:
    """The profile CI's make fuzz names exists and is make fuzz's but for fewer examples,
    still at least 1,000 a target (twenty times make test's 100 at least)."""
    (fuzz,) = [c for c in _commands() if c.startswith("make fuzz")]
    named = re.search(r"FUZZ_PROFILE=(\S+)", fuzz)
    assert named, f"{fuzz!r} names no FUZZ_PROFILE: it would run 10,000 each (43 min on 2 cores)"
    ci, full = settings.get_profile(named.group(1)), settings.get_profile("fuzz")
    assert 1_000 <= ci.max_examples < full.max_examples
    assert ci.deadline == full.deadline
    assert set(ci.suppress_health_check) == set(full.suppress_health_check)
    makefile = (ROOT / "Makefile").read_text("utf-8")
    recipe = makefile.split("\nfuzz:", 1)[1].split("\n\n", 1)[0]
    assert "HYPOTHESIS_PROFILE=$(FUZZ_PROFILE)" in recipe
    assert re.search(r"^FUZZ_PROFILE \?= fuzz$", makefile, re.MULTILINE)

"""Run ``ctxbudget`` in-process as a user would, capturing everything it shows."""

from __future__ import annotations

import io
import traceback
from dataclasses import dataclass

import pytest

from ctxbudget.cli.main import main


@dataclass(frozen=True, slots=True)
class Run:
    """What one command showed: exit code, stdout, stderr, and an escaped traceback (--debug)."""

    code: int
    stdout: str
    stderr: str
    traceback: str = ""

    @property
    def everything(self) -> str:
        return "\n".join((self.stdout, self.stderr, self.traceback))


def run_cli(
    args: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    stdin: str = "",
) -> Run:
    """``ctxbudget ARGS`` with ``stdin`` as piped input; --debug tracebacks are captured too."""
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    capsys.readouterr()
    code, shown = 0, ""
    try:
        main(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception:  # --debug lets the error through, as the user would see it
        code, shown = 2, traceback.format_exc()
    out, err = capsys.readouterr()
    return Run(code, out, err, shown)

"""CI runs the lint: ``.ci/run``, the CI entry point, runs scripts/lint, scripts/test (the compiled
build) and scripts/test again as pure Python (``MARCH_PURE_PYTHON=1``, a subset: docs/compiled.md),
and fails when any fails (a failed step does not skip the next).

The real ``.ci/run`` is run in a copy of the repository's layout whose scripts/lint and scripts/test
are stand-ins that record that they ran and exit with the status a test gives them: nothing is
installed, nothing else runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from march_harness import REPO_ROOT

pytestmark = pytest.mark.e2e

STAND_IN = """#!/usr/bin/env bash
echo "$(basename "$0") ran${{MARCH_PURE_PYTHON:+ as pure Python}} ${{MARCH_EXPECT_BUILD:-}}" >> "$CI_TRACE"
[ -z "${{MARCH_PURE_PYTHON:-}}" ] || exit "${{PURE_EXIT:-0}}"
exit "${{{var}:-0}}"
"""
RAN = ["lint ran ", "test ran compiled", "test ran as pure Python pure-python"]


def ci(tmp_path: Path, lint: int, tests: int, pure: int = 0) -> tuple[int, list[str]]:
    """Run the real .ci/run in a copy whose scripts/lint exits ``lint`` and scripts/test ``tests``."""
    root = tmp_path / "repo"
    (root / ".ci").mkdir(parents=True)
    (root / "scripts").mkdir()
    shutil.copy2(REPO_ROOT / ".ci" / "run", root / ".ci" / "run")
    for name, var in (("lint", "LINT_EXIT"), ("test", "TEST_EXIT")):
        path = root / "scripts" / name
        path.write_text(STAND_IN.format(var=var))
        path.chmod(0o755)
    trace = tmp_path / "trace"
    env = {k: v for k, v in os.environ.items() if k not in ("MARCH_PURE_PYTHON", "MARCH_EXPECT_BUILD")}
    env = {**env, "CI_TRACE": str(trace), "LINT_EXIT": str(lint), "TEST_EXIT": str(tests), "PURE_EXIT": str(pure)}
    done = subprocess.run(
        [str(root / ".ci" / "run")], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60
    )
    ran = trace.read_text().split("\n")[:-1] if trace.exists() else []
    return done.returncode, ran


def test_a_clean_lint_and_green_tests_pass(tmp_path: Path) -> None:
    assert ci(tmp_path, lint=0, tests=0) == (0, RAN)


def test_a_lint_failure_fails_ci_and_the_tests_still_run(tmp_path: Path) -> None:
    code, ran = ci(tmp_path, lint=1, tests=0)
    assert code != 0 and ran == RAN


def test_a_test_failure_fails_ci(tmp_path: Path) -> None:
    code, ran = ci(tmp_path, lint=0, tests=1)
    assert code != 0 and ran == RAN


def test_a_failure_of_the_pure_python_pass_fails_ci(tmp_path: Path) -> None:
    code, ran = ci(tmp_path, lint=0, tests=0, pure=1)
    assert code != 0 and ran == RAN

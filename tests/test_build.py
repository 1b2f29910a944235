"""Which build of the per-read path runs (march/build.py, setup.py, docs/compiled.md).

- ``INFO server`` says it (``march_build``), and the server's log says it once at start; under CI,
  ``MARCH_EXPECT_BUILD`` names the build the server must be on in that pass (``compiled`` for the
  whole suite, ``pure-python`` for the second pass: a build that failed silently would otherwise
  test the interpreted path twice);
- ``MARCH_PURE_PYTHON=1`` runs the ``.py`` files even where compiled modules are built;
- a source edited since the build is never shadowed by its older compiled module: the ``.py``
  files run (all of them, never a mix), and the reason is given;
- a build without any compiled module (no C compiler) runs the ``.py`` files, and so does one
  whose manifest of source hashes is missing;
- without a C compiler ``setup.py`` installs Python only, and the server runs and says so once.

The copies of the package are made in the test's directory; every server started is stopped.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from march_harness import REPO_ROOT, MarchServer, serving

from march import build

pytestmark = pytest.mark.e2e

_PROBE = (
    "import json, march.transport.connection, march.resp; from march import build; "
    "print(json.dumps([build.summary(), build.reason, march.resp.__file__, march.transport.connection.__file__]))"
)


@functools.cache
def _compiled_here() -> bool:
    """This tree has its compiled modules built from its current sources (``scripts/build``)."""
    return _probe(REPO_ROOT, pure=False)[0] == "compiled"


def _needs_compiled() -> None:
    if not _compiled_here():
        if os.environ.get("MARCH_EXPECT_BUILD"):  # CI: the build must be there
            pytest.fail("the compiled modules are not built (scripts/build)")
        pytest.skip("the compiled modules are not built here (scripts/build)")


def _probe(where: Path, pure: bool) -> list[str]:
    """Import the per-read modules in a fresh interpreter from the ``march`` package in ``where``."""
    environ = {k: v for k, v in os.environ.items() if k != build.PURE_ENV}
    if pure:
        environ[build.PURE_ENV] = "1"
    environ["PYTHONPATH"] = str(where)
    done = subprocess.run(
        [sys.executable, "-P", "-c", _PROBE], cwd=where, env=environ, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    out: list[str] = json.loads(done.stdout)
    return out


def _copy_package(to: Path, built: bool) -> Path:
    """A copy of the package (``built``: with its compiled modules and manifest) and of what builds it."""
    skip = shutil.ignore_patterns("__pycache__", *(() if built else ("*.so", build.MANIFEST)))
    shutil.copytree(REPO_ROOT / "march", to / "march", ignore=skip)
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy2(REPO_ROOT / name, to / name)
    if (REPO_ROOT / "build" / "cython").is_dir():  # Cython's C files, if current: no second translation
        shutil.copytree(REPO_ROOT / "build" / "cython", to / "build" / "cython")
    return to


def test_info_server_says_which_build_runs(march_server: MarchServer) -> None:
    with redis.Redis(port=march_server.port) as r:
        running = r.info("server")["march_build"]
    assert running == build.summary()
    expected = os.environ.get("MARCH_EXPECT_BUILD")
    if expected:  # CI's two passes: the whole suite compiled, the subset as pure Python
        assert running == expected, f"the server runs {running!r}, this pass is for {expected!r}: {build.reason}"
    ready = [line for line in march_server.log_tail(100_000).splitlines() if "ready to accept connections" in line]
    assert ready and f"build: {running}" in ready[-1], ready


def test_pure_python_is_chosen_by_the_environment() -> None:
    summary, reason, resp, conn = _probe(REPO_ROOT, pure=True)
    assert (summary, reason) == ("pure-python", f"{build.PURE_ENV} is set")
    assert resp.endswith("resp.py") and conn.endswith("connection.py")
    _needs_compiled()
    summary, reason, resp, conn = _probe(REPO_ROOT, pure=False)
    assert (summary, reason) == ("compiled", "")
    assert not resp.endswith(".py") and not conn.endswith(".py")


def test_an_edited_source_is_never_shadowed_by_its_older_compiled_module(tmp_path: Path) -> None:
    _needs_compiled()
    copy = _copy_package(tmp_path, built=True)
    assert _probe(copy, pure=False)[0] == "compiled"
    source = copy / "march" / "transport" / "timing.py"
    source.write_text(source.read_text() + "\n# edited after the build\n")
    summary, reason, resp, _ = _probe(copy, pure=False)
    assert summary == "pure-python" and "march.transport.timing" in reason and "scripts/build" in reason, reason
    assert resp.endswith("resp.py")  # all of them interpreted, never a mix


def test_no_compiled_modules_or_no_manifest_runs_the_sources(tmp_path: Path) -> None:
    bare = _copy_package(tmp_path / "bare", built=False)
    summary, reason, resp, conn = _probe(bare, pure=False)
    assert summary == "pure-python" and "no compiled modules" in reason, reason
    assert resp.endswith("resp.py") and conn.endswith("connection.py")
    _needs_compiled()
    unlisted = _copy_package(tmp_path / "unlisted", built=True)
    (unlisted / "march" / build.MANIFEST).unlink()
    summary, reason, resp, _ = _probe(unlisted, pure=False)
    assert summary == "pure-python" and build.MANIFEST in reason and resp.endswith("resp.py"), reason


class _MarchFrom(MarchServer):
    """A server run from another copy of the package (``-P``: not the one in the working directory)."""

    def __init__(self, package_root: Path, base: Path) -> None:
        super().__init__(base / "data", log_path=base / "march.log")
        self.package_root = package_root

    def command(self) -> list[str]:
        cmd = super().command()
        return [cmd[0], "-P", *cmd[1:]]

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env.pop(build.PURE_ENV, None)
        env["PYTHONPATH"] = str(self.package_root)
        return env


def test_without_a_compiler_march_is_python_and_says_so_once(tmp_path: Path) -> None:
    copy = _copy_package(tmp_path / "src", built=False)
    env = {k: v for k, v in os.environ.items() if k not in ("MARCH_NO_COMPILE", build.PURE_ENV)} | {"CC": "false"}
    done = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "compiling the per-read path failed, building Python only" in done.stderr, done.stderr
    assert not list((copy / "march").rglob("*.so")) and not (copy / "march" / build.MANIFEST).exists()
    server = _MarchFrom(copy, tmp_path)
    with serving(server), redis.Redis(port=server.port) as r:
        assert r.info("server")["march_build"] == "pure-python"
        assert r.incr("k") == 1
        log = server.log_tail(100_000)
    assert log.count("the per-read path runs as pure Python") == 1, log
    assert "no compiled modules" in log, log

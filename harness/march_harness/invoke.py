"""Commands run to their end, as a person types them: March's command line and the repository's scripts.

- `march(*args)`: ``python -m march ...`` with this Python and March from this tree, without the
  caller's ``MARCH_*`` variables; `ok` (exit 0: its stdout) and `refused` (exit 1 with a message,
  never a traceback: its stderr).
- `run_script(argv, timeout)`: ``python <argv>`` (a script of scripts/, or ``-m`` a module) from the
  repository root, its output returned once it exits 0; past ``timeout`` it gets SIGTERM (it stops
  its own servers) and ``STOP_GRACE`` seconds, then whatever is left of its process group is killed.

Nothing here is left running when a call returns or raises.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from march_harness.servers import REPO_ROOT

STOP_GRACE = 30  # seconds a timed-out script gets to stop its servers after SIGTERM
MARCH_TIMEOUT = 120  # seconds for one `march ...` command (a backup of 20,000 sequences on a loaded machine)


def march(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m march *args``: its exit code, stdout and stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARCH_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return subprocess.run(
        [sys.executable, "-m", "march", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=MARCH_TIMEOUT,
    )


def ok(*args: str, stdin: str | None = None) -> str:
    """The stdout of ``march *args``, which must exit 0."""
    done = march(*args, stdin=stdin)
    assert done.returncode == 0, done.stderr
    return done.stdout


def refused(*args: str, stdin: str | None = None) -> str:
    """The stderr of ``march *args``, which must exit 1 and say why without a traceback."""
    done = march(*args, stdin=stdin)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    return done.stderr


def run_script(args: list[str], timeout: float) -> str:
    """``python *args`` from the repository root to its end: its output (stdout and stderr), which
    must end with exit 0. On timeout SIGTERM (the script stops its servers), then kill what is left."""
    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=STOP_GRACE)
            pytest.fail(f"{args[0]} still running after {timeout}s:\n{out[-4000:]}")
    finally:  # whatever ends the wait (a timeout here or pytest-timeout's): nothing is left running
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, f"{args} exited with {proc.returncode}:\n{out[-4000:]}"
    return out

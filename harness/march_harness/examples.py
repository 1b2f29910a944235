"""The documentation's examples, as a test runs them: parsed from Markdown, run in document order,
compared with what they show.

What counts as an example (see docs/examples.md for the notation a writer uses):
- a ```console fence: each line starting with ``$ `` is a command (a trailing ``\\`` joins the next
  line), the lines up to the next command are its expected output (stdout);
- a ```pycon fence: a Python session (``>>>``/``...`` lines and their output), run with doctest.
Other fences (```sh, ```python, plain ```) show code without output and are not run.

An HTML comment on the line right before a fence, ``<!-- example: not run — <reason> -->``, skips
it (the reason is reported). Expected output may use ``<int>`` (an integer), ``<any>`` (any text
on that line) and a line ``...`` alone (any number of lines, none included); trailing blanks are
ignored.

Commands: ``redis-cli`` is run for real (with ``--no-raw``, so its output is what a terminal
shows); ``scripts/serve [flags]`` and ``scripts/cluster`` are not run as written: the runner's
``Targets`` start a fresh node (restarted on the same data dir with the flags given, e.g. a TLS
port) or three-node cluster on free ports instead and their output is not compared.
Documented ports (``PORTS``) are rewritten to the real ones in commands and back in the output,
so an example never binds a fixed port. Leading ``NAME=value`` words set the command's
environment; ``< /dev/null`` is what every command gets anyway. Also run for real:
``scripts/certs`` (the local CA of the TLS section), ``.venv/bin/python -c ...``, ``node <file>``
and ``npm install --prefix docs/clients/node`` (the Node examples; npm writes only into that
directory's ignored ``node_modules``). Anything else is an error: mark it not run.

Commands run in the page's own working directory (``Targets.workdir``: the test makes one per page
with links to the repository's top-level entries), so what an example writes (``certs/``, a
backup file) lands there and never in the checkout.

``march <subcommand>`` runs this checkout's CLI (``python -m march``) from the repository root,
stdout and stderr compared; ``march serve`` is refused (it never ends: the targets serve).
``promtool check|test ...`` (checks of the shipped Prometheus files, which read only them) runs
from the repository root too, stdout and stderr compared.

Nothing here starts a server; ``Targets`` (given by the test) does, and stops them.
"""

from __future__ import annotations

import doctest
import itertools
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from march_harness.servers import REPO_ROOT

SKIP = re.compile(r"^\s*<!--\s*example:\s*not run\s*(?:—|--|-)\s*(?P<reason>.+?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w-]*)\s*$")
RUN_LANGS = ("console", "pycon")
SINGLE_PORTS = (7379,)  # the single node's documented RESP port
SINGLE_TLS_PORT = 7380  # its TLS port, once ``scripts/serve --tls-port 7380 ...`` started it
CLUSTER_PORTS = (7381, 7382, 7383)  # scripts/cluster's three nodes, in order
CLUSTER_FORWARD_PORTS = (7481, 7482, 7483)  # their forwarding ports (config/cluster's forward_port)
COMMAND_TIMEOUT = 15.0  # seconds for one command: far above any example's, so a hang fails, not stalls
PLACEHOLDERS = {"<int>": r"-?\d+", "<any>": r".*"}
NPM_TIMEOUT = 300.0  # seconds for ``npm install`` (a cold npm cache fetches two packages' trees)
ENV_WORD = re.compile(r"^[A-Z_][A-Z0-9_]*=")


@dataclass(frozen=True)
class Step:
    """One ``$ command`` of a console example and the lines it must print."""

    line: int
    command: str
    expected: tuple[str, ...]


@dataclass(frozen=True)
class Example:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    body: str
    steps: tuple[Step, ...] = ()
    skip: str | None = None  # the reason, when marked not run

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def parse(text: str, path: Path) -> list[Example]:
    """Every fenced example of a Markdown text (run or marked not run), in document order."""
    lines = text.splitlines()
    out: list[Example] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m["lang"]
        i += 1
        body: list[str] = []
        while i < len(lines) and not FENCE.match(lines[i]):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        if lang not in RUN_LANGS:
            continue
        marker = SKIP.match(lines[start - 1]) if start > 0 else None
        steps = _steps(body, start + 2) if lang == "console" else ()
        out.append(Example(path, start + 1, lang, "\n".join(body), steps, marker["reason"] if marker else None))
    return out


def _steps(body: list[str], first_line: int) -> tuple[Step, ...]:
    steps: list[Step] = []
    command: list[str] | None = None
    line = 0
    expected: list[str] = []
    for n, text in enumerate(body, first_line):
        if command is not None and command[-1].endswith("\\"):
            command[-1] = command[-1][:-1].rstrip()
            command.append(text.strip())
        elif text.startswith("$ "):
            if command is not None:
                steps.append(Step(line, " ".join(command), tuple(expected)))
            command, line, expected = [text[2:]], n, []
        elif command is None:
            raise ValueError(f"line {n}: output before the first `$ ` command")
        else:
            expected.append(text)
    if command is not None:
        steps.append(Step(line, " ".join(command), tuple(expected)))
    return tuple(steps)


def mismatch(expected: tuple[str, ...] | list[str], actual: list[str]) -> str | None:
    """None if ``actual`` matches ``expected`` (with the notation above), else what differs."""
    want = [e.rstrip() for e in expected]
    got = [a.rstrip() for a in actual]
    while want and not want[-1]:
        want.pop()
    while got and not got[-1]:
        got.pop()
    pattern = "".join(r"(?:.*\n)*?" if w == "..." else _line_regex(w) + r"\n" for w in want)
    if re.fullmatch(pattern, "".join(g + "\n" for g in got)):
        return None
    return "expected:\n" + "\n".join(f"  | {w}" for w in want) + "\ngot:\n" + "\n".join(f"  | {g}" for g in got)


def _line_regex(line: str) -> str:
    parts = re.split("(" + "|".join(map(re.escape, PLACEHOLDERS)) + ")", line)
    return "".join(PLACEHOLDERS.get(p, re.escape(p)) for p in parts)


@dataclass
class PortMap:
    """Documented port -> real port (and back, for output that names an address)."""

    ports: dict[int, int] = field(default_factory=dict)

    def to_real(self, text: str) -> str:
        return self._swap(text, self.ports)

    def to_doc(self, text: str) -> str:
        return self._swap(text, {real: doc for doc, real in self.ports.items()})

    @staticmethod
    def _swap(text: str, table: dict[int, int]) -> str:
        if not table:
            return text
        alternatives = "|".join(str(p) for p in table)
        return re.sub(rf"(?<!\d)({alternatives})(?!\d)", lambda m: str(table[int(m[1])]), text)


class Targets:
    """What examples run against: a fresh single node (started on first use, restarted with the flags
    of a ``$ scripts/serve --flag ...`` step) and, once a ``$ scripts/cluster`` step is reached, a
    fresh three-node cluster. Given by the test, with the page's working directory."""

    def __init__(
        self,
        node: Callable[[list[str]], int],
        cluster: Callable[[], list[int]],
        workdir: Path = REPO_ROOT,
        free_port: Callable[[], int] | None = None,
    ) -> None:
        self._node, self._cluster, self.workdir = node, cluster, workdir
        self._free_port = free_port
        self._node_args: list[str] | None = None
        self.ports = PortMap()

    def single(self, args: list[str] | None = None) -> None:
        """The single node; ``args`` (documented flags) restart it with them when they differ."""
        if SINGLE_PORTS[0] in self.ports.ports and (args is None or args == self._node_args):
            return
        real = list(args or [])
        if SINGLE_TLS_PORT in {int(a) for a in real if a.isdigit()}:
            if self._free_port is None:
                raise ExampleFailed("this runner has no free ports for a TLS port")
            self.ports.ports[SINGLE_TLS_PORT] = self._free_port()
        real = [self._path(self.ports.to_real(a)) for a in real]
        self.ports.ports[SINGLE_PORTS[0]] = self._node(real)
        self._node_args = list(args or [])

    def _path(self, arg: str) -> str:
        """A flag's value that names a file of the page's working directory, made absolute."""
        return str(self.workdir / arg) if not arg.startswith("-") and (self.workdir / arg).exists() else arg

    def cluster(self) -> None:
        """The cluster: ``_cluster`` gives its nodes' ports, then their forwarding ports if they have them."""
        if CLUSTER_PORTS[0] not in self.ports.ports:
            ports = self._cluster()
            self.ports.ports.update(zip(CLUSTER_PORTS, ports[:3], strict=True))
            self.ports.ports.update(zip(CLUSTER_FORWARD_PORTS, ports[3:], strict=False))


class ExampleFailed(AssertionError):
    pass


def run_example(example: Example, targets: Targets) -> None:
    """Run one example; raises ``ExampleFailed`` saying where and what differed."""
    if example.lang == "pycon":
        _run_pycon(example, targets)
        return
    for step in example.steps:
        actual = run_command(step.command, targets)
        if actual is None:
            continue  # scripts/serve, scripts/cluster: the targets stand in; output not compared
        problem = mismatch(step.expected, actual)
        if problem:
            raise ExampleFailed(f"{example.path}:{step.line}: $ {step.command}\n{problem}")


def run_command(command: str, targets: Targets) -> list[str] | None:
    words = shlex.split(command, comments=True)
    if words[-2:] == ["<", "/dev/null"]:
        words = words[:-2]  # every command's stdin is /dev/null here
    env_words = list(itertools.takewhile(ENV_WORD.match, words))
    argv = words[len(env_words) :]
    env = dict(w.split("=", 1) for w in env_words)
    if argv in (["scripts/serve"], ["scripts/cluster"]):
        targets.cluster() if argv[0] == "scripts/cluster" else targets.single()
        return None
    if argv[:1] == ["scripts/serve"]:
        targets.single(argv[1:])
        return None
    _needs_targets(argv, env, targets)
    env = {k: targets.ports.to_real(v) for k, v in env.items()}
    real = [targets.ports.to_real(a) for a in argv]
    if argv and argv[0] == "march":
        return _run_march(command, argv[1:], targets, env)
    if argv[:1] == ["promtool"] and argv[1:2] in (["check"], ["test"]):
        return _run_in_workdir(argv, targets, env)
    if argv[:1] == ["scripts/certs"]:
        return _run_in_workdir([str(REPO_ROOT / "scripts" / "certs"), *argv[1:]], targets, env)
    if argv[:1] == [".venv/bin/python"]:
        return _run_in_workdir([sys.executable, *real[1:]], targets, env)
    if argv[:1] == ["node"] and len(argv) >= 2:
        return _run_in_workdir(["node", *real[1:]], targets, env)
    if argv == ["npm", "install", "--prefix", "docs/clients/node"]:
        return _run_in_workdir(argv, targets, env, timeout=NPM_TIMEOUT, quiet=True)
    if not argv or argv[0] != "redis-cli":
        raise ExampleFailed(f"no way to run {command!r} here: mark its fence `<!-- example: not run — why -->`")
    if not {b for a, b in itertools.pairwise(argv) if a in ("-p", "--port")}:
        real[1:1] = ["-p", str(targets.ports.ports[SINGLE_PORTS[0]])]
    real.insert(1, "--no-raw")  # the output a terminal shows: "(integer) 1", "(error) ..."
    proc = subprocess.run(
        real, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL, cwd=targets.workdir,
        env={**os.environ, **env},
    )  # fmt: skip
    return targets.ports.to_doc(proc.stdout).splitlines()


def _needs_targets(argv: list[str], env: dict[str, str], targets: Targets) -> None:
    """Start what the command talks to: a host other than loopback, or a documented port the runner
    does not know, is an error (never a fixed port). Ports are read from ``-p``/``--port``,
    ``127.0.0.1:<port>`` anywhere, and ``*_PORT`` variables."""
    command = " ".join([*(f"{k}={v}" for k, v in env.items()), *argv])
    hosts = {b for a, b in itertools.pairwise(argv) if a in ("-h", "--host", "-u")}
    if hosts - {"127.0.0.1", "localhost"}:
        raise ExampleFailed(f"{command!r}: a remote host: mark its fence `<!-- example: not run — why -->`")
    ports = {int(b) for a, b in itertools.pairwise(argv) if a in ("-p", "--port")}
    ports |= {int(p) for p in re.findall(r"(?:127\.0\.0\.1|localhost):(\d+)", command)}
    ports |= {int(v) for k, v in env.items() if k.endswith("_PORT") and v.isdigit()}
    known = {*SINGLE_PORTS, *CLUSTER_PORTS, *CLUSTER_FORWARD_PORTS}
    known |= {SINGLE_TLS_PORT} if SINGLE_TLS_PORT in targets.ports.ports else set()
    if unknown := ports - known:
        raise ExampleFailed(f"{command!r}: no target for port {sorted(unknown)} (known: {sorted(known)})")
    if ports & {*CLUSTER_PORTS, *CLUSTER_FORWARD_PORTS}:
        targets.cluster()
    if ports & {*SINGLE_PORTS, SINGLE_TLS_PORT} or (argv[:1] == ["redis-cli"] and not ports):
        targets.single()


def _run_march(command: str, args: list[str], targets: Targets, env: dict[str, str]) -> list[str]:
    """``march <subcommand>`` from this checkout (in the page's working directory, where the
    README's paths resolve); ``march serve`` never ends, so it is not an example: the targets serve."""
    if args[:1] == ["serve"] and "--help" not in args:
        raise ExampleFailed(f"{command!r} would not end: use `$ scripts/serve` or mark its fence not run")
    return _run_in_workdir([sys.executable, "-m", "march", *(targets.ports.to_real(a) for a in args)], targets, env)


def _run_in_workdir(
    argv: list[str], targets: Targets, env: dict[str, str], timeout: float = COMMAND_TIMEOUT, quiet: bool = False
) -> list[str]:
    """Run ``argv`` (no shell) in the page's working directory, without the developer's MARCH_*
    settings (but with the example's own); its stdout then stderr, as lines (``quiet``: none, and a
    failure raises)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MARCH_")}
    base["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), base.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, cwd=targets.workdir,
        env={**base, **env},
    )  # fmt: skip
    if quiet:
        if proc.returncode != 0:
            raise ExampleFailed(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return []
    return targets.ports.to_doc(proc.stdout + proc.stderr).splitlines()


def _run_pycon(example: Example, targets: Targets) -> None:
    numbers = {int(n) for n in re.findall(r"(?<!\d)\d{4}(?!\d)", example.body)}
    cluster = {*CLUSTER_PORTS, *CLUSTER_FORWARD_PORTS}
    if numbers & cluster:
        targets.cluster()
    if numbers & set(SINGLE_PORTS) or not numbers & cluster:
        targets.single()
    text = targets.ports.to_real(example.body)
    test = doctest.DocTestParser().get_doctest(text, {}, example.where, str(example.path), example.line)
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, out=report.append, clear_globs=True)
    if runner.failures:
        raise ExampleFailed(f"{example.where}: pycon example failed\n" + targets.ports.to_doc("".join(report)))


def examples_in(paths: list[Path]) -> Iterator[Example]:
    for path in paths:
        yield from parse(path.read_text(), path)

"""Every console example of the documentation, run in document order and compared with what it shows.

One test per Markdown file (README.md, clients/python/README.md, docs/*.md): its examples run in
order against a fresh single node (a ``MarchServer``), and those of a cluster section (from
``$ scripts/cluster`` on) against a fresh three-node cluster on a real etcd, with the leadership
groups of config/cluster (one per node) and its forwarding ports, as ``scripts/cluster`` starts it. The notation, the
skip marker and what is run are in ``march_harness.examples`` and docs/examples.md. Then the runner's
own tests: it must fail on a wrong expected output, or it checks nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from march_harness import REPO_ROOT as ROOT
from march_harness import MarchServer
from march_harness.bench import readme as bench_readme
from march_harness.clients import recommended
from march_harness.cluster import MarchCluster
from march_harness.etcd import EtcdCluster
from march_harness.examples import (
    Example,
    ExampleFailed,
    Targets,
    examples_in,
    mismatch,
    parse,
    run_example,
)
from march_harness.ports import free_port

pytestmark = pytest.mark.e2e

DOCS = [
    ROOT / "README.md",
    ROOT / "clients/python/README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "docs/clients/README.md",
]


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _workdir(tmp_path: Path) -> Path:
    """The page's working directory: links to the repository's top-level entries, so the README's
    relative paths resolve, and whatever an example writes (certs/, a backup) stays out of the checkout."""
    work = tmp_path / "work"
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in (".git", "data", "certs") and not entry.name.startswith(".venv"):
            (work / entry.name).symlink_to(entry)
    return work


@pytest.fixture
def targets(
    tmp_path: Path, march_factory: Callable[..., MarchServer], request: pytest.FixtureRequest
) -> Iterator[Targets]:
    started: list[EtcdCluster | MarchCluster] = []
    single: list[MarchServer] = []

    def node(args: list[str]) -> int:
        """The page's single node, restarted on the same data dir when the page starts it with flags."""
        if single:
            single[-1].stop()
        single.append(march_factory(data_dir=tmp_path / "single", extra_args=args))
        return single[-1].port

    def cluster() -> list[int]:
        etcd = EtcdCluster(tmp_path / "etcd", size=1, binary=request.getfixturevalue("etcd_bin"))
        started.append(etcd)
        etcd.start()
        # The cluster scripts/cluster starts (config/cluster/node1.toml's groups and forwarding ports),
        # as the README shows it.
        readme = recommended()
        nodes = MarchCluster(tmp_path / "cluster", etcd.endpoints, groups=readme.groups, forward=readme.forward)
        started.append(nodes)
        nodes.start()
        nodes.wait_settled()
        return [n.port for n in nodes.nodes] + [n.forward_port for n in nodes.nodes if n.forward_port]

    try:
        yield Targets(node, cluster, _workdir(tmp_path), free_port)
    finally:
        for thing in reversed(started):
            thing.stop()


@pytest.mark.parametrize("path", DOCS, ids=_name)
def test_examples_run_as_shown(path: Path, targets: Targets) -> None:
    examples = parse(path.read_text(), path)
    ran = [e for e in examples if e.skip is None]
    for example in ran:
        run_example(example, targets)
    skipped = [f"{e.where}: {e.skip}" for e in examples if e.skip is not None]
    print(f"{_name(path)}: {len(ran)} examples run, {len(skipped)} not run", *skipped, sep="\n  ")


def test_every_example_is_runnable_or_says_why() -> None:
    """Each example either parses into steps the runner knows, or carries the marker with a reason."""
    for example in examples_in(DOCS):
        if example.skip is not None:
            assert example.skip.strip(), f"{example.where}: the not-run marker needs a reason"
        elif example.lang == "console":
            assert example.steps, f"{example.where}: a console example without a `$ ` command"


def test_quoted_figures_carry_known_bench_keys(tmp_path: Path) -> None:
    """scripts/bench --check-readme re-measures these; a typo in a key would leave a figure unchecked."""
    quoted = bench_readme.quoted_figures(ROOT)
    every = set(bench_readme.KEYS) | set(bench_readme.CLUSTER_KEYS)
    assert {q.key for q in quoted} == every, "every bench key is quoted somewhere, and only those"
    (tmp_path / "README.md").write_text("fast <!-- bench: prefetch.nxt 10 -->\n")
    with pytest.raises(ValueError, match=r"unknown bench key 'prefetch\.nxt'"):
        bench_readme.quoted_figures(tmp_path, ("README.md",))
    lines = bench_readme.report(quoted[:1], {quoted[0].key: quoted[0].value * 2})
    assert lines[1].split()[3] == "2.00"


# --- the runner itself ---------------------------------------------------------------------------------

BROKEN = """\
Text.

```console
$ redis-cli -p 7379 INCR doc:broken
(integer) 1
$ redis-cli -p 7379 INCR doc:broken
(integer) 3
```
"""

FINE = """\
<!-- example: not run — needs a remote host -->
```console
$ ssh far-away redis-cli INCR x
(integer) 1
```

```console
$ redis-cli -p 7379 INCRBY doc:fine 5
(integer) <int>
$ redis-cli -p 7379 SEQ.LIST
...
1) "doc:fine"
$ redis-cli -p 7379 GET doc:fine   # a comment is not an argument
"5"
```

```pycon
>>> import redis
>>> redis.Redis(port=7379).incr("doc:fine")
6
```

```console
$ march --version
march <any>
```
"""


def test_the_runner_fails_on_a_wrong_expected_output(targets: Targets, tmp_path: Path) -> None:
    (example,) = parse(BROKEN, tmp_path / "broken.md")
    with pytest.raises(ExampleFailed, match=r"broken.md:6: \$ redis-cli -p 7379 INCR doc:broken") as failed:
        run_example(example, targets)
    assert "(integer) 3" in str(failed.value) and "(integer) 2" in str(failed.value)


def test_the_runner_fails_on_a_wrong_pycon_output(targets: Targets, tmp_path: Path) -> None:
    (example,) = parse(
        '```pycon\n>>> import redis\n>>> redis.Redis(port=7379).incr("doc:py")\n2\n```\n', tmp_path / "p.md"
    )
    with pytest.raises(ExampleFailed, match="pycon example failed"):
        run_example(example, targets)


def test_the_runner_passes_the_notation_and_honours_the_marker(targets: Targets, tmp_path: Path) -> None:
    examples = parse(FINE, tmp_path / "fine.md")
    assert [e.skip for e in examples] == ["needs a remote host", None, None, None]
    for example in examples[1:]:
        run_example(example, targets)


def test_a_command_it_cannot_run_must_be_marked(targets: Targets, tmp_path: Path) -> None:
    (example,) = parse("```console\n$ docker compose up -d\n```\n", tmp_path / "d.md")
    with pytest.raises(ExampleFailed, match="mark its fence"):
        run_example(example, targets)
    (example,) = parse("```console\n$ redis-cli -p 6379 PING\nPONG\n```\n", tmp_path / "p.md")
    with pytest.raises(ExampleFailed, match="no target for port"):  # never a fixed port
        run_example(example, targets)


def test_mismatch_notation() -> None:
    assert mismatch(["(integer) <int>"], ["(integer) 2126079029667721216"]) is None
    assert mismatch(["(integer) <int>"], ["(integer) x"]) is not None
    assert mismatch(["a", "...", "z"], ["a", "z"]) is None
    assert mismatch(["a", "...", "z"], ["a", "b", "c", "z"]) is None
    assert mismatch(["a", "...", "z"], ["a", "b"]) is not None
    assert mismatch(["<any> ok"], ["it is ok  "]) is None
    assert mismatch(["1) (a)"], ["1) (a)", ""]) is None  # trailing blank lines do not count
    assert mismatch(["x"], ["x", "y"]) is not None


def test_ports_are_rewritten_both_ways() -> None:
    t = Targets(lambda args: 40001, lambda: [40002, 40003, 40004])
    t.single()
    t.cluster()
    assert t.ports.to_real("redis-cli -p 7379; -p 7383; 73790") == "redis-cli -p 40001; -p 40004; 73790"
    assert t.ports.to_doc("MOVED 105 127.0.0.1:40003") == "MOVED 105 127.0.0.1:7382"


def test_examples_parse_in_document_order(tmp_path: Path) -> None:
    text = "```console\n$ a \\\n  b\nout\n$ c\n```\n```sh\n$ d\n```\n```pycon\n>>> 1\n1\n```\n"
    console, pycon = parse(text, tmp_path / "x.md")
    assert isinstance(console, Example) and [(s.line, s.command, s.expected) for s in console.steps] == [
        (2, "a b", ("out",)),
        (5, "c", ()),
    ]
    assert pycon.lang == "pycon" and pycon.line == 10

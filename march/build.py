"""Which build of March's per-read path runs: the compiled modules, or the same modules as Python.

The modules in ``COMPILED`` are plain Python files that the build (``setup.py``, Cython) also
compiles into extension modules beside them; both are one source and one behaviour. ``install()``
(called by ``march/__init__.py``, before any of them is imported) puts a finder first on
``sys.meta_path`` that loads, for each of them:

- the extension module, when every one of ``COMPILED`` has one built from the ``.py`` now beside
  it (the build writes each source's SHA-256 into ``MANIFEST``), and ``MARCH_PURE_PYTHON`` is not
  set;
- else the ``.py`` itself, for all of them (a compiled module may rely on another's compiled
  types: never a mix), and ``reason`` says why: not built (no compiler, or a build without
  Cython), a source edited since the build (``scripts/build`` compiles it again), or
  ``MARCH_PURE_PYTHON=1`` (how the suite runs the interpreted path).

So an edited source is never shadowed by an older compiled copy, and a machine without a compiler
runs the same code interpreted. ``summary()`` is what the log (once, at start) and ``INFO server``
(``march_build``) say.

This module imports nothing of March (it runs first) and never compiles anything itself: building
is ``setup.py``'s job.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

# The per-read path (issue 27): parse, the request loop, flow control, the accounting (and the
# command counters it bumps), the INCR handler, its generator and its term's lease check, and the
# client's state the request loop reads and writes (``march.client``). setup.py
# compiles exactly these; nothing else may import their compiled types.
COMPILED: tuple[str, ...] = (
    "march.resp",
    "march.transport.flow",
    "march.transport.timing",
    "march.transport.connection",
    "march.generators.bound",
    "march.generators.sequence",
    "march.stats.counters",
    "march.keyspace.serving",
    "march.commands.sequences",
    "march.client",
)
MANIFEST = "_compiled.json"  # beside this file: {"module": "sha256 of the source it was built from"}
PURE_ENV = "MARCH_PURE_PYTHON"  # set (to anything but "" or "0"): run the .py files even if compiled

_ROOT = Path(__file__).resolve().parent.parent  # the directory holding the march package

compiled = False  # the extension modules are in use
reason = "not decided yet"  # why not (when ``compiled`` is False)
_choice: dict[str, Path] = {}  # module -> the file it is loaded from


def source_of(module: str) -> Path:
    return _ROOT.joinpath(*module.split(".")).with_suffix(".py")


def digest(module: str) -> str:
    """SHA-256 of what ``module`` is compiled from: its ``.py`` and the ``.pxd`` beside it (its C types)."""
    source = source_of(module)
    declarations = source.with_suffix(".pxd")
    data = source.read_bytes() + (declarations.read_bytes() if declarations.exists() else b"")
    return hashlib.sha256(data).hexdigest()


def fingerprint() -> str:
    """One digest of every compiled module's sources and of this list (``scripts/build`` compiles
    again when it changes)."""
    return hashlib.sha256(" ".join(digest(m) for m in COMPILED).encode() + Path(__file__).read_bytes()).hexdigest()


def _extension_of(module: str) -> Path | None:
    base = _ROOT.joinpath(*module.split("."))
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = base.with_name(base.name + suffix)
        if path.exists():
            return path
    return None


def _decide() -> tuple[bool, str, dict[str, Path]]:
    sources = {m: source_of(m) for m in COMPILED}
    if chosen_pure():
        return False, f"{PURE_ENV} is set", sources
    extensions = {m: _extension_of(m) for m in COMPILED}
    missing = [m for m, p in extensions.items() if p is None]
    if len(missing) == len(COMPILED):
        return False, "no compiled modules (built without a C compiler or without Cython)", sources
    if missing:
        return False, "compiled modules missing: " + ", ".join(missing), sources
    try:
        built = json.loads((_ROOT / "march" / MANIFEST).read_text())
    except (OSError, ValueError):
        return False, f"compiled modules without {MANIFEST}", sources
    stale = [m for m in COMPILED if built.get(m) != digest(m)]
    if stale:
        return False, "sources changed since the build (run scripts/build): " + ", ".join(stale), sources
    return True, "", {m: p for m, p in extensions.items() if p is not None}


class _Finder(MetaPathFinder):
    """Loads each module of ``COMPILED`` from the file ``install`` chose (see the module docstring)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        where = _choice.get(fullname)
        return None if where is None else importlib.util.spec_from_file_location(fullname, where)


def install() -> None:
    """Decide the build once (at ``import march``) and load ``COMPILED`` accordingly."""
    global compiled, reason
    if _choice:
        return
    compiled, reason, choice = _decide()
    _choice.update(choice)
    sys.meta_path.insert(0, _Finder())


def chosen_pure() -> bool:
    """Pure Python on purpose (``MARCH_PURE_PYTHON``), not for want of a build."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def summary() -> str:
    """``compiled`` or ``pure-python``: ``INFO server``'s ``march_build``."""
    return "compiled" if compiled else "pure-python"

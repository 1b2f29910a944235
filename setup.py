"""Build March's compiled per-read path (``march.build.COMPILED``) with Cython, when it can.

pyproject.toml holds everything else; this file only adds the extension modules. Each module of
``COMPILED`` is a plain ``.py`` file compiled as it is (Cython's pure-Python mode: no ``.pyx``, no
second source). The build is optional: with no C compiler (or no Cython) it warns and March is
installed as Python only, which ``march.build`` reports at start and in ``INFO server``. Once every
module is built it writes ``march/_compiled.json`` (each source's SHA-256), by which
``march.build`` tells a compiled module from one built from an older source.

    pip install .                        a wheel with the compiled modules (Dockerfile's build stage)
    python setup.py build_ext --inplace  compile beside the sources (scripts/build; editable installs)
    MARCH_NO_COMPILE=1 pip install .     Python only, on purpose
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
# march/build.py by its path: importing the package would import its runtime dependencies.
_spec = importlib.util.spec_from_file_location("_march_build", ROOT / "march" / "build.py")
assert _spec is not None and _spec.loader is not None
_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_build)
COMPILED: tuple[str, ...] = _build.COMPILED
MANIFEST: str = _build.MANIFEST

# Cython's directives for every compiled module (docs/compiled.md says why each).
DIRECTIVES = {
    "language_level": 3,
    "annotation_typing": False,  # the .pxd beside each module declares its C types, not its annotations
    "binding": True,  # functions keep their Python attributes (__doc__, signatures for inspect)
    "embedsignature": True,
}


def _sources() -> dict[str, Path]:
    return {m: Path(*m.split(".")).with_suffix(".py") for m in COMPILED}


def _extensions() -> list[Extension]:
    if os.environ.get("MARCH_NO_COMPILE", "") not in ("", "0"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("march: Cython is not installed: building Python only", file=sys.stderr)
        return []
    # -g0: no debug information (it made the modules 1-3 MB each instead of a few hundred KB)
    extensions = [Extension(m, [str(p)], extra_compile_args=["-g0"]) for m, p in _sources().items()]
    try:
        out: list[Extension] = cythonize(
            extensions, compiler_directives=DIRECTIVES, build_dir="build/cython", quiet=True, language_level=3
        )
    except Exception as exc:  # a module Cython refuses: say so, install Python only
        print(f"march: Cython refused the per-read path, building Python only: {exc}", file=sys.stderr)
        return []
    return out


class OptionalBuildExt(build_ext):
    """build_ext that never fails the install: without a compiler March is Python only."""

    def run(self) -> None:
        if not self.extensions:
            return
        try:
            super().run()
        except Exception as exc:  # no compiler (CCompilerError, PlatformError), missing headers...
            print(f"march: compiling the per-read path failed, building Python only: {exc}", file=sys.stderr)
            return
        manifest = {m: _build.digest(m) for m in COMPILED}
        text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
        targets = [ROOT / "march" / MANIFEST] if self.inplace else [Path(self.build_lib) / "march" / MANIFEST]
        editable = getattr(self, "editable_mode", False)
        if editable and not self.inplace:
            targets.append(ROOT / "march" / MANIFEST)
        for target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)

    def get_outputs(self) -> list[str]:
        outputs: list[str] = super().get_outputs()
        if self.extensions and not self.inplace:
            outputs.append(str(Path(self.build_lib) / "march" / MANIFEST))
        return outputs


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})

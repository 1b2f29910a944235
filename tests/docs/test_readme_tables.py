"""The README's generated tables match the code (command table and config options)."""

from __future__ import annotations

from march_harness import REPO_ROOT

import march.commands  # noqa: F401  (registers every command)
from march.cli import commands_table
from march.config import reference_table

README = (REPO_ROOT / "README.md").read_text()


def test_command_table_is_current() -> None:
    assert commands_table() in README, "regenerate with: python -m march commands"


def test_config_reference_is_current() -> None:
    assert reference_table() in README, "regenerate with: python -m march config-reference"


def test_readme_opens_with_the_two_commands() -> None:
    head = README.split("\n\n", 3)[:3]
    assert any("scripts/serve" in part and "scripts/test" in part for part in head)

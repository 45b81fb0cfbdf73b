"""The ``megaprov`` console script's entry point; the commands live in :mod:`megaprov.commands`."""

from __future__ import annotations

from megaprov.commands import build_parser, main

__all__ = ["build_parser", "main"]

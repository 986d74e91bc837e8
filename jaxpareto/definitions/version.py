"""The installed package's version, read from its metadata (never from the package root)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("jaxpareto")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0+source"

"""Warm starts: JAX's persistent compilation cache, on by default (README, "Warm starts").

Compiling the model's jitted programs takes most of a small sweep's first call (seconds on a
2-core CPU). JAX can keep compiled executables on disk, keyed by the program, the JAX version,
the backend and its flags, so a second process that runs the same shapes loads them instead of
compiling. Importing jaxpareto turns that cache on in a user cache folder:

- ``$JAXPARETO_CACHE_DIR`` if set; ``off`` (or ``0``, ``none``, empty) turns the cache off;
- else ``$XDG_CACHE_HOME/jaxpareto/jax``, ``~/.cache/jaxpareto/jax`` by default (off when no
  home folder can be found).

A cache folder the user's own program set (``jax.config.update("jax_compilation_cache_dir",
...)`` before importing jaxpareto) is left as it is. Programs that compile in under 0.2 s are
not stored (they are cheaper to compile than to read), unless
``$JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` sets another threshold.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import jax

ENV = "JAXPARETO_CACHE_DIR"
_OFF = ("", "0", "off", "none", "false")
# compiles shorter than this are not worth a file read (JAX's own default is 1 s, which would
# leave out most of the model's programs on a CPU)
MIN_COMPILE_TIME_S = 0.2


def default_cache_dir() -> Path | None:
    """The folder jaxpareto uses: ``$JAXPARETO_CACHE_DIR``, or the user cache folder; None when
    ``$JAXPARETO_CACHE_DIR`` turns the cache off."""
    given = os.environ.get(ENV)
    if given is not None:
        return None if given.strip().lower() in _OFF else Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = Path.home() / ".cache"
        except RuntimeError:  # no home folder to be found (a user without a passwd entry and no HOME)
            return None
    return Path(base) / "jaxpareto" / "jax"


def enable_compilation_cache() -> Path | None:
    """Turn on JAX's persistent compilation cache in `default_cache_dir` (called on import).

    Returns:
        The folder in use (the user's own where one was set already), or None when off.

    A folder that cannot be created leaves the cache off with a warning saying why; nothing else
    changes.
    """
    own = jax.config.jax_compilation_cache_dir
    if own:
        return Path(own)
    folder = default_cache_dir()
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        warnings.warn(f"jaxpareto: compilation cache off: cannot create {folder} ({error}); set {ENV} to a "
                      f"writable folder, or to 'off'", stacklevel=2)
        return None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:  # the user's own threshold stays
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_TIME_S)
    return folder


def compilation_cache_dir() -> Path | None:
    """The persistent compilation cache folder in use, or None when the cache is off."""
    folder = jax.config.jax_compilation_cache_dir
    return Path(folder) if folder else None

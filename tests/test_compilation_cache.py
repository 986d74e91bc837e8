"""Warm starts: the persistent compilation cache folder is created by one process and read by the
next (jaxpareto.definitions.compilation_cache)."""

import json
import os
import subprocess
import sys

# one small sweep; prints the cache folder in use and the compiled programs read from it
SCRIPT = """
import json, jax.monitoring
hits = []
jax.monitoring.register_event_listener(lambda name, **kw: hits.append(name) if name.endswith("cache_hits") else None)
import jaxpareto as jp
jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=[1, 2], concurrency=[1, 8, 64])
print(json.dumps({"folder": str(jp.compilation_cache_dir()), "hits": len(hits)}))
"""


def _run(env_value: str) -> dict:
    env = {**os.environ, "JAXPARETO_CACHE_DIR": env_value}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_cache_folder_is_created_and_reused(tmp_path):
    folder = tmp_path / "nested" / "cache"
    first = _run(str(folder))
    assert first == {"folder": str(folder), "hits": 0} and folder.is_dir()
    written = sorted(p.name for p in folder.iterdir())
    assert written  # the sweep's programs were stored
    second = _run(str(folder))
    assert second["hits"] >= 1  # a second process loads them instead of compiling
    assert set(written) <= {p.name for p in folder.iterdir()}  # and keeps them


def test_cache_can_be_turned_off(tmp_path):
    assert _run("off") == {"folder": "None", "hits": 0}

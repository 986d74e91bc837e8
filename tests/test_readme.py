"""The README's Python runs as written: every ```python block executes, in order, in one namespace
(in a scratch folder), and a ``# (...)`` comment after an expression is that expression's value
(``...`` matching anything, as in doctest). Blocks with placeholders (``...`` arguments,
``path/to/``) are compiled only."""

import doctest
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def _placeholder(block: str) -> bool:
    return "path/to/" in block or re.search(r"=\.\.\.[,)]", block) is not None


def _expected_values(block: str) -> list[tuple[str, str]]:
    """(expression, shown value) for each ``# (...)`` line right after an expression line."""
    lines = block.splitlines()
    return [(lines[i - 1].split("#")[0].strip(), line.strip()[2:]) for i, line in enumerate(lines)
            if i and line.strip().startswith("# (")]


def test_there_are_blocks_to_run():
    assert len(BLOCKS) >= 6 and sum(not _placeholder(b) for b in BLOCKS) >= 5


def test_readme_python_runs_and_shows_its_values(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    checker = doctest.OutputChecker()
    for number, block in enumerate(BLOCKS, 1):
        code = compile(block, f"README.md python block {number}", "exec")
        if _placeholder(block):
            continue
        exec(code, namespace)  # noqa: S102 - the README's own code
        for expression, shown in _expected_values(block):
            got = repr(eval(expression, namespace))  # noqa: S307
            assert checker.check_output(shown + "\n", got + "\n", doctest.ELLIPSIS), \
                f"block {number}: {expression} is {got}, the README shows {shown}"


@pytest.mark.parametrize("block", [b for b in BLOCKS if _placeholder(b)])
def test_placeholder_blocks_compile(block):
    compile(block, "README.md", "exec")

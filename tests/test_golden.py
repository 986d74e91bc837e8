"""The restructured package computes exactly what it did before: every variable, coordinate and
stable attribute of the recorded cases, and the printed output of the recorded commands, bit for
bit (checksums recorded by ``scripts/golden_checksums.py --write`` before the restructuring)."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("golden_checksums", ROOT / "scripts" / "golden_checksums.py")
golden = importlib.util.module_from_spec(spec)
spec.loader.exec_module(golden)
WANT = json.loads(golden.GOLDEN.read_text())


@pytest.mark.parametrize("case", sorted(WANT))
def test_outputs_bit_identical_to_recorded(case, monkeypatch):
    monkeypatch.chdir(ROOT)  # the CLI runs name spec files relative to the repository
    got = golden.cases()[case]()
    assert sorted(got) == sorted(WANT[case]), "a variable, coordinate or command appeared or went missing"
    changed = [key for key in WANT[case] if got[key] != WANT[case][key]]
    assert not changed, f"{case}: changed {changed}"

"""The bad-input catalogue's size as the README and benchmarks/RESULTS.md state it is the size
benchmarks/count_catalogue.py collects now: a case added or removed without the documents following fails here."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_documents_state_the_catalogue_size_the_collector_counts():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "count_catalogue.py"), "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    assert done.returncode == 0, done.stderr[-2000:]
    table = json.loads(done.stdout)
    total = sum(sum(row.values()) for row in table.values())
    assert total > 1000  # the catalogue itself, not an empty collection
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    stated = {int(n.replace(",", "")) for n in re.findall(r"([\d,]+) (?:cases, each tagged|hostile or tired-user)", readme)}
    stated |= {int(n.replace(",", "")) for n in re.findall(r"All ([\d,]+) pass \(suite", results)}
    stated |= {int(n.replace(",", "")) for n in re.findall(r"\*\*total\*\* \|(?: \d+ \|){5} (\d+) \|", results)}
    assert stated == {total}, f"the documents state {sorted(stated)}; count_catalogue.py counts {total}"

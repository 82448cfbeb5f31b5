"""Print one of the README's quick-start commands, so CI runs exactly what the README tells a user to run.

    python3 .ci/readme_command.py main     # the first bash block under "## Quick start"
    python3 .ci/readme_command.py tests    # the second
"""
import re
import sys
from pathlib import Path

readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
blocks = [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S)]
if len(blocks) < 2:
    sys.exit("README.md: the Quick start section must hold two ```bash blocks (main job, tests)")
print(blocks[{"main": 0, "tests": 1}[sys.argv[1]]])

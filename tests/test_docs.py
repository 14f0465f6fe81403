"""The docs stay true to the code: the flags page is generated from the flag definitions
and must be current; the README stays short and opens with the two set-up commands.
(`mkdocs build --strict`, which checks every link and page, runs in scripts/check.sh.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import REPO


def test_the_flags_page_is_current():
    proc = subprocess.run(
        [sys.executable, "scripts/flags_reference.py", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_flags_page_names_every_flag_of_the_job():
    """The check above compares the page with a fresh one; this one checks the page
    itself: a generator that lost flags would not be caught by comparing with itself."""
    with open(os.path.join(REPO, "docs", "reference", "flags.md")) as f:
        page = f.read()
    code = (
        "import json; from absl import flags; import trainer.task as t; "
        "print(json.dumps([f.name for f in flags.FLAGS.get_key_flags_for_module(t)]))"
    )
    names = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    for name in json.loads(names.strip().splitlines()[-1]):
        assert f"| `--{name}` |" in page, name


def test_the_readme_is_short_and_opens_with_the_two_commands():
    with open(os.path.join(REPO, "README.md")) as f:
        lines = f.read().splitlines()
    assert len(lines) <= 200
    assert lines[2] == "```bash"
    assert lines[3].startswith("scripts/run_local.sh ") and lines[4].startswith("scripts/test.sh ")

"""Writes docs/reference/flags.md from the absl flag definitions of every entry point.

    python scripts/flags_reference.py          # rewrite the page
    python scripts/flags_reference.py --check  # exit 1 if the committed page is stale

Each entry point is imported in a process of its own (they define flags of the same
names), and its own flags are listed with their type, default and help, as absl holds
them: the page cannot say what the code does not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "reference", "flags.md")
# (the command as a user types it, the module that defines its flags, what it does)
COMMANDS = (
    ("python -m trainer.task", "trainer.task", "Trains, evaluates and exports a model."),
    (
        "python -m trainer.prepare",
        "trainer.prepare",
        "Tables (CSV, Parquet, BigQuery) to TFRecords.",
    ),
    (
        "python -m trainer.serve",
        "trainer.serve",
        "Serves an export over HTTP, as Vertex AI calls it.",
    ),
    ("python -m trainer.sample_data", "trainer.sample_data", "Writes the synthetic sample data."),
    ("trainer-submit", "trainer.vertex.submit_command", "Submits the trainer to Vertex AI."),
    (
        "trainer-deploy",
        "trainer.vertex.deploy_command",
        "Registers and serves an export on Vertex AI.",
    ),
    (
        "trainer-pipeline",
        "trainer.vertex.pipeline_command",
        "Builds, runs here or submits the Vertex AI pipeline (the `pipelines` extra).",
    ),
)
_DUMP = """
import importlib, json, sys
from absl import flags
module = importlib.import_module(sys.argv[1])
rows = []
for flag in flags.FLAGS.get_key_flags_for_module(module):
    values = getattr(flag.parser, "enum_values", None)
    rows.append({"name": flag.name, "type": flag.flag_type(), "default": flag.default,
                 "help": flag.help, "values": list(values) if values else None})
print(json.dumps(rows, default=repr))
"""


def flags_of(module: str) -> list[dict]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": ROOT}
    out = subprocess.run(
        [sys.executable, "-c", _DUMP, module],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=True,
    ).stdout
    return sorted(json.loads(out.strip().splitlines()[-1]), key=lambda r: r["name"])


def _cell(text: str) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text.replace("<", "&lt;").replace(">", "&gt;")


def page() -> str:
    lines = [
        "# Flags",
        "",
        "Generated from the flag definitions by `python scripts/flags_reference.py`; "
        "`tests/test_docs.py` fails when this page is stale. Defaults shown as `None` "
        "are decided at run time, as each help says.",
        "",
    ]
    for command, module, what in COMMANDS:
        lines += [
            f"## `{command}`",
            "",
            what,
            "",
            "| flag | type | default | meaning |",
            "| --- | --- | --- | --- |",
        ]
        for row in flags_of(module):
            kind = row["type"] + (f": {', '.join(row['values'])}" if row["values"] else "")
            default = "" if row["default"] is None else f"`{_cell(row['default'])}`"
            lines.append(
                f"| `--{row['name']}` | {_cell(kind)} | {default} | {_cell(row['help'])} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    text = page()
    if "--check" in argv:
        with open(PAGE) as f:
            if f.read() != text:
                print(f"{PAGE} is stale: run python scripts/flags_reference.py", file=sys.stderr)
                return 1
        return 0
    os.makedirs(os.path.dirname(PAGE), exist_ok=True)
    with open(PAGE, "w") as f:
        f.write(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

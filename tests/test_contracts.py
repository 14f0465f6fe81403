"""Each name the outside world reads is spelled once, in trainer/base/contracts.py: no
other string of the package's code, scripts or benchmarks holds a model_dir file name,
a signature name, a serving route, an evaluation schema URI or the staged-package
variable (docstrings and comments may name them)."""

from __future__ import annotations

import ast
import pathlib
import sys

import pytest

from trainer.base import contracts

from conftest import REPO as REPO_DIR

REPO = pathlib.Path(REPO_DIR)
CODE = ("trainer", "scripts", "benchmarks")
# Names unlikely to mean anything else: found inside any string, f-strings included.
FILES = [
    contracts.SAVED_MODEL,
    contracts.SCHEMA_FILE,
    contracts.CONFIG_FILE,
    contracts.PLAN_FILE,
    contracts.METRICS_FILE,
    contracts.EVALUATION_FILE,
    contracts.HISTORY_FILE,
    contracts.IMPORTANCE_FILE,
    contracts.PROFILE_FILE,
    contracts.REPORT_FILE,
    contracts.PREPARE_FILE,
    contracts.EVALUATION_SCHEMAS.rstrip("/"),
    contracts.PACKAGE_ENV,
]
# Short words: only a whole string counts.
WORDS = [
    contracts.SERVING_DEFAULT,
    contracts.PREDICT,
    contracts.HEALTH_ROUTE,
    contracts.PREDICT_ROUTE,
]


def strings(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, text) of every string constant but docstrings, f-strings' parts included."""
    tree = ast.parse(path.read_text())
    docs = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            docs.add(id(body[0].value))
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def spellings(name: str, whole_only: bool) -> list[str]:
    found = []
    for root in CODE:
        for path in sorted((REPO / root).rglob("*.py")):
            if path.name == "contracts.py":
                continue
            for line, text in strings(path):
                if (text == name) if whole_only else (name in text):
                    found.append(f"{path.relative_to(REPO)}:{line}")
    return found


@pytest.mark.parametrize("name", FILES)
def test_each_file_name_and_uri_is_spelled_in_contracts_only(name):
    assert spellings(name, whole_only=False) == []


@pytest.mark.parametrize("name", WORDS)
def test_each_signature_and_route_is_spelled_in_contracts_only(name):
    assert spellings(name, whole_only=True) == []


def test_a_second_spelling_is_found(tmp_path, monkeypatch):
    """The scan itself: a literal in code counts, the same words in a docstring do not."""
    (tmp_path / "trainer").mkdir()
    for root in CODE[1:]:
        (tmp_path / root).mkdir()
    (tmp_path / "trainer" / "x.py").write_text(
        '"""Writes metrics.json."""\n\ndef f(d):\n    return f"{d}/metrics.json", "predict"\n'
    )
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert spellings(contracts.METRICS_FILE, whole_only=False) == ["trainer/x.py:4"]
    assert spellings(contracts.PREDICT, whole_only=True) == ["trainer/x.py:4"]

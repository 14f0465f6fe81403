"""Imports flow one way between the subpackages of trainer/ (trainer/__init__.py draws the
order): a module imports only from its own subpackage and those below it, the entry
points at the top are imported by none, and only the Vertex clients import
trainer.vertex. Imports inside functions count too."""

from __future__ import annotations

import ast
import pathlib

import pytest

from conftest import REPO as REPO_DIR

REPO = pathlib.Path(REPO_DIR)
# Each subpackage, and what it may import besides itself.
ALLOWED = {
    "base": set(),
    "data": {"base"},
    "prep": {"base"},
    "model": {"base", "data"},
    "evaluate": {"base", "data", "model"},
    "serving": {"base", "data", "model"},
    "plan": {"base", "data", "model"},
    "train": {"base", "data", "model", "evaluate", "serving", "plan"},
    "vertex": {"base"},
}
TOP = "entry points"  # trainer/*.py: they may import every subpackage but vertex
ALLOWED[TOP] = set(ALLOWED) - {"vertex"}


def room(module: str, packages: set[str]) -> str:
    """The subpackage of a dotted module under trainer (TOP for trainer.X modules)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in packages else TOP


def trainer_imports(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, dotted module) of every import of trainer.* in a file, nested ones too;
    `from trainer import x` names trainer.x."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("trainer.")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "trainer":
                found += [(node.lineno, f"trainer.{a.name}") for a in node.names]
            elif node.module.startswith("trainer."):
                found.append((node.lineno, node.module))
    return found


def violations(package: pathlib.Path) -> list[str]:
    """Every import under `package` (a trainer/ folder) that goes against ALLOWED."""
    packages = {p.name for p in package.iterdir() if (p / "__init__.py").exists()}
    unknown = packages - set(ALLOWED)
    assert not unknown, f"subpackages without a place in the order: {sorted(unknown)}"
    bad = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        source = parts[0] if len(parts) > 1 else TOP
        for line, module in trainer_imports(path):
            target = room(module, packages)
            if target == TOP and module != "trainer.__init__":
                if module.split(".")[1] not in packages:  # an entry point
                    bad.append(f"{path}:{line}: imports the entry point {module}")
                continue
            if target != source and target not in ALLOWED[source]:
                bad.append(f"{path}:{line}: {source} imports {module} ({target})")
    return bad


def test_imports_follow_the_order_of_the_subpackages():
    assert violations(REPO / "trainer") == []


def test_an_import_against_the_order_is_found(tmp_path):
    """The check itself: an upward import, an import of an entry point and of vertex."""
    package = tmp_path / "trainer"
    for sub in ("base", "data", "train", "vertex"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text("from trainer.train import job\n")
    (package / "base" / "storage.py").write_text("def f():\n    from trainer.data import schema\n")
    (package / "data" / "schema.py").write_text("from trainer import task\n")
    (package / "train" / "job.py").write_text(
        "import trainer.data.schema\nfrom trainer.vertex import jobs\n"
    )
    found = violations(package)
    assert len(found) == 3, found
    assert "base imports trainer.data (data)" in found[0]
    assert "imports the entry point trainer.task" in found[1]
    assert "train imports trainer.vertex (vertex)" in found[2]


@pytest.mark.parametrize("sub", sorted(ALLOWED.keys() - {TOP}))
def test_each_subpackage_says_what_it_holds_and_may_import(sub):
    doc = ast.get_docstring(ast.parse((REPO / "trainer" / sub / "__init__.py").read_text()))
    assert doc and "Imports:" in doc, sub

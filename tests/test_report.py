"""report.html: written with every evaluated export, self-contained, and rendered by a
real headless Chromium; `python -m trainer.report` rebuilds it."""

from __future__ import annotations

import io
import os
import subprocess

import numpy as np
import pytest
from headless import Page

from conftest import run_python


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_the_report_renders_in_chromium_with_every_image_and_no_request(exported, task):
    model_dir = exported[task]
    for name in ("evaluation.json", "feature_importance.json", "report.html"):
        assert os.path.exists(os.path.join(model_dir, name)), name
    text = open(os.path.join(model_dir, "report.html")).read()
    import re

    assert "<script" not in text and "<link" not in text and "url(" not in text
    assert re.findall(r"""(?:src|href)=['"](?!data:)""", text) == []
    page = Page(f"file://{model_dir}/report.html")
    try:
        images = page.evaluate(
            "Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight])"
        )
        headings = page.evaluate(
            "Array.from(document.querySelectorAll('h2')).map(h => h.textContent)"
        )
        png = page.screenshot()
    finally:
        page.close()
    # Curves, then the task's plots (4 for classifiers, 3 for regression), importance.
    assert len(images) == (6 if task != "regression" else 5), images
    assert all(done and w > 100 and h > 100 for done, w, h in images), images
    assert headings == ["The run", "Curves", "Evaluation", "Feature importance"]
    assert [u for u in page.requests if not u.startswith(("file:", "data:"))] == []
    import matplotlib.image

    pixels = matplotlib.image.imread(io.BytesIO(png), format="png")
    assert pixels.shape[0] >= 900 and pixels.shape[1] == 1200
    # Not blank: many distinct colours, and a good share of non-white pixels.
    flat = (pixels[..., :3] * 255).astype(np.uint8).reshape(-1, 3)
    assert len(np.unique(flat, axis=0)) > 50
    assert (flat.min(axis=1) < 200).mean() > 0.02


def run_report(*args: str) -> subprocess.CompletedProcess:
    return run_python("-m", "trainer.report", *args)


def test_trainer_report_rebuilds_it_from_model_dir(exported, tmp_path):
    import shutil

    copy = tmp_path / "model"
    shutil.copytree(exported["binary"], copy)
    os.remove(copy / "report.html")
    proc = run_report(str(copy))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{copy}/report.html"
    original = open(os.path.join(exported["binary"], "report.html")).read()
    rebuilt = open(copy / "report.html").read()
    assert rebuilt.count("<img") == original.count("<img") and "<h3>Thresholds</h3>" in rebuilt


def test_trainer_report_on_a_folder_that_is_not_an_export(tmp_path):
    proc = run_report(str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: {tmp_path}: not an export of trainer.task (no config.json, schema.json, "
        "metrics.json)"
    ]

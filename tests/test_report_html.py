"""report.html is self-contained, and renders in headless Chromium with its tables and
images (a screenshot that is not blank; the DOM holds the tables and <img> tags)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from servelab.experiment import load_spec, run_experiment
from servelab.report import build_report, write_report

SPEC = """\
name: html
engine: sim
hardware: {gpu: L40S}
model: Qwen/Qwen3-0.6B
arms:
  - name: base
  - name: slots
    args: {max_num_seqs: 2}
workloads:
  - name: rnd
    dataset_name: random
    random_input_len: 64
    random_output_len: 16
loads:
  concurrency: [1, 4]
  num_prompts: 12
"""
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("html")
    spec_path = root / "spec.yaml"
    spec_path.write_text(SPEC)
    out = root / "out"
    run_experiment(load_spec(spec_path), out)
    write_report(out, build_report(out))
    return out


def test_html_is_self_contained(report_dir: Path) -> None:
    page = (report_dir / "report.html").read_text()
    assert "<script" not in page
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:)""", page)  # no external asset
    imgs = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(imgs) == 5 == len(list((report_dir / "plots").glob("*.png")))
    assert page.count("<table>") == 3  # comparison, ratios, memory (no SLO, no failed arm)


def _chromium() -> str:
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    if os.environ.get("SERVELAB_REQUIRE_CHROMIUM") == "1":
        pytest.fail(f"{CHROMIUM} is absent and SERVELAB_REQUIRE_CHROMIUM=1")
    pytest.skip(f"{CHROMIUM} is absent (apt-get install chromium; SERVELAB_REQUIRE_CHROMIUM=1 makes this a failure)")


def _flags(tmp_path: Path) -> list[str]:
    return ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}"]


def test_chromium_renders_tables_and_images(report_dir: Path, tmp_path: Path) -> None:
    chromium = _chromium()
    url = (report_dir / "report.html").resolve().as_uri()
    shot = tmp_path / "shot.png"
    subprocess.run([chromium, *_flags(tmp_path), f"--screenshot={shot}", "--window-size=1200,3000",
                    url], capture_output=True, timeout=120, check=True)
    import matplotlib.image as mpimg
    import numpy as np

    pixels = mpimg.imread(shot)
    assert pixels.shape[0] == 3000 and pixels.shape[1] == 1200
    rgb = pixels[..., :3]
    assert float(np.std(rgb)) > 0.05  # not one flat colour
    dark = float((rgb.mean(axis=2) < 0.5).mean())
    assert dark > 0.005  # text and plot lines were drawn

    dom = subprocess.run([chromium, *_flags(tmp_path), "--dump-dom", url], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert dom.count("<table>") == 3
    assert len(re.findall(r"<img src=\"data:image/png;base64,", dom)) == 5
    assert "servelab report: html" in dom
    assert "slots (binds: batch slots (max_num_seqs))" in dom

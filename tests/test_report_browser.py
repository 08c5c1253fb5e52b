"""The report as a person sees it: rendered from small records, opened in headless Chromium
(Debian's chromium + chromium-driver, which `make` and .ci/run install when absent and the user
is root), checked through the W3C WebDriver protocol (plain HTTP, no client library): no console
errors, every figure drawn at a non-zero size, every link of the contents to an existing anchor,
nothing fetched from outside the file. A screenshot is left for inspection."""

import base64
import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import report_section

from suite.analysis.tables import tidy_table
from suite.launch.ports import free_port
from suite.records import Record, Status, write_record
from suite.report.render import render_report
from suite.env import REPO_ROOT
from suite.scale.datasets import load_paper, validation_table
from suite.measure.stats import summarize

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER),
    reason="needs Debian's chromium and chromium-driver (make installs them when run as root)")

PAGE_FACTS = """
const figures = [...document.querySelectorAll('figure svg')].map(s => {
  const r = s.getBoundingClientRect(); return [r.width, r.height]; });
const ids = new Set([...document.querySelectorAll('[id]')].map(e => e.id));
const links = [...document.querySelectorAll('nav a')].map(a => a.getAttribute('href'));
const outside = [...document.querySelectorAll('[src],[href]')]
  .map(e => e.getAttribute('src') || e.getAttribute('href')).filter(u => /^[a-z]+:/i.test(u));
const labels = [...document.querySelectorAll('figure')].map(f =>
  [f.getAttribute('aria-label'), (f.querySelector('figcaption') || {}).textContent]);
return {figures, links, missing: links.filter(h => !ids.has(h.slice(1))), outside, labels,
        fetched: performance.getEntriesByType('resource').map(e => e.name)};
"""


def _call(base: str, method: str, path: str, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["value"]


def _report(tmp_path: Path) -> Path:
    recs = []
    for system, samples, status in (("torch-eager", [0.020, 0.021, 0.019], Status.OK),
                                    ("reference", [0.010, 0.011, 0.009], Status.OK),
                                    ("tensorflow-xla", None, Status.UNAVAILABLE)):
        rec = Record("bert_varlen", system, {"batch_size": 1, "max_seq_len": 64, "seed": 0,
                                             "distribution": "bytetransformer", "dtype": "fp32"},
                     {"seed": 0}, status, "" if samples else "tensorflow is not installed",
                     env={"machine": "m", "git": {"commit": "abc123"}},
                     workload={"lengths": [32], "total_tokens": 32, "gemm_flop_bound": 2.0,
                               "attention_flop_bound": 4.0})
        if samples:
            rec.timing = {"samples": samples, "stats": summarize(samples), "threads": 2,
                          "timer": "time.perf_counter"}
            rec.derived = {"padding_free": system == "reference", "useful_flops_per_s": 2e9}
        recs.append(write_record(rec, tmp_path / f"{system}.json"))
    scale = validation_table(load_paper(REPO_ROOT / "results" / "paper"))
    sections = [report_section(tmp_path, "bert_varlen", tidy_table(recs), records=recs),
                report_section(tmp_path, "llm_scale", scale)]
    return render_report(sections, tmp_path / "index.html")


def test_the_report_in_a_browser(tmp_path):
    html = _report(tmp_path)
    port = free_port()
    driver = subprocess.Popen([DRIVER, f"--port={port}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):  # the driver needs a moment to listen
            try:
                _call(base, "GET", "/status")
                break
            except OSError:
                time.sleep(0.1)
        options = {"binary": CHROMIUM, "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                                                 "--window-size=1400,1000"]}
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome",
                                                 "goog:chromeOptions": options,
                                                 "goog:loggingPrefs": {"browser": "ALL"}}}}
        session = _call(base, "POST", "/session", caps)["sessionId"]
        try:
            _call(base, "POST", f"/session/{session}/url", {"url": html.resolve().as_uri()})
            facts = _call(base, "POST", f"/session/{session}/execute/sync",
                          {"script": PAGE_FACTS, "args": []})
            log = _call(base, "POST", f"/session/{session}/se/log", {"type": "browser"})
            shot = _call(base, "GET", f"/session/{session}/screenshot")
        finally:
            _call(base, "DELETE", f"/session/{session}")
    finally:
        driver.terminate()
        driver.wait(timeout=10)
    out = Path(os.environ.get("SEEDBENCH_SCREENSHOT_DIR", tmp_path)) / "report.png"
    out.write_bytes(base64.b64decode(shot))
    assert out.stat().st_size > 10_000  # a screenshot to look at
    errors = [e for e in log if e.get("level") in ("SEVERE", "ERROR")]
    assert not errors, errors
    assert len(facts["figures"]) == 2 and all(w > 100 and h > 100 for w, h in facts["figures"])
    assert facts["missing"] == [] and "#bert_varlen" in facts["links"]
    assert "#problems" in facts["links"] and "#claims" in facts["links"]
    assert facts["outside"] == [] and facts["fetched"] == []
    assert all(label and "Figure:" in label and caption for label, caption in facts["labels"])

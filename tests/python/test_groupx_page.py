"""Static checks of the GroupX web page (crates/convene-daemon/src/groupx/page.html).

No daemon needed: the page must be one self-contained file whose script parses, which never turns
data into markup, loads nothing from the network beyond its own origin, and whose event reducer
passes tests/js/page_reducer_test.mjs. The node-based parts skip when `node` is not on PATH.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "crates" / "convene-daemon" / "src" / "groupx" / "page.html"
HARNESS = ROOT / "tests" / "js" / "page_reducer_test.mjs"


def page() -> str:
    return PAGE.read_text(encoding="utf-8")


def inline_scripts(html: str) -> list[str]:
    return re.findall(r"<script>(.*?)</script>", html, flags=re.S)


def test_page_is_one_file_with_one_inline_script():
    html = page()
    assert html.lstrip().lower().startswith("<!doctype html>")
    assert len(inline_scripts(html)) == 1
    # No external script, stylesheet, frame or image: every <script> is inline, no <link> but the data: icon.
    assert not re.search(r"<script[^>]*\bsrc\s*=", html, flags=re.I)
    for link in re.findall(r"<link\b[^>]*>", html, flags=re.I):
        assert 'href="data:' in link, link
    assert not re.search(r"<(iframe|img|object|embed)\b", html, flags=re.I)


@pytest.mark.parametrize(
    "forbidden", ["innerHTML", "insertAdjacentHTML", "outerHTML =", "outerHTML=", "document.write", "eval(",
                  "new Function", "http://", "https://", "//cdn", "@import", "url("]
)
def test_page_never_builds_markup_from_data_nor_loads_remote_resources(forbidden):
    assert forbidden not in page()


def test_page_sets_a_strict_content_security_policy():
    m = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page())
    assert m, "CSP meta tag missing"
    csp = {d.split()[0]: d.split()[1:] for d in (p.strip() for p in m.group(1).split(";")) if d}
    assert csp["default-src"] == ["'none'"]
    assert csp["connect-src"] == ["'self'"]
    assert csp["script-src"] == ["'unsafe-inline'"]


def test_page_uses_the_wire_contract_endpoints():
    html = page()
    for needle in ["'/api/bootstrap'", "'/api/events?afterSeq='", "'/api/messages'", "'/api/turns/'", "clientCommandId",
                   "'/api/setup'"]:
        assert needle in html, needle


node = shutil.which("node")
needs_node = pytest.mark.skipif(node is None, reason="node is not on PATH")


@needs_node
def test_inline_script_parses():
    with tempfile.TemporaryDirectory() as d:
        js = Path(d) / "page.js"
        js.write_text(inline_scripts(page())[0], encoding="utf-8")
        r = subprocess.run([node, "--check", str(js)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


@needs_node
def test_event_reducer_harness():
    r = subprocess.run([node, str(HARNESS)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "checks passed" in r.stdout


jsdom_installed = (ROOT / "tests" / "js" / "node_modules" / "jsdom").is_dir()


@needs_node
@pytest.mark.skipif(not jsdom_installed, reason="jsdom not installed: npm install --prefix tests/js")
def test_page_in_jsdom_against_a_fake_daemon():
    r = subprocess.run([node, str(ROOT / "tests" / "js" / "page_dom_test.mjs")], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "checks passed" in r.stdout


@needs_node
@pytest.mark.skipif(not jsdom_installed, reason="jsdom not installed: npm install --prefix tests/js")
def test_setup_view_in_jsdom_against_a_fake_daemon():
    r = subprocess.run([node, str(ROOT / "tests" / "js" / "page_setup_test.mjs")], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "checks passed" in r.stdout


@needs_node
@pytest.mark.skipif(not jsdom_installed, reason="jsdom not installed: npm install --prefix tests/js")
def test_assistant_panel_in_jsdom_against_a_fake_daemon():
    r = subprocess.run([node, str(ROOT / "tests" / "js" / "page_assistant_test.mjs")], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "checks passed" in r.stdout

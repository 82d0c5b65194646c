"""The course as a book: `book/build.py` (what `make book` runs) builds build/book/ from the stored notebooks.

The build runs from a copy of the repository (what a fresh clone has), with Sphinx's -W, and must
finish without a warning. The built site must be self-contained: no page or stylesheet references a
script, stylesheet, font or image outside build/book/. A real Chromium (Debian's /usr/bin/chromium,
via Playwright, which never downloads a browser) opens the front page and chapter 02 with every
non-file request aborted and checks math, CJK fonts and images. Screenshots go to build/browser/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from batchlab.paths import repo_root
from browser_fonts import fonts_for  # noqa: E402

ROOT = repo_root()
CHROMIUM = os.environ.get("BATCHLAB_CHROMIUM", "/usr/bin/chromium")
SHOTS = ROOT / "build" / "browser"
CJK_HINTS = ("CJK", "Han Sans", "Han Serif", "WenQuanYi", "Hei", "Noto Sans SC", "PingFang", "YaHei")
BUILD_TIMEOUT_S = 600  # a hung build fails instead of blocking the run
REMOTE = re.compile(r"^\s*(?:[a-zA-Z][a-zA-Z0-9+.-]*:)?//")  # http://, https://, protocol-relative //
CSS_URL = re.compile(r"url\(\s*['\"]?([^'\")]+)")
CSS_IMPORT = re.compile(r"@import\s+['\"]([^'\"]+)")
RAW_MATH = re.compile(r"\$[^$\s][^$]*?\$|\\\(|\\\[")

pytestmark = pytest.mark.slow  # every test here builds the whole book (one to two minutes)

pytest.importorskip("sphinx", reason="book test skipped: the `book` extra is not installed (make test installs it)")
pytest.importorskip("myst_nb", reason="book test skipped: the `book` extra is not installed (make test installs it)")


def _repo_copy(dst: Path) -> None:
    """Copy what a fresh clone has: the tracked and not-ignored files."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)


@pytest.fixture(scope="module")
def book(tmp_path_factory) -> dict:
    clone = tmp_path_factory.mktemp("clone")
    _repo_copy(clone)
    proc = subprocess.run([sys.executable, "book/build.py", "build/book"], cwd=clone,
                          capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                          env={**os.environ, "PYTHONPATH": str(clone / "src")})
    return {"proc": proc, "out": clone / "build" / "book"}


def test_book_builds_without_warnings(book) -> None:
    proc = book["proc"]
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"book build failed:\n{log[-4000:]}"
    assert "WARNING" not in log and "ERROR" not in log, log[-4000:]


def test_book_has_every_chapter_lab_and_quiz(book) -> None:
    out = book["out"]
    assert (out / "index.html").is_file()
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + [ROOT / "notebooks" / "index.ipynb"]:
        assert (out / "notebooks" / f"{nb.stem}.html").is_file(), nb.name
    for nb in sorted((ROOT / "labs").glob("lab*.ipynb")):
        page = (out / "labs" / f"{nb.stem}.html").read_text(encoding="utf-8")
        assert f'href="../solutions/{nb.stem}.html"' in page, f"{nb.name}: no link to its solution"
        assert (out / "solutions" / f"{nb.stem}.html").is_file()
    bank = (out / "quiz" / "bank.html").read_text(encoding="utf-8")
    for q in ("ch02-1", "Q1", "Q10"):
        assert q in bank, f"quiz bank page lacks {q}"
    assert (out / "docs" / "classroom.html").is_file()
    front = (out / "notebooks" / "index.html").read_text(encoding="utf-8")
    text = re.sub(r"<[^>]+>", "", front)
    assert "make start" in text and "make test" in text, "front page lacks the README's two commands"
    assert "search.html" in front and (out / "searchindex.js").is_file()


def test_chapter_pages_keep_errata_numbers_navigation_and_open_in_lab(book) -> None:
    out = book["out"]
    for ch in sorted((out / "notebooks").glob("[0-9][0-9]_*.html")):
        html = ch.read_text(encoding="utf-8")
        assert "open_in_jupyterlab.html" in html, f"{ch.name}: no 'open in JupyterLab' link"
        assert 'class="prev-next-area"' in html or "prev-next" in html, f"{ch.name}: no prev/next navigation"
        n = int(ch.stem[:2])
        numbered = re.findall(rf"<h2>{n}\.\d+ ", html)
        assert len(numbered) >= 3, f"{ch.name}: sections not numbered {n}.1, {n}.2 …"
        assert "3.1. 2.1" not in html and 'class="section-number"' not in html, "doubled section numbers"
        src = (ROOT / "notebooks" / f"{ch.stem}.ipynb").read_text(encoding="utf-8")
        n_errata = src.count("> **勘误**")
        assert html.count('class="erratum"') == n_errata, f"{ch.name}: {n_errata} 勘误 boxes in the notebook"
    ch00 = (out / "notebooks" / "00_visual_demo.html").read_text(encoding="utf-8")
    assert "动画需要 JupyterLab" in ch00 and "<img" in ch00


def test_chinese_full_text_search_index(book) -> None:
    """Sphinx's zh search (jieba) indexes Chinese words, so searching 延迟 or 吞吐 finds chapter 02."""
    js = (book["out"] / "searchindex.js").read_text(encoding="utf-8")
    index = json.loads(js[js.index("(") + 1:js.rindex(")")])
    ch02 = index["docnames"].index("notebooks/02_dynamic_batching")
    for word in ("批处理", "序列", "延迟", "拼锅"):
        assert word in index["terms"], f"search index has no term {word}"
    for word in ("延迟", "吞吐"):
        hits = index["terms"][word]
        assert ch02 in (hits if isinstance(hits, list) else [hits]), f"searching {word} does not find chapter 02"


class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str]] = []
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "style":
            self._in_style = True
        for key in ("src", "href", "poster", "data"):
            if a.get(key) and not (tag == "a" and key == "href"):
                self.refs.append((tag, a[key]))
        if a.get("style"):
            self.styles.append(a["style"])
        if tag == "a" and a.get("href") and not REMOTE.match(a["href"]) and a["href"].startswith("/"):
            self.refs.append(("a-absolute", a["href"]))

    def handle_endtag(self, tag):
        if tag == "style":
            self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.styles.append(data)


def _css_refs(text: str) -> list[str]:
    return CSS_URL.findall(text) + CSS_IMPORT.findall(text)


def test_no_page_loads_anything_from_outside(book) -> None:
    out = book["out"]
    bad = []
    for page in out.rglob("*.html"):
        parser = _Refs()
        parser.feed(page.read_text(encoding="utf-8"))
        refs = [(t, r) for t, r in parser.refs] + [("style", u) for s in parser.styles for u in _css_refs(s)]
        bad += [f"{page.relative_to(out)}: <{t}> {r}" for t, r in refs
                if REMOTE.match(r) or t == "a-absolute" or (t != "a-absolute" and r.startswith("/"))]
    for css in out.rglob("*.css"):
        bad += [f"{css.relative_to(out)}: url({u})" for u in _css_refs(css.read_text(encoding="utf-8", errors="replace"))
                if REMOTE.match(u) or u.startswith("/")]
    assert bad == [], "\n".join(bad[:30])
    # every local image the pages reference exists
    missing = []
    for page in out.rglob("*.html"):
        parser = _Refs()
        parser.feed(page.read_text(encoding="utf-8"))
        for tag, ref in parser.refs:
            if tag == "img" and not ref.startswith("data:"):
                if not (page.parent / ref.split("?")[0]).resolve().is_file():
                    missing.append(f"{page.relative_to(out)}: {ref}")
    assert missing == []


_VISIBLE_PROSE = """() => {
  const main = document.querySelector('main') || document.body;
  const copy = main.cloneNode(true);
  copy.querySelectorAll('pre, code, script, style, mjx-container, .cell_output, .highlight').forEach(e => e.remove());
  return copy.innerText;
}"""

_MARK_CHINESE = """() => {
  const walker = document.createTreeWalker(document.querySelector('main') || document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const t = walker.currentNode;
    if (/[\\u4e00-\\u9fff]{4,}/.test(t.textContent) && t.parentElement.closest('p')) {
      const span = document.createElement('span');
      span.setAttribute('data-batchlab-probe', '1');
      t.parentElement.insertBefore(span, t);
      span.appendChild(t);
      return span.textContent.slice(0, 20);
    }
  }
  return null;
}"""



@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"browser test skipped: no Chromium at {CHROMIUM} (apt-get install chromium fonts-noto-cjk; .ci/run does)")
def test_book_in_chromium_with_network_blocked(book) -> None:
    assert book["proc"].returncode == 0, "book did not build"
    from playwright.sync_api import sync_playwright  # reason: playwright is only needed with a Chromium present
    SHOTS.mkdir(parents=True, exist_ok=True)
    blocked: list[str] = []

    def route(r):
        if r.request.url.startswith("file:"):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                                           "--allow-file-access-from-files"])
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN")
            context.route("**/*", route)
            page = context.new_page()
            for name, url, needs_math in (
                ("front", (book["out"] / "index.html").as_uri(), False),
                ("chapter02", (book["out"] / "notebooks" / "02_dynamic_batching.html").as_uri(), True),
            ):
                page.goto(url, wait_until="load")
                page.wait_for_load_state("load")
                if name == "front":  # the site root redirects (relative meta refresh) to the course map
                    page.wait_for_url("**/notebooks/index.html", timeout=15_000)
                    page.wait_for_load_state("load")
                page.wait_for_function("() => !document.querySelector('main') || "
                                       "!window.MathJax || (MathJax.startup && MathJax.startup.promise)",
                                       timeout=30_000)
                page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
                n_math = page.locator("mjx-container").count()
                if needs_math or "math notranslate" in page.content():
                    assert n_math > 0, f"{name}: no MathJax output"
                prose = page.evaluate(_VISIBLE_PROSE)
                raw = RAW_MATH.findall(prose)
                assert raw == [], f"{name}: raw math in visible text: {raw[:5]}"
                assert page.evaluate(_MARK_CHINESE), f"{name}: no Chinese prose found"
                fonts = fonts_for(page, "[data-batchlab-probe]")
                assert any(any(h in f for h in CJK_HINTS) for f in fonts), f"{name}: Chinese drawn without a CJK font: {fonts}"
                images = page.evaluate("() => Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, i.naturalWidth])")
                broken = [src for src, done, w in images if not (done and w > 0)]
                assert broken == [], f"{name}: images not loaded: {broken}"
                if name == "chapter02":
                    assert len(images) >= 3, f"chapter 02 shows {len(images)} images"
                page.screenshot(path=str(SHOTS / f"book_{name}.png"), full_page=True)
        finally:
            browser.close()
    assert blocked == [], f"pages tried to load from the network: {blocked[:10]}"


def test_a_broken_image_fails_the_build(tmp_path) -> None:
    """Warnings are errors: a notebook pointing at a missing image stops the build."""
    _repo_copy(tmp_path)
    nb_path = tmp_path / "notebooks" / "01_bottleneck.ipynb"
    for other in [*(tmp_path / "notebooks").glob("[0-9][0-9]_*.ipynb"), *(tmp_path / "labs").glob("lab*.ipynb")]:
        if other != nb_path:  # a book of one chapter builds in seconds
            other.unlink()
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    nb["cells"].append({"cell_type": "markdown", "id": "broken-image", "metadata": {},
                        "source": "![没有这张图](no_such_figure.png)"})
    nb_path.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    proc = subprocess.run([sys.executable, "book/build.py", "build/book"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                          env={**os.environ, "PYTHONPATH": str(tmp_path / "src")})
    assert proc.returncode != 0
    assert "no_such_figure.png" in proc.stderr + proc.stdout
    assert "warnings are errors" in proc.stderr

"""The course as a learner meets it: JupyterLab in a real Chromium, driven by Playwright.

Every chapter, lab handout and lab solution, as stored (nbconvert HTML of the notebooks with their
outputs), is opened in Chromium (a failing page is screenshotted to build/browser/<dir>_<name>.png:
a full-page shot takes two seconds a notebook, most of what this check costs). A page fails
on any character drawn as tofu (each distinct non-ASCII character is drawn on a canvas in the font
of the element it sits in and compared with the drawing of a code point no font has, i.e. the
.notdef box), on an emoji (the CI browser has no emoji font: status marks are text), and on a
figure whose stored figure check (`batchlab.plotting.layout`, recorded next to each figure when
the notebook ran) found a legend over data, a cut marker or a stray label, or is missing.

It also starts what `make start` starts (JupyterLab with a token plus the embedded Triton
server), opens chapter 00 and the quiz notebook, runs all cells, and checks what a person would
see: no error output, the animation's play/step controls exist and stepping changes the frame, a
quiz answer click shows feedback, and the Chinese text is drawn with a CJK font (the fonts
Chromium actually resolved, not only the DOM text). Screenshots go to build/browser/.

It needs Debian's Chromium at /usr/bin/chromium (`.ci/run` installs it); elsewhere it is skipped
with a message saying so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from batchlab.paths import repo_root
from batchlab.plotting.layout import FIGURE_CHECK_MIME
from batchlab.server import free_port
from browser_fonts import fonts_for  # noqa: E402
from procs import process_tree, still_running

CHROMIUM = os.environ.get("BATCHLAB_CHROMIUM", "/usr/bin/chromium")
SHOTS = repo_root() / "build" / "browser"
CJK_HINTS = ("CJK", "Han Sans", "Han Serif", "WenQuanYi", "Hei", "Noto Sans SC", "PingFang", "YaHei")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"browser test skipped: no Chromium at {CHROMIUM} (apt-get install chromium fonts-noto-cjk; .ci/run does)"),
]


RUN_IN_LAB = [repo_root() / "notebooks" / "00_visual_demo.ipynb", repo_root() / "quiz" / "quiz.ipynb"]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """`python -m batchlab.start` (what `make start` runs), yielding its JSON info line.

    JupyterLab gets private user settings with autosave off (and private workspaces): running a
    notebook here must not rewrite the tracked file, which other tests (other xdist workers) read.
    """
    settings = tmp_path_factory.mktemp("lab-user-settings")
    (settings / "@jupyterlab" / "docmanager-extension").mkdir(parents=True)
    (settings / "@jupyterlab" / "docmanager-extension" / "plugin.jupyterlab-settings").write_text('{"autosave": false}')
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(settings),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path_factory.mktemp("lab-workspaces"))}
    stored = {p: p.read_bytes() for p in RUN_IN_LAB}
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "batchlab.start", "--no-browser", "--lab-port", str(port), "--token", "browser-test"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )
    info = None
    for line in proc.stdout:
        if line.startswith("{"):
            info = json.loads(line)
            break
    if info is None:
        proc.kill()
        pytest.fail("make start printed no JSON line")
    tree = process_tree(proc.pid)
    yield info
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert still_running(tree[1:], timeout=10) == []
    assert [p.name for p in RUN_IN_LAB if p.read_bytes() != stored[p]] == [], "JupyterLab saved a tracked notebook"


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="batchlab-chromium-")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS[1:],
            viewport={"width": 1400, "height": 1000}, locale="zh-CN",
        )
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


def _open_notebook(context, info: dict, path: str):
    page = context.new_page()
    url = f"http://127.0.0.1:{info['lab']['port']}/lab/tree/{path}?token={info['lab']['token']}&reset"
    page.goto(url, wait_until="domcontentloaded", timeout=120_000)
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=120_000)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle'], .jp-Toolbar-kernelStatus",
                           timeout=120_000)
    return page


def _run_all(page, timeout_ms: int = 240_000) -> None:
    """Edit > Clear Outputs of All Cells, Run > Run All Cells, then wait until every code cell ran.

    Clearing first matters: a stored notebook already shows execution counts, so without it the
    wait could pass before anything ran.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout  # as the fixture: only when the test runs

    page.locator(".jp-NotebookPanel .jp-Notebook").first.click(position={"x": 5, "y": 5})  # focus
    _menu(page, "Edit", "Clear Outputs of All Cells")
    page.wait_for_function(
        """() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt')]
                 .every(p => p.textContent.trim() === '[ ]:')""", timeout=30_000)
    _menu(page, "Run", "Run All Cells")
    try:  # a menu click JupyterLab swallowed while busy leaves every cell unrun: click it once more
        page.wait_for_function(
            """() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt')]
                     .some(p => p.textContent.trim() !== '[ ]:')""", timeout=60_000)
    except PlaywrightTimeout:
        _menu(page, "Run", "Run All Cells")
    page.wait_for_function(
        """() => {
            const prompts = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-InputPrompt')];
            const code = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell')];
            if (!code.length) return false;
            const busy = prompts.some(p => p.textContent.includes('*'));
            const unrun = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt')]
                .some(p => p.textContent.trim() === '[ ]:');
            return !busy && !unrun;
        }""",
        timeout=timeout_ms,
    )


def _menu(page, menu: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=menu).first.click()
    page.locator(".lm-Menu-itemLabel", has_text=item).first.click()


def _errors(page) -> list[str]:
    return page.evaluate(
        """() => [...document.querySelectorAll(
                '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
             .map(e => e.textContent).filter(t => /Traceback|Error\\b|Exception/.test(t))"""
    )


_MARK_CHINESE = """el => {
    document.querySelectorAll('[data-batchlab-probe]').forEach(e => e.removeAttribute('data-batchlab-probe'));
    const own = e => [...e.childNodes].filter(n => n.nodeType === 3).map(n => n.textContent).join('');
    const hit = [el, ...el.querySelectorAll('*')].find(e => /[\\u4e00-\\u9fff]/.test(own(e)));
    if (hit) hit.setAttribute('data-batchlab-probe', '1');
}"""
"""Marks the first element under `el` whose own text holds Chinese characters."""



def _run_notebook(context, info: dict, path: str):
    """Open `path`, run all its cells, and require that no cell shows an error."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = _open_notebook(context, info, path)
    _run_all(page)
    assert _errors(page) == []
    return page


def _assert_cjk_font(page, element, what: str) -> None:
    """The first Chinese text under `element` is drawn with a CJK font."""
    element.scroll_into_view_if_needed()  # the notebook only lays out cells in view
    element.evaluate(_MARK_CHINESE)
    fonts = fonts_for(page, "[data-batchlab-probe]")
    assert any(any(h in f for h in CJK_HINTS) for f in fonts), f"{what} drawn without a CJK font: {fonts}"


@pytest.mark.server
def test_chapter_00_runs_and_animates(course, browser) -> None:
    page = _run_notebook(browser, course, "notebooks/00_visual_demo.ipynb")
    step = page.locator(".batchlab-step button, button.batchlab-step").first
    label = page.locator(".batchlab-frame-label").first
    step.scroll_into_view_if_needed()
    assert page.locator(".batchlab-play").count() >= 1, "no play control"
    before = label.inner_text()
    frame_before = page.locator(".batchlab-frame").first.inner_html()
    step.click()
    page.wait_for_function(
        "([sel, old]) => document.querySelector(sel) && document.querySelector(sel).innerText !== old",
        arg=[".batchlab-frame-label", before], timeout=20_000,
    )
    assert label.inner_text() != before
    # The label moves at once; the kernel then draws the new frame and sends the image.
    page.wait_for_function(
        "([sel, old]) => document.querySelector(sel).innerHTML !== old",
        arg=[".batchlab-frame", frame_before], timeout=30_000,
    )
    page.locator(".batchlab-frame").first.screenshot(path=str(SHOTS / "chapter00_animation.png"))
    # Chinese prose in a markdown cell is drawn with a CJK font.
    _assert_cjk_font(page, page.locator(".jp-MarkdownCell .jp-RenderedMarkdown").first, "Chinese prose")
    page.screenshot(path=str(SHOTS / "chapter00.png"))


@pytest.mark.server
def test_quiz_answer_shows_feedback(course, browser) -> None:
    page = _run_notebook(browser, course, "quiz/quiz.ipynb")
    quiz = page.locator(".batchlab-quiz").first
    quiz.scroll_into_view_if_needed()
    question = quiz.locator(".batchlab-question").first
    question.locator("input[type=radio], input[type=checkbox]").first.check()
    question.locator("button.batchlab-submit, .batchlab-submit button").first.click()
    feedback = question.locator(".batchlab-feedback").first
    feedback.wait_for(state="visible", timeout=20_000)
    page.wait_for_function(
        "el => /正确|错误/.test(el.innerText)", arg=feedback.element_handle(), timeout=20_000
    )
    text = feedback.inner_text()
    assert "正确" in text or "错误" in text
    _assert_cjk_font(page, feedback, "quiz feedback")
    question.screenshot(path=str(SHOTS / "quiz_feedback.png"))
    page.screenshot(path=str(SHOTS / "quiz.png"))


# --------------------------------------------------------------------------- every stored notebook

STORED = sorted((repo_root() / "notebooks").glob("*.ipynb")) + sorted((repo_root() / "labs").glob("*.ipynb")) \
    + sorted((repo_root() / "solutions").glob("*.ipynb"))

NO_GLYPH = "\u0378"
"""A code point no font has (unassigned): Chromium draws it as the font's .notdef box."""

# Characters with Emoji_Presentation=Yes in the BMP (Unicode 15 emoji-data), plus every code point
# from U+1F000 up: drawn as colour pictures where an emoji font exists, as tofu where none does.
_EMOJI_BMP = ("\u231a\u231b\u23e9-\u23ec\u23f0\u23f3\u25fd\u25fe\u2614\u2615\u2648-\u2653\u267f\u2693\u26a1"
              "\u26aa\u26ab\u26bd\u26be\u26c4\u26c5\u26ce\u26d4\u26ea\u26f2\u26f3\u26f5\u26fa\u26fd\u2705"
              "\u270a\u270b\u2728\u274c\u274e\u2753-\u2755\u2757\u2795-\u2797\u27b0\u27bf\u2b1b\u2b1c\u2b50\u2b55")
EMOJI = re.compile(f"[{_EMOJI_BMP}\U0001F000-\U0001FAFF]")

_TOFU_JS = """(noGlyph) => {
    const skip = /[\\s\\p{M}\\p{Cf}\\p{Cc}\\p{Co}]/u;
    const groups = new Map();
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
        const node = walker.currentNode, el = node.parentElement;
        if (!el || el.closest('script, style')) continue;
        const cs = getComputedStyle(el);
        if (cs.display === 'none' || cs.visibility === 'hidden') continue;
        const font = `${cs.fontStyle} ${cs.fontWeight} 40px ${cs.fontFamily}`;
        for (const ch of node.textContent) {
            if (ch.codePointAt(0) < 128 || skip.test(ch)) continue;
            if (!groups.has(font)) groups.set(font, new Set());
            groups.get(font).add(ch);
        }
    }
    const canvas = document.createElement('canvas');
    canvas.width = 96; canvas.height = 64;
    const ctx = canvas.getContext('2d', {willReadFrequently: true});
    const draw = (font, ch) => {
        ctx.clearRect(0, 0, 96, 64);
        ctx.font = font; ctx.fillStyle = '#000'; ctx.textBaseline = 'middle';
        ctx.fillText(ch, 8, 32);
        return {w: ctx.measureText(ch).width, px: ctx.getImageData(0, 0, 96, 64).data};
    };
    const same = (a, b) => Math.abs(a.w - b.w) < 0.01 && a.px.every((v, i) => v === b.px[i]);
    const tofu = [];
    let checked = 0;
    for (const [font, chars] of groups) {
        const box = draw(font, noGlyph);
        for (const ch of chars) {
            checked += 1;
            if (same(draw(font, ch), box)) tofu.push({ch, font});
        }
    }
    return {checked, tofu};
}"""


def _tofu(page) -> dict:
    return page.evaluate(_TOFU_JS, NO_GLYPH)


@pytest.fixture(scope="module")
def stored_html(tmp_path_factory):
    """Every stored chapter, lab and solution as nbconvert HTML (lab template), by notebook path."""
    from nbconvert import HTMLExporter  # the test's own tool; imported only when the browser test runs
    import nbformat

    out = tmp_path_factory.mktemp("html")
    exporter = HTMLExporter(template_name="lab")
    pages = {}
    for nb_path in STORED:
        body, _ = exporter.from_notebook_node(nbformat.read(nb_path, as_version=4))
        html = out / f"{nb_path.parent.name}_{nb_path.stem}.html"
        html.write_text(body, encoding="utf-8")
        pages[nb_path] = html
    return pages


def _offline_page(context):
    """A page that loads only local files (nbconvert's pages link CDNs; CI has no network)."""
    page = context.new_page()
    page.route(re.compile(r"^(?!file:|data:).*"), lambda route: route.abort())
    return page


def test_the_tofu_check_sees_a_missing_glyph(browser, tmp_path) -> None:
    """The check itself: characters with a font pass, ones without a font (and emoji) are caught."""
    page = _offline_page(browser)
    html = tmp_path / "probe.html"
    html.write_text("<html><head><meta charset=\"utf-8\"></head><body><p>拼锅 ✓ ✗ – · × →</p><p>\U00010000 \U00016A40</p><p>\u2705\u274c</p></body></html>",
                    encoding="utf-8")
    page.goto(html.as_uri())
    got = _tofu(page)
    missing = {t["ch"] for t in got["tofu"]}
    assert got["checked"] >= 10
    assert "\U00010000" in missing and "\U00016A40" in missing            # Linear B, Mro: no font here
    assert not missing & set("拼锅✓✗–·×→"), missing
    assert EMOJI.findall(page.inner_text("body")) == ["\u2705", "\u274c"]
    assert not EMOJI.search("✓ ✗ → ● ▶ ★ ①")                               # text symbols are fine
    page.close()


@pytest.mark.parametrize("nb_path", STORED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_stored_notebook_has_no_tofu_no_emoji_and_clean_figures(browser, stored_html, nb_path) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = _offline_page(browser)
    page.goto(stored_html[nb_path].as_uri(), wait_until="load", timeout=60_000)
    got = _tofu(page)
    emoji = sorted(set(EMOJI.findall(page.inner_text("body"))))
    problems = [] if got["checked"] > 0 else ["no non-ASCII text found: the page did not render"]
    problems += [f"drawn as tofu: {t['ch']!r} (U+{ord(t['ch']):04X}) in {t['font']}" for t in got["tofu"]]
    problems += [f"emoji in the page (draw status marks as text, e.g. ✓ ✗): {e!r}" for e in emoji]
    problems += _figure_problems(nb_path)
    if problems:
        page.screenshot(path=str(SHOTS / f"{nb_path.parent.name}_{nb_path.stem}.png"), full_page=True)
    page.close()
    assert problems == [], "\n".join(problems)


def _figure_problems(nb_path: Path) -> list[str]:
    """Each stored figure's check (recorded when the notebook ran): problems, or a missing check."""
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    out = []
    for i, cell in enumerate(nb["cells"]):
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            if "image/png" not in data:
                continue
            check = data.get(FIGURE_CHECK_MIME)
            if check is None:
                out.append(f"cell {i}: figure stored without its check (re-execute the notebook)")
            else:
                out += [f"cell {i}: {p}" for p in check.get("problems", [])]
                if check.get("error"):
                    out.append(f"cell {i}: the check failed: {check['error']}")
    return out

"""Chinese figure text renders with a real CJK font, never as empty boxes."""

from __future__ import annotations

import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import font_manager  # noqa: E402

from batchlab.plotting import fonts  # noqa: E402


def test_cjk_font_is_configured_and_has_the_glyphs(tmp_path) -> None:
    family = fonts.setup()
    assert family, "no CJK font found: Chinese labels would be boxes"
    assert fonts.zh("吞吐量", "throughput") == "吞吐量"
    path = font_manager.findfont(font_manager.FontProperties(family=family), fallback_to_default=False)
    assert "CJK" in path or "Han" in path or "Hei" in path, path
    fig, ax = plt.subplots()
    ax.set_title("拼锅：动态批处理的吞吐量与 P99 延迟")
    ax.set_xlabel("批大小 B")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns "Glyph ... missing from font(s)"
        fig.savefig(tmp_path / "zh.png")
    plt.close(fig)


def test_english_fallback_without_a_cjk_font(monkeypatch) -> None:
    monkeypatch.setitem(fonts._STATE, "done", True)
    monkeypatch.setitem(fonts._STATE, "family", None)
    assert fonts.zh("吞吐量", "throughput") == "throughput"


def test_a_course_figure_renders_its_chinese_labels(tmp_path) -> None:
    """A real course figure: its Chinese title and labels use the CJK font and save without missing glyphs."""
    from batchlab.plotting.cases import plot_fairness

    family = fonts.setup()
    rows = [{"scheduler": s, "tenant": t, "p99_s": 1.0 + i}
            for i, (s, t) in enumerate([("补齐批", "短单"), ("补齐批", "长单"), ("连续批处理", "短单"), ("连续批处理", "长单")])]
    fig = plot_fairness(rows)
    (ax,) = fig.axes
    assert ax.get_title() == "短单与长单同锅：各租户的 p99" and ax.get_ylabel() == "p99 延迟 (s)"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["补齐批", "连续批处理"]
    assert plt.rcParams["font.sans-serif"][0] == family
    for text in (ax.title, ax.yaxis.label, *ax.get_xticklabels()):
        path = font_manager.findfont(text.get_fontproperties(), fallback_to_default=False)
        assert "CJK" in path or "Han" in path or "Hei" in path, (text.get_text(), path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns "Glyph ... missing from font(s)"
        fig.savefig(tmp_path / "fairness.png")
    plt.close(fig)

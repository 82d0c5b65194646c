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

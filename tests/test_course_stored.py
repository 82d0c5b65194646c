"""Exercises read a chapter's measured values from its stored outputs (`batchlab.course.stored`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchlab.course.stored import chapter_output, keyword_numbers, table_rows


def _chapter(tmp_path: Path, source: str, text: str | None) -> Path:
    outputs = [] if text is None else [{"output_type": "stream", "name": "stdout", "text": text}]
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "print(cost)"},
                    {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": source,
                     "outputs": outputs}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "01_x.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    return tmp_path


def test_a_printed_dataclass_and_table_are_read_back(tmp_path: Path) -> None:
    text = ("TokenCost(prefill_per_token=145.6, decode_base=3652.0, decode_per_seq=2.5e2, context_per_token=0.0)\n"
            " B   t_batch（最快一轮）   中位数\n 1        14.02 ms     21.36 ms\n32       243.15 ms   250.04 ms\n"
            "拟合 t(B) = a + b·B：a = 5.11 ms\n")
    out = chapter_output("01_x.ipynb", "print(cost)", _chapter(tmp_path, "print(cost)\nprint(table)", text))
    assert keyword_numbers(out, "TokenCost") == {"prefill_per_token": 145.6, "decode_base": 3652.0,
                                                 "decode_per_seq": 250.0, "context_per_token": 0.0}
    assert table_rows(out, 2) == [[1.0, 14.02], [32.0, 243.15]]


def test_what_is_missing_is_named(tmp_path: Path) -> None:
    folder = _chapter(tmp_path, "print(cost)", None)
    with pytest.raises(ValueError, match="no stored output: execute the chapter"):
        chapter_output("01_x.ipynb", "print(cost)", folder)
    with pytest.raises(ValueError, match="no code cell containing 'calibrate'"):
        chapter_output("01_x.ipynb", "calibrate", folder)
    with pytest.raises(ValueError, match="no chapter notebook"):
        chapter_output("99_none.ipynb", "x", folder)
    with pytest.raises(ValueError, match=r"no TokenCost\(\.\.\.\)"):
        keyword_numbers("nothing here", "TokenCost")


def test_the_exercises_read_the_shipped_chapters() -> None:
    """What the exercise answers read is in the shipped chapters 01 and 02."""
    cost = keyword_numbers(chapter_output("01_bottleneck.ipynb", "print(cost)"), "TokenCost")
    assert {"prefill_per_token", "decode_base", "decode_per_seq"} <= set(cost)
    rows = table_rows(chapter_output("02_dynamic_batching.ipynb", 'measure_batch_times(server, "embed"'), 2)
    assert [int(b) for b, _ in rows] == [1, 2, 4, 8, 16, 32] and all(t > 0 for _, t in rows)

"""Prose cannot drift from results: every number a markdown cell states has a source.

The rule (`tests/prose_numbers.py`): a number in a chapter's or a lab solution's markdown must
appear in the source article, in that notebook's own code or stored outputs, or in the allow-list of
cited constants `notebooks/cited_numbers.yaml`. Read with `json` only (nothing is executed).
"""

from __future__ import annotations

import copy
import json
import re
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

import prose_numbers as pn

ROOT = Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb"))
SHARED_ARTICLE = ROOT.parent / "shared" / "seed" / "000_3380aa626800d449.txt"
CHAPTER = NB_DIR / "02_dynamic_batching.ipynb"
#: The errata appendix restates what the chapters teach: its numbers may come from any chapter's code or outputs.
RESTATES = {"appendix_errata.ipynb": sorted(NB_DIR.glob("[0-9][0-9]_*.ipynb"))}


@pytest.fixture(scope="module")
def shared() -> set[Decimal]:
    return pn.shared_sources(NB_DIR)


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_the_article_copy_is_the_article() -> None:
    copy_text = pn.ARTICLE
    assert "「一口锅」" in copy_text and len(copy_text) > 10_000
    if not SHARED_ARTICLE.is_file():
        pytest.skip("no ../shared beside the repository: the shipped copy is the reference")
    assert copy_text == SHARED_ARTICLE.read_text(encoding="utf-8"), "src/batchlab/lm/article.txt is stale"


def test_allow_list_entries_name_what_and_source() -> None:
    entries = yaml.safe_load((NB_DIR / pn.ALLOW_LIST_NAME).read_text(encoding="utf-8"))
    assert isinstance(entries, list) and entries
    for e in entries:
        assert {"value", "what", "source"} <= set(e), e
        assert str(e["what"]).strip() and str(e["source"]).strip(), e
    values = [Decimal(str(e["value"])) for e in entries]
    assert len(values) == len(set(values)), "an allow-listed value appears twice"


def test_every_allow_listed_value_is_used() -> None:
    """No dead entries: each cited constant is stated by some notebook's prose."""
    stated: set[Decimal] = set()
    for path in NOTEBOOKS:
        for cell in _load(path)["cells"]:
            if cell["cell_type"] == "markdown":
                stated |= {v.value for _, v, _ in pn.prose_numbers("".join(cell["source"]))}
                stated |= {v.value / 100 for _, v, _ in pn.prose_numbers("".join(cell["source"])) if v.percent}
    unused = [e["value"] for e in yaml.safe_load((NB_DIR / pn.ALLOW_LIST_NAME).read_text(encoding="utf-8"))
              if Decimal(str(e["value"])) not in stated]
    assert not unused, f"cited_numbers.yaml entries no notebook states: {unused}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_prose_number_has_a_source(path: Path, shared: set[Decimal]) -> None:
    restated = set().union(*(pn.notebook_sources(_load(p)) for p in RESTATES.get(path.name, [])))
    bad = pn.unsourced_numbers(_load(path), path.name, shared | restated)
    assert not bad, ("numbers in the prose that neither the article, the notebook's code/outputs nor "
                     "notebooks/cited_numbers.yaml contain:\n" + "\n".join(map(str, bad)))


def _markdown(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def test_a_planted_contradiction_is_caught(shared: set[Decimal]) -> None:
    nb = _load(CHAPTER)
    assert pn.unsourced_numbers(nb, CHAPTER.name, shared) == []
    planted = copy.deepcopy(nb)
    planted["cells"].insert(5, _markdown("实测：拼锅后平均延迟降到 4.73 ms，吞吐 1,234.5 req/s。"))
    bad = pn.unsourced_numbers(planted, CHAPTER.name, shared)
    assert [(b.cell, b.text) for b in bad] == [(5, "4.73"), (5, "1,234.5")]
    assert "02_dynamic_batching.ipynb cell 5: '4.73'" in str(bad[0])


def test_a_number_whose_output_moved_is_caught(shared: set[Decimal]) -> None:
    """A sentence quotes an output; the notebook is re-run and the output changes: the sentence fails."""
    nb = copy.deepcopy(_load(CHAPTER))
    nb["cells"].append({"cell_type": "code", "metadata": {}, "execution_count": None, "source": "print(x)",
                        "outputs": [{"output_type": "stream", "name": "stdout", "text": "S = 3.8173\n"}]})
    nb["cells"].append(_markdown("读上面的输出：S 约为 3.82。"))
    assert pn.unsourced_numbers(nb, CHAPTER.name, shared) == []
    nb["cells"][-2]["outputs"][0]["text"] = "S = 3.6402\n"
    assert [b.text for b in pn.unsourced_numbers(nb, CHAPTER.name, shared)] == ["3.82"]


@pytest.mark.parametrize("prose, sources, ok", [
    ("S = 2.47", "2.470", True),            # a trailing zero
    ("1,250 个实例", "1250", True),          # thousands separator
    ("58 ms", "58.0", True),
    ("平均 4.6 s", "4.57", True),            # rounded to the digits shown
    ("平均 4.5 s", "4.57", False),
    ("22%", "0.219", True),                 # a percentage matches its fraction
    ("0.22", "22%", True),
    ("约 1300 个", "1296", True),            # 约: significant digits
    ("1300 个", "1296", False),              # no 约: as written
    ("约 45 ms", "44.3", True),              # 约: within 2 %
    ("约 45 ms", "41.0", False),
])
def test_matching_rules(prose: str, sources: str, ok: bool) -> None:
    [(_, value, _)] = pn.prose_numbers(prose)
    assert pn.matches(value, pn.numbers_in_source(sources)) is ok


@pytest.mark.parametrize("prose", [
    "第 3 章", "第 1、2 章", "见 2.1 节", "## 4.4 拼批", "1. 第一条\n2. 第二条", "H100 与 H200", "Llama-3-8B 的 fp16",
    "server issue #4667", "Orca（OSDI '22）", "Bailey（J. R. Statist. Soc. B 16(1):80–87, 1954）", "`max_batch_size: 16`",
    "[06 · 成本](06_engineering.ipynb#成本)", "$t_{\\text{step}}(B)$ 与 $z^K$", "Q7 和 Lab 3", "M/D/1 队列",
])
def test_references_and_names_are_not_numbers(prose: str) -> None:
    assert pn.prose_numbers(prose) == []


def test_latex_keeps_its_values_but_not_its_indices() -> None:
    assert [raw for raw, _, _ in pn.prose_numbers(r"$t(B)=4+0.5B$，$\sum_{i=1}^{B} L_i$")] == ["4", "0.5"]


def test_a_bad_allow_list_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text("- {value: 989, what: H100 dense BF16 TFLOP/s}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="value, what and source"):
        pn.load_allow_list(tmp_path / "x.yaml")


GLUED_UNIT = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:\.\d+)?(ms|µs|us|s)(?![A-Za-z])")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_units_are_spaced(path: Path) -> None:
    """One unit style: 「5 ms」, not 「5ms」 (quotes of the article keep the article's spelling)."""
    bad = []
    for i, cell in enumerate(_load(path)["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        text = re.sub(r"`[^`\n]*`|\$[^$]*\$", " ", "".join(cell["source"]))
        for m in GLUED_UNIT.finditer(text):
            quoted = text[max(0, m.start() - 6):m.end() + 2]
            if quoted not in pn.ARTICLE:
                bad.append(f"cell {i}: {m.group(0)!r}")
    assert not bad, f"{path.name}: write a space between number and unit: {bad}"


def test_the_unit_rule_catches_a_glued_unit() -> None:
    assert GLUED_UNIT.search("延时设为 5ms") and not GLUED_UNIT.search("延时设为 5 ms")
    assert not GLUED_UNIT.search("Llama-3-8B 与 H100")


def test_the_command_line_names_a_missing_notebook(capsys: pytest.CaptureFixture[str]) -> None:
    assert pn.main(["no_such_notebook.ipynb"]) == 2
    assert "no such notebook: no_such_notebook.ipynb" in capsys.readouterr().err


def test_the_command_line_lists_what_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nb = _load(CHAPTER)
    nb["cells"].append(_markdown("实测 4.73 ms。"))
    bad = tmp_path / "bad.ipynb"
    bad.write_text(json.dumps(nb), encoding="utf-8")
    assert pn.main([str(bad), "--notebooks-dir", str(NB_DIR)]) == 1
    assert "bad.ipynb cell" in capsys.readouterr().out


# --------------------------------------------------------------------------- ratios a sentence derives


def _code(text: str) -> dict:
    return {"cell_type": "code", "metadata": {}, "execution_count": None, "source": "print(r)",
            "outputs": [{"output_type": "stream", "name": "stdout", "text": text}]}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_derived_ratio_is_printed_above(path: Path) -> None:
    bad = pn.underived_ratios(_load(path), path.name)
    assert not bad, ("a sentence states a ratio (翻倍, 减半, 三倍 …) that no output of its section prints: "
                     "print the ratio in the cell that measured it, or say what the output shows:\n"
                     + "\n".join(map(str, bad)))


def test_a_planted_doubling_where_the_output_shows_1_3_fails() -> None:
    nb = {"cells": [_markdown("## 预算"), _code("吞吐 ×1.3（预算 256 → 512）\n"),
                    _markdown("预算翻倍，吞吐也翻倍。")]}
    [bad] = pn.underived_ratios(nb, "planted.ipynb")
    assert (bad.cell, bad.word) == (2, "翻倍") and "[1.8, 2.25]" in str(bad)
    nb["cells"][1] = _code("吞吐 ×1.93（预算 256 → 512）\n")
    assert pn.underived_ratios(nb, "planted.ipynb") == []


def test_a_ratio_printed_in_another_section_does_not_count() -> None:
    nb = {"cells": [_markdown("## 一"), _code("TTFT 低 2.0 倍\n"), _markdown("## 二"), _code("吞吐 ×1.3\n"),
                    _markdown("吞吐近乎翻倍。")]}
    assert [b.cell for b in pn.underived_ratios(nb, "x.ipynb")] == [4]


@pytest.mark.parametrize("prose, checked", [
    ("预算翻倍，并发和吞吐近乎翻倍。", ["翻倍"]),     # the first 翻倍 is a setting: no measured quantity before it
    ("吞吐没有翻倍。", []),                          # negated
    ("平均延迟不到不合批时的一半。", []),              # bounded
    ("p95 就大了一半以上。", []),                    # bounded
    ("只换分母，利用率就能翻倍。", []),                # hypothetical
    ("p95 大了一半。", ["大了一半"]),
    ("到达率翻倍时，队伍越排越长。", []),              # a setting
])
def test_which_ratio_words_are_checked(prose: str, checked: list[str]) -> None:
    assert [w for w, *_ in pn.ratio_words(prose)] == checked

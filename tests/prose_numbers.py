"""`python tests/prose_numbers.py NOTEBOOK...`: every number a notebook's prose states must
appear (as written or rounded as shown) in the source article (`batchlab.lm.vocab.ARTICLE`), the notebook's code or outputs, or
the allow-list of cited constants; references, identifiers and numbering are not claims (`_DROP`)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from typing import Iterable, Sequence

import yaml

from batchlab.lm.vocab import ARTICLE
from batchlab.paths import repo_root

ALLOW_LIST_NAME = "cited_numbers.yaml"  # the allow-list of cited constants, next to the notebooks

_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_SOURCE_NUMBER = re.compile(r"(?<![\d.])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)(%?)")
_PROSE_NUMBER = re.compile(rf"(?<![A-Za-z0-9_.,'#])({_NUM})(?![A-Za-z0-9_]|\.\d|,\d{{3}})")
_APPROX = re.compile(r"(约|近|大约|将近|接近|≈|~|～|上下)\s*$")
_APPROX_AFTER = re.compile(r"^\s*\S{0,4}?(左右|上下)")

# Patterns removed from prose before numbers are read (each replaced by a space).
_DROP = [
    re.compile(r"```.*?```", re.S),                                  # fenced code
    re.compile(r"`[^`\n]*`"),                                         # inline code
    re.compile(r"!?\[[^\]]*\]\([^)\s]*\.ipynb(?:#[^)]*)?\)"),          # links to a chapter: its number
    re.compile(r"!?\[([^\]]*)\]\([^)]*\)"),                          # other links: keep the text (see below)
    re.compile(r"<[^>]+>"),                                           # html tags
    re.compile(r"第\s*\d+(?:\.\d+)*(?:\s*[、,，和与及至–\-~]\s*\d+(?:\.\d+)*)*\s*(?:章|节|题|条|步|行|格|档|类)"),
    re.compile(r"\d+(?:\.\d+)+\s*节"),                               # 「2.1 节」
    re.compile(r"练习\s*\d+\.\d+"),                                 # 「练习 2.3」: an exercise's number
    re.compile(r"§\s*\d+(?:\.\d+)*"),
    re.compile(r"(?:Lab|lab|练习|实验|Part|Q|误区|规则|rule|Rule|cell|Cell|模式|成因|读法|缺陷)\s*\d+(?:\s*[–\-、,，和与]\s*\d+)*"),
    re.compile(r"#\d+"),                                              # issue / PR numbers
    re.compile(r"（约\s*\d+\s*分钟）"),                               # a lab's time estimate
    re.compile(r"\*\*用时\*\*\s*[：:]?\s*约\s*\d+\s*分钟"),                  # a chapter's reading-time estimate
    re.compile(r"'\d\d\b"),                                           # OSDI '22
    re.compile(r"\d{4}-\d{2}-\d{2}"),                                 # dates
    re.compile(r"\d+\(\d+\):\d+(?:[–\-]\d+)?"),                      # journal volume(issue):pages
    re.compile(r"(?<=[（(\s,，])(?:19[5-9]\d|20[0-3]\d)(?=\s*[)）,，;；]|年)"),   # citation years
    re.compile(r"[A-Za-z][A-Za-z0-9_.\-/:+']*\d[A-Za-z0-9_.\-/:+']*"),  # H100, Llama-3-8B, M/D/1, arXiv:…
    re.compile(r"\d+(?:\.\d+)?[A-Za-z][A-Za-z0-9_]*"),              # 7B, 40GB, 8k (a size in a name)
]
_HEADING_NUMBER = re.compile(r"^(#{1,6}\s+)\d+(?:\.\d+)*\.?\s", re.M)
_LIST_MARKER = re.compile(r"^(\s*(?:>\s*)*)\d+[.)]\s", re.M)
_MATH = re.compile(r"\$\$(.+?)\$\$|\$([^$\n]+?)\$", re.S)
_LATEX_SCRIPT = re.compile(r"[_^](?:\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}|\\?[A-Za-z0-9])")
_LATEX_FRAC = re.compile(r"\\t?frac(\d)(\d)")
_LATEX_CMD = re.compile(r"\\[A-Za-z]+")


@dataclass(frozen=True)
class ProseNumber:
    """One number a markdown cell states, with enough context to find it."""

    notebook: str
    cell: int
    text: str
    context: str

    def __str__(self) -> str:
        return f"{self.notebook} cell {self.cell}: {self.text!r} in …{self.context}…"


@dataclass(frozen=True)
class _Value:
    value: Decimal
    decimals: int
    approx: bool
    percent: bool


def _decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None


def numbers_in_source(text: str) -> set[Decimal]:
    """Every number in code, outputs or the article; a percentage also counts as its fraction."""
    out: set[Decimal] = set()
    for m in _SOURCE_NUMBER.finditer(text):
        v = _decimal(m.group(1))
        if v is None:
            continue
        out.add(v)
        if m.group(2):
            out.add(v / 100)
    return out


def _strip_math(text: str) -> str:
    """LaTeX with sub/superscripts and command names removed; `\\frac12` becomes `1 2`."""
    def clean(m: re.Match) -> str:
        body = m.group(1) if m.group(1) is not None else m.group(2)
        body = _LATEX_FRAC.sub(r"{\1}{\2}", body)
        while (new := _LATEX_SCRIPT.sub(" ", body)) != body:
            body = new
        body = _LATEX_CMD.sub(" ", body)
        # inside maths a letter after a number is a product (0.5B), not a name: split them
        body = re.sub(r"(\d)([A-Za-z])", r"\1 \2", body)
        body = re.sub(r"([A-Za-z])(\d)", r"\1 \2", body)
        return " " + body + " "
    return _MATH.sub(clean, text)


def prose_text(markdown: str) -> str:
    """The part of a markdown cell whose numbers are claims (see the module docstring)."""
    text = _HEADING_NUMBER.sub(r"\1", markdown)
    text = _LIST_MARKER.sub(r"\1", text)
    text = _strip_math(text)
    for pat in _DROP:  # a pattern with a group is a link: keep its text
        text = pat.sub((lambda m: f" {m.group(1)} ") if pat.groups else " ", text)
    return text


def prose_numbers(markdown: str) -> list[tuple[str, _Value, str]]:
    """(as written, value, context) for each number the cell states."""
    text = prose_text(markdown)
    out = []
    for m in _PROSE_NUMBER.finditer(text):
        raw = m.group(1)
        value = _decimal(raw)
        if value is None:
            continue
        before, after = text[max(0, m.start() - 4):m.start()], text[m.end():m.end() + 8]
        decimals = len(raw.split(".")[1]) if "." in raw else 0
        approx = bool(_APPROX.search(before) or _APPROX_AFTER.search(after))
        percent = after.lstrip().startswith(("%", "％"))
        context = text[max(0, m.start() - 25):m.end() + 15].replace("\n", " ")
        out.append((raw, _Value(value, decimals, approx, percent), context.strip()))
    return out


def _rounds_to(source: Decimal, target: Decimal, decimals: int) -> bool:
    q = Decimal(1).scaleb(-decimals)
    return any(source.quantize(q, rounding=r) == target for r in (ROUND_HALF_UP, ROUND_HALF_EVEN))


def _significant_round(source: Decimal, target: Decimal) -> bool:
    """`target` (an integer with trailing zeros, e.g. 1300) is `source` rounded to its significant digits."""
    if target != target.to_integral_value() or target == 0:
        return False
    digits = str(int(abs(target)))
    zeros = len(digits) - len(digits.rstrip("0"))
    return zeros > 0 and _rounds_to(source.scaleb(-zeros), target.scaleb(-zeros), 0)


def matches(value: _Value, sources: set[Decimal]) -> bool:
    """True when some source number is `value` as written, rounded as the prose rounds it, or
    (for 约/近/≈) within 2 % of it; a percentage may also match the fraction."""
    targets = [value.value] + ([value.value / 100] if value.percent else [])
    for k, target in enumerate(targets):
        decimals = value.decimals + (2 if k else 0)
        if target in sources:
            return True
        lo, hi = target - Decimal(1).scaleb(-decimals), target + Decimal(1).scaleb(-decimals)
        for s in sources:
            if lo <= s <= hi and _rounds_to(s, target, decimals):
                return True
            if value.approx and target and (abs(s - target) <= abs(target) * Decimal("0.02")
                                            or _significant_round(s, target)):
                return True
    return False


def load_allow_list(path: Path) -> set[Decimal]:
    """The values of `cited_numbers.yaml` (a list of {value, what, source}); every entry needs all three."""
    entries = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    out = set()
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not {"value", "what", "source"} <= set(e) or not str(e["source"]).strip():
            raise ValueError(f"{path.name}: entry {i} needs value, what and source: {e!r}")
        v = _decimal(str(e["value"]))
        if v is None:
            raise ValueError(f"{path.name}: entry {i} has a value that is not a number: {e['value']!r}")
        out.add(v)
    return out


def notebook_sources(nb: dict) -> set[Decimal]:
    """Numbers in the notebook's code cells and their stored text outputs."""
    chunks: list[str] = []
    for cell in (c for c in nb["cells"] if c["cell_type"] == "code"):
        chunks.append("".join(cell["source"]))
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            chunks += ["".join(out.get("text", "")), out.get("evalue", "") if out.get("output_type") == "error" else "",
                       *("".join(data[k]) for k in ("text/plain", "text/markdown", "text/html") if k in data)]
    return numbers_in_source("\n".join(chunks))


def unsourced_numbers(nb: dict, name: str, shared: set[Decimal]) -> list[ProseNumber]:
    """The numbers of `nb`'s markdown cells that neither `shared` (article + allow-list) nor the
    notebook's own code and outputs contain."""
    sources = shared | notebook_sources(nb)
    return [ProseNumber(name, i, raw, context) for i, cell in enumerate(nb["cells"]) if cell["cell_type"] == "markdown"
            for raw, value, context in prose_numbers("".join(cell["source"])) if not matches(value, sources)]


# --------------------------------------------------------------------------- ratios a sentence derives
#
# 「吞吐近乎翻倍」 names no number, yet it states one: a ratio of about 2. Where such a word follows a
# measured quantity in the same clause, a ratio in that range must be printed by a code cell above
# (「×1.93」, 「1.9 倍」): the writer's arithmetic is then the notebook's, and a re-run that moves the
# ratio fails the sentence. Negated, bounded or hypothetical forms (「没有翻倍」「不到一半」「一倍以上」「就能翻倍」)
# are not checked.

#: A measured quantity: the ratio word must follow one of these in the same clause.
_MEASURED = ("吞吐", "延迟", "p50", "p95", "p99", "TTFT", "ITL", "TPOT", "tokens/s", "token/s", "req/s",
             "请求/s", "耗时", "执行时间", "利用率", "容量", "并发", "加速比", "goodput", "块数", "显存")
#: ratio word -> the range of the measured factor r >= 1 it states (a halving is r = 2).
_RATIO_WORDS: tuple[tuple[str, float, float], ...] = (
    (r"翻了?(?:一)?倍|加倍|翻番|涨到两倍|变成两倍|减半|降到一半|降了一半|少了一半|砍掉一半", 1.8, 2.25),
    (r"大了一半|多出一半|高出一半|多了一半|涨了一半", 1.4, 1.6),
    (r"翻两番|四倍", 3.6, 4.5),
    (r"三倍", 2.7, 3.4),
    (r"十倍", 8.0, 12.5),
)
_NEGATED = re.compile(r"(不到|没有|没|未|远不到|不足|不是|并非|不可能|不会|远不止|超过|能|会|可以|可能)"
                      r"\s*(翻|涨到|变成|达到|降到)?\s*$")
_BOUND_AFTER = re.compile(r"^\s*(以上|多|有余|还多|不止)")
_CLAUSE_END = "，。；：！？,;:!?\n（）()"
_PRINTED_RATIO = re.compile(rf"[×x]\s*({_NUM})|({_NUM})\s*(?:倍|[×x](?![A-Za-z0-9]))")


@dataclass(frozen=True)
class RatioWord:
    """A word in a markdown cell that states a measured ratio, and the range it states."""

    notebook: str
    cell: int
    word: str
    lo: float
    hi: float
    context: str

    def __str__(self) -> str:
        return (f"{self.notebook} cell {self.cell}: {self.word!r} states a ratio in [{self.lo:g}, {self.hi:g}] "
                f"that no output above prints, in …{self.context}…")


def ratio_words(markdown: str) -> list[tuple[str, float, float, str]]:
    """(word, lo, hi, context) for each ratio word that follows a measured quantity in its clause."""
    text = markdown
    for pat in _DROP[:2] + [_DROP[4]]:  # code and html only: 「p95」 and 「tokens/s」 name the quantity
        text = pat.sub(" ", text)
    out = []
    for pattern, lo, hi in _RATIO_WORDS:
        for m in re.finditer(pattern, text):
            start = m.start()
            while start > 0 and text[start - 1] not in _CLAUSE_END:
                start -= 1
            clause = text[start:m.start()]
            if not any(q.lower() in clause.lower() for q in _MEASURED):
                continue
            if _NEGATED.search(clause) or _BOUND_AFTER.search(text[m.end():m.end() + 4]):
                continue
            out.append((m.group(0), lo, hi, text[max(0, m.start() - 25):m.end() + 10].replace("\n", " ").strip()))
    return out


def printed_ratios(cells: Iterable[dict]) -> list[float]:
    """Every ratio the code cells print (a number with 倍 or ×), as a factor >= 1."""
    out = []
    for cell in (c for c in cells if c["cell_type"] == "code"):
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            text = "".join(o.get("text", "")) + "".join(data.get("text/plain", ""))
            for m in _PRINTED_RATIO.finditer(text):
                v = float((m.group(1) or m.group(2)).replace(",", ""))
                if v > 0:
                    out.append(v if v >= 1 else 1 / v)
    return out


def section_above(cells: Sequence[dict], index: int) -> list[dict]:
    """The cells above cell `index` back to the last heading: what the sentence reads. A section with
    no code cell there (a summary, 小结) reads every cell above it."""
    start = index
    while start > 0 and not (cells[start - 1]["cell_type"] == "markdown"
                             and "".join(cells[start - 1]["source"]).lstrip().startswith("#")):
        start -= 1
    section = list(cells[max(start - 1, 0):index])
    return section if any(c["cell_type"] == "code" for c in section) else list(cells[:index])


def underived_ratios(nb: dict, name: str) -> list[RatioWord]:
    """The ratio words of `nb`'s markdown cells that no output of a code cell above supports."""
    bad = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        words = ratio_words("".join(cell["source"]))
        ratios = printed_ratios(section_above(nb["cells"], i)) if words else []
        bad += [RatioWord(name, i, w, lo, hi, ctx) for w, lo, hi, ctx in words
                if not any(lo <= r <= hi for r in ratios)]
    return bad


def shared_sources(notebooks_dir: Path) -> set[Decimal]:
    """Numbers of the source article and of the allow-list that sits in `notebooks_dir`."""
    return numbers_in_source(ARTICLE) | load_allow_list(notebooks_dir / ALLOW_LIST_NAME)


def check_notebooks(paths: Iterable[Path], notebooks_dir: Path) -> list[ProseNumber]:
    """Every unsourced prose number in the notebooks at `paths`."""
    shared = shared_sources(notebooks_dir)
    return [bad for p in map(Path, paths) for bad in
            unsourced_numbers(json.loads(p.read_text(encoding="utf-8")), f"{p.parent.name}/{p.name}", shared)]


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: list the unsourced numbers of the given notebooks; exit 1 when there are any."""
    p = argparse.ArgumentParser(prog="python tests/prose_numbers.py")
    p.add_argument("paths", nargs="+", type=Path)
    p.add_argument("--notebooks-dir", type=Path, default=None,
                   help="folder with cited_numbers.yaml (default: notebooks/ of the repo)")
    args = p.parse_args(argv)
    folder = args.notebooks_dir or repo_root() / "notebooks"
    missing = [q for q in args.paths if not q.is_file()]
    if missing:
        print(f"prose_numbers: no such notebook: {missing[0]}", file=sys.stderr)
        return 2
    bad = check_notebooks(args.paths, folder)
    for b in bad:
        print(b)
    print(f"{len(bad)} unsourced number(s)", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

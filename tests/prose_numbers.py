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
    re.compile(r"§\s*\d+(?:\.\d+)*"),
    re.compile(r"(?:Lab|lab|实验|Part|Q|误区|规则|rule|Rule|cell|Cell|模式|成因|读法|缺陷|练习)\s*\d+(?:\s*[–\-、,，和与]\s*\d+)*"),
    re.compile(r"#\d+"),                                              # issue / PR numbers
    re.compile(r"（约\s*\d+\s*分钟）"),                               # a lab's time estimate
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

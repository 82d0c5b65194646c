"""A learner's config block read the way Triton reads it; a refusal names the line and column
in the learner's text, quotes it with a caret and says in Chinese what Triton expected."""

from __future__ import annotations

from typing import Any

from batchlab.config_pbtxt import ConfigError, edit_config, parse_config
from batchlab.labs._core import Grader

_PAIRS = {"}": "{", "]": "["}
_OPEN = {"{": "}", "[": "]"}

def _quote(text: str, line: int, column: int) -> str:
    lines = text.split("\n")
    if not 1 <= line <= len(lines):
        return ""
    src = lines[line - 1].rstrip()
    caret = " " * max(column - 1, 0) + "^"
    return f"\n      {line:>3} | {src}\n          | {caret}"


def unbalanced(text: str) -> tuple[int, int, str] | None:
    """(line, column, Chinese message) of the first brace or bracket without a partner, or None
    (strings and # comments skipped, as Triton does)."""
    stack: list[tuple[str, int, int]] = []
    line, col, i, n = 1, 0, 0, len(text)
    while i < n:
        ch = text[i]
        col += 1
        if ch == "\n":
            line, col = line + 1, 0
        elif ch == "#":
            while i + 1 < n and text[i + 1] != "\n":
                i += 1
        elif ch in "\"'":
            j = i + 1
            while j < n and text[j] != ch and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            col += j - i
            i = j
        elif ch in _OPEN:
            stack.append((ch, line, col))
        elif ch in _PAIRS:
            if not stack:
                return line, col, f"多了一个 `{ch}`：它前面没有和它配对的 `{_PAIRS[ch]}`"
            opener, ol, oc = stack.pop()
            if _OPEN[opener] != ch:
                return line, col, (f"这里的 `{ch}` 和第 {ol} 行第 {oc} 列的 `{opener}` 配不上对："
                                   f"`{opener}` 要用 `{_OPEN[opener]}` 闭合")
        i += 1
    if stack:
        opener, ol, oc = stack[-1]
        return ol, oc, f"这个 `{opener}` 没有闭合：少了一个 `{_OPEN[opener]}`（每个 `{opener}` 都要有配对的 `{_OPEN[opener]}`）"
    return None


def explain(text: str, exc: ConfigError | None = None) -> str:
    """One message about why Triton cannot read the learner's `text`: where, the quoted line, what it expected."""
    found = unbalanced(text)
    if found is not None:
        line, col, why = found
        return f"你的块第 {line} 行第 {col} 列：{why}。{_quote(text, line, col)}"
    if exc is None:
        return "Triton 读不懂这段文本"
    what = exc.explanation().rstrip("。")
    if exc.line:
        return f"你的块第 {exc.line} 行第 {exc.column} 列：{what}。{_quote(text, exc.line, exc.column)}"
    return f"Triton 读不懂你的块：{what}。"


def read_block(g: Grader, text: Any, base: str, at: str = "", what: str = "你的块", args: str = "") -> Any:
    """`edit_config(base, text, at=at)`, or fail `g` with an `explain`ed message."""
    if not isinstance(text, str):
        g.fail(f"{what}应返回 config.pbtxt 文本（str），收到的是 {type(text).__name__}")
    try:
        return edit_config(base, text, at=at)
    except ConfigError as exc:
        g.fail(f"{what}{args}Triton 读不懂。" + explain(text, exc))
    except ValueError as exc:
        g.fail(f"{what}{args}有问题：{exc}")


def call_block(g: Grader, fn: Any, args: tuple, base: str, keyword: str, what: str, at: str = "") -> Any:
    """`read_block` of the learner's `fn(*args)`, which must be a ``keyword { ... }`` block, or fail `g`."""
    text = g.call(fn, *args)
    if not isinstance(text, str) or keyword not in text:
        g.fail(f"{what} 应返回形如 {keyword} {{ ... }} 的文本（参数 {args}），收到的是 {text!r}"[:200])
    return read_block(g, text, base, at=at, what=what, args=f"（参数 {args}）生成的块")


def read_config(g: Grader, text: Any, what: str = "改过的配置") -> Any:
    """`parse_config(text)` (a whole config.pbtxt), or fail `g` with an `explain`ed message."""
    if not isinstance(text, str):
        g.fail(f"{what}应是 config.pbtxt 文本（str），收到的是 {type(text).__name__}")
    try:
        return parse_config(text)
    except ConfigError as exc:
        g.fail(f"{what}Triton 读不懂。" + explain(text, exc).replace("你的块", "配置"))

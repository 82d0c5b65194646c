"""Checks of Lab 4 (连续批处理): the admission policy, chunked prefill's split, η and the config limits."""

from __future__ import annotations

import math
from typing import Any, Callable

from batchlab.config_pbtxt import load_config_text, parse_config
from batchlab.labs._blocks import read_config
from batchlab.labs._core import Grader, check
from batchlab.batching.policies import prefill_chunks
from batchlab.batching.request import GenerationRequest
from batchlab.batching.scheduler import KV_TOKEN_BUDGET, MAX_ACTIVE


def _seq(i: int, prompt: int, max_tokens: int, generated: int = 0) -> Any:
    """A scheduler `GenerationRequest` of `prompt` tokens that has generated `generated` (its KV: all but the last)."""
    return GenerationRequest(i, [1] * (prompt + generated), max_tokens, prompt_tokens=prompt, generated=generated,
                   computed=prompt + generated - 1 if generated else 0)


def _ints(g: Grader, got: Any, name: str, wanted: str) -> list[int]:
    """`got` as a list of ints, else the check stops: `name` returned None (it should return `wanted`),
    or something that is not a list of ints."""
    if got is None:
        g.fail(f"{name} 返回了 None：应返回{wanted}")
    try:
        return [int(i) for i in got]
    except (TypeError, ValueError):
        g.fail(f"{name} 应返回整数（int）的列表，收到的是 {got!r}"[:200])


def _indices(g: Grader, got: Any) -> list[int]:
    return _ints(g, got, "admit", "要接纳的序列在 waiting 里的下标列表（可以是空列表 []）")


@check("lab4.q1", points=4, title="写接纳策略（admission policy）")
def check_admit(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(waiting, active, max_active, kv_token_budget) -> [indices into waiting]`."""
    small = [_seq(i, 16, 32) for i in range(3)]
    got = _indices(g, g.call(fn, small, [], MAX_ACTIVE, KV_TOKEN_BUDGET))
    empty = _indices(g, g.call(fn, [], [_seq(9, 16, 32)], MAX_ACTIVE, KV_TOKEN_BUDGET))
    g.expect(got == [0, 1, 2] and empty == [],
             "额度充足时按到达顺序全部接纳；没人等时返回 []",
             f"3 条小请求、没有活跃序列、额度充足时应返回 [0, 1, 2]（没人等时返回 []），你的是 {got} / {empty}")
    active = [_seq(10 + i, 16, 32, generated=5) for i in range(6)]
    waiting = [_seq(i, 16, 32) for i in range(4)]
    got = _indices(g, g.call(fn, waiting, active, 8, 100_000))
    g.expect(got == [0, 1], "max_active = 8、已有 6 条活跃：只再接纳 2 条",
             f"已有 6 条活跃序列、max_active = 8 时应只接纳 [0, 1]，你的是 {got}：活跃数加上新接纳的不能超过 max_active")
    # active sequences have generated little: kv_tokens is far below what they reserved
    active = [_seq(20, 1000, 2000, generated=10)]           # reserves 3000, holds 1010 now
    waiting = [_seq(0, 500, 300), _seq(1, 100, 96)]        # 800 and 196
    got = _indices(g, g.call(fn, waiting, active, MAX_ACTIVE, KV_TOKEN_BUDGET))
    tight = [_seq(0, 1000, 500), _seq(1, 50, 50)]          # 1500 (does not fit) and 100 (would)
    got2 = _indices(g, g.call(fn, tight, active, MAX_ACTIVE, KV_TOKEN_BUDGET))
    # [1] respects the budget; overtaking is graded below
    g.expect(got == [0, 1] and got2 in ([], [1]), "KV 预算按 prompt + max_tokens 预留：活跃序列的预留也算在内",
             "KV 预算要按预留量算：每条序列占 prompt_tokens + max_tokens（GenerationRequest.reserved_tokens），"
             "活跃序列现在虽然只用了 kv_tokens 个，但它可能长到预留的那么多（不预留就可能中途爆显存）"
             if got2 in ([0, 1], [0]) else f"已预留 3000、预算 {KV_TOKEN_BUDGET} 时，等待的 [800, 196] 应全部接纳（[0, 1]），"
             f"而 [1500, 100] 一条也不接纳；你的是 {got} 与 {got2}")
    g.expect(got2 != [1], "先来先服务：队首放不下时，后面的也不插队",
             "你让后面的小请求插了队（返回 [1]）：本题要求先来先服务——队首放不下就停，否则大请求可能永远排不上（饿死）")


def _chunk_list(g: Grader, fn: Callable[..., Any], remaining: list[int], n_decoding: int, budget: int) -> list[int]:
    """The learner's split for one case, as ints, one per prompt (else the check stops, naming why)."""
    got = g.call(fn, list(remaining), n_decoding, budget)
    out = _ints(g, got, "prefill_chunks", "一个列表，每条正在预填充的提示一个数（这一步给它几个 token）")
    if len(out) != len(remaining):
        g.fail(f"remaining 有 {len(remaining)} 条提示，你返回了 {len(out)} 个数（{out}）："
               "每条提示都要有一个数，这一步不给它 token 就写 0")
    return out


def _chunk_mistake(remaining: list[int], n_decoding: int, budget: int, got: list[int], want: list[int]) -> str:
    """What is wrong with `got` on this case, in Chinese: the typical mistake it shows, else the answer."""
    case = f"remaining = {remaining}、{n_decoding} 条解码、max_num_tokens = {budget} 时你返回了 {got}"
    if any(c < 0 for c in got):
        return (f"{case}：出现了负数。解码已经占满（甚至超过）预算时，提示这一步一个 token 也不算，"
                "每条都返回 0，不是负数")
    if any(c > left for c, left in zip(got, remaining)):
        return f"{case}：有的块比这条提示剩下的 token 还多——每块最多是它剩下的那么多（min(剩下的, 还有的预算)）"
    if got == remaining and sum(got) + n_decoding > budget:
        return (f"{case}：整段提示一次算完了，没有分块。分块预填充每一步最多算 max_num_tokens 个 token，"
                "没算完的留到下一步")
    if sum(got) + n_decoding > budget and sum(got) <= budget:
        return (f"{case}：解码的 token 没有先占预算。{n_decoding} 条解码每条先占 1 个，提示只能分剩下的 "
                f"{max(0, budget - n_decoding)} 个；你这一步一共要算 {sum(got) + n_decoding} 个，超了预算")
    if sum(got) + n_decoding > budget:
        return f"{case}：这一步一共要算 {sum(got) + n_decoding} 个 token，超了预算 {budget}"
    if any(got[j] < remaining[j] and any(got[k] > 0 for k in range(j + 1, len(got))) for j in range(len(got))):
        return (f"{case}：后来的提示插了队——前面的提示还没分够，后面的就分到了 token。按队列顺序给："
                "先让最早的提示拿满（它剩下的或预算剩下的），再轮到下一条")
    return f"{case}，应为 {want}"


@check("lab4.q2", points=5, title="分块预填充：这一步每条提示算几个 token", shortcuts=(prefill_chunks,))
def check_chunks(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(remaining, n_decoding, max_num_tokens) -> [chunk per prefilling prompt, in queue order]`."""
    cases = [  # (remaining, n_decoding, max_num_tokens, want, what the right answer shows)
        ([100], 0, 32, [32], "没有解码时，长提示每步最多分到整个预算（[100] → [32]），其余留到下一步"),
        ([100], 4, 32, [28], "4 条解码先各占 1 个 token，提示只分剩下的 28 个"),
        ([3, 4], 0, 32, [3, 4], "短提示不会分到比它剩下的更多的 token"),
        ([10, 100, 5], 4, 32, [10, 18, 0], "按队列顺序：最早的提示先拿满，下一条分剩下的，再后面的等下一步"),
    ]
    for remaining, n_decoding, budget, want, good in cases:
        got = _chunk_list(g, fn, remaining, n_decoding, budget)
        g.expect(got == want, good, _chunk_mistake(remaining, n_decoding, budget, got, want))
    full = [(_chunk_list(g, fn, r, d, m), r, d, m) for r, d, m in (([50, 50], 32, 32), ([50], 40, 32))]
    bad = [_chunk_mistake(r, d, m, got, [0] * len(r)) for got, r, d, m in full if got != [0] * len(r)]
    g.expect(not bad, "解码占满（或超过）预算时，提示这一步都分到 0 个 token（不是负数）", bad[0] if bad else "")


def _params(cfg: Any) -> dict[str, str]:
    return {k: v.string_value for k, v in cfg.parameters.items()}


@check("lab4.q4", points=3, title="在配置里改调度上限")
def check_with_limits(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(config_text, max_active, kv_token_budget) -> config_text`."""
    base = load_config_text("lm_stream")
    before = _params(parse_config(base))
    results = []
    for ma, kv in ((2, 600), (16, 8192)):
        text = g.call(fn, base, ma, kv)
        if not isinstance(text, str):
            g.fail(f"with_limits 应返回 config.pbtxt 文本，收到的是 {type(text).__name__}")
        cfg = read_config(g, text, what="with_limits 返回的配置")
        results.append((ma, kv, _params(cfg), cfg))
    g.expect(all(p.get("max_active") == str(ma) for ma, _, p, _ in results),
             "parameters 里的 max_active 改对了（字符串值）",
             f"max_active 应为 {[str(r[0]) for r in results]}，读到 {[r[2].get('max_active') for r in results]}")
    g.expect(all(p.get("kv_token_budget") == str(kv) for _, kv, p, _ in results),
             "kv_token_budget 改对了",
             f"kv_token_budget 应为 {[str(r[1]) for r in results]}，读到 {[r[2].get('kv_token_budget') for r in results]}")
    others = all({k: v for k, v in p.items() if k not in ("max_active", "kv_token_budget")} ==
                 {k: v for k, v in before.items() if k not in ("max_active", "kv_token_budget")}
                 and c.name == "lm_stream" for _, _, p, c in results)
    g.expect(others, "其余参数和字段原样保留",
             "别的参数（max_tokens_limit、blas_threads…）或模型名被改动了：只改这两个参数的值")


@check("lab4.q3", points=3, title="算出请求级批处理的 η")
def check_eta(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(num_tokens, padded_steps) -> η`."""
    got = g.number(g.call(fn, [5, 7, 3], [0, 0, 0]), "eta")
    g.expect(math.isclose(got, 1.0), "没有 padding 时 η = 1",
             f"没有 padding（padded_steps 全为 0）时 η 应为 1，你的是 {got}")
    n, pad = [10, 2, 4], [0, 8, 0]   # a batch of 10 steps (10 and 2 tokens) and one of 4 steps
    got = g.number(g.call(fn, n, pad), "eta")
    want = 16 / 24   # Σn / Σ(n + padding)
    per_request = sum(a / (a + b) for a, b in zip(n, pad)) / len(n)
    wrong = [(per_request, f"你对每个请求的比例取了平均（{per_request:.3f}）：η 是总的有用 token 步数 ÷ 总的计算槽位，"
                           f"Σn / Σ(n + padding) = {want:.3f}"),
             (1 / want, f"倒过来了：η = 有用 ÷ 总计 = {want:.3f}，不是 {got:.3f}")]
    g.expect(math.isclose(got, want, rel_tol=1e-6), f"两锅、一锅有人提前出锅：η = 16 / 24 = {want:.3f}",
             next((why for v, why in wrong if math.isclose(got, v, rel_tol=1e-6)),
                  f"tokens {n}、padding {pad} 时 η 应为 Σn / Σ(n + padding) = {want:.3f}，你的是 {got}"))
    got = g.number(g.call(fn, [1, 1], [99, 99]), "eta")
    g.expect(math.isclose(got, 0.01, rel_tol=1e-6), "极端情况：每行 1 个有用 token、99 步 padding，η = 0.01",
             f"tokens [1, 1]、padding [99, 99] 时 η 应为 0.01，你的是 {got}")

"""Lab 4 (连续批处理): the checks (the admission policy, chunked prefill's split, η, the config limits,
the KV blocks a pool holds, speculative decoding's acceptance rule) and the lab's runs on the real
server, each one round for `course.llm_serving.interleaved` (a dict of figures, the server's own
where it sends them)."""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from batchlab.batching.blocks import BlockManager
from batchlab.batching.policies import prefill_chunks
from batchlab.batching.scheduler import KV_TOKEN_BUDGET, MAX_ACTIVE
from batchlab.batching.speculative import accept as course_accept
from batchlab.bench.continuous import source, workload
from batchlab.config_pbtxt import load_config_text, parse_config
from batchlab.course import llm_serving as L
from batchlab.course.speculative import spec_round
from batchlab.labs._blocks import read_config
from batchlab.labs._core import MARK_BAD, Grader, check
from batchlab.labs.labkit import isolated, outside_names, waiting_request as _seq
from batchlab.load import RequestSpec, run_closed_loop
from batchlab.sim.lengths import capped_exponential
from batchlab.sim.summary import percentile


def _call(g: Grader, fn: Callable[..., Any], name: str, *args: Any) -> Any:
    """The learner's `name(*args)`; a name from outside the function (it runs alone in the model
    process) or any other error stops the check, saying which."""
    value, raised = g.call_raw(fn, *args)
    if raised is None:
        return value
    if raised.type_name == "NameError":
        g.fail(outside_names(name, raised.message.strip().splitlines()[0] if raised.message.strip() else ""))
    g.fail(f"调用 {name}(…) 时抛出了 {raised.short()}")


def _ints(g: Grader, got: Any, name: str, wanted: str) -> list[int]:
    """`got` as a list of ints, else the check stops: `name` returned None (it should return `wanted`),
    or something that is not a list of ints."""
    if got is None:
        g.fail(f"{name} 返回了 None：应返回{wanted}")
    try:
        return [int(i) for i in got]
    except (TypeError, ValueError):
        g.fail(f"{name} 应返回整数（int）的列表，收到的是 {got!r}"[:200])


def _admit(g: Grader, fn: Callable[..., Any], *args: Any) -> list[int]:
    return _ints(g, _call(g, fn, "admit", *args), "admit", "要接纳的序列在 waiting 里的下标列表（可以是空列表 []）")


@check("lab4.q1", points=5, title="写接纳策略（admission policy）")
def check_admit(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(waiting, active, max_active, kv_token_budget) -> [indices into waiting]`, run as the model
    runs it: without the notebook's globals."""
    fn = isolated(fn)
    small = [_seq(i, 16, 32) for i in range(3)]
    got = _admit(g, fn, small, [], MAX_ACTIVE, KV_TOKEN_BUDGET)
    empty = _admit(g, fn, [], [_seq(9, 16, 32)], MAX_ACTIVE, KV_TOKEN_BUDGET)
    g.expect(got == [0, 1, 2] and empty == [],
             "额度充足时按到达顺序全部接纳；没人等时返回 []",
             f"3 条小请求、没有活跃序列、额度充足时应返回 [0, 1, 2]（没人等时返回 []），你的是 {got} / {empty}")
    active = [_seq(10 + i, 16, 32, generated=5) for i in range(6)]
    waiting = [_seq(i, 16, 32) for i in range(4)]
    got = _admit(g, fn, waiting, active, 8, 100_000)
    g.expect(got == [0, 1], "max_active = 8、已有 6 条活跃：只再接纳 2 条",
             f"已有 6 条活跃序列、max_active = 8 时应只接纳 [0, 1]，你的是 {got}：活跃数加上新接纳的不能超过 max_active")
    # active sequences have generated little: kv_tokens is far below what they reserved
    active = [_seq(20, 1000, 2000, generated=10)]           # reserves 3000, holds 1010 now
    waiting = [_seq(0, 500, 300), _seq(1, 100, 96)]        # 800 and 196
    got = _admit(g, fn, waiting, active, MAX_ACTIVE, KV_TOKEN_BUDGET)
    tight = [_seq(0, 1000, 500), _seq(1, 50, 50)]          # 1500 (does not fit) and 100 (would)
    got2 = _admit(g, fn, tight, active, MAX_ACTIVE, KV_TOKEN_BUDGET)
    # [1] respects the budget; overtaking is graded below
    g.expect(got == [0, 1] and got2 in ([], [1]), "KV 预算按 prompt + max_tokens 预留：活跃序列的预留也算在内",
             "KV 预算要按预留量算：每条序列占 prompt_tokens + max_tokens（GenerationRequest.reserved_tokens），"
             "活跃序列现在虽然只用了 kv_tokens 个，但它可能长到预留的那么多（不预留就可能中途爆显存）"
             if got2 in ([0, 1], [0]) else f"已预留 3000、预算 {KV_TOKEN_BUDGET} 时，等待的 [800, 196] 应全部接纳（[0, 1]），"
             f"而 [1500, 100] 一条也不接纳；你的是 {got} 与 {got2}")
    g.expect(got2 != [1], "先来先服务：队首放不下时，后面的也不插队",
             "你让后面的小请求插了队（返回 [1]）：本题要求先来先服务——队首放不下就停，否则大请求可能永远排不上（饿死）")
    exact = _admit(g, fn, [_seq(0, 1000, 96)], active, MAX_ACTIVE, KV_TOKEN_BUDGET)   # 3000 + 1096 = 4096
    over = _admit(g, fn, [_seq(0, 1000, 97)], active, MAX_ACTIVE, KV_TOKEN_BUDGET)    # one token more
    g.expect(exact == [0] and over == [], "边界：已预留 + 这条正好等于 kv_token_budget 时接纳，多 1 个 token 就不接纳",
             f"已预留 3000、预算 {KV_TOKEN_BUDGET} 时，一条 1096 个 token 的请求正好用满预算，应接纳（[0]），"
             f"1097 个的不接纳（[]）；你的是 {exact} 与 {over}："
             + ("正好用满也放得下——条件是「已预留 + reserved_tokens ≤ kv_token_budget」，你写成了 <（或用 >= 判断放不下）"
                if exact == [] else "超出预算也接纳了——放不下的条件是「已预留 + reserved_tokens > kv_token_budget」"))


def _chunk_list(g: Grader, fn: Callable[..., Any], remaining: list[int], n_decoding: int, budget: int) -> list[int]:
    """The learner's split for one case, as ints, one per prompt (else the check stops, naming why)."""
    got = _call(g, fn, "prefill_chunks", list(remaining), n_decoding, budget)
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
    """`fn(remaining, n_decoding, max_num_tokens) -> [chunk per prefilling prompt, in queue order]`, run
    as the model runs it: without the notebook's globals."""
    fn = isolated(fn)
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
        cfg = read_config(g, g.call(fn, base, ma, kv), what="with_limits 返回的配置")
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


def _ceil(n: int, size: int) -> int:
    return -(-n // size)


#: The blocks a pool holds for sequences storing `kv` tokens, sharing their first `shared`, counted
#: the right way and with each typical mistake (name -> (count, what is wrong, in Chinese)).
_POOL_WAYS: dict[str, tuple[Callable[[Sequence[int], int, int], int], str]] = {
    "right": (lambda kv, sh, b: sum(_ceil(n, b) for n in kv) - max(len(kv) - 1, 0) * (sh // b), ""),
    "floor": (lambda kv, sh, b: sum(n // b for n in kv) - max(len(kv) - 1, 0) * (sh // b),
              "没装满的最后一块也要占一整块：17 个 token 要 2 块（⌈17 / 16⌉），不是 17 // 16 = 1 块"),
    "plus1": (lambda kv, sh, b: sum(n // b + 1 for n in kv) - max(len(kv) - 1, 0) * (sh // b),
              "块边上差一：32 个 token 正好装满 2 块，不需要第 3 块。向上取整写 -(-n // block_size) 或 "
              "(n + block_size - 1) // block_size，不是 n // block_size + 1"),
    "no_share": (lambda kv, sh, b: sum(_ceil(n, b) for n in kv),
                 "共享前缀的块被每条序列各算了一次：前缀缓存命中时，块表指向同一批物理块（引用计数 + 1，不复制），"
                 "池里只占一份"),
    "share_none": (lambda kv, sh, b: sum(_ceil(n, b) for n in kv) - len(kv) * (sh // b),
                   "共享的块一次也没算：它们被每条序列的块表指着，池里还是占着一份（算一次，不是零次）"),
    "partial": (lambda kv, sh, b: sum(_ceil(n, b) for n in kv) - max(len(kv) - 1, 0) * _ceil(sh, b),
                "共享前缀末尾没装满的那块不能共享：只有装满的块才有哈希、才能被命中，各条序列在那一块里"
                "接着写的是自己的 token。共享的块数是 shared_tokens // block_size"),
    "size16": (lambda kv, sh, b: sum(_ceil(n, 16) for n in kv) - max(len(kv) - 1, 0) * (sh // 16),
               "块大小写死成了 16：用参数 block_size"),
}


def pool_mistake(kv: Sequence[int], shared: int, block_size: int, got: float, seen: Sequence[tuple] = ()) -> str:
    """What is wrong with `got` blocks for this case (Chinese): the typical mistake that explains every
    case in `seen` ((kv, shared, block_size, got) answered so far), else one that explains this case,
    else the answer."""
    want = _POOL_WAYS["right"][0](kv, shared, block_size)
    case = f"kv_tokens = {list(kv)}、shared_tokens = {shared}、block_size = {block_size} 时应为 {want} 块，你的是 {got:g}"
    mistakes = [(way, text) for name, (way, text) in _POOL_WAYS.items() if name != "right"]
    fits = [text for way, text in mistakes if way(kv, shared, block_size) == got]
    every = [text for way, text in mistakes if text in fits and all(way(*c[:3]) == c[3] for c in seen)]
    why = (every or fits or [""])[0]
    return f"{case}：{why}" if why else case


@check("lab4.q5", points=5, title="KV 块池：这些序列一共占几块",
       shortcuts=(BlockManager.blocks_for, BlockManager.usage))
def check_pool_blocks(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(kv_tokens, shared_tokens, block_size) -> blocks the pool holds`."""
    groups = [  # (cases, what the right answers show)
        ([([17], 0, 16), ([32], 0, 16), ([1], 0, 16), ([16], 0, 16)],
         "一条序列占 ⌈n / block_size⌉ 块：17 个 token 2 块，正好 32 个 2 块，1 个也占 1 块"),
        ([([40, 40, 40], 0, 16), ([], 0, 16)], "不共享时各占各的块，加起来（3 × 3 = 9）；没有序列时是 0"),
        ([([40, 40, 40], 32, 16), ([33], 32, 16)], "共享前缀的 2 个满块只占一份：2 + 3 × 1 = 5 块"),
        ([([40, 47, 52], 20, 16)], "共享前缀 20 个 token 只有 1 个满块能共享：1 + 2 + 2 + 3 = 8 块"),
        ([([40, 17], 0, 8), ([40, 40], 16, 8)], "块大小用参数 block_size：每块 8 个 token 时 [40, 17] 占 5 + 3 = 8 块"),
    ]
    seen = [(kv, sh, b, g.number(_call(g, fn, "pool_blocks", list(kv), sh, b), "pool_blocks "))
            for cases, _ in groups for kv, sh, b in cases]
    for cases, good in groups:
        answers = [c for c in seen if any(c[:3] == case for case in cases)]
        wrong = [c for c in answers if c[3] != _POOL_WAYS["right"][0](*c[:3])]
        g.expect(not wrong, good, pool_mistake(*wrong[0], seen=seen) if wrong else "")


def _accept_pair(g: Grader, fn: Callable[..., Any], draft: list[int], target: list[int]) -> tuple[Any, Any]:
    """The learner's answer for one case as (accepted, next_token), else the check stops, naming why
    (an IndexError: the usual off-by-one at the end of the lists)."""
    value, raised = g.call_raw(fn, list(draft), list(target))
    if raised is not None:
        if raised.type_name == "NameError":
            g.fail(outside_names("accept", raised.message.strip().splitlines()[0] if raised.message.strip() else ""))
        hint = ("：下标差一。draft_tokens 有 k 个、target_argmax 有 k + 1 个，全部接受时下一个 token 是 "
                "target_argmax[k]（最后一个），不是 draft_tokens[k]" if raised.type_name == "IndexError" else "")
        g.fail(f"accept({draft}, {target}) 抛出了 {raised.short()}{hint}")
    if value is None:
        g.fail("accept 返回了 None：应返回 (accepted, next_token) 两个整数——接受了几个草稿 token，以及这一步最后出的那个 token")
    try:
        accepted, token = value
    except (TypeError, ValueError):
        g.fail(f"accept 应返回 (accepted, next_token) 两个数，收到的是 {value!r}"[:300])
    return accepted, token


def accept_mistake(draft: Sequence[int], target: Sequence[int], got: tuple[Any, Any]) -> str:
    """What is wrong with `got` = (accepted, next_token) for this case, in Chinese: the typical mistake
    it shows (accepting past the first mismatch, dropping the correction token, off by one), else the answer."""
    want = course_accept(draft, target)
    case = f"draft_tokens = {list(draft)}、target_argmax = {list(target)} 时应为 {want}，你的是 {tuple(got)}"
    accepted, token = got
    k, first = len(draft), want[0]
    if not isinstance(accepted, (int, np.integer)) or isinstance(accepted, bool):
        return f"{case}：accepted 应是一个整数（接受了几个草稿 token）"
    matches = sum(d == t for d, t in zip(draft, target))
    if accepted > first and first < k:
        return (f"{case}：接受过了第一个不一致的位置。第 {first + 1} 个草稿 token {draft[first]} 和目标的 "
                f"{target[first]} 不一样，它和它后面的草稿 token 都要丢掉——后面位置的 argmax 是接在错的 token 后面算出来的，"
                "碰巧相同也不算" + ("（你数的是所有对上的位置）" if accepted == matches else ""))
    if accepted == first == k and token != target[k]:
        return (f"{case}：草稿全部接受时，这一步还白得目标在最后一个位置的 token target_argmax[{k}] = {target[k]}"
                f"（一共 k + 1 = {k + 1} 个），它就是 next_token" + ("：你把它丢了" if token is None else ""))
    if token is None or (accepted == first and first < k and token == draft[first] != target[first]):
        return (f"{case}：丢了纠正 token。第一个不一致的位置要出目标模型自己的 token（target_argmax[accepted]），"
                "不是被拒的草稿 token；所以每一步至少出 1 个 token，和不投机的贪心解码逐个相同")
    if abs(accepted - first) == 1 or any(0 <= j < len(target) and token == target[j] != target[first]
                                        for j in (first - 1, first + 1)):
        return (f"{case}：差一。accepted 是从头起对上的草稿 token 个数（第一个就不对时是 0），next_token 是 "
                "target_argmax[accepted]：target_argmax[j] 是目标看完前 j 个草稿 token 之后自己的 token")
    return case


@check("lab4.q6", points=5, title="投机解码：接受几个草稿 token", shortcuts=(course_accept,))
def check_accept(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(draft_tokens, target_argmax) -> (accepted, next_token)`, the greedy acceptance rule, run as
    the model runs it: without the notebook's globals."""
    fn = isolated(fn)
    groups = [  # (cases, what the right answers show)
        ([([5, 6, 7], [9, 6, 7, 4]), ([], [4])],
         "第一个草稿 token 就不对：一个也不接受，出目标自己的 token（没有草稿时就是一步普通解码）"),
        ([([5, 6, 7], [5, 6, 9, 4])], "前两个对上：接受 2 个，再出目标在第 3 个位置的 token 9（纠正 token）"),
        ([([5, 6, 7], [5, 8, 7, 4]), ([3, 3, 3, 3], [3, 2, 3, 3, 3])],
         "第一个不一致之后的一律不要，哪怕后面碰巧对上"),
        ([([5, 6, 7], [5, 6, 7, 4]), ([8], [8, 2])], "全部接受：k 个草稿 token 再加目标在最后一个位置的 token，一步出 k + 1 个"),
    ]
    for cases, good in groups:
        answers = [(d, t, _accept_pair(g, fn, d, t)) for d, t in cases]
        wrong = [(d, t, got) for d, t, got in answers if tuple(got) != course_accept(d, t)]
        g.expect(not wrong, good, accept_mistake(*wrong[0]) if wrong else "")
    rng = np.random.default_rng(6)
    cases = []
    for _ in range(24):
        k = int(rng.integers(1, 6))
        target = rng.integers(0, 3, k + 1).tolist()   # three token ids: long matching runs are common
        cases.append((rng.integers(0, 3, k).tolist(), target))
    wrong = [(d, t, got) for d, t in cases if tuple(got := _accept_pair(g, fn, d, t)) != course_accept(d, t)]
    g.expect(not wrong, f"{len(cases)} 组随机的草稿与目标（k = 1…5）都答对了",
             accept_mistake(*wrong[0]) if wrong else "")


# ---- the lab's runs on the real server: one round each (`L.interleaved` alternates the models) ----


def _kind(model: str) -> str:
    """The course model a lab model copies, by its name: generate, lm_iterative, else lm_stream."""
    return model if model in ("generate", "lm_iterative") else "lm_stream"


def chunk_round(server: Any, model: str, n_decode: int = 16, decode_tokens: int = 64, long_prompt: int = 420,
                long_at: float = 0.25, seed: int = 0) -> dict[str, Any]:
    """`n_decode` short prompts decoding from t = 0, one `long_prompt` arriving at `long_at` (s). From the
    server's clock (T_NS) and batch sizes (ACTIVE): the decoders' ITL p50 / p99 and the long prompt's
    prefill, from the start of the step that admitted it to its first token (ms and steps); its TTFT
    at the client."""
    prompts = [L.token_prompt(8, seed * 100 + i) for i in range(n_decode)] + [L.token_prompt(long_prompt, seed * 100 + 99)]
    rec = L.stream_requests(server, model, prompts, [decode_tokens] * n_decode + [4], [0.0] * n_decode + [long_at])
    n_steps, prefill_s = L.prefill_window(rec, n_decode, n_decode)
    gaps = np.concatenate([np.diff(rec.server_times[i]) for i in range(n_decode)]) * 1e3
    return {"model": model, "itl_p50_ms": percentile(gaps, 50), "itl_p99_ms": percentile(gaps, 99),
            "prefill_ms": prefill_s * 1e3, "prefill_steps": n_steps,
            "long_ttft_ms": float(rec.token_times[-1][0] - rec.sent[-1]) * 1e3}


def warm_up(server: Any, models: Sequence[str], long_prompt: int = 420) -> bool:
    """One long and four short generations on each of `models` before a measurement (the first
    touches a fresh model's KV pool and code paths), results dropped; True (RuntimeError naming the
    first error if a request failed)."""
    prompts = [L.token_prompt(long_prompt, 990)] + [L.token_prompt(8, 991 + i) for i in range(4)]
    for model in models:
        L.stream_requests(server, model, prompts, [2] * len(prompts), np.zeros(len(prompts)))
    return True


def workload_round(server: Any, model: str, n: int = 24, mean: float = 24, longest: int = 96,
                   seed: int = 0) -> dict[str, Any]:
    """The lab's chat workload (`n` requests, prompts of 9-25 tokens, outputs drawn from a capped
    exponential of `mean` and at most `longest` tokens, greedy, <eos> ignored; workload `seed`), 8
    clients in a closed loop: tokens/s and TTFT at the client; from the
    server, the mean batch of its steps (ACTIVE / BATCH_SIZE), for `lm_stream` copies the mean queue
    (WAITING) and, streamed, ITL p50 (T_NS); η; `generate`'s NUM_TOKENS / PADDED_STEPS / BATCH_SIZE
    per request; how many requests failed, with the first error."""
    prompts, lengths = workload(n, capped_exponential(mean, longest), seed=seed)
    kind = _kind(model)
    inner, kept = source(kind, prompts, lengths, None), []
    keys = ("NUM_TOKENS", "PADDED_STEPS", "BATCH_SIZE") if kind == "generate" else ("T_NS", "ACTIVE", "WAITING",
                                                                                     "BATCH_SIZE")

    def make(i: int) -> RequestSpec:
        spec = inner(i)

        def keep(out: Any) -> Any:
            kept.append([{k: int(o[k].reshape(-1)[0]) for k in keys if k in o}
                         for o in (out if isinstance(out, list) else [out])])
            return spec.check(out) if spec.check else None
        return RequestSpec(spec.inputs, check=keep, expected_tokens=spec.expected_tokens,
                           sequence_start=spec.sequence_start, count_tokens=spec.count_tokens)
    rep = run_closed_loop(server, model, make, concurrency=8, n_requests=n, warmup_requests=4, progress=False,
                          protocol="grpc" if kind == "generate" else "grpc-stream", label=model)
    return {"model": model, **_figures(rep, kind, kept)}


def _figures(rep: Any, kind: str, kept: list[list[dict[str, int]]]) -> dict[str, Any]:
    """A `workload_round`'s row from its LoadReport and each request's kept outputs."""
    ttft = rep.ttft_ms()
    row = {"ok": rep.n_ok, "failed": rep.n_errors, "error": next((e for e in rep.records.error if e), ""),
           "tokens_per_s": rep.tokens_per_s, "ttft_p50_ms": ttft["p50"], "ttft_p95_ms": ttft["p95"]}
    if kind == "generate":
        for k in ("NUM_TOKENS", "PADDED_STEPS", "BATCH_SIZE"):
            row[k] = [o[k] for r in kept for o in r if k in o]
        row["batch"] = float(np.mean(row["BATCH_SIZE"])) if row["BATCH_SIZE"] else math.nan
        return row
    steps = {o["T_NS"]: o for r in kept for o in r if "T_NS" in o}
    gaps = [np.diff([o["T_NS"] for o in r if "T_NS" in o]) for r in kept]
    gaps = np.concatenate([x for x in gaps if x.size] or [np.array([np.nan])])
    row["batch"] = float(np.mean([o.get("ACTIVE", o.get("BATCH_SIZE", 0)) for o in steps.values()] or [np.nan]))
    if kind == "lm_stream":
        row["waiting"] = float(np.mean([o.get("WAITING", 0) for o in steps.values()] or [np.nan]))
    row["itl_p50_ms"] = float(np.median(gaps)) / 1e6
    if kind != "lm_stream":  # lm_stream computes only active sequences: η = 1 by design, nothing to measure
        inferences = rep.server.inference_count if rep.server is not None else 0
        row["eta"] = rep.tokens / inferences if inferences else math.nan
    return row


def kv_round(server: Any, model: str, shared: int = 100, own: int = 20, n: int = 8, max_tokens: int = 24,
             seed: int = 0) -> list[dict[str, Any]]:
    """`n` requests at once whose prompts (`shared` + `own` tokens) start with the same `shared` tokens
    (0: nothing but <bos> in common). Per step of the server: the KV positions each sequence running
    after it stores (its prompt + INDEX of the token it just sampled), the common prefix of the
    prompts (`shared_tokens`) and the server's own KV_BLOCKS and KV_TOKENS."""
    head = L.token_prompt(max(shared, 1), 7000 + seed)
    prompts = [np.concatenate([head, L.token_prompt(shared + own - head.size + 1, 8000 + seed * 50 + i)[1:]])
               for i in range(n)]
    common = next((j for j in range(prompts[0].size) if len({int(p[j]) for p in prompts}) > 1), prompts[0].size)
    rec = L.stream_requests(server, model, prompts, [max_tokens] * n, np.zeros(n))
    steps: dict[int, dict[str, Any]] = {}
    for p, figures in zip(prompts, rec.figures):
        for index, f in enumerate(figures):
            step = steps.setdefault(f["T_NS"], {"shared_tokens": common, "kv_tokens": [],
                                                "KV_BLOCKS": f["KV_BLOCKS"], "KV_TOKENS": f["KV_TOKENS"]})
            if index < len(figures) - 1:   # its last token finished it: it left the pool in that step
                step["kv_tokens"].append(int(p.size) + index)
    return [steps[t] for t in sorted(steps)]


def spec_runs(server: Any, models: Sequence[str], n: int = 4, max_tokens: int = 40) -> dict[str, dict[str, Any]]:
    """The same `n` greedy generations (16-token prompts; request i asks for `max_tokens` + i tokens)
    sent at once to each of `models` in turn: model -> `course.speculative.spec_round`'s row (tokens,
    steps, each request's drafted / accepted totals as the server reported them)."""
    return {m: spec_round(server, m, n, max_tokens=max_tokens) for m in models}


# ---- printing the runs (Chinese) ----


def show_row(row: dict[str, Any]) -> None:
    """One `workload_round` row as a line; failed requests with the server's first error."""
    line = (f"第 {row['round']} 轮 {row['model']:15} {row['ok']:2d} 成功 / {row['failed']} 失败 "
            f"{row['tokens_per_s']:5.0f} tokens/s  TTFT p50 {row['ttft_p50_ms']:7.1f} ms  平均批 {row['batch']:3.1f}")
    print(line + (f"  ITL p50 {row['itl_p50_ms']:4.1f} ms" if "itl_p50_ms" in row else ""))
    if row["failed"]:
        print(f"  {MARK_BAD} {row['failed']} 个请求失败，服务器说：{row['error'][:300]}"
              + ("（模型进程里运行你写的函数时出了错：先把那一题改对）" if "lm_stream failed" in row["error"] else ""))


def medians(rows: Sequence[dict[str, Any]], columns: dict[str, str]) -> dict[str, dict[str, tuple]]:
    """Print, per model, each column's median over the rounds with the lowest…highest round; return
    {column: {model: (median, lowest, highest)}} (`L.median_spread`; a model without the column is left out)."""
    out = {k: L.median_spread([r for r in rows if k in r], k) for k in columns}
    for m in dict.fromkeys(r["model"] for r in rows):
        cells = [f"{label} {out[k][m][0]:.1f}（{out[k][m][1]:.1f}…{out[k][m][2]:.1f}）"
                 for k, label in columns.items() if m in out[k]]
        print(f"{m:15} " + "  ".join(cells))
    return out


def eta_rounds(rows: Sequence[dict[str, Any]], eta: Callable[[list, list], float]) -> dict[str, list[float]]:
    """η of each round per model: `generate`'s from its responses with the lab's `eta`, the others' as
    `workload_round` measured it (a model it measured none for, `lm_stream`, is left out)."""
    out: dict[str, list[float]] = {}
    for r in rows:
        if "NUM_TOKENS" not in r and "eta" not in r:
            continue
        value = eta(r["NUM_TOKENS"], r["PADDED_STEPS"]) if "NUM_TOKENS" in r else r["eta"]
        out.setdefault(r["model"], []).append(float(value))
    return out


def pool_audit(runs: dict[str, list[dict[str, Any]]], fn: Callable[..., Any],
               block_size: int = 16) -> list[dict[str, Any]]:
    """Each step of `kv_round` runs (label -> steps) with the lab's `pool_blocks` count beside the
    server's KV_BLOCKS."""
    return [{"run": label, "step": k, **s, "mine": fn(list(s["kv_tokens"]), s["shared_tokens"], block_size)}
            for label, steps in runs.items() for k, s in enumerate(steps)]


def show_audit(rows: Sequence[dict[str, Any]]) -> None:
    """The steps where the server's block count changed (and every one the lab's count gets wrong)."""
    last = None
    for r in rows:
        wrong = r["mine"] != r["KV_BLOCKS"]
        if wrong or (r["run"], r["KV_BLOCKS"]) != last:
            kv = r["kv_tokens"]
            held = f"{len(kv)} 条，各存 {min(kv)}…{max(kv)} 个 token" if kv else "0 条"
            print(f"{r['run']:8} 第 {r['step']:2d} 步后 {held:22}  你算 {r['mine']:3}  服务器 KV_BLOCKS "
                  f"{r['KV_BLOCKS']:3}  KV_TOKENS {r['KV_TOKENS']:4}" + (f"  {MARK_BAD}" if wrong else ""))
        last = (r["run"], r["KV_BLOCKS"])


def show_spec(rows: dict[str, dict[str, Any]]) -> None:
    """One line per model of `spec_runs`: its decode steps, tokens per step and each request's
    accepted / drafted totals (the server's ACCEPTED_TOKENS / DRAFTED_TOKENS)."""
    for model, r in rows.items():
        counts = "  ".join(f"{a}/{d}" for d, a in r["requests"]) if r["drafted"] else "不投机"
        print(f"{model:19} 解码 {r['decode_steps']:3d} 步（各请求合计），每步 {r['tokens_per_step']:.2f} 个 token；"
              f"各请求 接受/草稿 {counts}")

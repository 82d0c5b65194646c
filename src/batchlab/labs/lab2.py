"""Checks of Lab 2 (dynamic batching): the dynamic batcher's decision written by the learner (replayed on batches
recorded from the real server), the dynamic_batching block, the measured sweep, the simulator's
prediction of it with the learner's rule plugged in, and the best configuration under a p95 SLO."""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from batchlab.config_pbtxt import load_config_text
from batchlab.course.tuning import unit_arrivals
from batchlab.labs._blocks import call_block
from batchlab.labs._core import Grader, check
from batchlab.labs import recorded
from batchlab.labs.record_lab2 import agreed, pattern_of, recorded_service, spread
from batchlab.probe import simulate_pattern
from batchlab.sim import Affine, simulate_dynamic
from batchlab.batching import BatchRule, Decision, QueuedRequest, next_batch
from batchlab.load.stats import ModelStats

ROW_KEYS = ("delay_us", "preferred", "throughput_rps", "p95_ms", "mean_batch")


# ---------------------------------------------------------------- question 1: the decision itself

class _BadDecision(Exception):
    """The learner's decision cannot be carried out (the message says why, in Chinese)."""


#: Calls of the learner's decision allowed per request of a replayed pattern (a wake-up that keeps
#: asking again a hair later would otherwise run for ever).
_CALLS_PER_REQUEST = 200
_FOUR_ARGS = "next_batch 要接受四个参数 (pending, now, rule, payload)：payload 是负载里已有的批元素数"


def _guarded(fn: Callable[..., Any], limit: int) -> Callable[..., Decision]:
    """``fn`` as the batcher's decision: each answer checked, at most ``limit`` calls."""
    calls = [0]

    def decide(pending: list[QueuedRequest], now: float, rule: BatchRule, payload: int) -> Decision:
        calls[0] += 1
        if calls[0] > limit:
            raise _BadDecision(f"被问了 {limit} 次还没把请求发完：返回 send=0 时，wake_at 要给出真正会到的时刻"
                               "（最老请求的到达时间 + max_queue_delay），不要每次只往后挪一点点")
        try:
            out = fn(pending, now, rule, payload)
        except TypeError as exc:
            if "positional argument" in str(exc):
                raise _BadDecision(f"{_FOUR_ARGS}（{exc}）"[:300]) from None
            raise
        send, wake_at, saturated = _decision(out)
        if send is None:
            raise _BadDecision(f"应返回 Decision(send, wake_at, saturated)，收到的是 {out!r}"[:200])
        if not 0 <= send <= len(pending):
            raise _BadDecision(f"队列里有 {len(pending)} 个请求，你的函数却要发 send={send} 个")
        joined = payload + sum(r.elements for r in pending[:send])
        if joined > rule.max_batch_size:
            raise _BadDecision(f"负载已有 {payload} 个批元素，再并入队首 {send} 个请求就是 {joined} 个，"
                               f"超过了 max_batch_size = {rule.max_batch_size}")
        if send == 0 and not saturated and not wake_at > now:
            raise _BadDecision(f"now = {now:.4f} s 时返回了 Decision(0, {wake_at!r})：不发，又要求在此刻或更早再问，"
                               "批处理器会原地打转。" + ("这里 max_queue_delay = 0：延时为 0 时不等，能装下的立即全发"
                                                         if rule.delay_s == 0 else
                                                         "等待时 wake_at 是最老请求的到达时间 + max_queue_delay"))
        return Decision(send, wake_at, saturated)

    return decide


def _decision(out: Any) -> tuple[int | None, float, bool]:
    """(send, wake_at, saturated) of an answer; a two-field answer is not saturated; (None, …) if unreadable."""
    try:
        send, wake_at, *rest = out
        if len(rest) > 1:
            raise ValueError
        return int(send), float(wake_at), bool(rest[0]) if rest else False
    except (TypeError, ValueError):
        return None, math.nan, False


def replay_batches(fn: Callable[..., Any], index: int) -> dict[str, Any]:
    """The batches ``fn`` (a `next_batch`) forms on recorded pattern ``index`` in the simulator
    (`batchlab.probe.simulate_pattern`'s batcher, the recordings' service times): ``batches`` in
    the order they were sent and ``never_sent`` (the requests never sent, by arrival order), or
    ``error`` (Chinese)."""
    data = _replay_data()
    pattern = pattern_of(data["patterns"][index])
    try:
        out = simulate_pattern(pattern, _replay_service(), decide=_guarded(fn, _CALLS_PER_REQUEST * pattern.n))
    except _BadDecision as exc:
        return {"error": str(exc)}
    result = out.extra["result"]
    never = [int(i) for i in np.flatnonzero(result.records["batch_id"] < 0)]
    return {"batches": [int(b) for b in result.batches["size"]], "never_sent": never}


def _replay_data() -> dict[str, Any]:
    return recorded.load("lab2_batches")


@functools.lru_cache(maxsize=1)
def _replay_service() -> Any:
    return recorded_service(_replay_data())


def recorded_patterns() -> list[dict[str, Any]]:
    """The recorded patterns: ``name``, ``note``, ``arrivals_s``, the settings, every recording's
    batches (``recordings``), ``agreed`` (the batches all recordings formed, or None when they
    differ) and ``spread`` (how much the recordings differ, `batchlab.labs.record_lab2.spread`)."""
    return [{**p, "agreed": agreed(p), "spread": spread(p["recordings"])} for p in _replay_data()["patterns"]]


def _ask(g: Grader, fn: Callable[..., Any], arrivals: Sequence[float], now: float, rule: BatchRule,
         elements: Sequence[int] | None = None, payload: int = 0) -> tuple[int, float, bool]:
    pending = [QueuedRequest(a, int(e), 1, i)
               for i, (a, e) in enumerate(zip(arrivals, elements or [1] * len(arrivals)))]
    out, raised = g.call_raw(fn, pending, now, rule, payload)
    if raised is not None:
        if raised.type_name == "TypeError" and "positional argument" in raised.message:
            g.fail(f"{_FOUR_ARGS}（你的函数：{raised.short()}）"[:300])
        g.fail(f"调用 next_batch(…) 时抛出了 {raised.short()}")
    send, wake_at, saturated = _decision(out)
    if send is None:
        g.fail(f"next_batch 应返回 Decision(send, wake_at, saturated)，收到的是 {out!r}"[:240])
    return send, wake_at, saturated


def _rule_text(rule: BatchRule) -> str:
    return (f"max_batch_size {rule.max_batch_size}、preferred {list(rule.preferred) or '[]'}、"
            f"max_queue_delay {rule.max_queue_delay_us / 1000:g} ms")


def _same_time(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=0, abs_tol=1e-9)


def _check_idle_rules(g: Grader, fn: Callable[..., Any]) -> None:
    """Six crafted queues with an empty payload, each aimed at one typical mistake."""
    # 1. Waiting: the deadline runs from the oldest request (the head), not the newest.
    rule = BatchRule(8, (), 150_000)
    send, wake, _ = _ask(g, fn, [0.0, 0.02, 0.05], 0.06, rule)
    g.expect(send == 0 and _same_time(wake, 0.15),
             "没凑满、延时未到：等，wake_at = 最老请求的到达 + max_queue_delay",
             f"3 个请求在 0、20、50 ms 到达，now = 60 ms，{_rule_text(rule)}：应返回 Decision(0, 0.15)（等到最老的请求满 150 ms），"
             f"你的是 Decision({send}, {wake:g})" + (
                 "：延时从最老的请求（队首）算起，不是最新的" if send == 0 and _same_time(wake, 0.2) else
                 "：还没凑到偏好的批大小（没设时就是 max_batch_size），延时也没到，要等" if send else ""))
    # 2. Preferred sizes: the largest one reachable goes at once, within the delay.
    rule = BatchRule(8, (4, 8), 150_000)
    send, _, _ = _ask(g, fn, [0.0] * 7, 0.0, rule)
    g.expect(send == 4, "7 条待发、preferred [4, 8]、延时未到：立即发能凑到的最大偏好批 4 条",
             f"7 个请求同时到、{_rule_text(rule)}：Triton 立即发 4 条（能凑到的最大偏好批大小），你的是 send = {send}"
             + ("：你的规则忽略了 preferred_batch_size——延时未到时，凑到某个偏好大小就立即下锅，不必等满延时"
                if send in (0, 7) else ""))
    # 3. After the delay: whatever fits goes, preferred sizes no longer cut the batch.
    rule = BatchRule(16, (8,), 1_000)
    send, _, _ = _ask(g, fn, [0.0] * 12, 0.02, rule)
    g.expect(send == 12, "延时过期后不再按偏好批切：能装下的 12 条全发",
             f"12 个请求在 0 时到达、now = 20 ms、{_rule_text(rule)}：最老的已等过 1 ms 的延时，Triton 把能装下的 12 条一起发，"
             f"你的是 send = {send}" + ("：延时过期后你还在按偏好批大小切（Triton 那时跳过偏好规则，有多少发多少，"
                                       "不超过 max_batch_size）" if send == 8 else ""))
    # 4. The batch is the front of the queue, counted in batch elements.
    rule = BatchRule(8)
    send, _, _ = _ask(g, fn, [0.0, 0.0, 0.0], 0.0, rule, elements=[5, 4, 2])
    g.expect(send == 1, "按批元素计数，批总是队首的若干个请求：5 + 4 > 8，只发第 1 个",
             f"3 个请求分别有 5、4、2 个批元素、{_rule_text(rule)}：5 + 4 = 9 超过 8，批停在第 1 个请求（send = 1），"
             f"你的是 send = {send}" + {
                 2: "：放不下的第 2 个请求被你跳过、让后面的请求插了队——但 send 数的是队首起的请求，批只能是队列最前面的若干个，"
                    "遇到放不下的就停",
                 3: "：你数的是请求数（3 ≤ 8），Triton 数的是批元素（request.elements 之和）"}.get(send, ""))
    # 5. Delay 0 and no preferred size: never wait.
    send, wake, _ = _ask(g, fn, [0.0, 0.0, 0.001], 0.001, rule)
    g.expect(send == 3, "max_queue_delay = 0、没设偏好批：不等，能装下的立即全发",
             f"3 个请求待发、{_rule_text(rule)}：延时为 0 时不等，应立即发 3 条，你的是 Decision({send}, {wake:g})"
             + ("：延时为 0 从不算「过期」（Triton 的 delay_is_exceeded 要求延时不为 0），要单独处理 delay == 0 的情况"
                if send == 0 else ""))
    # 6. Delay 0 with preferred sizes (the sweep's setting): the preferred rule still comes first.
    rule = BatchRule(32, (8, 16), 0)
    send, _, _ = _ask(g, fn, [0.0] * 12, 0.0, rule)
    g.expect(send == 8, "延时为 0、preferred [8, 16]、12 条待发：偏好规则照样在先，发 8 条",
             f"12 个请求待发、{_rule_text(rule)}（第 3 题扫描用的设置）：Triton 发 8 条（能凑到的最大偏好批），"
             f"你的是 send = {send}" + ("：你先判断了「延时为 0 就全发」。Triton 先看偏好批——延时 0 永不过期，所以凑到偏好批"
                                       "就立即发它；只有凑不出偏好批时，延时为 0 才把能装下的全发" if send == 12 else ""))


def _check_payload_rules(g: Grader, fn: Callable[..., Any]) -> None:
    """Three crafted cases: jumping past the largest preferred size, a payload that already holds a
    preferred size, and a preferred size closing the payload at delay 0."""
    # 7. Jumping past the largest preferred size with none reached: the batch before it goes.
    rule = BatchRule(16, (4, 8), 150_000)
    send, _, _ = _ask(g, fn, [0.0, 0.0, 0.0], 0.0, rule, elements=[3, 3, 3])
    g.expect(send == 2, "3 + 3 + 3：第 3 个请求越过最大偏好值 8 而此前没凑到偏好批，立即发前 2 个",
             f"3 个请求各有 3 个批元素、{_rule_text(rule)}：3 + 3 = 6，再加一个就是 9，越过了最大偏好值 8，而此前一个偏好值"
             f"也没凑到——Triton 把加它之前的 2 个请求当作偏好批立即发（send = 2），你的是 send = {send}"
             + ("：漏了「越过最大偏好值」那一条（录下的每个请求都只有 1 个批元素，重放考不到它）" if send in (0, 3) else ""))
    # 8. The payload counts in every size test, and the first request past the largest preferred
    #    size marks a best batch of 0 requests, which counts as none yet: one more joins.
    rule = BatchRule(12, (3,), 150_000)
    send, _, saturated = _ask(g, fn, [0.01] * 4, 0.01, rule, payload=3)
    g.expect(send == 1 and saturated, "负载已有偏好的 3 个、又来 4 个：再收 1 个（3 + 1），负载封口",
             f"负载里已有 3 个批元素、4 个请求待发、{_rule_text(rule)}：Triton 并入 1 个、负载封口（Decision(1, now, True)），"
             f"你的是 send = {send}、saturated = {saturated}" + (
                 "：每个大小判断都要算上负载里已有的 payload 个批元素（你的规则像是从 0 数起）" if send == 3 else
                 "：越过最大偏好值时记下的是「之前 0 个请求」，而 0 在 Triton 里表示「还没有」，下一个请求会再记一次——"
                 "结果是多收 1 个，不是一个不收" if send == 0 else
                 "：越过最大偏好值的那一刻负载就封口（saturated = True），后来的请求另起一个负载" if send == 1 else ""))
    # 9. Delay 0: the preferred size closes the payload.
    rule = BatchRule(8, (4,))
    send, _, saturated = _ask(g, fn, [0.0] * 5, 0.0, rule)
    g.expect(send == 4 and saturated, "延时为 0 时凑到偏好批 4 就发，负载封口（saturated = True）",
             f"5 个请求待发、{_rule_text(rule)}：Triton 发 4 条并封口（Decision(4, now, True)），"
             f"你的是 send = {send}、saturated = {saturated}"
             + ("：延时为 0 时偏好批一凑到就封口（payload_saturated_ = True），第 5 个另起一个负载" if send == 4 else ""))


@check("lab2.q1", points=13, title="写出动态批处理器的决定 next_batch", shortcuts=(next_batch,))
def check_next_batch(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(pending, now, rule, payload) -> Decision(send, wake_at, saturated)`: nine crafted queues
    aimed at the typical mistakes, then the recorded real-server patterns whose recordings all
    agree, replayed through the simulator's batcher with `fn` deciding."""
    _check_idle_rules(g, fn)
    _check_payload_rules(g, fn)
    data = _replay_data()
    misses: dict[bool, list[str]] = {True: [], False: []}
    graded = {True: 0, False: 0}
    for i, entry in enumerate(data["patterns"]):
        want = agreed(entry)
        if want is None:  # the recordings differ: shown in the notebook, not graded
            continue
        crafted = not str(entry["name"]).startswith("R")  # chapter 02's and the extra ones, or random
        graded[crafted] += 1
        got, raised = g.call_raw(replay_batches, fn, i)
        if raised is not None:
            misses[crafted].append(f"模式「{entry['name']}」：重放时出错 {raised.short()}")
            continue
        got = got if isinstance(got, Mapping) else {}
        if got.get("error"):
            misses[crafted].append(f"模式「{entry['name']}」：{got['error']}")
        elif list(got.get("batches", [])) != want or got.get("never_sent"):
            never = got.get("never_sent") or []
            unsent = (f"；第 {'、'.join(str(k + 1) for k in never[:6])} 个请求（按到达顺序）一直没发出去"
                      "——等待时 wake_at 对吗？" if never else "")
            misses[crafted].append(f"模式「{entry['name']}」（{_rule_text(pattern_of(entry).settings)}）："
                                   f"服务器每次组成的批都是 {want}，你的规则给出 {list(got.get('batches', []))}{unsent}")
    g.expect(not misses[True], f"{graded[True]} 个构造的模式（第 02 章的 A–E、G 等，每次录制都一致）：服务器组成的每一批你都预测对了",
             f"构造的模式有 {len(misses[True])} 个没对上：" + "；".join(misses[True][:2]), points=2)
    g.expect(not misses[False], f"{graded[False]} 个随机模式（每次录制都一致的那些）：服务器组成的每一批你都预测对了",
             f"随机模式里有 {len(misses[False])} 个没对上：" + "；".join(misses[False][:2]), points=2)


@check("lab2.q2", points=4, title="写 dynamic_batching 块")
def check_dynamic_batching_block(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(max_queue_delay_us: int, preferred: tuple[int, ...]) -> str` (a `dynamic_batching { }` block)."""
    base = load_config_text("embed")
    parsed = [(d, p, call_block(g, fn, (d, p), base, "dynamic_batching", "dynamic_batching_block"))
              for d, p in ((0, ()), (2000, (8, 16)), (500, (4,)))]
    g.expect(True, "三组参数生成的块都能被 Triton 的解析器读懂", "")
    wrong = [(d, c.dynamic_batching.max_queue_delay_microseconds) for d, _, c in parsed
             if c.dynamic_batching.max_queue_delay_microseconds != d]
    unit = ""
    if wrong and all(got * 1000 == want or round(want / 1000) == got for want, got in wrong if want):
        unit = "：单位是微秒（µs），参数本来就是微秒，不要再换算成毫秒"
    g.expect(not wrong, "max_queue_delay_microseconds 写对了（微秒，整数）",
             f"max_queue_delay_microseconds 不对：期望 {wrong[0][0] if wrong else ''}，读到 {wrong[0][1] if wrong else ''}{unit}")
    wrong_p = [(p, list(c.dynamic_batching.preferred_batch_size)) for _, p, c in parsed
               if list(c.dynamic_batching.preferred_batch_size) != list(p)]
    g.expect(not wrong_p, "preferred_batch_size 写对了（空元组时不写这个字段）",
             f"preferred_batch_size 不对：期望 {list(wrong_p[0][0]) if wrong_p else ''}，读到 {wrong_p[0][1] if wrong_p else ''}"
             "（写成 preferred_batch_size: [ 8, 16 ]；空元组时整行不写）")
    g.expect(all(c.max_batch_size == 32 for *_, c in parsed),
             "没有动 max_batch_size：它是模型级字段，不属于 dynamic_batching",
             "max_batch_size 被改动了：它是模型级字段（在 dynamic_batching 外面），这个块里不要写它")


def _num(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _row_key(row: Mapping[str, Any]) -> tuple[int, tuple[int, ...]] | None:
    try:
        return int(row["delay_us"]), tuple(int(x) for x in row["preferred"])
    except (KeyError, TypeError, ValueError):
        return None


def _check_rows(g: Grader, rows: Any, delays: Sequence[int] | None, preferred_sets: Sequence[Sequence[int]] | None,
                what: str) -> list[Mapping[str, Any]]:
    rows = g.require(rows, what)
    if not isinstance(rows, (list, tuple)) or not all(isinstance(r, Mapping) for r in rows):
        g.fail(f"{what}应是由 dict 组成的 list，每个配置一行")
    missing = sorted({k for r in rows for k in ROW_KEYS if k not in r})
    if missing:
        g.fail(f"{what}的行缺少键 {', '.join(missing)}（每行要有 {', '.join(ROW_KEYS)}）")
    if delays is not None and preferred_sets is not None:
        want = [(int(d), tuple(int(x) for x in p)) for d in delays for p in preferred_sets]
        got = [_row_key(r) for r in rows]
        g.expect(sorted(got, key=str) == sorted(want, key=str),
                 f"{len(want)} 个配置各一行（{len(delays)} 个排队延时 × {len(preferred_sets)} 组偏好批大小）",
                 f"应有 {len(want)} 行，覆盖每个 (delay_us, preferred) 组合各一次；你的 {len(rows)} 行是 {got}")
    return list(rows)


def _history_entry(history: Any, key: tuple[int, tuple[int, ...]]) -> Mapping[str, Any] | None:
    """The last segment of the server's history that ran config `key` and served requests."""
    hits = [h for h in history if isinstance(h, Mapping) and _row_key(h) == key and int(h.get("success", 0)) > 0]
    return hits[-1] if hits else None


def config_stats(workspace: Any, row: Mapping[str, Any], model: str = "embed") -> ModelStats:
    """The server's statistics over sweep `row`'s configuration (the last `Workspace.history`
    segment that ran it and served requests): its batch sizes and their times."""
    found = _history_entry(workspace.history(model), _row_key(row))
    if found is None:
        raise ValueError(f"配置 {_row_key(row)} 在服务器的统计里没有处理过任何请求：先在服务器上扫描（第 3 题）")
    return found["stats"]


@check("lab2.q3", points=4, title="在真实服务器上扫描动态批处理参数", after=(2,))
def check_sweep_rows(g: Grader, rows: Any, delays: Sequence[int] | None = None,
                     preferred_sets: Sequence[Sequence[int]] | None = None, rate: float | None = None,
                     workspace: Any = None, model: str = "embed") -> None:
    """`rows` (one dict per config, `ROW_KEYS`) against the offered `rate` and the statistics the
    server recorded for each config (`workspace.history(model)`)."""
    rows = _check_rows(g, rows, delays, preferred_sets, "测量结果 measured ")
    if delays is None or preferred_sets is None:
        g.expect(False, "", "检查需要网格：check_sweep_rows(measured, delays=DELAYS, preferred_sets=PREFERRED, ...)")
    thr = [_num(r["throughput_rps"]) for r in rows]
    p95 = [_num(r["p95_ms"]) for r in rows]
    if not all(t and t > 0 for t in thr) or not all(p and p > 0 for p in p95):
        g.fail("有的行 throughput_rps 或 p95_ms 不是正数：用 report.throughput_rps 和 report.latency_ms()['p95']")
    rate = _num(rate)
    low = [t for t in thr if rate and not 0.35 * rate <= t <= 1.15 * rate]   # units, not noise
    why = "检查需要到达率：check_sweep_rows(..., rate=RATE)" if not rate else "" if not low else (
        f"吞吐应接近到达率 {rate:.0f} req/s（开环负载下服务器跟得上时两者相等），你的是 {low[0]:.4g}"
        + ("：单位是 req/s，不是 req/ms" if low and math.isclose(low[0] * 1000, rate, rel_tol=0.5) else
           "：用的是 report.throughput_rps 吗？"))
    g.expect(rate and not low, "每行的吞吐都接近到达率（req/s）", why)
    if workspace is None:
        g.fail("检查需要私有仓库，才能对照服务器的统计：check_sweep_rows(..., workspace=ws)")
    history = g.observe(lambda: [{k: v for k, v in h.items() if k != "stats"} for h in workspace.history(model)])
    missing = [r for r in rows if _history_entry(history, _row_key(r)) is None]
    if missing:
        g.fail(f"配置 {_row_key(missing[0])} 在服务器的统计里没有处理过任何请求：这一行不是在服务器上测出来的。"
               "每个配置都要写配置、ws.reload、再用 run_open_loop 发负载")
    bad_mb, bad_p95 = [], []
    for r in rows:
        h = _history_entry(history, _row_key(r))
        server_mb = int(h["inference_count"]) / max(int(h["execution_count"]), 1)
        mine = _num(r["mean_batch"])
        if mine is None or abs(mine - server_mb) > 0.25 * server_mb + 0.15:
            bad_mb.append((_row_key(r), mine, server_mb))
        server_ms = int(h["success_ns"]) / max(int(h["success"]), 1) / 1e6
        # A unit slip is a factor of 1000; a stalled core can lift the server's mean above a
        # correct p95 (a few slow requests), so the bound is a tenth of that mean.
        if _num(r["p95_ms"]) < 0.1 * server_ms:
            bad_p95.append((_row_key(r), _num(r["p95_ms"]), server_ms))
    g.expect(not bad_mb, "每行的平均批大小与服务器统计记录的一致",
             f"配置 {bad_mb[0][0]} 的 mean_batch 是 {bad_mb[0][1]}，服务器统计记录的是 {bad_mb[0][2]:.2f}"
             "（inference_count ÷ execution_count）：用 report.mean_batch_size()，它来自服务器的统计扩展" if bad_mb else "")
    g.expect(not bad_p95, "每行的 p95 与服务器记录的平均请求时长同一量级（单位 ms）",
             f"配置 {bad_p95[0][0]} 的 p95_ms 是 {bad_p95[0][1]:.4g}，连服务器统计里每个请求平均时长 {bad_p95[0][2]:.2f} ms "
             "的十分之一都不到：单位是毫秒吗？用 report.latency_ms()['p95']" if bad_p95 else "")


#: The check's two fixed sweeps: (service base µs, per row µs), rate (req/s), client overhead (ms).
_PREDICTION_CASES = [((2000.0, 250.0), 800.0, 0.5), ((1500.0, 400.0), 1500.0, 2.0)]
PREDICTION_DELAYS, PREDICTION_PREFERRED = (0, 4000), ((), (8, 16))


@functools.lru_cache(maxsize=None)  # a handful of fixed cases, each ~0.1 s to simulate
def _reference_rows(service: Affine, rate: float, overhead_ms: float, delays: tuple = PREDICTION_DELAYS,
                    preferred_sets: tuple = PREDICTION_PREFERRED,
                    decide: Callable[..., Decision] = next_batch) -> dict[tuple, tuple[float, float, float]]:
    """The simulator's rows for one fixed sweep (n = 3000, seed 0, `decide` deciding):
    {(delay, preferred): (throughput_rps, p95_ms incl. overhead, mean_batch)}. Cached: read, never
    modify, the returned dict."""
    arrivals = unit_arrivals(3000, seed=0) / rate
    rows = {}
    for d in delays:
        for p in preferred_sets:
            s = simulate_dynamic(arrivals, service, 32, max_queue_delay_us=d, preferred_batch_sizes=p,
                                 decide=decide).summary()
            rows[(d, p)] = (s["throughput_rps"], s["latency_ms"]["p95"] + overhead_ms, s["batch_size_mean"])
    return rows


def _p95_hint(p: float, want: float, oh: float) -> str:
    if math.isclose(p + oh, want, rel_tol=2e-3):
        return "少了 overhead_ms：模拟器不含客户端开销，p95_ms = summary()['latency_ms']['p95'] + overhead_ms"
    if any(math.isclose(x, want, rel_tol=2e-3) for x in (p * 1000, p * 1000 + oh, (p - oh) * 1000 + oh)):
        return "单位是毫秒：summary()['latency_ms']['p95'] 已经是 ms，不要再换算"
    return "到达要用同一条流：arrivals = unit_arrivals(3000, seed=0) / rate；p95 取 summary()['latency_ms']['p95']"


def one_at_a_time(pending: Sequence[QueuedRequest], now: float, rule: BatchRule, payload: int = 0) -> Decision:
    """A batcher that puts each request in a payload of its own at once (the check's test that
    ``decide`` is used)."""
    return Decision(1, now, True)


@check("lab2.q4", points=4, title="把你的规则接进模拟器，预测同一组扫描")
def check_predict_sweep(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(service, rate, delays, preferred_sets, overhead_ms, decide=...) -> rows` (n=3000, seed=0
    Poisson): with the course's `next_batch` as ``decide`` (the learner's own is judged in question 1),
    then with `one_at_a_time`, which must change the prediction."""
    problems = {"shape": "", "thr": "", "p95": ""}
    for (base_us, per_us), r, oh in _PREDICTION_CASES:
        want = _reference_rows(Affine(base_us, per_us), r, oh)
        got = g.call(fn, Affine(base_us, per_us), r, PREDICTION_DELAYS, PREDICTION_PREFERRED, oh, decide=next_batch)
        rows = _check_rows(g, got, None, None, "predict_sweep 的结果")
        mine = {_row_key(x): x for x in rows}
        label = f"服务时间 {base_us / 1000:g} ms + {per_us / 1000:g} ms/行、{r:.0f} req/s"
        if set(mine) != set(want):
            problems["shape"] = problems["shape"] or (
                f"{label}：应对每个 (delay_us, preferred) 组合各给一行：期望 {sorted(want, key=str)}，你的 {sorted(mine, key=str)}")
            continue
        for k, (w_thr, w_p95, _) in want.items():
            t, p = _num(mine[k].get("throughput_rps")), _num(mine[k].get("p95_ms"))
            if (t is None or not math.isclose(t, w_thr, rel_tol=2e-3)) and not problems["thr"]:
                problems["thr"] = (f"{label}、配置 {k}：吞吐应为 {w_thr:.1f} req/s，你的是 {t}。"
                                   "用 simulate_dynamic(...).summary()['throughput_rps']；到达是 unit_arrivals(3000, seed=0) / rate")
            if (p is None or not math.isclose(p, w_p95, rel_tol=2e-3)) and not problems["p95"]:
                problems["p95"] = (f"{label}、配置 {k}：p95 应为 {w_p95:.3f} ms，你的是 {p}。"
                                   + (_p95_hint(p, w_p95, oh) if p is not None else ""))
    g.expect(not problems["shape"], "每个配置一行，键齐全", problems["shape"])
    g.expect(not problems["thr"], "预测的吞吐与参考模拟一致", problems["thr"])
    g.expect(not problems["p95"], "预测的 p95 与参考模拟一致（含客户端开销）", problems["p95"])
    (base_us, per_us), r, oh = _PREDICTION_CASES[0]
    got = g.call(fn, Affine(base_us, per_us), r, PREDICTION_DELAYS[1:], PREDICTION_PREFERRED[:1], oh, decide=one_at_a_time)
    rows = _check_rows(g, got, None, None, "predict_sweep 的结果")
    ref = _reference_rows(Affine(base_us, per_us), r, oh, PREDICTION_DELAYS[1:], PREDICTION_PREFERRED[:1], one_at_a_time)
    want = next(iter(ref.values()))[2]  # the one row's mean batch
    mb = _num(rows[0].get("mean_batch")) if len(rows) == 1 else None
    g.expect(mb is not None and math.isclose(mb, want, rel_tol=1e-6),
             "换一个决定（每来一条就单独发）预测就跟着变：decide 确实接进了模拟器",
             f"把 decide 换成「每条单独发」的决定时，你的预测没有变（平均批应为 {want:.2f}）：把参数 decide 传给模拟器，"
             "simulate_dynamic(..., decide=decide)，不要写死")


@check("lab2.q5", points=3, title="p95 SLO 之下吞吐最高的配置")
def check_best_under_slo(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(rows, slo_ms) -> row | None`."""
    rows = [
        {"delay_us": 0, "preferred": (), "rate_rps": 300, "throughput_rps": 300.0, "p95_ms": 8.0, "mean_batch": 2.0},
        {"delay_us": 0, "preferred": (), "rate_rps": 600, "throughput_rps": 598.0, "p95_ms": 19.0, "mean_batch": 5.0},
        {"delay_us": 4000, "preferred": (), "rate_rps": 600, "throughput_rps": 601.0, "p95_ms": 20.0, "mean_batch": 7.5},
        {"delay_us": 4000, "preferred": (8,), "rate_rps": 900, "throughput_rps": 880.0, "p95_ms": 45.0, "mean_batch": 9.0},
        {"delay_us": 8000, "preferred": (), "rate_rps": 900, "throughput_rps": 650.0, "p95_ms": 400.0, "mean_batch": 20.0},
    ]
    got = g.call(fn, rows, 20.0)
    if isinstance(got, (list, tuple)) and got and all(isinstance(x, Mapping) for x in got):
        g.fail(f"best_under_slo 返回了 {len(got)} 行的列表：只返回吞吐最高的那一行（dict），没有达标的就返回 None")
    if got is not None and not isinstance(got, Mapping):
        g.fail(f"best_under_slo 应返回一行（dict）或 None，收到的是 {type(got).__name__}")
    g.expect(got is rows[2] or got == rows[2], "SLO 20 ms：选中 601 req/s、p95 正好 20 ms 的那一行（≤ 也算达标）",
             "SLO 20 ms 时应选 delay 4000、601 req/s、p95 = 20.0 ms 的那一行"
             + ("：p95 恰好等于 SLO 也算达标，用 <=" if got == rows[1] else "") +
             ("：880 req/s 那行 p95 = 45 ms 超了 SLO，先筛掉不达标的" if got == rows[3] else "") +
             ("：你选了 p95 最低的一行；要在达标的行里选吞吐最高的" if got == rows[0] else ""))
    got = g.call(fn, rows, 50.0)
    g.expect(got == rows[3], "SLO 50 ms：选中 880 req/s 的那一行；p95 400 ms 的过载配置吞吐再低也不该选",
             f"SLO 50 ms 时应选 880 req/s、p95 45 ms 的那一行，你的函数给出 {got!r}")
    got = g.call(fn, rows, 5.0)
    if isinstance(got, (list, tuple)) and not got:
        g.fail("SLO 5 ms 时没有一行达标：应返回 None，你的函数返回了空列表")
    g.expect(got is None, "SLO 5 ms：没有达标的配置，返回 None",
             f"SLO 5 ms 时没有一行达标，应返回 None，你的函数给出 {got!r}")

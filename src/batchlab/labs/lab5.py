"""Checks of Lab 5 (晚高峰): the queue guard, a burst schedule, priority levels, a client that
hangs up mid-stream, and counters turned into rates for the dashboard."""

from __future__ import annotations

import math
import queue
import time
from typing import Any, Callable

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.grpc import model_config_pb2 as mc

from batchlab.config_pbtxt import load_config_text
from batchlab.labs._blocks import call_block
from batchlab.labs._core import Grader, check
from batchlab.labs.lab3 import lm_tokens
from batchlab.lm import encode
from batchlab.load.transport import infer_inputs
from batchlab.models.requests import generate_inputs
from batchlab.server import poll


def _parse_block(g: Grader, fn: Callable[..., Any], args: tuple, what: str) -> Any:
    return call_block(g, fn, args, load_config_text("embed"), "dynamic_batching", what).dynamic_batching


@check("lab5.q2", points=3, title="给队列设上限与超时")
def check_guard_block(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(max_queue_size, timeout_us) -> dynamic_batching { default_queue_policy { ... } }`."""
    cases = [(16, 100_000), (64, 0)]
    dbs = [(a, _parse_block(g, fn, a, "guard_block")) for a in cases]
    g.expect(all(db.default_queue_policy.max_queue_size == q for (q, _), db in dbs),
             "default_queue_policy.max_queue_size：队列满了新请求立即被拒绝",
             "max_queue_size 不对：它写在 dynamic_batching { default_queue_policy { ... } } 里")
    g.expect(all(db.default_queue_policy.default_timeout_microseconds == t for (_, t), db in dbs),
             "default_timeout_microseconds：排队超过它的请求被处理掉",
             "default_timeout_microseconds 不对（单位是微秒；0 表示不设超时）")
    g.expect(all(db.default_queue_policy.timeout_action == mc.ModelQueuePolicy.REJECT for _, db in dbs),
             "timeout_action: REJECT：超时的请求直接返回 UNAVAILABLE，而不是被推迟（DELAY）",
             "timeout_action 应为 REJECT（DELAY 会把超时请求挪到队尾，可能被无限推迟）")


@check("lab5.q1", points=3, title="造一次晚高峰")
def check_burst(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(base_rate, burst_rate, burst_start, burst_len, duration, seed) -> send times (s)`."""
    t = g.call(fn, 100.0, 1000.0, 1.0, 0.5, 3.0, 0)
    try:
        t = np.asarray(t, dtype=float)
    except (TypeError, ValueError):
        g.fail(f"burst_arrivals 应返回发送时刻的数组，收到的是 {type(t).__name__}")
    if t.ndim != 1 or t.size == 0:
        g.fail(f"应返回一维的发送时刻数组，你的形状是 {t.shape}")
    g.expect(bool(np.all(np.diff(t) >= 0)) and t.min() >= 0 and t.max() < 3.0,
             "时刻从小到大、都落在 [0, duration) 里", "时刻要排好序，并且都在 [0, duration) 之内")
    windows = [(0.0, 1.0, 100.0), (1.0, 1.5, 1000.0), (1.5, 3.0, 100.0)]
    bad = []
    for a, b, rate in windows:
        n = int(((t >= a) & (t < b)).sum())
        mean = rate * (b - a)
        if abs(n - mean) > 5 * math.sqrt(mean) + 2:
            bad.append(f"[{a}, {b}) 秒内有 {n} 个，期望约 {mean:.0f} 个")
    g.expect(not bad, "平时 100 req/s，高峰 0.5 秒里 1000 req/s：每段的请求数都对得上",
             "每段的到达率不对：" + "；".join(bad) + "。每段用对应速率的泊松过程（间隔服从指数分布）")
    again = np.asarray(g.call(fn, 100.0, 1000.0, 1.0, 0.5, 3.0, 0), dtype=float)
    other = np.asarray(g.call(fn, 100.0, 1000.0, 1.0, 0.5, 3.0, 1), dtype=float)
    gaps = np.diff(t[(t >= 1.0) & (t < 1.5)])
    cv = float(gaps.std() / gaps.mean()) if gaps.size > 10 and gaps.mean() > 0 else 0.0
    g.expect(np.array_equal(again, t) and not np.array_equal(other, t) and 0.7 < cv < 1.3,
             "同一个 seed 可以复现、换 seed 就变；间隔是随机的（泊松）",
             "要用 seed 建随机数发生器（np.random.default_rng(seed)），同一 seed 结果相同；"
             f"间隔应服从指数分布（变异系数约 1，你的是 {cv:.2f}——是不是用了等间隔？）")


@check("lab5.q3", points=3, title="优先级：让急单插队")
def check_priority_block(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(low_timeout_us) -> dynamic_batching { priority_levels: 2 ... priority_queue_policy {...} }`."""
    db = _parse_block(g, fn, (500_000,), "priority_block")
    db2 = _parse_block(g, fn, (200_000,), "priority_block")
    g.expect(db.priority_levels == 2 and db.default_priority_level == 2,
             "priority_levels: 2，默认（不带优先级的请求）归入第 2 档：1 是最高优先级",
             f"应有 priority_levels: 2 和 default_priority_level: 2（1 为最高，默认请求算低优先级），"
             f"读到 {db.priority_levels} / {db.default_priority_level}")
    pol = db.priority_queue_policy.get(2) if 2 in db.priority_queue_policy else None
    pol2 = db2.priority_queue_policy.get(2) if 2 in db2.priority_queue_policy else None
    g.expect(pol is not None and pol.default_timeout_microseconds == 500_000 and pol2 is not None
             and pol2.default_timeout_microseconds == 200_000,
             "priority_queue_policy 给第 2 档设了超时（key: 2）",
             "要在 priority_queue_policy 里为第 2 档（key: 2）设 default_timeout_microseconds")
    g.expect(pol is not None and pol.timeout_action == mc.ModelQueuePolicy.REJECT and 1 not in db.priority_queue_policy,
             "低优先级超时就拒绝（REJECT），高优先级不设超时",
             "第 2 档的 timeout_action 应为 REJECT，第 1 档不要设策略")


def _stream(grpc_url: str, n: int, model: str, read: Callable[[Any], Any]) -> Any:
    """`read(get)` on a fresh stream of one n-token request for "锅" (`get()` returns the next response)."""
    client = grpcclient.InferenceServerClient(grpc_url)
    q: "queue.Queue[tuple[Any, Any]]" = queue.Queue()
    client.start_stream(callback=lambda result, error: q.put((result, error)))

    def get() -> Any:
        result, error = q.get(timeout=30)
        if error is not None:
            raise RuntimeError(str(error))
        return result
    try:
        inputs = generate_inputs(encode("锅"), n, ignore_eos=True, batched=False)
        client.async_stream_infer(model, infer_inputs(grpcclient, inputs))
        return read(get)
    finally:
        client.stop_stream()
        client.close()


def active_now(grpc_url: str, model: str = "lm_stream") -> int:
    """Sequences the `lm_stream` scheduler runs, as reported by a fresh 1-token probe (itself included)."""
    return _stream(grpc_url, 1, model, lambda get: int(get().as_numpy("ACTIVE").reshape(-1)[0]))


def seconds_per_token(grpc_url: str, n: int = 24, model: str = "lm_stream") -> float:
    """Seconds per generated token of `model` right now (one uncancelled n-token stream)."""
    def read(get: Callable[[], Any]) -> float:
        get()
        t0 = time.perf_counter()
        for _ in range(n - 1):
            get()
        return (time.perf_counter() - t0) / (n - 1)
    return _stream(grpc_url, n, model, read)


@check("lab5.q4", points=3, title="客人中途离席")
def check_hang_up(g: Grader, fn: Callable[..., Any], client: Any = None, grpc_url: str | None = None) -> None:
    """`fn(client, prompt, max_tokens, k)` reads k streamed tokens from lm_stream, hangs up, returns them."""
    if client is None or grpc_url is None:
        g.fail("检查需要客户端和地址：check_hang_up(hang_up, client=grpc, grpc_url=server.grpc_url)")
    per_token = g.observe(lambda: seconds_per_token(grpc_url))
    prompt = encode("虾滑")  # int32 ids after <bos>
    t0 = g.clock()
    got = g.call(fn, client, prompt, 256, 4)
    took = g.clock() - t0
    try:
        tokens = [int(x) for x in got]
    except (TypeError, ValueError):
        g.fail(f"hang_up 应返回收到的 token 列表，收到的是 {got!r}"[:200])
    g.expect(tokens == lm_tokens(prompt, 4), f"挂断前收到了 4 个 token：{tokens}",
             f"应收到前 4 个 token {lm_tokens(prompt, 4)}，你的是 {tokens}（每个响应的 TOKEN 输出取一个）")
    full = 252 * per_token  # what the rest of the 256-token generation takes
    g.expect(took < 0.25 * full + 0.1 and len(tokens) == 4,
             f"收到 4 个就挂断：用时 {took:.2f} s，远少于生成完 256 个 token 的约 {full + 4 * per_token:.2f} s",
             f"函数用了 {took:.2f} s，差不多等到 256 个 token 全部生成完（约 {full:.2f} s）才返回："
             "stop_stream() 默认等流上的请求全部完成；要用 stop_stream(cancel_requests=True) 真正挂断")
    # lm_stream looks for cancelled requests every 20 ms: a second is plenty
    live = g.observe(lambda: poll(lambda: active_now(grpc_url), 1.0, interval=0.1, done=lambda n: n <= 1))
    g.expect(live == 1, "服务器发现客户端走了：那条序列已取消，KV 缓存已释放（探测请求看到的活跃序列只有它自己）",
             f"挂断后服务器上还有 {live - 1} 条序列在生成：用 client.stop_stream(cancel_requests=True) 取消流上未完成的请求")


@check("lab5.q5", points=3, title="把计数器变成速率")
def check_counter_rates(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(times, counts) -> rates` (len n-1; a counter that goes down restarted from 0)."""
    def arr(v: Any, n: int) -> np.ndarray:
        try:
            a = np.asarray(v, dtype=float)
        except (TypeError, ValueError):
            g.fail(f"counter_rates 应返回数组（每个间隔一个速率），收到的是 {type(v).__name__}")
        if a.shape != (n,):
            g.fail(f"{n + 1} 个采样点应得到 {n} 个速率（相邻两点之间各一个），你的形状是 {a.shape}")
        return a
    times, counts = [0.0, 0.5, 1.0, 2.0], [100, 150, 150, 350]
    r = arr(g.call(fn, times, counts), 3)
    g.expect(np.allclose(r, [100, 0, 200]), "速率 = 计数的增量 ÷ 时间的增量：[100, 0, 200] 次/秒",
             f"应为 [100, 0, 200]（Δcount / Δt），你的是 {r.tolist()}")
    r = arr(g.call(fn, [0.0, 0.2, 1.0], [0, 30, 90]), 2)
    g.expect(np.allclose(r, [150, 75]), "采样间隔不均匀也对：0.2 s 与 0.8 s 各除以自己的 Δt，[150, 75]",
             f"采样间隔是 0.2 s 和 0.8 s，每段要除以它自己的 Δt：应为 [150, 75]，你的是 {r.tolist()}")
    r = arr(g.call(fn, [0.0, 1.0, 2.0, 3.0], [500, 520, 10, 40]), 3)
    if np.allclose(r, [20, -510, 30]):
        g.expect(False, "", "计数器变小说明服务器（或模型）重启过、从 0 重新计数：这一段的增量就是新的计数本身（10），不是负数")
    else:
        g.expect(np.allclose(r, [20, 10, 30]), "计数器重置（变小）时，把新值当作增量：[20, 10, 30]",
                 f"计数 [500, 520, 10, 40] 应得到 [20, 10, 30]（变小即重启，增量取新值），你的是 {r.tolist()}")

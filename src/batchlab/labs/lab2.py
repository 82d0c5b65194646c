"""Checks of Lab 2 (拼锅): the dynamic_batching block, the measured sweep, the simulator's
prediction of it, and the choice of the best configuration under a p95 SLO."""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

from batchlab.config_pbtxt import ConfigError, edit_config, load_config_text
from batchlab.course.tuning import unit_arrivals
from batchlab.labs._core import Grader, check
from batchlab.sim import Affine, simulate_dynamic

ROW_KEYS = ("delay_us", "preferred", "throughput_rps", "p95_ms", "mean_batch")


def _base_config() -> str:
    return load_config_text("embed")


@check("lab2.q1", points=4, title="写 dynamic_batching 块")
def check_dynamic_batching_block(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(max_queue_delay_us: int, preferred: tuple[int, ...]) -> str` (a `dynamic_batching { }` block)."""
    base = _base_config()
    cases = [(0, ()), (2000, (8, 16)), (500, (4,))]
    parsed = []
    for delay, pref in cases:
        text = g.call(fn, delay, pref)
        if not isinstance(text, str):
            g.fail(f"dynamic_batching_block 应返回 config.pbtxt 文本（str），收到的是 {type(text).__name__}")
        if "dynamic_batching" not in text:
            g.fail(f"返回的文本里没有 dynamic_batching：应形如 dynamic_batching {{ ... }}（参数 {delay}, {pref}）")
        try:
            cfg = edit_config(base, text)
        except ConfigError as exc:
            where = f"第 {exc.line} 行第 {exc.column} 列" if exc.line else "解析时"
            g.fail(f"参数 ({delay}, {pref}) 生成的块 Triton 读不懂（{where}：{exc.message}）。{exc.hint}")
        except ValueError as exc:
            g.fail(f"参数 ({delay}, {pref}) 生成的块有问题：{exc}")
        parsed.append((delay, pref, text, cfg))
    g.expect(True, "三组参数生成的块都能被 Triton 的解析器读懂", "")
    wrong = [(d, c.dynamic_batching.max_queue_delay_microseconds) for d, _, _, c in parsed
             if c.dynamic_batching.max_queue_delay_microseconds != d]
    g.expect(not wrong, "max_queue_delay_microseconds 写对了（微秒，整数）",
             f"max_queue_delay_microseconds 不对：期望 {wrong[0][0] if wrong else ''}，读到 {wrong[0][1] if wrong else ''}")
    wrong_p = [(p, list(c.dynamic_batching.preferred_batch_size)) for _, p, _, c in parsed
               if list(c.dynamic_batching.preferred_batch_size) != list(p)]
    g.expect(not wrong_p, "preferred_batch_size 写对了（空元组时不写这个字段）",
             f"preferred_batch_size 不对：期望 {list(wrong_p[0][0]) if wrong_p else ''}，读到 {wrong_p[0][1] if wrong_p else ''}"
             "（写成 preferred_batch_size: [ 8, 16 ]）")
    inside = [t for _, _, t, c in parsed if c.max_batch_size != 32]
    g.expect(not inside, "没有动 max_batch_size：它是模型级字段，不属于 dynamic_batching",
             "max_batch_size 被改动了：它是模型级字段（在 dynamic_batching 外面），这个块里不要写它")


def _num(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _grid_keys(delays: Sequence[int], preferred_sets: Sequence[Sequence[int]]) -> list[tuple[int, tuple[int, ...]]]:
    return [(int(d), tuple(int(x) for x in p)) for d in delays for p in preferred_sets]


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
        want = _grid_keys(delays, preferred_sets)
        got = [_row_key(r) for r in rows]
        g.expect(sorted(got, key=str) == sorted(want, key=str),
                 f"{len(want)} 个配置各一行（{len(delays)} 个延迟 × {len(preferred_sets)} 组偏好批大小）",
                 f"应有 {len(want)} 行，覆盖每个 (delay_us, preferred) 组合各一次；你的 {len(rows)} 行是 {got}")
    return list(rows)


@check("lab2.q2", points=3, title="在真实服务器上扫描拼锅参数")
def check_sweep_rows(g: Grader, rows: Any, delays: Sequence[int] | None = None,
                     preferred_sets: Sequence[Sequence[int]] | None = None) -> None:
    """`rows`: one dict per config with delay_us, preferred, throughput_rps, p95_ms, mean_batch."""
    rows = _check_rows(g, rows, delays, preferred_sets, "测量结果 measured ")
    if delays is None or preferred_sets is None:
        g.expect(True, "（没有给出网格，跳过行数检查）", "")
    bad = [r for r in rows if not (_num(r["throughput_rps"]) and _num(r["throughput_rps"]) > 0
                                   and _num(r["p95_ms"]) and _num(r["p95_ms"]) > 0)]
    g.expect(not bad, "每行的吞吐（req/s）和 p95（ms）都是正数",
             f"有 {len(bad)} 行的 throughput_rps 或 p95_ms 不是正数：用 report.throughput_rps 和 report.latency_ms()['p95']")
    mb = [r for r in rows if not (_num(r["mean_batch"]) and _num(r["mean_batch"]) >= 1)]
    g.expect(not mb, "每行都记下了服务器统计里的平均批大小（≥ 1）",
             f"有 {len(mb)} 行的 mean_batch 不是 ≥ 1 的数：用 report.mean_batch_size()（来自服务器的统计扩展）")


def reference_predictions(service: Any, rate: float, delays: Sequence[int], preferred_sets: Sequence[Sequence[int]],
                          overhead_ms: float = 0.0, n: int = 3000, seed: int = 0) -> list[dict[str, Any]]:
    """The simulator's rows for the lab's sweep (what `predict_sweep` should return)."""
    arrivals = unit_arrivals(n, seed) / rate
    rows = []
    for d, p in _grid_keys(delays, preferred_sets):
        s = simulate_dynamic(arrivals, service, 32, max_queue_delay_us=d, preferred_batch_sizes=p).summary()
        rows.append({"delay_us": d, "preferred": p, "throughput_rps": s["throughput_rps"],
                     "p95_ms": s["latency_ms"]["p95"] + overhead_ms, "mean_batch": s["batch_size_mean"]})
    return rows


@check("lab2.q3", points=3, title="用模拟器预测同一组扫描")
def check_predict_sweep(g: Grader, fn: Callable[..., Any], service: Any = None, rate: float | None = None,
                        overhead_ms: float = 0.0) -> None:
    """`fn(service, rate, delays, preferred_sets, overhead_ms) -> rows` (n=3000, seed=0 Poisson)."""
    cases = [(Affine(2000.0, 250.0), 800.0, 0.5)]  # 2 ms + 0.25 ms per row; 800 req/s
    if service is not None and rate is not None:
        cases.insert(0, (service, float(rate), float(overhead_ms)))
    delays, prefs = (0, 4000), ((), (8, 16))
    problems = {"shape": "", "thr": "", "p95": ""}
    for svc, r, oh in cases:
        got = g.call(fn, svc, r, delays, prefs, oh)
        rows = _check_rows(g, got, None, None, "predict_sweep 的结果")
        want = {(w["delay_us"], w["preferred"]): w for w in reference_predictions(svc, r, delays, prefs, oh)}
        mine = {_row_key(x): x for x in rows}
        if set(mine) != set(want) and not problems["shape"]:
            problems["shape"] = f"应对每个 (delay_us, preferred) 组合各给一行：期望 {sorted(want, key=str)}，你的 {sorted(mine, key=str)}"
            continue
        for k, w in want.items():
            m = mine.get(k, {})
            t, p = _num(m.get("throughput_rps")), _num(m.get("p95_ms"))
            if (t is None or not math.isclose(t, w["throughput_rps"], rel_tol=0.05)) and not problems["thr"]:
                problems["thr"] = (f"配置 {k}（{r:.0f} req/s）：吞吐应约为 {w['throughput_rps']:.0f} req/s，你的是 {t}。"
                                   "用 simulate_dynamic(...).summary()['throughput_rps']")
            if (p is None or not math.isclose(p, w["p95_ms"], rel_tol=0.25)) and not problems["p95"]:
                hint = "别忘了加上 overhead_ms（模拟器不含的客户端开销）" if p is not None and math.isclose(
                    p + oh, w["p95_ms"], rel_tol=0.05) else "用 summary()['latency_ms']['p95']，arrivals = unit_arrivals(3000, seed=0) / rate"
                problems["p95"] = f"配置 {k}（{r:.0f} req/s）：p95 应约为 {w['p95_ms']:.2f} ms，你的是 {p}。{hint}"
    g.expect(not problems["shape"], "每个配置一行，键齐全", problems["shape"])
    g.expect(not problems["thr"], "预测的吞吐与参考模拟一致", problems["thr"])
    g.expect(not problems["p95"], "预测的 p95 与参考模拟一致（含客户端开销）", problems["p95"])


@check("lab2.q4", points=3, title="p95 SLO 之下吞吐最高的配置")
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
    if got is not None and not isinstance(got, Mapping):
        g.fail(f"best_under_slo 应返回一行（dict）或 None，收到的是 {type(got).__name__}")
    g.expect(got is rows[2] or got == rows[2], "SLO 20 ms：选中 601 req/s、p95 正好 20 ms 的那一行（≤ 也算达标）",
             "SLO 20 ms 时应选 delay 4000、601 req/s、p95 = 20.0 ms 的那一行"
             + ("：p95 恰好等于 SLO 也算达标，用 <=" if got == rows[1] else "") +
             ("：880 req/s 那行 p95 = 45 ms 超了 SLO，先筛掉不达标的" if got == rows[3] else ""))
    got = g.call(fn, rows, 50.0)
    g.expect(got == rows[3], "SLO 50 ms：选中 880 req/s 的那一行；p95 400 ms 的过载配置吞吐再低也不该选",
             f"SLO 50 ms 时应选 880 req/s、p95 45 ms 的那一行，你的函数给出 {got!r}")
    got = g.call(fn, rows, 5.0)
    g.expect(got is None, "SLO 5 ms：没有达标的配置，返回 None",
             f"SLO 5 ms 时没有一行达标，应返回 None，你的函数给出 {got!r}")

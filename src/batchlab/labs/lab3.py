"""Checks of Lab 3 (同锅同煮，有状态): one sequence step, the client loop over several
sequences, the `oldest` strategy block, and an abandoned sequence after the idle timeout."""

from __future__ import annotations

import contextlib
import itertools
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from tritonclient.utils import InferenceServerException

from batchlab.config_pbtxt import load_config_text
from batchlab.labs._blocks import read_block
from batchlab.labs._core import Grader, check
from batchlab.lm import ToyLM, encode, generate

STEP_KEYS = ("token", "length", "batch_size", "live", "t")
_IDS = itertools.count(9_100_001)  # correlation ids the checks use (far from the lab's)


def lm_tokens(prompt: Sequence[int], n: int) -> list[int]:
    """The first n greedy tokens of the course LM after `prompt` (the same in any batch)."""
    return [int(t) for t in generate(ToyLM.default(), np.asarray(prompt, np.int32), max_tokens=n, ignore_eos=True)]


def _prompt(text: str) -> np.ndarray:
    return np.asarray(encode(text), np.int32)


def _step_dict(g: Grader, value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        g.fail(f"{what}应返回 dict（键 {', '.join(STEP_KEYS)}），收到的是 {type(value).__name__}")
    missing = [k for k in STEP_KEYS if k not in value]
    if missing:
        g.fail(f"{what}返回的 dict 缺少键：{', '.join(missing)}")
    return value


def _needs_start(client: Any, model: str, seq_id: int) -> bool:
    """True when the server refuses a non-START request for `seq_id` (the sequence is over)."""
    try:
        client.infer(model, [], sequence_id=seq_id)
    except InferenceServerException as exc:
        return "START" in (exc.message() or "")
    with contextlib.suppress(InferenceServerException):  # it ran as a live sequence: end it, free its slot
        client.infer(model, [], sequence_id=seq_id, sequence_end=True)
    return False


@check("lab3.q1", points=4, title="一条序列走一步")
def check_step(g: Grader, fn: Callable[..., Any], client: Any = None, model: str = "lm_step") -> None:
    """`fn(client, model, seq_id, tokens=None, start=False, end=False) -> {token, length, batch_size, live, t}`."""
    if client is None:
        g.fail("检查需要 gRPC 客户端：check_step(step, client=grpc)")
    prompt = _prompt("毛肚")
    ref = lm_tokens(prompt, 3)
    sid = next(_IDS)
    first = _step_dict(g, g.call(fn, client, model, sid, prompt, start=True), "step")
    g.expect(first["token"] == ref[0] and first["length"] == len(prompt),
             f"START 请求带着提示：第一个 token {first['token']}，KV 缓存里 {first['length']} 个 token",
             f"START 请求应返回 token {ref[0]}、length {len(prompt)}（提示的 token 数），你的是 token {first['token']}、length {first['length']}。"
             "提示要放进 TOKENS（形状 [1, n]），并设 sequence_start=True")
    second = _step_dict(g, g.call(fn, client, model, sid), "step")
    third = _step_dict(g, g.call(fn, client, model, sid, end=True), "step")
    g.expect([second["token"], third["token"]] == ref[1:] and third["length"] == len(prompt) + 2,
             "后续请求不带 TOKENS：模型把上一步的 token 接着喂回去，序列延续下来",
             f"后两步应返回 {ref[1:]}（length 到 {len(prompt) + 2}），你的是 {[second['token'], third['token']]}。"
             "同一条序列的每个请求都要带同一个 sequence_id，后续请求不设 START")
    g.expect(g.observe(lambda: _needs_start(client, model, sid)), "end=True 结束了序列：服务器要求同一 ID 重新从 START 开始",
             "序列没有结束：最后一步要设 sequence_end=True，否则它会一直占着一个槽位直到空闲超时")
    ok_types = all(isinstance(d["t"], float) for d in (first, second, third)) and third["t"] >= first["t"]
    g.expect(ok_types and isinstance(first["live"], (int, np.integer)) and isinstance(first["batch_size"], (int, np.integer)),
             "batch_size、live 是整数，t 是收到回复的时刻（time.perf_counter()）",
             "batch_size / live 应是 int（int(r.as_numpy('BATCH_SIZE')[0, 0])），t 应是收到回复时的 time.perf_counter()")


@check("lab3.q2", points=3, title="客户端循环：几条序列一起走")
def check_run_sequences(g: Grader, fn: Callable[..., Any], client: Any = None, model: str = "lm_step") -> None:
    """`fn(client, model, prompts, steps, first_id) -> [[step dict, ...] per sequence]`."""
    if client is None:
        g.fail("检查需要 gRPC 客户端：check_run_sequences(run_sequences, client=grpc)")
    texts = ["毛肚", "虾滑", "鸭血", "毛肚虾滑"]
    prompts = [_prompt(t) for t in texts]
    first_id = next(_IDS)
    for _ in range(len(texts)):
        next(_IDS)
    steps = 6
    out, raised = g.call_raw(fn, client, model, prompts, steps, first_id)
    if raised is not None and "START" in raised.message:
        g.fail(f"run_sequences 抛出了 {raised.short()[:160]}：序列 ID 混用了？每条序列要有自己的 ID（first_id + i），"
               "它的第一步带 START 和提示，之后的步都用同一个 ID")
    if raised is not None:
        g.fail(f"调用 run_sequences(…) 时抛出了 {raised.short()}")
    if not isinstance(out, (list, tuple)) or len(out) != len(prompts):
        g.fail(f"run_sequences 应返回 {len(prompts)} 个列表（每条序列一个），收到的是 {type(out).__name__}"
               + (f"，长度 {len(out)}" if isinstance(out, (list, tuple)) else ""))
    lens = [len(s) if isinstance(s, (list, tuple)) else -1 for s in out]
    g.expect(lens == [steps] * len(prompts), f"每条序列走了 {steps} 步",
             f"每条序列应有 {steps} 个 step 结果，你的是 {lens}")
    wrong = []
    for i, (seq, p) in enumerate(zip(out, prompts)):
        ref = lm_tokens(p, steps)
        got = [int(_step_dict(g, d, "step")["token"]) for d in seq] if isinstance(seq, (list, tuple)) else []
        if got != ref:
            wrong.append((texts[i], ref, got))
    g.expect(not wrong, "每条序列的 token 都和单独生成时一模一样：同一 ID 的请求回到了自己的 KV 缓存",
             f"序列「{wrong[0][0]}」应生成 {wrong[0][1]}，你的是 {wrong[0][2]}：是不是序列 ID 混用了，"
             "或者 START 没带提示？" if wrong else "")
    # the sequence that stepped last first: the one least likely to have been reaped as idle meanwhile
    last = [max((d["t"] for d in seq if isinstance(d, Mapping) and isinstance(d.get("t"), (int, float))), default=0.0)
            if isinstance(seq, (list, tuple)) else 0.0 for seq in out]
    order = sorted(range(len(prompts)), key=lambda i: -last[i])
    ended = g.observe(lambda: all(_needs_start(client, model, first_id + i) for i in order))
    g.expect(ended, "每条序列最后一步都设了 end=True，槽位都还回去了",
             "有序列没有结束：每条序列的最后一步要设 end=True，否则它占着槽位直到空闲超时")
    sizes = [d["batch_size"] for seq in out if isinstance(seq, (list, tuple)) for d in seq if isinstance(d, Mapping)]
    if sizes and max(sizes) > 1:
        g.note(f"最大批大小 {max(sizes)}：几条序列的步被拼进了同一次执行")
    else:
        g.note("所有步的批大小都是 1：序列是一条一条串行走的。用线程（ThreadPoolExecutor）让它们同时在路上，才能拼锅")


@check("lab3.q3", points=3, title="把 direct 换成 oldest")
def check_oldest_block(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(max_candidates, preferred, delay_us) -> "oldest { ... }"`."""
    base = load_config_text("lm_step")
    cases = [(16, (4,), 2000), (8, (), 0)]
    parsed = []
    for cand, pref, delay in cases:
        text = g.call(fn, cand, pref, delay)
        if not isinstance(text, str) or "oldest" not in text:
            g.fail(f"oldest_block 应返回形如 oldest {{ ... }} 的文本，收到的是 {text!r}"[:200])
        if "sequence_batching" in text:
            g.fail("只返回 oldest { ... } 这一节：它会被放进已有的 sequence_batching { } 里，替换 direct { }")
        cfg = read_block(g, text, base, at="sequence_batching", what="oldest_block",
                         args=f"（参数 {cand}, {pref}, {delay}）生成的块")
        parsed.append((cand, pref, delay, cfg.sequence_batching))
    g.expect(all(sb.WhichOneof("strategy_choice") == "oldest" for *_, sb in parsed),
             "sequence_batching 的策略变成了 oldest（direct 和 oldest 二选一）", "策略没有变成 oldest")
    bad = [(c, sb.oldest.max_candidate_sequences) for c, _, _, sb in parsed if sb.oldest.max_candidate_sequences != c]
    g.expect(not bad, "max_candidate_sequences 写对了",
             f"max_candidate_sequences 应为 {bad[0][0]}，读到 {bad[0][1]}" if bad else "")
    bad = [(p, d, list(sb.oldest.preferred_batch_size), sb.oldest.max_queue_delay_microseconds)
           for _, p, d, sb in parsed
           if list(sb.oldest.preferred_batch_size) != list(p) or sb.oldest.max_queue_delay_microseconds != d]
    g.expect(not bad, "preferred_batch_size 与 max_queue_delay_microseconds 写对了（空的偏好批大小不写）",
             f"期望 preferred {list(bad[0][0])}、delay {bad[0][1]}，读到 {bad[0][2]}、{bad[0][3]}" if bad else "")


@check("lab3.q4", points=3, title="被遗弃的序列")
def check_abandoned(g: Grader, fn: Callable[..., Any], client: Any = None, model: str = "lm_step",
                    idle_s: float = 1.5) -> None:
    """`fn(client, model, seq_id, idle_s)` starts a sequence, goes silent for idle_s, steps again and
    returns the InferenceServerException it caught."""
    if client is None:
        g.fail("检查需要 gRPC 客户端：check_abandoned(probe_abandoned, client=grpc)")
    sid = next(_IDS)
    got, raised = g.call_raw(fn, client, model, sid, idle_s)
    if raised is not None and isinstance(raised.exception, InferenceServerException):
        g.fail(f"异常没有被接住（{raised.message[:80]}）：用 try / except InferenceServerException as e: return e")
    if raised is not None:
        g.fail(f"调用 probe_abandoned 时抛出了 {raised.short()}")
    if got is None:
        g.fail("函数返回了 None：空闲之后的那一步成功了？空闲时间要长于 max_sequence_idle_microseconds，"
               "而且那一步不能设 START")
    g.expect(isinstance(got, InferenceServerException), "返回了服务器的错误", f"应返回 InferenceServerException，收到的是 {type(got).__name__}")
    msg = got.message() if isinstance(got, InferenceServerException) else ""
    g.expect("START" in (msg or ""), "服务器已经放弃了这条序列：它要求重新从 START 开始",
             f"错误信息应说明序列要重新 START（服务器说：{(msg or '')[:120]}）")
    g.expect(g.observe(lambda: _needs_start(client, model, sid)), "序列的槽位已被收回", "这条序列似乎还活着：空闲时间够长吗？")

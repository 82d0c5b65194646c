"""Checks of Lab 3 (序列批处理器，有状态): one sequence step, the client loop over several sequences,
the `oldest` strategy block, an abandoned sequence after the idle timeout, and the `direct` slot
assignment written by the learner (its release step, then crafted timelines and timelines recorded
from the real server)."""

from __future__ import annotations

import contextlib
import heapq
import itertools
from collections import deque
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from tritonclient.utils import InferenceServerException

from batchlab.config_pbtxt import load_config_text
from batchlab.labs._blocks import read_block
from batchlab.labs._core import Grader, check
from batchlab.labs import recorded
from batchlab.labs.record_lab3 import _reference_slots
from batchlab.lm import ToyLM, encode, generate
from batchlab.batching.slots import SequenceSlots

STEP_KEYS = ("token", "length", "batch_size", "live", "t")
_IDS = itertools.count(9_100_001)  # correlation ids the checks use (far from the lab's)


def lm_tokens(prompt: Sequence[int], n: int) -> list[int]:
    """The first n greedy tokens of the course LM after `prompt` (the same in any batch)."""
    return [int(t) for t in generate(ToyLM.default(), np.asarray(prompt, np.int32), max_tokens=n, ignore_eos=True)]


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
    prompt = encode("毛肚")  # int32 ids after <bos>
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
    prompts = [encode(t) for t in texts]
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
        g.note("所有步的批大小都是 1：序列是一条一条串行走的。用线程（ThreadPoolExecutor）让它们同时在路上，才能合批")


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


# ---------------------------------------------------------------- questions 5-6: direct's slot assignment

def _released(fn: Callable[..., Any], seqs: Sequence[int], slot_of: dict, backlog: Sequence, n_out: int) -> list:
    """Run ``fn`` (a `release`) for each of ``seqs`` on fresh structures (no free slot to start with)
    and return what it left in them: [sorted slot_of items, free, backlog, out] (the recorded value)."""
    slot_of, free, queue, out = dict(slot_of), [], deque(backlog), [None] * n_out
    for seq in seqs:
        fn(seq, slot_of, free, queue, out)
    return [sorted([int(k), v] for k, v in slot_of.items()), list(free),
            [list(x) if isinstance(x, (tuple, list)) else x for x in queue], out]


@check("lab3.q5", points=3, title="让出槽位：release")
def check_release(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(seq, slot_of, free, backlog, out)` frees ``seq``'s slot in place: the head of ``backlog``
    (``(seq, event index)`` pairs) takes it, else it goes back on the heap ``free``."""
    state = g.call(_released, fn, [1], {0: 0, 1: 1, 2: 2}, [(3, 7), (4, 9)], 10)
    slot_of, free, backlog, out = state
    held = {k: v for k, v in slot_of}
    g.expect(held.get(3) == 1 and out[7] == 1 and backlog == [[4, 9]],
             "槽位 1 空出：积压队列里最早的序列 3 接手，它在第 8 个事件（out[7]）发出的 START 跑在槽位 1",
             f"序列 3、4 先后在积压队列里等（它们的 START 是第 8、第 10 个事件，out[7]、out[9]），序列 1 让出槽位 1："
             f"应由序列 3 接手（slot_of[3] = 1、out[7] = 1，队列剩 [(4, 9)]），"
             f"你的是 slot_of = {held}、out[7] = {out[7]}、backlog = {backlog}"
             + ("：不要让后来的序列插队——积压队列先进先出，用 backlog.popleft()" if held.get(4) == 1 else ""))
    g.expect(1 not in held, "让出槽位的序列不再占着它", "序列 1 让出槽位后还在 slot_of 里：要把它删掉（slot_of.pop(seq)）")
    slot_of, free, _, _ = g.call(_released, fn, [2, 0, 1], {0: 0, 1: 1, 2: 2}, [], 4)
    free = [x for x in free if isinstance(x, int)]
    lowest = heapq.heappop(free) if free else None
    g.expect(lowest == 0, "没人等时槽位回到空槽位堆：按 2、0、1 的顺序空出，下一个新序列拿到最低的 0",
             "没人等，槽位按 2、0、1 的顺序空出后，heapq.heappop(free) 应给出 0，你的 free 里"
             + (f"弹出的是 {lowest}" if free or lowest is not None else "什么也没有")
             + "：空出的槽位要用 heapq.heappush(free, slot) 放回堆里，新序列才总是拿到编号最低的空槽位"
             "（不是最先或最后空出的那个）")


def _ev(text: str) -> list[tuple[int, str]]:
    """'0s 1s 0e 2i 1p' -> [(0, "start"), (1, "start"), (0, "end"), (2, "idle"), (1, "step")]."""
    kinds = {"s": "start", "p": "step", "e": "end", "i": "idle"}
    return [(int(w[:-1]), kinds[w[-1]]) for w in text.split()]


#: Crafted timelines, one per typical mistake: (slots, events, what it tests, hint when wrong).
_CRAFTED = [
    (3, "0s 1s 2s 2e 0e 1e 3s 4s", "最低空槽位：槽位按 2、0、1 的顺序空出，新序列 3、4 拿到 0、1",
     "空出的槽位放进一个堆（Triton 的 ready_batcher_seq_slots_），新序列总是拿编号最低的空槽位——不是最先或最后空出的那个，"
     "也不是一个一直往上数的计数器"),
    (2, "0s 1s 2s 3s 0e 1e 2e 3e", "积压按先来后到：先等的序列 2 先拿到空出的槽位 0",
     "没有空槽位时 START 进积压队列（backlog，先进先出）：槽位一空，最早等的那条序列先拿——不要让后来的序列插队"),
    (2, "0s 1s 2s 1p 0e 1e 2e", "只有 END 让出槽位：序列 1 的中间一步之后，序列 2 仍在等，直到序列 0 END",
     "中间一步（step）跑完并不让出槽位：direct 下一条序列从 START 到 END 一直占着它的槽位，只有 END（或空闲超时）才放"),
    (2, "0s 1s 2s 0i 3s 1e 2e 3e", "空闲超时：序列 0 的槽位被收回、给了等着的序列 2；这个事件没有请求，槽位是 None",
     "空闲超时（idle）不是送到模型的请求：Triton 的 null 请求留在调度器里，模型什么也收不到，这个事件的槽位是 None；"
     "但槽位确实被收回了，等着的序列接着拿到它"),
]


def _slots_of(g: Grader, fn: Callable[..., Any], events: list[tuple[int, str]], n: int, what: str) -> list[Any] | str:
    """``fn``'s slots for ``events`` on ``n`` slots, or why they are no list; when ``fn`` raises, the
    check stops there, saying once what raised where (``what``: the timeline it was given)."""
    out, raised = g.call_raw(fn, [tuple(e) for e in events], n)
    if raised is not None:
        where = raised.where or {}
        blame = ("。出错的是你在第 5 题写的 release：先让第 5 题的检查全对" if where.get("function") == "release"
                 else "")
        g.fail(f"{what}时，assign 抛出了 {raised.located()}{blame}")
    if not isinstance(out, (list, tuple)) or len(out) != len(events):
        return (f"assign 应返回 {len(events)} 个槽位的列表（每个事件一个），收到的是 {type(out).__name__}"
                + (f"，长度 {len(out)}" if isinstance(out, (list, tuple)) else ""))
    return [None if x is None else int(x) if isinstance(x, (int, np.integer)) else x for x in out]


def _first_diff(events: list[tuple[int, str]], want: list[Any], got: list[Any]) -> str:
    i = next(i for i, (w, x) in enumerate(zip(want, got)) if w != x)
    seq, kind = events[i]
    return f"第 {i + 1} 个事件（序列 {seq} 的 {kind}）应在槽位 {want[i]}，你的是 {got[i]}"


@check("lab3.q6", points=8, title="direct：给每个请求分配槽位",
       shortcuts=(SequenceSlots.arrive, SequenceSlots.release, SequenceSlots.take, _reference_slots))
def check_assign(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(events, n_slots) -> [slot or None per event]`: four crafted timelines aimed at the typical
    mistakes, then the timelines recorded from the real server (`batchlab.labs.record_lab3`)."""
    for n, text, good, hint in _CRAFTED:
        events = _ev(text)
        want, got = _reference_slots(events, n), _slots_of(g, fn, events, n, f"{n} 个槽位、事件 {text}（考的是：{good}）")
        if isinstance(got, str):  # it raised or answered no list: the hint still names the likely mistake
            g.expect(False, good, f"{n} 个槽位、事件 {text}：{got}。这条时间线考的是：{hint}")
            continue
        idle_slot = [x for (s, k), x in zip(events, got) if k == "idle" and x is not None]
        g.expect(got == want, good, f"{n} 个槽位、事件 {text}：应得到 {want}，你的是 {got}。{_first_diff(events, want, got)}："
                 + ("空闲超时的事件你给了槽位——" if idle_slot else "") + hint if got != want else "")
    data = recorded.load("lab3_slots")
    misses = []
    for t in data["timelines"]:
        events = [tuple(e) for e in t["events"]]
        got = _slots_of(g, fn, events, t["n_slots"], f"重放录下的时间线 {t['name']}（{t['n_slots']} 个槽位）")
        if isinstance(got, str) or got != t["slots"]:
            misses.append(f"时间线 {t['name']}（{t['n_slots']} 个槽位）：" + (got if isinstance(got, str) else
                          _first_diff(events, t["slots"], got)))
    n_req = sum(len(t["events"]) for t in data["timelines"])
    g.expect(not misses, f"服务器上录下的 {len(data['timelines'])} 条时间线（{n_req} 个事件）：每个请求的槽位都对上了",
             f"录下的 {len(data['timelines'])} 条时间线里有 {len(misses)} 条没对上：" + "；".join(misses[:2]), points=4)


def recorded_timelines() -> list[dict[str, Any]]:
    """The timelines the check replays: ``name``, ``n_slots``, ``events`` and the ``slots`` the server reported."""
    return [dict(t) for t in recorded.load("lab3_slots")["timelines"]]

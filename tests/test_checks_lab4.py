"""Lab 4 checks (no server needed): admission policy, chunked prefill's split, η, config limits, KV blocks,
speculative decoding's acceptance rule."""

from __future__ import annotations

import re

import numpy as np
import pytest

from batchlab.labs.lab4 import (accept_mistake, check_accept, check_admit, check_chunks, check_eta, check_pool_blocks,
                                check_with_limits)
from batchlab.batching.policies import ReserveAdmission

from lab_solutions import solution_namespace


def test_admit(capsys) -> None:
    reference_admit = solution_namespace("lab4")["admit"]   # FCFS under both limits, no overtaking

    assert check_admit(reference_admit).passed
    capsys.readouterr()

    def skipping(waiting, active, max_active, budget):  # lets small requests overtake the head
        n, used, out = len(active), sum(a.reserved_tokens for a in active), []
        for i, c in enumerate(waiting):
            if n < max_active and used + c.reserved_tokens <= budget:
                out.append(i)
                n += 1
                used += c.reserved_tokens
        return out
    r = check_admit(skipping)
    assert r.score == 4 and "插了队" in capsys.readouterr().out

    def current_usage(waiting, active, max_active, budget):  # counts kv_tokens, not reservations
        n, used, out = len(active), sum(a.kv_tokens for a in active), []
        for i, c in enumerate(waiting):
            if n >= max_active or used + c.reserved_tokens > budget:
                break
            out.append(i)
            n += 1
            used += c.reserved_tokens
        return out
    r = check_admit(current_usage)
    assert r.score == 3 and "预留" in capsys.readouterr().out
    r = check_admit(lambda w, a, m, b: list(range(len(w))))  # no limits at all
    assert r.score <= 2
    r = check_admit(lambda w, a, m, b: None)
    assert r.score == 0 and "None" in capsys.readouterr().out


def _strict_budget(waiting, active, max_active, budget):
    """Refuses a request that would fill the budget exactly (`>=` where the rule says `>`)."""
    n, used, out = len(active), sum(a.reserved_tokens for a in active), []
    for i, c in enumerate(waiting):
        if n >= max_active or used + c.reserved_tokens >= budget:
            break
        out.append(i)
        n += 1
        used += c.reserved_tokens
    return out


def _admit_with_np(waiting, active, max_active, budget):
    """Reads `np` from the module it was defined in: the model process has no such name."""
    return [int(i) for i in np.arange(len(waiting))[: max(0, max_active - len(active))]]


def _admit_importing_np(waiting, active, max_active, budget):
    """The same with its own import: it runs alone."""
    import numpy as np
    used, out = int(np.sum([a.reserved_tokens for a in active])), []
    for i, c in enumerate(waiting):
        if len(active) + len(out) >= max_active or used + c.reserved_tokens > budget:
            break
        out.append(i)
        used += c.reserved_tokens
    return out


def test_admit_budget_boundary_and_outside_names(capsys) -> None:
    r = check_admit(_strict_budget)
    out = capsys.readouterr().out
    assert r.score == r.max_score - 1 and "正好用满也放得下" in out and "≤ kv_token_budget" in out, out
    r = check_admit(_admit_with_np)
    out = capsys.readouterr().out
    assert r.score == 0 and "用到了函数外面的名字 np" in out and "import" in out and "Traceback" not in out, out
    assert check_admit(_admit_importing_np).passed


def with_limits(text, max_active, budget):
    for key, value in (("max_active", max_active), ("kv_token_budget", budget)):
        text = re.sub(r'(key:\s*"' + key + r'"(?:\s*#[^\n]*)?\s*value\s*\{\s*string_value:\s*")[^"]*(")',
                      lambda m, value=value: m.group(1) + str(value) + m.group(2), text)
    return text


def test_with_limits(capsys) -> None:
    assert check_with_limits(with_limits).passed
    capsys.readouterr()
    only_first = lambda t, m, b: with_limits(t, m, b).replace(f'string_value: "{b}"', 'string_value: "4096"')
    r = check_with_limits(only_first)
    assert r.score == 2 and "kv_token_budget" in capsys.readouterr().out
    r = check_with_limits(lambda t, m, b: t.replace('key: "max_active"', f'key: "max_active" {m}'))
    assert r.score == 0 and "Triton 读不懂" in capsys.readouterr().out


def test_eta(capsys) -> None:
    assert check_eta(lambda n, p: sum(n) / (sum(n) + sum(p))).passed
    capsys.readouterr()
    r = check_eta(lambda n, p: sum(a / (a + b) for a, b in zip(n, p)) / len(n))
    assert r.score == 2 and "平均" in capsys.readouterr().out
    r = check_eta(lambda n, p: (sum(n) + sum(p)) / sum(n))
    assert r.score == 1 and "倒过来" in capsys.readouterr().out


def test_the_library_policy_is_no_answer(capsys) -> None:
    """The scheduler's admission policies leave the limits to the block manager: no answer to q1."""
    def admit(waiting, active, max_active, budget):
        return list(ReserveAdmission().select(waiting, active))
    r = check_admit(admit)
    assert not r.passed and r.score <= 2


def _split(room_first=True, cap=True, floor=True, order=None):
    """A split with one of the typical mistakes switched on (all defaults: the right one)."""
    def split(remaining, n_decoding, max_num_tokens):
        room = max_num_tokens - (n_decoding if room_first else 0)
        out = [0] * len(remaining)
        for i in (order(remaining) if order else range(len(remaining))):
            chunk = min(remaining[i], room) if cap else room
            out[i] = max(0, chunk) if floor else chunk
            room -= out[i]
        return out
    return split


def test_chunks_solution_and_stub(capsys) -> None:
    assert check_chunks(solution_namespace("lab4")["prefill_chunks"]).passed
    assert check_chunks(_split()).passed
    capsys.readouterr()

    def stub(remaining, n_decoding, max_num_tokens):
        raise NotImplementedError("第 2 题")
    r = check_chunks(stub)
    assert r.score == 0 and "尚未完成" in capsys.readouterr().out


@pytest.mark.parametrize("answer, score, message", [
    (_split(room_first=False), 2, "解码的 token 没有先占预算"),                       # decodes not first
    (lambda r, d, m: list(r), 1, "整段提示一次算完了，没有分块"),                       # whole prompts
    (_split(order=lambda r: sorted(range(len(r)), key=r.__getitem__)), 4, "插了队"),  # shortest prompt first
    (lambda r, d, m: [min(x, max(0, m - d) // len(r)) for x in r], 4, "插了队"),      # an equal share each
    (_split(cap=False), 3, "比这条提示剩下的 token 还多"),                            # chunk > what remains
    (_split(floor=False), 4, "出现了负数"),                                          # negative room
    (lambda r, d, m: None, 0, "返回了 None"),
    (lambda r, d, m: [1], 0, "每条提示都要有一个数"),
])
def test_chunks_typical_mistakes(capsys, answer, score, message) -> None:
    r = check_chunks(answer)
    out = capsys.readouterr().out
    assert r.score == score and message in out, out


def test_the_library_split_is_no_answer(capsys) -> None:
    def split(remaining, n_decoding, max_num_tokens):
        from batchlab.batching.policies import prefill_chunks
        return prefill_chunks(remaining, n_decoding, max_num_tokens)
    r = check_chunks(split)
    assert r.score == 0 and "课程库里现成的" in capsys.readouterr().out


def _pool(ceil=True, plus1=False, share=True, once=True, full_only=True, size=None):
    """`pool_blocks` with one of the typical mistakes switched on (all defaults: the right one)."""
    def pool_blocks(kv_tokens, shared_tokens, block_size):
        b = size or block_size
        per = [n // b + 1 if plus1 else (-(-n // b) if ceil else n // b) for n in kv_tokens]
        common = (shared_tokens // b if full_only else -(-shared_tokens // b)) if share else 0
        return sum(per) - common * (max(len(per) - 1, 0) if once else len(per))
    return pool_blocks


def test_pool_blocks_solution(capsys) -> None:
    assert check_pool_blocks(solution_namespace("lab4")["pool_blocks"]).passed
    assert check_pool_blocks(_pool()).passed
    capsys.readouterr()


@pytest.mark.parametrize("answer, message", [
    (_pool(ceil=False), "没装满的最后一块也要占一整块"),
    (_pool(plus1=True), "块边上差一"),
    (_pool(share=False), "被每条序列各算了一次"),
    (_pool(once=False), "一次也没算"),
    (_pool(full_only=False), "没装满的那块不能共享"),
    (_pool(size=16), "block_size"),
])
def test_pool_blocks_typical_mistakes(capsys, answer, message) -> None:
    r = check_pool_blocks(answer)
    out = capsys.readouterr().out
    assert r.score < r.max_score and message in out, out


def test_pool_blocks_wrong_kinds_and_the_library(capsys) -> None:
    r = check_pool_blocks(lambda kv, shared, size: None)
    assert r.score == 0 and "pool_blocks" in capsys.readouterr().out

    def by_manager(kv_tokens, shared_tokens, block_size):
        from batchlab.batching.blocks import BlockManager
        manager = BlockManager(None, block_size)
        return sum(manager.blocks_for(n) for n in kv_tokens) - (shared_tokens // block_size) * max(len(kv_tokens) - 1, 0)
    r = check_pool_blocks(by_manager)
    assert r.score == 0 and "课程库里现成的" in capsys.readouterr().out


def test_the_lab_runs_helpers_without_a_server(capsys) -> None:
    from batchlab.labs import lab4

    rows = [{"round": r, "model": m, "NUM_TOKENS": [4, 2], "PADDED_STEPS": [0, 2], "tokens_per_s": 10.0 * (r + 1)}
            if m == "generate" else {"round": r, "model": m, "eta": 1.0, "tokens_per_s": 30.0 + r}
            for r in range(3) for m in ("generate", "lm_stream_mine")]
    unmeasured = [{"round": 0, "model": "lm_stream_other", "tokens_per_s": 1.0}]   # lm_stream: no η measured
    assert lab4.eta_rounds(rows + unmeasured, lambda n, p: sum(n) / (sum(n) + sum(p))) == {
        "generate": [0.75] * 3, "lm_stream_mine": [1.0] * 3}
    med = lab4.medians(rows, {"tokens_per_s": "tokens/s"})
    assert med["tokens_per_s"] == {"generate": (20.0, 10.0, 30.0), "lm_stream_mine": (31.0, 30.0, 32.0)}
    assert "generate        tokens/s 20.0（10.0…30.0）" in capsys.readouterr().out
    steps = {"共享开头": [{"shared_tokens": 100, "kv_tokens": [120, 121], "KV_BLOCKS": 10, "KV_TOKENS": 141},
                      {"shared_tokens": 100, "kv_tokens": [], "KV_BLOCKS": 0, "KV_TOKENS": 0}]}
    audit = lab4.pool_audit(steps, _pool())
    assert [r["mine"] for r in audit] == [10, 0]
    audit = lab4.pool_audit(steps, _pool(share=False))
    lab4.show_audit(audit)
    out = capsys.readouterr().out
    assert audit[0]["mine"] == 16 and "✗" in out and "2 条，各存 120…121 个 token" in out
    lab4.show_row({"round": 0, "model": "lm_stream_mine", "ok": 0, "failed": 24, "tokens_per_s": 0.0,
                   "ttft_p50_ms": float("nan"), "batch": float("nan"),
                   "error": "lm_stream failed: NameError: name 'np' is not defined"})
    out = capsys.readouterr().out
    assert "24 个请求失败，服务器说：lm_stream failed: NameError" in out and "先把那一题改对" in out


# ---- question 6: speculative decoding's acceptance rule ----

def _accept(past_mismatch=False, correction="target", shift=0):
    """An acceptance rule, right by default; `past_mismatch` counts every matching position,
    `correction` "target" / "draft" / None picks the last token, `shift` reads target_argmax one off."""
    def accept(draft_tokens, target_argmax):
        accepted = 0
        for d, t in zip(draft_tokens, target_argmax):
            if d != t:
                if past_mismatch:
                    continue
                break
            accepted += 1
        if correction is None:
            return accepted, None
        if correction == "draft" and accepted < len(draft_tokens):
            return accepted, draft_tokens[accepted]
        return accepted, target_argmax[accepted + shift]
    return accept


def test_accept_solution_and_stub(capsys) -> None:
    assert check_accept(solution_namespace("lab4")["accept"]).passed
    assert check_accept(_accept()).passed
    capsys.readouterr()

    def stub(draft_tokens, target_argmax):
        raise NotImplementedError("TODO（第 6 题）")
    r = check_accept(stub)
    assert r.score == 0 and not r.passed


@pytest.mark.parametrize("answer, score, message", [
    (_accept(past_mismatch=True), 2, "接受过了第一个不一致的位置"),
    (_accept(correction="draft"), 1, "丢了纠正 token"),
    (_accept(correction=None), 0, "丢了纠正 token"),
    (_accept(shift=-1), 0, "差一"),
    (_accept(shift=1), 0, "下标差一"),
])
def test_accept_typical_mistakes(capsys, answer, score, message) -> None:
    r = check_accept(answer)
    out = capsys.readouterr().out
    assert r.score == score and message in out and "Traceback" not in out, out


def test_accept_mistakes_are_named_case_by_case() -> None:
    assert "所有对上的位置" in accept_mistake([5, 6, 7], [9, 6, 7, 4], (2, 7))
    assert "白得" in accept_mistake([5, 6, 7], [5, 6, 7, 4], (3, 7))
    assert "丢了" in accept_mistake([5, 6, 7], [5, 6, 7, 4], (3, None))
    assert "整数" in accept_mistake([5], [5, 2], ("1", 2))
    assert accept_mistake([5, 6], [5, 7, 1], (1, 3)).endswith("你的是 (1, 3)")


def _library_accept(draft_tokens, target_argmax):
    """The course's own rule, imported inside (it runs alone)."""
    from batchlab.batching import accept
    return accept(draft_tokens, target_argmax)


def _accept_with_np(draft_tokens, target_argmax):
    """Reads `np` from this module: the model process has no such name."""
    first = int(np.argmax([d != t for d, t in zip(draft_tokens, target_argmax)] + [True]))
    return first, target_argmax[first]


def test_accept_wrong_kinds_and_the_library(capsys) -> None:
    for answer, message in ((lambda d, t: None, "返回了 None"), (lambda d, t: 3, "两个数"),
                            (lambda d, t: [{"wrong": 1}], "两个数"), (_library_accept, "课程库里现成的")):
        r = check_accept(answer)
        out = capsys.readouterr().out
        assert r.score == 0 and message in out and "Traceback" not in out, out
    r = check_accept(_accept_with_np)
    assert r.score == 0 and "用到了函数外面的名字 np" in capsys.readouterr().out


def test_show_spec_prints_the_servers_counts(capsys) -> None:
    from batchlab.labs import lab4

    rows = {"lm_stream_plain": {"decode_steps": 156, "tokens_per_step": 1.0, "drafted": 0, "accepted": 0,
                                "requests": [(0, 0)] * 2},
            "lm_stream_spec": {"decode_steps": 60, "tokens_per_step": 2.6, "drafted": 90, "accepted": 47,
                               "requests": [(48, 22), (42, 25)]}}
    lab4.show_spec(rows)
    out = capsys.readouterr().out
    assert "不投机" in out and "22/48  25/42" in out and "每步 2.60 个 token" in out


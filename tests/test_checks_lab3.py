"""Lab 3 checks against a private server: lm_step as the course ships it (3 s idle timeout), and
lm_step_idle with a 0.5 s one for the abandoned-sequence question (as the lab sets them up)."""

from __future__ import annotations

import json
import linecache
import re
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from batchlab.labs import labkit, record_lab3, recorded
from batchlab.labs.lab3 import (_ev, check_abandoned, check_assign, check_oldest_block, check_release, check_run_sequences,
                                check_step)
from batchlab.lm import encode
from lab_solutions import solution_path

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def grpc():
    ws = labkit.workspace(["lm_step"])
    ws.add("lm_step", as_name="lm_step_idle")
    text = re.sub(r"max_sequence_idle_microseconds:\s*\d+", "max_sequence_idle_microseconds: 500000",
                  ws.read_config("lm_step_idle"))
    ws.write_config("lm_step_idle", text)
    server = ws.start()
    yield server.grpc_client()
    ws.close()


def step(client, model, seq_id, tokens=None, start=False, end=False):
    inputs = []
    if tokens is not None:
        x = np.asarray(tokens, np.int32).reshape(1, -1)
        inp = grpcclient.InferInput("TOKENS", list(x.shape), "INT32")
        inp.set_data_from_numpy(x)
        inputs.append(inp)
    r = client.infer(model, inputs, sequence_id=seq_id, sequence_start=start, sequence_end=end)
    v = lambda n: int(r.as_numpy(n).reshape(-1)[0])
    return {"token": v("TOKEN"), "length": v("LENGTH"), "batch_size": v("BATCH_SIZE"),
            "live": v("LIVE_SEQUENCES"), "t": time.perf_counter()}


def run_sequences(client, model, prompts, steps, first_id, end=True):
    def one(i):
        out = [step(client, model, first_id + i, prompts[i], start=True)]
        for k in range(steps - 1):
            out.append(step(client, model, first_id + i, end=end and k == steps - 2))
        return out
    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(one, range(len(prompts))))


def test_step(grpc, capsys) -> None:
    assert check_step(step, client=grpc).passed
    capsys.readouterr()
    never_ends = lambda c, m, s, tokens=None, start=False, end=False: step(c, m, s, tokens, start, False)
    r = check_step(never_ends, client=grpc)
    assert r.score == 3 and "sequence_end=True" in capsys.readouterr().out
    # the check ended the sequence it found still live (lab3._needs_start), so no slot stays taken
    no_start = lambda c, m, s, tokens=None, start=False, end=False: step(c, m, s, tokens, False, end)
    r = check_step(no_start, client=grpc)
    assert r.score == 0 and "START" in capsys.readouterr().out


def test_run_sequences(grpc, capsys) -> None:
    assert check_run_sequences(run_sequences, client=grpc).passed
    capsys.readouterr()
    shared_id = lambda c, m, p, s, f: run_sequences(c, m, p, s, f)[:1] * len(p)
    r = check_run_sequences(shared_id, client=grpc)
    out = capsys.readouterr().out
    assert not r.passed and "序列「" in out
    r = check_run_sequences(lambda c, m, p, s, f: run_sequences(c, m, p, s, f, end=False), client=grpc)
    assert r.score == 2 and "end=True" in capsys.readouterr().out
    time.sleep(1.2)


def oldest(c, pref=(), delay=0):
    lines = ["oldest {", f"  max_candidate_sequences: {c}"]
    if pref:
        lines.append("  preferred_batch_size: [ " + ", ".join(map(str, pref)) + " ]")
    return "\n".join(lines + [f"  max_queue_delay_microseconds: {delay}", "}"])


def test_oldest_block(capsys) -> None:
    assert check_oldest_block(oldest).passed
    capsys.readouterr()
    r = check_oldest_block(lambda c, p=(), d=0: "sequence_batching { " + oldest(c, p, d) + " }")
    assert r.score == 0 and "只返回 oldest" in capsys.readouterr().out
    r = check_oldest_block(lambda c, p=(), d=0: oldest(c, p, 0))
    assert r.score == 2 and "delay" in capsys.readouterr().out


def test_abandoned(grpc, capsys) -> None:
    def probe(client, model, seq_id, idle_s):
        step(client, model, seq_id, encode("毛肚"), start=True)
        time.sleep(idle_s)
        try:
            step(client, model, seq_id)
        except InferenceServerException as e:
            return e

    assert check_abandoned(probe, client=grpc, model="lm_step_idle", idle_s=1.2).passed
    capsys.readouterr()
    r = check_abandoned(probe, client=grpc, model="lm_step_idle", idle_s=0.05)  # too short: the step succeeds
    assert r.score == 0 and "空闲" in capsys.readouterr().out
    time.sleep(1.2)


# ---------------------------------------------------------------- question 5: direct's slot assignment
# (no server: the check replays the timelines recorded by batchlab.labs.record_lab3)

def _answers(old: str = "", new: str = "") -> dict:
    """The solution's `assign`, with `old` replaced by `new` in its source (a planted mistake)."""
    nb = json.loads(solution_path("lab3").read_text(encoding="utf-8"))
    src = "import heapq\nfrom collections import deque\n" + "\n".join(
        "".join(c["source"]) for c in nb["cells"] if "def assign(" in "".join(c["source"]) or "def release(" in "".join(c["source"]))
    assert old in src
    src = src.replace(old, new)
    name = f"<lab3-answer-{abs(hash(src))}>"  # as IPython does for a cell: its lines can be shown
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    ns: dict = {}
    exec(compile(src, name, "exec"), ns)
    return ns


def _assign(old: str = "", new: str = ""):
    """The solution's `assign` (and the `release` it calls), with `old` replaced by `new`."""
    return _answers(old, new)["assign"]


@pytest.mark.parametrize("old,new,needle", [
    ("", "", None),
    ("nxt, j = backlog.popleft()", "nxt, j = backlog.pop()", "不要让后来的序列插队"),
    ("heapq.heappush(free, slot)", "free.append(slot)", "heapq.heappush(free, slot)"),
    ("slot = slot_of.pop(seq)", "slot = slot_of[seq]", "slot_of.pop(seq)"),
])
def test_release(old, new, needle, capsys) -> None:
    r = check_release(_answers(old, new)["release"])
    out = capsys.readouterr().out
    assert r.passed if needle is None else (not r.passed and needle in out), out


def test_assign_solution_and_recorded_data(capsys) -> None:
    assert check_assign(_assign()).passed
    data = recorded.load("lab3_slots")
    assert len(data["timelines"]) >= 6 and any(("idle" in (k for _, k in t["events"])) for t in data["timelines"])
    for t in data["timelines"]:  # the server's slots are chapter 03's SequenceSlots'
        assert record_lab3._reference_slots(t["events"], t["n_slots"]) == t["slots"], t["name"]
    assert {t["n_slots"] for t in data["timelines"]} >= {2, 3, 4}


@pytest.mark.parametrize("old,new,needle", [
    ("heapq.heappush(free, slot)", "free.append(slot)", "编号最低的空槽位"),
    ("nxt, j = backlog.popleft()", "nxt, j = backlog.pop()", "不要让后来的序列插队"),
    ('if kind != "idle":', "if True:", "空闲超时的事件你给了槽位"),
    ('if kind in ("end", "idle"):', 'if kind == "end":', "槽位确实被收回了"),
])
def test_assign_mistakes_are_named(old, new, needle, capsys) -> None:
    r = check_assign(_assign(old, new))
    out = capsys.readouterr().out
    assert not r.passed and needle in out and r.score >= 3, out


def test_release_without_pop_gets_one_consistent_message(capsys) -> None:
    """Issue 40: a `release` that leaves the sequence in `slot_of` is told to pop it, and the heap
    part is judged on the heap alone (no "should give 0, yours gives 0")."""
    r = check_release(_answers("slot = slot_of.pop(seq)", "slot = slot_of[seq]")["release"])
    out = capsys.readouterr().out
    assert r.score == 2 and "slot_of.pop(seq)" in out and "✓ 没人等时槽位回到空槽位堆" in out, out
    assert not re.search(r"应给出 0，你的 free (给出|里弹出的是) 0", out), out


def test_release_and_assign_number_events_alike(capsys) -> None:
    """Issue 40: both checks count events from 1 (the event at out[7] is the 8th)."""
    check_release(_answers("nxt, j = backlog.popleft()", "nxt, j = backlog.pop()")["release"])
    out = capsys.readouterr().out
    assert "第 8、第 10 个事件" in out and "第 7 个事件" not in out, out
    check_assign(_assign("nxt, j = backlog.popleft()", "nxt, j = backlog.pop()"))
    out = capsys.readouterr().out
    m = re.search(r"第 (\d+) 个事件（序列 (\d+) 的 (\w+)）", out)
    assert m, out
    events = _ev("0s 1s 2s 3s 0e 1e 2e 3e")
    i = int(m.group(1)) - 1
    assert events[i] == (int(m.group(2)), m.group(3)), out  # the n-th event, counted from 1


def test_an_exception_in_assign_is_said_once_with_its_line(capsys) -> None:
    """Issue 40: an exception in the learner's `assign` is named once, with the line it came from,
    not as "KeyError" on every timeline beside unrelated hints."""
    r = check_assign(_assign('out[i] = slot_of[seq]', 'out[i] = slot_of[seq + 100]'))
    out = capsys.readouterr().out
    assert not r.passed and out.count("KeyError") == 1, out
    assert "assign 第" in out and "slot_of[seq + 100]" in out and "这条时间线考的是" not in out, out


def test_a_step_that_releases_the_slot_raises_on_the_step_timeline(capsys) -> None:
    """Releasing at a step makes the sequence's next step look up a slot it no longer has: the
    KeyError is said once, on the timeline that tests steps, with what that timeline tests."""
    r = check_assign(_assign('if kind in ("end", "idle"):', 'if kind in ("end", "idle", "step"):'))
    out = capsys.readouterr().out
    assert not r.passed and out.count("KeyError") == 1 and "中间一步" in out and r.score == 2, out


def test_a_raising_release_is_blamed_on_question_5(capsys) -> None:
    """Issue 40: when `assign` fails inside the learner's `release`, the message says so."""
    r = check_assign(_assign("slot = slot_of.pop(seq)", "slot = slot_of.pop(seq + 100)"))
    out = capsys.readouterr().out
    assert not r.passed and "出错的是你在第 5 题写的 release" in out and "release 第" in out, out


def test_assign_shortcut_and_wrong_type(capsys) -> None:
    r = check_assign(lambda events, n: record_lab3._reference_slots(events, n))
    assert r.score == 0 and "现成的" in capsys.readouterr().out
    r = check_assign(lambda events, n: [{"wrong": 1}])
    assert r.score == 0 and "列表" in capsys.readouterr().out

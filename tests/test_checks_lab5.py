"""Lab 5 checks: config blocks, the burst schedule and counter rates offline; hang-up on a real server."""

from __future__ import annotations

import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from batchlab.labs.lab5 import check_burst, check_counter_rates, check_guard_block, check_hang_up, check_priority_block
from batchlab.load.transport import infer_inputs
from batchlab.models.requests import generate_inputs
from batchlab.sim.workload import rate_curve


def guard(q, t):
    return (f"dynamic_batching {{ default_queue_policy {{ max_queue_size: {q} "
            f"default_timeout_microseconds: {t} timeout_action: REJECT }} }}")


def test_guard_block(capsys) -> None:
    assert check_guard_block(guard).passed
    capsys.readouterr()
    r = check_guard_block(lambda q, t: guard(q, t).replace("REJECT", "DELAY"))
    assert r.score == 2 and "DELAY" in capsys.readouterr().out
    r = check_guard_block(lambda q, t: f"dynamic_batching {{ max_queue_size: {q} }}")
    assert r.score == 0 and "Triton 读不懂" in capsys.readouterr().out


def burst(base, peak, start, length, duration, seed=0):
    return rate_curve(lambda t: np.where((t >= start) & (t < start + length), peak, base), duration, seed=seed)


def test_burst(capsys) -> None:
    assert check_burst(burst).passed
    capsys.readouterr()
    even = lambda b, p, s, n, d, seed=0: np.sort(np.concatenate([np.arange(0, s, 1 / b), np.arange(s, s + n, 1 / p),
                                                                  np.arange(s + n, d, 1 / b)]))
    r = check_burst(even)
    assert r.score == 2 and "等间隔" in capsys.readouterr().out
    r = check_burst(lambda b, p, s, n, d, seed=0: burst(b, b, s, n, d, seed))  # forgot the peak
    assert r.score == 2 and "到达率不对" in capsys.readouterr().out


def prio(t):
    return ("dynamic_batching { priority_levels: 2 default_priority_level: 2 priority_queue_policy { key: 2 "
            f"value {{ default_timeout_microseconds: {t} timeout_action: REJECT }} }} }}")


def test_priority_block(capsys) -> None:
    assert check_priority_block(prio).passed
    capsys.readouterr()
    r = check_priority_block(lambda t: prio(t).replace("default_priority_level: 2", "default_priority_level: 1"))
    assert r.score == 2 and "1 为最高" in capsys.readouterr().out


def test_counter_rates(capsys) -> None:
    def right(t, c):
        c = np.asarray(c, float)
        d = np.diff(c)
        return np.where(d < 0, c[1:], d) / np.diff(np.asarray(t, float))
    assert check_counter_rates(right).passed
    capsys.readouterr()
    r = check_counter_rates(lambda t, c: np.diff(c) / np.diff(t))
    assert r.score == 2 and "重启" in capsys.readouterr().out
    r = check_counter_rates(lambda t, c: np.asarray(c[1:]) / np.asarray(t[1:]))
    assert r.score == 0
    capsys.readouterr()

    def evenly_spaced(t, c):  # divides every increment by the first interval
        c = np.asarray(c, float)
        d = np.diff(c)
        return np.where(d < 0, c[1:], d) / (t[1] - t[0])
    r = check_counter_rates(evenly_spaced)
    assert r.score == 1 and "0.2 s 和 0.8 s" in capsys.readouterr().out


@pytest.mark.server
def test_hang_up(triton, capsys) -> None:
    def hang_up(client, prompt, max_tokens, k, cancel=True):
        q = queue.Queue()
        client.start_stream(callback=lambda result, error: q.put((result, error)))
        inputs = generate_inputs(prompt, max_tokens, ignore_eos=True, batched=False)
        client.async_stream_infer("lm_stream", infer_inputs(grpcclient, inputs))
        toks = [int(q.get(timeout=30)[0].as_numpy("TOKEN")[0]) for _ in range(k)]
        client.stop_stream(cancel_requests=cancel)
        return toks

    assert check_hang_up(hang_up, client=triton.grpc_client(), grpc_url=triton.grpc_url).passed
    capsys.readouterr()
    r = check_hang_up(lambda c, p, m, k: hang_up(c, p, m, k)[:-1], client=triton.grpc_client(), grpc_url=triton.grpc_url)
    assert r.score == 1 and "前 4 个 token" in capsys.readouterr().out
    r = check_hang_up(lambda c, p, m, k: hang_up(c, p, m, k, cancel=False), client=triton.grpc_client(),
                      grpc_url=triton.grpc_url)
    assert r.score == 2 and "cancel_requests=True" in capsys.readouterr().out

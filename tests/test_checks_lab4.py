"""Lab 4 checks (no server needed): admission policy, config limits, η."""

from __future__ import annotations

import re

from batchlab.labs.lab4 import check_admit, check_eta, check_with_limits
from batchlab.lm.scheduler import FCFSAdmission

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
    assert r.score == 3 and "插了队" in capsys.readouterr().out

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


def with_limits(text, max_active, budget):
    for key, value in (("max_active", max_active), ("kv_token_budget", budget)):
        text = re.sub(r'(key:\s*"' + key + r'"(?:\s*#[^\n]*)?\s*value\s*\{\s*string_value:\s*")[^"]*(")',
                      lambda m: m.group(1) + str(value) + m.group(2), text)
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
    def admit(waiting, active, max_active, budget):
        return FCFSAdmission(max_active, budget).admit(waiting, active)
    r = check_admit(admit)
    assert r.score == 0 and "课程库里现成的" in capsys.readouterr().out

"""Speculative decoding's mechanisms in `batchlab.batching`: the greedy acceptance rule, and what the
scheduler does with draft tokens (the token budget counts every verified position; the rejected
positions' KV is rolled back through the block manager; unverified tokens are never keyed into the
prefix cache). No LM here: the tests play the executor."""

from __future__ import annotations

import pytest

from batchlab.batching import (BlockManager, BlockTable, GenerationRequest, OnDemandAdmission, ReserveAdmission,
                               Scheduler, block_key)
from batchlab.batching.speculative import accept


# --- the acceptance rule ----------------------------------------------------------------------------

@pytest.mark.parametrize("draft, target, expected", [
    ([5, 6, 7], [5, 6, 7, 8], (3, 8)),     # all accepted: the target's token after the last draft comes free
    ([5, 6, 7], [5, 9, 7, 8], (1, 9)),     # first mismatch at 1: its target token replaces it
    ([5, 6, 7], [4, 6, 7, 8], (0, 4)),     # rejected at once: a plain decode step's token
    ([5, 6, 7], [5, 6, 4, 8], (2, 4)),
    ([5, 5, 5], [5, 4, 5, 5], (1, 4)),     # matching again after a mismatch does not count
    ([], [3], (0, 3)),                     # no draft: one token, as without speculation
])
def test_accept_takes_the_longest_matching_prefix_then_the_targets_token(draft, target, expected):
    assert accept(draft, target) == expected


def test_accept_needs_one_target_token_per_verified_position():
    with pytest.raises(ValueError, match="3 draft tokens need 4 target tokens"):
        accept([1, 2, 3], [1, 2, 3])
    assert accept((1, 2), (1, 2, 3)) == (2, 3) and isinstance(accept([1], [1, 2])[1], int)


# --- the scheduler with draft tokens ------------------------------------------------------------------

def req(name: object, prompt: int, max_tokens: int) -> GenerationRequest:
    return GenerationRequest(name, [5 + (j * 7) % 40 for j in range(prompt)], max_tokens)


def scheduler(num_blocks: int | None = None, admission=None, block_size: int = 4, caching: bool = False,
              **kwargs) -> Scheduler:
    return Scheduler(BlockManager(num_blocks, block_size, caching), admission or OnDemandAdmission(), **kwargs)


def prefill(s: Scheduler, *requests: GenerationRequest) -> None:
    for r in requests:
        s.submit(r)
    plan = s.schedule()
    s.complete(plan, [9] * len(plan.work))


def verify(s: Scheduler, emitted: dict) -> object:
    """One step: schedule, then each request emits `emitted[seq_id]` (accepted drafts + the target's token)."""
    plan = s.schedule()
    s.complete(plan, [emitted.get(r.seq_id, 9) for r, _ in plan.work])
    return plan


def test_a_draft_is_verified_in_one_step_and_counted_against_the_budget():
    s = scheduler(max_num_tokens=6, step_policy="chunked", max_active=4)
    a, b = req("A", 3, 20), req("B", 3, 20)
    prefill(s, a, b)
    a.draft, b.draft = [11, 12, 13], [21, 22, 23]
    plan = s.schedule()
    assert plan.work == [(a, 4), (b, 2)] and plan.tokens == 6      # A: 1 + 3 drafts; B gets what is left
    assert b.draft == [21] and plan.draft_tokens == 4                # B's draft trimmed to the budget
    assert plan.context_tokens == (4 * 3 + 10) + (2 * 3 + 3)         # each position attends to all before it
    s.complete(plan, [[11, 12, 7], [21, 8]])                          # A: 2 of 3 accepted; B: its one
    assert a.token_ids[3:] == [9, 11, 12, 7] and (a.drafted, a.accepted, a.generated) == (3, 2, 4)
    assert a.computed == len(a.token_ids) - 1 == 6                   # the rejected position's KV is gone
    assert b.token_ids[3:] == [9, 21, 8] and (b.drafted, b.accepted, b.computed) == (1, 1, 5)
    assert a.draft == [] and b.draft == []


def test_a_draft_leaves_prompts_the_budget_it_does_not_use():
    s = scheduler(max_num_tokens=8, step_policy="chunked", max_active=4)
    a = req("A", 2, 20)
    prefill(s, a)
    s.submit(req("B", 10, 3))
    a.draft = [1, 2]
    plan = s.schedule()
    assert [n for _, n in plan.work] == [3, 5] and plan.tokens == 8


def test_the_budget_runs_out_for_a_later_decode():
    s = scheduler(max_num_tokens=4, step_policy="chunked", max_active=4)
    a, b = req("A", 2, 20), req("B", 2, 20)
    prefill(s, a, b)
    a.draft, b.draft = [1, 2, 3], [4, 5]
    plan = s.schedule()
    assert plan.work == [(a, 4)] and b.draft == []                   # B waits a step, its draft dropped


def test_a_rollback_frees_the_blocks_of_rejected_positions_on_demand():
    s = scheduler(num_blocks=16, block_size=4)
    a = req("A", 3, 30)
    prefill(s, a)                                                    # 4 tokens, 3 computed: 1 block
    a.draft = [1, 2, 3, 4, 5, 6]
    plan = s.schedule()
    assert plan.work == [(a, 7)] and len(a.table.blocks) == 3        # 3 + 7 positions: 3 blocks
    tail = a.table.blocks[1:]
    s.complete(plan, [[7]])                                          # nothing accepted
    assert a.computed == 4 and len(a.table.blocks) == 1 and s.blocks.num_used == 1
    assert all(s.blocks.ref[b] == 0 and b in s.blocks.free_queue for b in tail)
    a.draft = [1, 2, 3, 4, 5, 6]
    plan = s.schedule()
    s.complete(plan, [[1, 2, 3, 4, 9]])                              # 4 accepted: 4 + 1 + 4 = 9 positions of KV
    assert a.computed == 9 and len(a.token_ids) == 10 and len(a.table.blocks) == 3


def test_reserve_keeps_its_blocks_through_a_rollback():
    s = scheduler(num_blocks=16, admission=ReserveAdmission(), block_size=4)
    a = req("A", 3, 13)
    prefill(s, a)
    held = list(a.table.blocks)
    assert len(held) == 4                                            # prompt + max_tokens = 16 slots
    a.draft = [1, 2, 3]
    plan = s.schedule()
    s.complete(plan, [[8]])
    assert a.table.blocks == held and a.computed == 4 and s.blocks.num_used == 4


def test_drafts_never_go_past_what_a_request_may_hold():
    s = scheduler(num_blocks=16, admission=ReserveAdmission(), block_size=4)
    a = req("A", 3, 4)
    prefill(s, a)
    a.draft = [1, 2]                                                 # 1 generated + 1 + 2 = max_tokens
    plan = s.schedule()
    finished = s.complete(plan, [[1, 2, 3]])
    assert finished == [a] and a.generated == 4 and s.blocks.num_used == 0


def test_unverified_tokens_are_never_keyed_into_the_prefix_cache():
    s = scheduler(num_blocks=32, block_size=4, caching=True)
    a = req("A", 6, 40)
    prefill(s, a)                                                    # 7 tokens; block 0 (tokens 0-3) keyed
    a.draft = [30, 31, 32, 33, 34, 35]                               # positions 6..12 cover blocks 1-3
    plan = s.schedule()
    verified = a.token_ids[:]
    expected = {block_key(b"", verified[:4]): a.table.blocks[0]}
    assert s.blocks.cached == expected                               # block 1 holds draft positions: not keyed
    s.complete(plan, [[30, 31, 7]])                                  # 2 of 6 accepted
    assert a.token_ids == verified + [30, 31, 7] and a.computed == 9
    assert s.blocks.cached == expected and len(a.table.blocks) == 3  # blocks 3 (positions 12-15) freed
    plan = s.schedule()                                              # a plain decode: positions 9 only
    k1 = block_key(block_key(b"", verified[:4]), a.token_ids[4:8])
    assert s.blocks.cached == {**expected, k1: a.table.blocks[1]}    # now the verified tokens 4-7 are keyed
    s.complete(plan, [9])


def test_a_draft_with_tokens_the_executor_did_not_accept_is_refused():
    s = scheduler(num_blocks=16)
    a = req("A", 3, 20)
    prefill(s, a)
    a.draft = [1, 2, 3]
    plan = s.schedule()
    with pytest.raises(ValueError, match=r"accepted tokens \[2\] are not a prefix of the draft \[1, 2, 3\]"):
        s.complete(plan, [[2, 5]])


def test_a_preempted_request_drops_its_draft():
    s = scheduler(num_blocks=3, block_size=4, max_active=2)
    a, b = req("A", 3, 8), req("B", 3, 8)
    prefill(s, a, b)                                                 # 1 block each
    a.draft, b.draft = [1, 2, 3, 4], [5]
    plan = s.schedule()                                              # A needs 2 more blocks: B is preempted
    assert plan.preempted == [b] and b.draft == [] and plan.work == [(a, 5)]


# --- the block manager's truncate ---------------------------------------------------------------------

def test_truncate_uncaches_a_kept_block_whose_tail_goes_and_refuses_a_shared_one():
    m = BlockManager(8, block_size=4, prefix_caching=True)
    t = BlockTable()
    toks = list(range(10, 22))
    m.allocate(t, 12, toks, 12)                                      # 3 full blocks, all keyed
    m.truncate(t, 6)                                                 # keep 6 tokens: block 1 stays, half of it goes
    assert len(t.blocks) == 2 and m.key[t.blocks[1]] is None and len(m.cached) == 1
    m.allocate(t, 12, toks, 12)
    u = BlockTable()
    m.allocate(u, 8, toks[:8], 8, m.cached_prefix(u, toks[:9]))      # shares blocks 0 and 1
    with pytest.raises(ValueError, match="shared"):
        m.truncate(t, 6)
    m.truncate(t, 8, hold_tokens=12)                                 # keeps all 3 blocks, forgets block 2's key
    assert len(t.blocks) == 3 and m.key[t.blocks[2]] is None

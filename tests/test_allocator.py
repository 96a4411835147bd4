"""BatchAllocator (llama_batch_allocr): validation with numbers in the message, automatic
positions, output ids, and the three splits with llama.cpp's ubatch counts."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from llamapy.batch import Batch, BatchAllocator, BatchError
from llamapy.memory.cells import KVCells


def no_mem(s: int) -> int:
    return -1


def make(*slots, **kw) -> Batch:
    """slots: (token, pos, seq_ids, logits)."""
    b = Batch()
    for tok, pos, sids, lg in slots:
        b.add(tok, pos, sids, lg)
    return b


def alloc(n_vocab=100, n_batch=2048, n_seq_max=4) -> BatchAllocator:
    return BatchAllocator(n_vocab=n_vocab, n_batch=n_batch, n_seq_max=n_seq_max)


# --- validation ------------------------------------------------------------------------------

def test_empty_batch():
    with pytest.raises(BatchError, match=r"n_tokens == 0"):
        alloc().init(Batch(), no_mem)


def test_too_many_tokens_names_both_numbers_and_flag():
    b = Batch.get_one([1] * 2049)
    with pytest.raises(BatchError) as e:
        alloc(n_batch=2048).init(b, no_mem)
    msg = str(e.value)
    assert "n_tokens (2049) > n_batch (2048)" in msg and "-b/--batch-size" in msg
    assert isinstance(e.value, ValueError)


def test_token_outside_vocab():
    for bad in (100, -1):
        with pytest.raises(BatchError, match=rf"token\[1\] = {bad} .*n_vocab = 100"):
            alloc(n_vocab=100).init(make((1, 0, [0], 0), (bad, 1, [0], 0)), no_mem)


def test_seq_id_outside_range_names_n_seq_max():
    with pytest.raises(BatchError, match=r"seq_id\[0\] = 4 .*n_seq_max = 4.*-np"):
        alloc(n_seq_max=4).init(make((1, 0, [4], 1)), no_mem)
    with pytest.raises(BatchError, match=r"seq_id\[0\] = -1"):
        alloc().init(make((1, 0, [-1], 1)), no_mem)


def test_slot_without_sequence():
    with pytest.raises(BatchError, match=r"slot 0 has no seq_id"):
        alloc().init(make((1, 0, [], 1)), no_mem)


def test_field_lengths_must_agree():
    b = make((1, 0, [0], 1), (2, 1, [0], 1))
    b.pos.pop()
    with pytest.raises(BatchError, match=r"token has 2 entries, pos 1"):
        alloc().init(b, no_mem)


def test_position_must_continue_memory():
    mem = {0: 9}
    with pytest.raises(BatchError) as e:
        alloc().init(make((1, 12, [0], 1)), lambda s: mem.get(s, -1))
    msg = str(e.value)
    assert "X = 9" in msg and "Y = 12" in msg and "Y = X + 1" in msg
    alloc().init(make((1, 10, [0], 1)), lambda s: mem.get(s, -1))  # continues: fine
    alloc().init(make((1, 12, [1], 1)), lambda s: mem.get(s, -1))  # seq 1 absent: any start


def test_positions_inside_batch_consecutive_and_increasing():
    with pytest.raises(BatchError, match=r"sequence 0: .*not consecutive.*2 distinct positions span \[0, 2\]"):
        alloc().init(make((1, 0, [0], 0), (1, 2, [0], 1)), no_mem)
    with pytest.raises(BatchError, match=r"sequence 1: positions decrease at slot 1: 0 after 1"):
        alloc().init(make((1, 1, [1], 0), (1, 0, [1], 1)), no_mem)
    with pytest.raises(BatchError, match=r"pos\[0\] = -2 < 0"):
        alloc().init(make((1, -2, [0], 0)), no_mem)
    # interleaved sequences are fine as long as each one increases
    a = alloc()
    a.init(make((1, 0, [0], 0), (1, 5, [1], 0), (1, 1, [0], 0), (1, 6, [1], 1)), no_mem)
    assert a.seq_pos_min(1) == 5 and a.seq_pos_max(1) == 6 and a.seq_pos_max(3) == -1


def test_repeated_position_is_allowed_like_llamacpp():
    a = alloc()
    a.init(make((1, 0, [0], 0), (1, 0, [0], 0), (1, 1, [0], 1)), no_mem)
    assert a.batch_pos == [0, 0, 1]


def test_overlapping_sequence_sets_are_accepted_like_llamacpp():
    # llama.cpp's "incompatible sequence sets" test can never fire (a set always holds its own
    # sequence), so {0,1} then {1,2} passes there; it passes here too
    a = alloc()
    a.init(make((1, 0, [0, 1], 0), (1, 1, [1, 2], 1)), no_mem)
    assert a.seq_id_unq == (0, 1, 2)


def test_coupled_sequences_must_agree_in_memory():
    mx, mn = {0: 4, 1: 4}, {0: 0, 1: 2}
    b = make((1, 5, [0, 1], 1))
    with pytest.raises(BatchError, match=r"sequence 1 is coupled to 0"):
        alloc().init(b, lambda s: mx.get(s, -1), seq_pos_min=lambda s: mn.get(s, -1))
    alloc().init(b, lambda s: mx.get(s, -1))  # without seq_pos_min the check is skipped


def test_rejected_batch_changes_nothing():
    cells = KVCells(32, 2)
    for i in range(5):
        cells.set_cell(i, i, (0,))
    before = cells.snapshot()
    b = make((1, 5, [0], 0), (1, 7, [0], 1))  # gap at 6
    b_copy = make((1, 5, [0], 0), (1, 7, [0], 1))
    a = alloc(n_seq_max=2)
    a.init(Batch.get_one([1, 2, 3]), cells.seq_pos_max)
    with pytest.raises(BatchError):
        a.init(b, cells.seq_pos_max)
    assert cells == before
    assert b == b_copy  # the submitted batch is not rewritten either
    assert a.split_simple(512) is None  # the allocator holds nothing after a failed init


# --- positions and outputs ------------------------------------------------------------------

def test_auto_positions_continue_each_sequence():
    mem = {0: 3, 1: -1}
    b = make((1, None, [0], 0), (1, None, [1], 0), (1, None, [0], 1), (1, None, [1, 2], 1), (1, None, [2], 1))
    a = alloc()
    a.init(b, lambda s: mem.get(s, -1))
    # seq 0: 4, 5; seq 1: 0, 1 (the coupled slot also advances seq 2); seq 2 continues from 1
    assert a.batch_pos == [4, 0, 5, 1, 2]
    assert b.pos == [None] * 5


def test_output_ids_follow_submission_order():
    b = make(*[(1, i, [0], i in (1, 4, 5)) for i in range(7)])
    a = alloc()
    a.init(b, no_mem)
    assert a.n_outputs == 3
    assert a.output_ids == [-1, 0, -1, -1, 1, 2, -1]
    a.init(b, no_mem, output_all=True)
    assert a.output_ids == list(range(7)) and a.n_outputs == 7


def test_out_ids_record_split_order():
    b = make((1, 0, [0], 1), (1, 0, [1], 1), (1, 1, [0], 1), (1, 1, [1], 0))
    a = alloc()
    a.init(b, no_mem)
    while a.split_seq(8) is not None:
        pass
    assert a.out_ids == [0, 2, 1]
    assert a.output_ids == [0, 1, 2, -1]


# --- split_simple ---------------------------------------------------------------------------

def count_ubatches(a: BatchAllocator, n_ubatch: int) -> list[int]:
    sizes = []
    while (ub := a.split_simple(n_ubatch)) is not None:
        sizes.append(ub.n_tokens)
    return sizes


def test_5000_token_prompt_is_3_decodes_and_10_ubatches():
    n_batch, n_ubatch = 2048, 512
    prompt = [7] * 5000
    cells = KVCells(8192, 1)
    a = BatchAllocator(n_vocab=100, n_batch=n_batch, n_seq_max=1)
    per_call = []
    for start in range(0, len(prompt), n_batch):
        a.init(Batch.get_one(prompt[start:start + n_batch]), cells.seq_pos_max)
        assert a.batch_pos[0] == start
        sizes = []
        while (ub := a.split_simple(n_ubatch)) is not None:
            sizes.append(ub.n_tokens)
            cells.apply_ubatch(cells.find_slot(ub.n_tokens), ub.pos, ub.seq_id)
        per_call.append(sizes)
    assert [len(s) for s in per_call] == [4, 4, 2]
    assert [sum(s) for s in per_call] == [2048, 2048, 904]
    assert per_call[2] == [512, 392]
    assert cells.seq_pos_max(0) == 4999 and cells.used() == 5000


def test_split_simple_mixes_sequences_in_submission_order():
    b = make(*[(i, i // 3, [i % 3], i == 8) for i in range(9)])
    a = alloc()
    a.init(b, no_mem)
    ub1, ub2, ub3 = a.split_simple(4), a.split_simple(4), a.split_simple(4)
    assert a.split_simple(4) is None
    assert ub1.idx == (0, 1, 2, 3) and ub2.idx == (4, 5, 6, 7) and ub3.idx == (8,)
    assert ub1.seq_id == ((0,), (1,), (2,), (0,))
    assert ub1.pos == (0, 0, 0, 1)
    assert ub3.output == (True,) and ub3.n_outputs == 1
    assert not ub1.equal_seqs and ub1.n_seqs == 4
    assert a.n_used == 9
    a.split_reset()
    assert count_ubatches(a, 9) == [9]


def test_split_rejects_zero_ubatch():
    a = alloc()
    a.init(Batch.get_one([1]), no_mem)
    with pytest.raises(ValueError, match=r"n_ubatch \(0\)"):
        a.split_simple(0)


# --- split_equal ----------------------------------------------------------------------------

def seq_batch(lengths: dict[int, int]) -> Batch:
    """Round-robin interleaving of sequences s with lengths[s] tokens each."""
    b = Batch()
    for p in range(max(lengths.values())):
        for s, n in lengths.items():
            if p < n:
                b.add(1, p, [s], True)
    return b


def test_split_equal_takes_equal_tokens_per_sequence():
    a = alloc()
    a.init(seq_batch({0: 5, 1: 3, 2: 4}), no_mem)
    ub = a.split_equal(9, sequential=False)
    assert ub.equal_seqs and ub.n_seqs == 3 and ub.n_seq_tokens == 3
    assert ub.seq_id == ((0,),) * 3 + ((1,),) * 3 + ((2,),) * 3  # grouped by sequence
    assert ub.pos == (0, 1, 2) * 3
    ub = a.split_equal(9, sequential=False)  # seq 1 finished: 0 and 2 get 1 more each
    assert ub.seq_id == ((0,), (2,)) and ub.pos == (3, 3)
    ub = a.split_equal(9, sequential=False)
    assert ub.seq_id == ((0,),) and ub.pos == (4,)
    assert a.split_equal(9, sequential=False) is None


def test_split_equal_respects_n_ubatch():
    a = alloc()
    a.init(seq_batch({0: 10, 1: 10}), no_mem)
    sizes = []
    while (ub := a.split_equal(5, sequential=False)) is not None:
        assert ub.n_tokens <= 5 and ub.n_tokens % ub.n_seqs == 0
        sizes.append((ub.n_seqs, ub.n_seq_tokens))
    assert sizes == [(2, 2)] * 5
    # more sequences than n_ubatch: never more than n_ubatch rows
    a = alloc(n_seq_max=4)
    a.init(seq_batch({0: 1, 1: 1, 2: 1}), no_mem)
    assert [a.split_equal(2, False).n_tokens, a.split_equal(2, False).n_tokens] == [2, 1]


def test_split_equal_sequential_needs_consecutive_seq_ids():
    a = alloc()
    a.init(seq_batch({0: 2, 2: 2, 3: 2}), no_mem)
    ub = a.split_equal(16, sequential=True)
    assert ub.seq_id_unq == (0,)
    ub = a.split_equal(16, sequential=True)
    assert ub.seq_id_unq == (2, 3) and ub.n_seq_tokens == 2
    a.init(seq_batch({0: 2, 2: 2, 3: 2}), no_mem)
    assert a.split_equal(16, sequential=False).seq_id_unq == (0, 2, 3)


def test_split_equal_coupled_sets_do_not_overlap():
    b = make((1, 0, [0, 1], 0), (1, 1, [0, 1], 0), (1, 0, [2], 0), (1, 2, [0, 1], 1), (1, 1, [2], 1))
    a = alloc()
    a.init(b, no_mem)
    ub = a.split_equal(16, sequential=False)
    assert ub.idx == (0, 1, 2, 4) and ub.n_seqs == 2
    assert a.split_equal(16, sequential=False).idx == (3,)
    a.init(b, no_mem)
    with pytest.raises(BatchError, match=r"-kvu"):
        a.split_equal(16, sequential=True)


def test_split_equal_keep_tail():
    a = alloc()
    a.init(seq_batch({0: 6}), no_mem)
    # without the rule: 4 + 2; keeping a tail of 3 together: 3 + 3
    assert a.split_equal(4, False, n_keep_tail=3).n_tokens == 3
    assert a.split_equal(4, False, n_keep_tail=3).n_tokens == 3


# --- split_seq ------------------------------------------------------------------------------

def test_split_seq_one_sequence_set_per_ubatch():
    b = make((1, 0, [0], 0), (1, 0, [1], 0), (1, 1, [0], 0), (1, 1, [1], 0), (1, 2, [0], 1))
    a = alloc()
    a.init(b, no_mem)
    assert a.split_seq(2).idx == (0, 2)
    assert a.split_seq(8).idx == (1, 3)
    assert a.split_seq(8).idx == (4,)
    assert a.split_seq(8) is None


# --- properties of the splits ---------------------------------------------------------------

@st.composite
def interleaved_batches(draw):
    """Sequences 0..3 with random lengths, slots interleaved in a random order that keeps
    each sequence's own order; random output flags."""
    lengths = draw(st.lists(st.integers(0, 12), min_size=1, max_size=4))
    order = [s for s, n in enumerate(lengths) for _ in range(n)]
    order = draw(st.permutations(order)) if order else order
    b = Batch()
    nxt = [0] * len(lengths)
    for s in order:
        b.add(1, nxt[s], [s], draw(st.booleans()))
        nxt[s] += 1
    return b


@settings(max_examples=200, deadline=None)
@given(b=interleaved_batches(), n_ubatch=st.integers(1, 9), mode=st.sampled_from(["simple", "equal", "seq"]))
def test_splits_use_every_slot_once_and_keep_sequence_order(b, n_ubatch, mode):
    if len(b) == 0:
        return
    a = alloc()
    a.init(b, no_mem)
    ubs = []
    while (ub := getattr(a, f"split_{mode}")(n_ubatch, *([False] if mode == "equal" else []))) is not None:
        ubs.append(ub)
        assert 1 <= ub.n_tokens <= n_ubatch
        if ub.equal_seqs:  # n_seqs groups of n_seq_tokens rows, one sequence set per group
            k = ub.n_seq_tokens
            assert k * ub.n_seqs == ub.n_tokens
            groups = [set(ub.seq_id[g * k:(g + 1) * k]) for g in range(ub.n_seqs)]
            assert all(len(g) == 1 for g in groups) and len(set.union(*groups)) == ub.n_seqs
    idx = [i for ub in ubs for i in ub.idx]
    assert sorted(idx) == list(range(len(b)))
    if mode == "simple":
        assert idx == list(range(len(b)))
        assert [ub.n_tokens for ub in ubs[:-1]] == [n_ubatch] * (len(ubs) - 1)
    for s in range(4):  # every sequence is fed in position order
        seen = [p for ub in ubs for p, sids in zip(ub.pos, ub.seq_id) if sids[0] == s]
        assert seen == sorted(seen)
    assert sorted(a.out_ids) == [i for i in range(len(b)) if b.logits[i]]
    assert a.n_used == len(b)

"""Batch (llama_batch): slots are appended, cleared, and get_one builds a one-sequence batch."""
from llamapy.batch import Batch, BatchAllocator, UBatch


def test_add_appends_one_slot_per_call():
    b = Batch()
    b.add(5, 0, [0], logits=False)
    b.add(7, 3, (1, 2), logits=True)
    b.add(9, None)
    assert len(b) == b.n_tokens == 3
    assert b.token == [5, 7, 9]
    assert b.pos == [0, 3, None]
    assert b.seq_id == [(0,), (1, 2), (0,)]
    assert b.logits == [False, True, False]


def test_add_copies_seq_ids():
    b = Batch()
    sids = [0, 1]
    b.add(1, 0, sids)
    sids.append(2)
    assert b.seq_id[0] == (0, 1)


def test_clear_empties_in_place():
    b = Batch()
    for i in range(4):
        b.add(i, i, [0])
    lists = (b.token, b.pos, b.seq_id, b.logits)
    b.clear()
    assert len(b) == 0
    assert all(len(x) == 0 for x in lists)
    b.add(3, 0)
    assert b.token == [3]


def test_get_one_continues_positions_and_outputs_last_only():
    b = Batch.get_one([10, 11, 12], seq_id=2)
    assert b.token == [10, 11, 12]
    assert b.pos == [None, None, None]
    assert b.seq_id == [(2,)] * 3
    assert b.logits == [False, False, True]
    alloc = BatchAllocator(n_vocab=100, n_batch=16, n_seq_max=4)
    alloc.init(b, seq_pos_max=lambda s: 6 if s == 2 else -1)
    assert alloc.batch_pos == [7, 8, 9]
    assert alloc.output_ids == [-1, -1, 0]


def test_get_one_of_nothing_is_empty():
    assert len(Batch.get_one([])) == 0


def test_ubatch_reserve_shape():
    ub = UBatch.reserve(n_seq_tokens=3, n_seqs=2)
    assert ub.n_tokens == 6 and ub.n_seqs == 2 and ub.n_seq_tokens == 3 and ub.equal_seqs
    assert ub.pos == (0, 1, 2, 0, 1, 2)
    assert ub.seq_id_unq == (0, 1)
    assert ub.n_outputs == 0

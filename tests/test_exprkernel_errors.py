"""A damaged chunk read by the fused expression kernel is named by its operand and its own chunk
number, not by the number of the group of chunks (an item of the kernel) it is in."""

import numpy as np
import pytest

import blzarr
from blzarr import _exprkernel
from blzarr.query import exprkernel


def _damaged(chunk):
    """`chunk` (Blosc bytes, LZ4) with its first block's stream broken, its header intact."""
    bad = bytearray(chunk)
    start = int.from_bytes(bad[16:20], "little")
    bad[start + 4:start + 40] = b"\xff" * 36
    return bytes(bad)


def _chunks(values, chunklen):
    return blzarr.carray(values, chunklen=chunklen, cparams=blzarr.cparams(clevel=5, shuffle=1)).resident_chunks()[0]


@pytest.mark.parametrize("op,k", [(0, 5), (0, 0), (1, 1), (1, 3)])
def test_the_kernel_names_the_damaged_chunk(op, k):
    # operand 0 (float64) in chunks of 1024 rows, operand 1 (int32) of 2048: a group (an item of the
    # kernel) is one chunk of operand 1 and two of operand 0, so group numbers are not chunk numbers
    chunks = [list(_chunks(np.arange(8192) % 5 * 1.0, 1024)), list(_chunks(np.arange(8192, dtype="i4") % 7, 2048))]
    chunks[op][k] = _damaged(chunks[op][k])
    prog = np.array([[_exprkernel.EXPR_OPCODES["add"], 2, 0, 1]], np.int32)

    def work(**kw):
        w = _exprkernel.ExprChunks(chunks, prog, np.zeros(0), 3, 2, "sum", 1024, kinds=["f8", "i4"],
                                   clens=[1024, 2048], **kw)
        w.run()
        return w
    with pytest.raises(blzarr.ChunkError, match=rf"\(chunk {k} of operand {op}\): decoding failed"):
        work().check()
    with pytest.raises(blzarr.ChunkError, match=rf"\(chunk {k} of '{'ab'[op]}'\)"):
        work(wheres=lambda i, m: f"chunk {m} of '{'ab'[i]}'").check()


def test_an_expression_names_the_operand_and_chunk(monkeypatch):
    kernel_calls = []
    work = exprkernel._work

    def counted(prepared, mode, *args, **kwargs):
        kernel_calls.append(mode)
        return work(prepared, mode, *args, **kwargs)
    monkeypatch.setattr(exprkernel, "_work", counted)
    n = 1 << 16
    a = blzarr.carray(np.arange(n) % 11 * 1.0, chunklen=4096, cparams=blzarr.cparams(clevel=5))
    c = blzarr.carray(np.arange(n, dtype="i4") % 13, chunklen=8192, cparams=blzarr.cparams(clevel=5))
    assert blzarr.eval("sum(a * 2 + c)", user_dict={"a": a, "c": c}) == (np.arange(n) % 11 * 2.0 + np.arange(n) % 13).sum()
    assert kernel_calls == ["sum"]
    chunk = list.__getitem__(a.chunkstore, 5)          # (in memory: the chunk object holds its bytes)
    chunk._data = _damaged(chunk._data)
    with pytest.raises(blzarr.ChunkError, match=r"\(chunk 5 of 'a'\): decoding failed"):
        blzarr.eval("sum(a * 2 + c)", user_dict={"a": a, "c": c})
    assert kernel_calls == ["sum", "sum"]


@pytest.mark.parametrize("op,k", [(0, 3), (1, 0)])
def test_a_bad_header_is_named_when_the_kernel_is_made(op, k):
    # the names are made only for an error: the check of every header still names the one that fails
    chunks = [list(_chunks(np.arange(8192) % 5 * 1.0, 1024)), list(_chunks(np.arange(8192) % 3 * 1.0, 1024))]
    bad = bytearray(chunks[op][k])
    bad[0] = 3                                  # a Blosc format version no reader knows
    chunks[op][k] = bytes(bad)
    prog = np.array([[_exprkernel.EXPR_OPCODES["add"], 2, 0, 1]], np.int32)
    with pytest.raises(blzarr.ChunkError, match=rf"\(chunk {k} of operand {op}\): format version 3"):
        _exprkernel.ExprChunks(chunks, prog, np.zeros(0), 3, 2, "sum", 1024)
    with pytest.raises(blzarr.ChunkError, match=rf"\(chunk {k} of '{'ab'[op]}'\): format version 3"):
        _exprkernel.ExprChunks(chunks, prog, np.zeros(0), 3, 2, "sum", 1024,
                               wheres=lambda i, m: f"chunk {m} of '{'ab'[i]}'")

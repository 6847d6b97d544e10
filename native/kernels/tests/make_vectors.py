#!/usr/bin/env python3
"""Writes dequantization test vectors made by gguf-py (an implementation independent of ours).

usage: make_vectors.py OUT_DIR      (the test reads native/build/kernel_vectors by default)

One file per type, OUT_DIR/<TYPE>.bin, little endian:
  u32 ggml type id, u32 rows, u32 k, u32 has_src
  f32 src[rows*k]            only if has_src: the floats gguf-py quantized (legacy types)
  u8  blocks[rows*row_bytes] the quantized rows
  f32 deq[rows*k]            gguf-py's dequantization of the blocks
gguf-py cannot quantize K-quants, so for those the blocks are random bytes with sane scales.
"""
import os
import struct
import sys

try:
    import numpy as np
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
    import gguf.quants as q
except ImportError as e:  # the C++ test then reports the cross-check as skipped
    print("make_vectors: gguf-py not available (%s); no vectors written" % e)
    sys.exit(0)

ROWS, K = 4, 512


rng = None


def random_kquant(t):
    block_elems, block_bytes = GGML_QUANT_SIZES[t]
    nb = ROWS * K // block_elems
    raw = rng.integers(0, 256, size=(nb, block_bytes), dtype=np.uint8)
    def put_half(col, lo, hi):
        v = rng.uniform(lo, hi, size=nb).astype(np.float16).view(np.uint8).reshape(nb, 2)
        raw[:, col:col + 2] = v
    if t in (T.Q4_K, T.Q5_K):
        put_half(0, 1e-3, 2e-2)   # d
        put_half(2, 1e-3, 2e-2)   # dmin
    elif t == T.Q6_K:
        put_half(block_bytes - 2, 1e-3, 2e-2)  # d is last
    return raw.reshape(ROWS, -1)


def main():
    global rng
    rng = np.random.default_rng(1234)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for t in (T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K, T.MXFP4):
        src = None
        if t in (T.Q4_K, T.Q5_K, T.Q6_K):
            blocks = random_kquant(t)
        else:
            src = (rng.standard_normal((ROWS, K)) * rng.uniform(0.1, 3.0, size=(ROWS, 1))).astype(np.float32)
            src[0, :32] = 0.0          # an all-zero block (d = 0)
            src[1, 5] = 40.0           # an outlier block
            blocks = q.quantize(src, t)
        deq = q.dequantize(blocks, t).astype(np.float32)
        with open(os.path.join(out, t.name + ".bin"), "wb") as f:
            f.write(struct.pack("<4I", int(t), ROWS, K, 1 if src is not None else 0))
            if src is not None:
                f.write(src.astype("<f4").tobytes())
            f.write(np.ascontiguousarray(blocks).view(np.uint8).tobytes())
            f.write(deq.astype("<f4").tobytes())
    print("wrote vectors to", out)


if __name__ == "__main__":
    main()

# Writes kquant_llamacpp.bin: float32 inputs, their Q4_K and Q6_K super-blocks as
# llama.cpp's reference quantizers (quantize_row_q4_K_ref, quantize_row_q6_K_ref)
# write them, and those blocks decoded by llama.cpp (dequantize_row_q4_K,
# dequantize_row_q6_K). TestKQuantMatchesLlamaCpp reads it.
#
# Run with the ggml library of a llama.cpp build, e.g. from the node-llama-cpp package:
#   python3 kquant_llamacpp.py .../node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so
#
# Layout (little-endian): "KQLC", uint32 n (values, a multiple of 256), n float32
# inputs, then for Q4_K and Q6_K in turn: the n/256 super-blocks, n float32 decoded.
import ctypes, random, struct, sys

lib = ctypes.CDLL(sys.argv[1])
rng = random.Random(20240611)
blocks = []
for b in range(6):
    blocks.append([rng.gauss(0, 1) for _ in range(256)])
blocks.append([rng.gauss(0, 0.02) for _ in range(256)])           # small weights
blocks.append([rng.gauss(3, 1) for _ in range(256)])              # all positive
x = [rng.gauss(0, 1) for _ in range(256)]; x[77] = 40.0           # one outlier
blocks.append(x)
blocks.append([0.0] * 256)                                        # zeros
blocks.append([-1.5] * 256)                                       # constant
blocks.append([rng.gauss(0, 1) * (100 if i // 32 == 5 else 1) for i in range(256)])  # one loud sub-block
# A quiet sub-block and 16-value group (their quantised scales round to 0) and a zero one.
blocks.append([rng.gauss(0, 1) * (1e-4 if i // 32 == 2 else 1) * (0 if i // 16 == 9 else 1) for i in range(256)])
vals = [v for blk in blocks for v in blk]
n = len(vals)
xs = (ctypes.c_float * n)(*vals)

out = bytearray(b"KQLC" + struct.pack("<I", n) + bytes(xs))
for name, size in (("q4_K", 144), ("q6_K", 210)):
    q = (ctypes.c_uint8 * (n // 256 * size))()
    getattr(lib, "quantize_row_%s_ref" % name)(xs, q, ctypes.c_int64(n))
    y = (ctypes.c_float * n)()
    getattr(lib, "dequantize_row_%s" % name)(q, y, ctypes.c_int64(n))
    out += bytes(q) + bytes(y)
open("kquant_llamacpp.bin", "wb").write(out)
print("wrote", len(out), "bytes for", n, "values")

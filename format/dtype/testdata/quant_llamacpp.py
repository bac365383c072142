# Writes quant_llamacpp.bin: float32 inputs, their blocks in every quantised weight
# type as llama.cpp's reference quantizers (quantize_row_<type>_ref) write them, and
# those blocks decoded by llama.cpp (dequantize_row_<type>). TestQuantMatchesLlamaCpp
# reads it.
#
# Run with the ggml library of a llama.cpp build, e.g. from the node-llama-cpp package:
#   python3 quant_llamacpp.py .../node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so
#
# Layout (little-endian): "QLC2", uint32 n (values, a multiple of 256), uint32 t (types),
# n float32 inputs, then for each type: uint32 ggml type id, uint32 bytes of blocks, the
# blocks, n float32 decoded values.
import ctypes, random, struct, sys

lib = ctypes.CDLL(sys.argv[1])
rng = random.Random(20240611)
blocks = []
for b in range(6):
    blocks.append([rng.gauss(0, 1) for _ in range(256)])
blocks.append([rng.gauss(0, 0.02) for _ in range(256)])           # small weights
blocks.append([rng.gauss(3, 1) for _ in range(256)])              # all positive
blocks.append([rng.gauss(-3, 1) for _ in range(256)])             # all negative
x = [rng.gauss(0, 1) for _ in range(256)]; x[77] = 40.0           # one outlier
blocks.append(x)
blocks.append([0.0] * 256)                                        # zeros
blocks.append([-1.5] * 256)                                       # constant
blocks.append([rng.gauss(0, 1) * (100 if i // 32 == 5 else 1) for i in range(256)])  # one loud sub-block
# A quiet sub-block and 16-value group (their quantised scales round to 0) and a zero one.
blocks.append([rng.gauss(0, 1) * (1e-4 if i // 32 == 2 else 1) * (0 if i // 16 == 9 else 1) for i in range(256)])
# Ties: values on the half-steps of the rounding.
blocks.append([(i % 17 - 8) * 0.25 for i in range(256)])
vals = [v for blk in blocks for v in blk]
n = len(vals)
xs = (ctypes.c_float * n)(*vals)

# name, ggml type id, values per block, bytes per block
types = [("q4_0", 2, 32, 18), ("q4_1", 3, 32, 20), ("q5_0", 6, 32, 22), ("q5_1", 7, 32, 24),
         ("q8_0", 8, 32, 34), ("q4_K", 12, 256, 144), ("q5_K", 13, 256, 176), ("q6_K", 14, 256, 210)]
out = bytearray(b"QLC2" + struct.pack("<II", n, len(types)) + bytes(xs))
for name, tid, per, size in types:
    q = (ctypes.c_uint8 * (n // per * size))()
    getattr(lib, "quantize_row_%s_ref" % name)(xs, q, ctypes.c_int64(n))
    y = (ctypes.c_float * n)()
    getattr(lib, "dequantize_row_%s" % name)(q, y, ctypes.c_int64(n))
    out += struct.pack("<II", tid, len(q)) + bytes(q) + bytes(y)
open("quant_llamacpp.bin", "wb").write(out)
print("wrote", len(out), "bytes for", n, "values")

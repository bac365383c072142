// The small kernels of specula's GPU runner, compiled at run time by NVRTC (see
// backend_cuda.go and nvrtc.go; backend_host.go holds a plain-Go twin of each, which the tests compare
// against). No headers are included: the few types and conversions needed are here.
//
// Every kernel is batch-invariant: what it computes for one token does not depend on
// the other tokens of the batch (reductions run in a fixed order per token), so greedy
// speculative decoding reproduces plain greedy decoding exactly.
//
// Conventions: activations are row-major float32, one row per token. A weight matrix
// is rows × cols, row-major, of type F32 (0), F16 (1), BF16 (2) or Q8_0 (3: blocks of
// 32 values, a float16 scale then 32 int8, 34 bytes). The key/value cache is a pool of
// blocks of bs positions; block b holds, for every layer l, kind k (0 keys, 1 values)
// and kv head h, bs × hd floats at ((((b·layers + l)·2 + k)·kvh + h)·bs + slot)·hd.
// A physical slot index is block·bs + slot.

typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

struct __attribute__((aligned(16))) u32x4 { u32 x, y, z, w; };
struct __attribute__((aligned(16))) f32x4 { float x, y, z, w; };

#define WT_F32 0
#define WT_F16 1
#define WT_BF16 2
#define WT_Q8_0 3
#define Q8_BYTES 34

__device__ __forceinline__ float h2f(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ u16 f2h(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float bits2f(u32 u) {
    float f;
    asm("mov.b32 %0, %1;" : "=f"(f) : "r"(u));
    return f;
}

__device__ __forceinline__ u32 f2bits(float f) {
    u32 u;
    asm("mov.b32 %0, %1;" : "=r"(u) : "f"(f));
    return u;
}

__device__ __forceinline__ float bf2f(u16 h) { return bits2f(((u32)h) << 16); }

__device__ __forceinline__ u16 f2bf(float f) {
    u32 b = f2bits(f);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (u16)((b >> 16) | 0x40u);
    b += 0x7fffu + ((b >> 16) & 1u);
    return (u16)(b >> 16);
}

__device__ __forceinline__ float warp_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 16);
    v += __shfl_xor_sync(0xffffffffu, v, 8);
    v += __shfl_xor_sync(0xffffffffu, v, 4);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v;
}

// Element c of row r of a weight matrix, as float.
__device__ __forceinline__ float weight_at(const void* w, int wt, i64 r, int cols, int c) {
    switch (wt) {
    case WT_F32:
        return ((const float*)w)[r * cols + c];
    case WT_F16:
        return h2f(((const u16*)w)[r * cols + c]);
    case WT_BF16:
        return bf2f(((const u16*)w)[r * cols + c]);
    default: {
        const unsigned char* blk = (const unsigned char*)w + (r * (cols / 32) + c / 32) * Q8_BYTES;
        return (float)(signed char)blk[2 + c % 32] * h2f(*(const u16*)blk);
    }
    }
}

// ---------------------------------------------------------------------------------
// Products with the weights: y[t·ldy + r] (+)= Σ_c W[r, c] · x[t·cols + c].
//
// One warp computes one row r for a group of up to 8 tokens (blockIdx.y picks the
// group). Lane l takes the 8-column chunks l, l+32, …; within a chunk the products are
// added in column order, then the lanes' sums are combined by a fixed butterfly. The
// order of additions for a token is therefore the same in every group size.

template <int WT>
__device__ __forceinline__ void load8(const void* w, i64 r, int cols, int chunk, float* v) {
    if (WT == WT_F32) {
        const f32x4* p = (const f32x4*)((const float*)w + r * cols + chunk * 8);
        f32x4 a = p[0], b = p[1];
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
        u32x4 a = *(const u32x4*)((const u16*)w + r * cols + chunk * 8);
        u32 u[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if (WT == WT_F16) {
                v[2 * i] = h2f((u16)(u[i] & 0xffffu));
                v[2 * i + 1] = h2f((u16)(u[i] >> 16));
            } else {
                v[2 * i] = bf2f((u16)(u[i] & 0xffffu));
                v[2 * i + 1] = bf2f((u16)(u[i] >> 16));
            }
        }
    }
}

template <int WT, int T>
__device__ __forceinline__ void gemv_rows(const void* __restrict__ w, const float* __restrict__ xs,
                                          float* __restrict__ y, int r, int t0, int cols, int ldy, int accumulate) {
    const int lane = threadIdx.x & 31;
    float acc[T];
#pragma unroll
    for (int t = 0; t < T; t++) acc[t] = 0.0f;
    if (WT == WT_Q8_0) {
        const int nb = cols / 32;
        const unsigned char* row = (const unsigned char*)w + (i64)r * nb * Q8_BYTES;
        for (int b = lane; b < nb; b += 32) {
            const u16* blk = (const u16*)(row + (i64)b * Q8_BYTES);
            const float d = h2f(blk[0]);
            float q[32];
#pragma unroll
            for (int i = 0; i < 16; i++) {
                u16 v = blk[1 + i];
                q[2 * i] = (float)(signed char)(v & 0xff);
                q[2 * i + 1] = (float)(signed char)(v >> 8);
            }
#pragma unroll
            for (int t = 0; t < T; t++) {
                const f32x4* xp = (const f32x4*)(xs + (i64)t * cols + b * 32);
                float s = 0.0f;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    f32x4 a = xp[i];
                    s = fmaf(q[4 * i], a.x, s);
                    s = fmaf(q[4 * i + 1], a.y, s);
                    s = fmaf(q[4 * i + 2], a.z, s);
                    s = fmaf(q[4 * i + 3], a.w, s);
                }
                acc[t] = fmaf(s, d, acc[t]);
            }
        }
    } else if ((cols & 7) == 0) {
        const int chunks = cols >> 3;
#pragma unroll 2
        for (int c = lane; c < chunks; c += 32) {
            float v[8];
            load8<WT>(w, r, cols, c, v);
#pragma unroll
            for (int t = 0; t < T; t++) {
                const f32x4* xp = (const f32x4*)(xs + (i64)t * cols + c * 8);
                f32x4 a = xp[0], b = xp[1];
                float s = acc[t];
                s = fmaf(v[0], a.x, s);
                s = fmaf(v[1], a.y, s);
                s = fmaf(v[2], a.z, s);
                s = fmaf(v[3], a.w, s);
                s = fmaf(v[4], b.x, s);
                s = fmaf(v[5], b.y, s);
                s = fmaf(v[6], b.z, s);
                s = fmaf(v[7], b.w, s);
                acc[t] = s;
            }
        }
    } else {
        for (int c = lane; c < cols; c += 32) {
            const float v = weight_at(w, WT, r, cols, c);
#pragma unroll
            for (int t = 0; t < T; t++) acc[t] = fmaf(v, xs[(i64)t * cols + c], acc[t]);
        }
    }
#pragma unroll
    for (int t = 0; t < T; t++) acc[t] = warp_sum(acc[t]);
    if (lane == 0) {
#pragma unroll
        for (int t = 0; t < T; t++) {
            float* yp = y + (i64)(t0 + t) * ldy + r;
            *yp = accumulate ? *yp + acc[t] : acc[t];
        }
    }
}

template <int WT>
__device__ __forceinline__ void gemv(const void* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
                                     int rows, int cols, int n, int ldy, int accumulate) {
    const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int t0 = blockIdx.y * 8;
    if (r >= rows || t0 >= n) return; // the whole warp leaves together
    const float* xs = x + (i64)t0 * cols;
    switch (n - t0 < 8 ? n - t0 : 8) {
    case 1: gemv_rows<WT, 1>(w, xs, y, r, t0, cols, ldy, accumulate); break;
    case 2: gemv_rows<WT, 2>(w, xs, y, r, t0, cols, ldy, accumulate); break;
    case 3: gemv_rows<WT, 3>(w, xs, y, r, t0, cols, ldy, accumulate); break;
    case 4: gemv_rows<WT, 4>(w, xs, y, r, t0, cols, ldy, accumulate); break;
    case 5: gemv_rows<WT, 5>(w, xs, y, r, t0, cols, ldy, accumulate); break;
    case 6: gemv_rows<WT, 6>(w, xs, y, r, t0, cols, ldy, accumulate); break;
    case 7: gemv_rows<WT, 7>(w, xs, y, r, t0, cols, ldy, accumulate); break;
    default: gemv_rows<WT, 8>(w, xs, y, r, t0, cols, ldy, accumulate); break;
    }
}

extern "C" __global__ void gemv_f32(const void* w, const float* x, float* y, int rows, int cols, int n, int ldy, int acc) {
    gemv<WT_F32>(w, x, y, rows, cols, n, ldy, acc);
}
extern "C" __global__ void gemv_f16(const void* w, const float* x, float* y, int rows, int cols, int n, int ldy, int acc) {
    gemv<WT_F16>(w, x, y, rows, cols, n, ldy, acc);
}
extern "C" __global__ void gemv_bf16(const void* w, const float* x, float* y, int rows, int cols, int n, int ldy, int acc) {
    gemv<WT_BF16>(w, x, y, rows, cols, n, ldy, acc);
}
extern "C" __global__ void gemv_q8_0(const void* w, const float* x, float* y, int rows, int cols, int n, int ldy, int acc) {
    gemv<WT_Q8_0>(w, x, y, rows, cols, n, ldy, acc);
}

// ---------------------------------------------------------------------------------
// A product's input in the column order of a weight whose columns were permuted (an
// act-order layer's inputs sorted by group): out[t·cols + j] = x[t·cols + perm[j]].
// Grid-stride over total = rows · cols.
extern "C" __global__ void gather_cols(float* out, const float* x, const int* perm, i64 total, int cols) {
    for (i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += (i64)gridDim.x * blockDim.x) {
        const int j = (int)(k % cols);
        out[k] = x[k - j + perm[j]];
    }
}

// ---------------------------------------------------------------------------------
// Embedding lookup: out[i·cols + c] = W[tokens[i], c]. Grid: n blocks.
extern "C" __global__ void embed(float* out, const void* w, int wt, const int* tokens, int cols) {
    const int i = blockIdx.x;
    const i64 r = tokens[i];
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[(i64)i * cols + c] = weight_at(w, wt, r, cols, c);
}

// ---------------------------------------------------------------------------------
// Block-wide reductions over blockDim.x threads (a power of two, at most 256), in a
// fixed order.
__device__ __forceinline__ double block_sum_d(double v, double* red) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x >> 1; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    double r = red[0];
    __syncthreads();
    return r;
}

__device__ __forceinline__ float block_max_f(float v, float* red) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x >> 1; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}

// rms_row writes out[c] = xr[c] / √(mean(xr²) + eps) · w[c] for c < n, the sum of
// squares in double; out may be xr (each thread writes what it read, after the sum).
__device__ __forceinline__ void rms_row(float* out, const float* xr, const float* w, int n, float eps, double* red) {
    double ss = 0.0;
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        const double v = xr[c];
        ss += v * v;
    }
    ss = block_sum_d(ss, red);
    const float scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (int c = threadIdx.x; c < n; c += blockDim.x) out[c] = xr[c] * scale * w[c];
}

// RMSNorm: out[i] = x[row] / √(mean(x[row]²) + eps) · w, row = rows ? rows[i] : i.
// Grid: n blocks of 256 threads. out may be x when rows is null.
extern "C" __global__ void rmsnorm(float* out, const float* x, const float* w, const int* rows, int dim, float eps) {
    __shared__ double red[256];
    const int i = blockIdx.x;
    const i64 row = rows ? rows[i] : i;
    rms_row(out + (i64)i * dim, x + row * dim, w, dim, eps, red);
}

// Each head of a row normalised in place (Qwen3's q and k norms): block b takes head
// head0 + b % heads of row b / heads, hd values at width·row + hd·head, with weights w
// of hd values. Grid: n·heads blocks of 256 threads.
extern "C" __global__ void head_rmsnorm(float* x, const float* w, int width, int head0, int heads, int hd, float eps) {
    __shared__ double red[256];
    float* xr = x + (i64)(blockIdx.x / heads) * width + (i64)(head0 + blockIdx.x % heads) * hd;
    rms_row(xr, xr, w, hd, eps, red);
}

// ---------------------------------------------------------------------------------
// After the Q, K, V projection: add the biases, rotate Q and K, store K and V in the
// cache at the token's slot, and write Q to q. qkv rows hold (heads + 2·kvh)·hd
// values: Q, then K, then V. rope holds per token half cosines then half sines,
// half = ropeDim/2. style 0: pairs (2j, 2j+1); style 1: pairs (j, j+half).
// Grid: n blocks.
extern "C" __global__ void qkv_rope(const float* qkv, const float* bias, const float* rope, const int* slots,
                                    float* q, float* kv, int heads, int kvh, int hd, int ropeDim, int style,
                                    int layer, int layers, int bs) {
    const int i = blockIdx.x;
    const int width = (heads + 2 * kvh) * hd;
    const float* row = qkv + (i64)i * width;
    const int half = ropeDim / 2;
    const float* cs = rope + (i64)i * 2 * half;
    const float* sn = cs + half;
    const i64 slot = slots[i];
    const i64 blk = slot / bs, so = slot % bs;
    for (int e = threadIdx.x; e < width; e += blockDim.x) {
        const int h = e / hd, d = e % hd;
        float v = row[e];
        if (bias) v += bias[e];
        if (h < heads + kvh && d < ropeDim) {
            int partner, j;
            bool first;
            if (style == 0) {
                j = d / 2;
                first = (d & 1) == 0;
                partner = first ? e + 1 : e - 1;
            } else {
                first = d < half;
                j = first ? d : d - half;
                partner = first ? e + half : e - half;
            }
            float p = row[partner];
            if (bias) p += bias[partner];
            // first: a·cos − b·sin with (a, b) = (v, p); second: a·sin + b·cos with (a, b) = (p, v).
            v = first ? v * cs[j] - p * sn[j] : p * sn[j] + v * cs[j];
        }
        if (h < heads) {
            q[(i64)i * heads * hd + e] = v;
        } else {
            const int kind = h < heads + kvh ? 0 : 1;
            const int kh = kind == 0 ? h - heads : h - heads - kvh;
            kv[((((blk * layers + layer) * 2 + kind) * kvh + kh) * bs + so) * hd + d] = v;
        }
    }
}

// ---------------------------------------------------------------------------------
// Attention of token i (blockIdx.x) and query head h (blockIdx.y) over the positions
// it sees, in order: positions 0 … prefix[i]−1, then base + extras[extraOff[i] + k] for
// k < extraCnt[i]. A chain token sees prefix = base + i + 1 and no extras; a tree token
// sees the base positions, its ancestors in the batch and itself; in a sliding-window
// layer (window > 0) only the last window of them. Scores go to
// scratch (ld floats per (token, head)) or, when scratch is null, to dynamic shared
// memory. Block: 256 threads.
__device__ __forceinline__ i64 kv_row(const int* table, int p, int bs, int layers, int layer, int kind, int kvh, int kh, int hd) {
    const i64 blk = table[p / bs];
    return ((((blk * layers + layer) * 2 + kind) * kvh + kh) * bs + p % bs) * (i64)hd;
}

__device__ __forceinline__ int visible(int j, int pre, int base, const int* ex) {
    return j < pre ? j : base + ex[j - pre];
}

extern "C" __global__ void attention(const float* q, float* out, const float* kv, const int* table,
                                     const int* prefix, const int* extraOff, const int* extraCnt, const int* extras,
                                     float* scratch, i64 ld, int base, int heads, int kvh, int hd,
                                     int layer, int layers, int bs, float scale, int window) {
    __shared__ __attribute__((aligned(16))) float qs[512];
    __shared__ double redd[256];
    __shared__ float redf[256];
    extern __shared__ float dyn[];
    const int i = blockIdx.x, h = blockIdx.y;
    const int kh = h / (heads / kvh);
    const int pre = prefix[i];
    const int L = pre + extraCnt[i];
    // A sliding-window layer sees the last window positions: visible index j is
    // position j, so the positions before lo are left out.
    const int lo = window > 0 ? max(0, L - window) : 0;
    const int* ex = extras + extraOff[i];
    float* sc = scratch ? scratch + ((i64)i * heads + h) * ld : dyn;
    const float* qi = q + ((i64)i * heads + h) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = qi[d] * scale;
    __syncthreads();
    // Scores: one thread per position, the dimensions in order.
    float mx = bits2f(0xff800000u); // −∞
    for (int j = lo + threadIdx.x; j < L; j += blockDim.x) {
        const float* kp = kv + kv_row(table, visible(j, pre, base, ex), bs, layers, layer, 0, kvh, kh, hd);
        float s = 0.0f;
        if ((hd & 3) == 0) {
            for (int d = 0; d < hd; d += 4) {
                f32x4 k4 = *(const f32x4*)(kp + d);
                s = fmaf(qs[d], k4.x, s);
                s = fmaf(qs[d + 1], k4.y, s);
                s = fmaf(qs[d + 2], k4.z, s);
                s = fmaf(qs[d + 3], k4.w, s);
            }
        } else {
            for (int d = 0; d < hd; d++) s = fmaf(qs[d], kp[d], s);
        }
        sc[j] = s;
        mx = fmaxf(mx, s);
    }
    mx = block_max_f(mx, redf);
    double sum = 0.0;
    for (int j = lo + threadIdx.x; j < L; j += blockDim.x) {
        const float e = expf(sc[j] - mx);
        sc[j] = e;
        sum += (double)e;
    }
    sum = block_sum_d(sum, redd);
    const float inv = (float)(1.0 / sum);
    // Weighted values: one thread per dimension, the positions in order.
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int j = lo; j < L; j++) {
            const float* vp = kv + kv_row(table, visible(j, pre, base, ex), bs, layers, layer, 1, kvh, kh, hd);
            acc = fmaf(sc[j] * inv, vp[d], acc);
        }
        out[((i64)i * heads + h) * hd + d] = acc;
    }
}

// ---------------------------------------------------------------------------------
// out[t·ffn + c] = act(gu[t·2ffn + c]) · gu[t·2ffn + ffn + c], act SiLU (0) or GELU
// in its tanh form (1), both as x·sigmoid(·). Grid-stride over n·ffn.
__device__ __forceinline__ float sigmoidf(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    const float e = expf(x);
    return e / (1.0f + e);
}

extern "C" __global__ void glu(float* out, const float* gu, i64 total, int ffn, int act) {
    for (i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += (i64)gridDim.x * blockDim.x) {
        const i64 t = k / ffn;
        const int c = (int)(k % ffn);
        const float g = gu[t * 2 * ffn + c];
        const float u = gu[t * 2 * ffn + ffn + c];
        const float z = act == 0 ? g : 1.5957691216057308f * (g + 0.044715f * g * g * g);
        out[k] = g * sigmoidf(z) * u;
    }
}

// ---------------------------------------------------------------------------------
// x[k] *= s; y[k] += x[k]. Grid-stride over total.
extern "C" __global__ void scale_rows(float* x, i64 total, float s) {
    for (i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += (i64)gridDim.x * blockDim.x) x[k] *= s;
}

extern "C" __global__ void add_rows(float* y, const float* x, i64 total) {
    for (i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += (i64)gridDim.x * blockDim.x) y[k] += x[k];
}

// ---------------------------------------------------------------------------------
// Copies, in order, slot pairs[2p+1] to slot pairs[2p] (physical slot indices) in
// every run (layer, kind, head) of the cache. Grid: runs blocks.
extern "C" __global__ void kv_copy(float* kv, const int* pairs, int m, int bs, int hd) {
    const i64 run = blockIdx.x, runs = gridDim.x;
    for (int p = 0; p < m; p++) {
        const i64 dst = pairs[2 * p], src = pairs[2 * p + 1];
        float* dp = kv + (((dst / bs) * runs + run) * bs + dst % bs) * hd;
        const float* sp = kv + (((src / bs) * runs + run) * bs + src % bs) * hd;
        for (int d = threadIdx.x; d < hd; d += blockDim.x) dp[d] = sp[d];
    }
}

// ---------------------------------------------------------------------------------
// Activations to half or bfloat16 for cuBLAS: out[k] = convert(x[k]).
extern "C" __global__ void to_f16(u16* out, const float* x, i64 total) {
    for (i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += (i64)gridDim.x * blockDim.x) out[k] = f2h(x[k]);
}
extern "C" __global__ void to_bf16(u16* out, const float* x, i64 total) {
    for (i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += (i64)gridDim.x * blockDim.x) out[k] = f2bf(x[k]);
}

// ---------------------------------------------------------------------------------
// Pseudo-random fill for benchmark weights: value k = offset + scale·u, u uniform in
// [−1, 1) from a hash of (seed, k). wt: 0 F32, 1 F16, 2 BF16.
__device__ __forceinline__ u64 mix64(u64 z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ float fill_value(u64 seed, i64 k, float scale, float offset) {
    const u64 z = mix64(seed * 0x9e3779b97f4a7c15ull + (u64)k);
    const float u = (float)(z >> 40) * (1.0f / 8388608.0f) - 1.0f; // 24 bits → [−1, 1)
    return offset + scale * u;
}

extern "C" __global__ void fill(void* out, int wt, i64 total, u64 seed, float scale, float offset) {
    for (i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += (i64)gridDim.x * blockDim.x) {
        const float v = fill_value(seed, k, scale, offset);
        if (wt == WT_F32) ((float*)out)[k] = v;
        else if (wt == WT_F16) ((u16*)out)[k] = f2h(v);
        else ((u16*)out)[k] = f2bf(v);
    }
}

// The same values as fill, quantised to Q8_0 as the CPU's QuantizeQ8_0 does: per block
// of 32, d = max|v|/127 stored as float16, q = round-half-away(v · (1/d)). One thread
// per block; grid-stride over blocks.
extern "C" __global__ void fill_q8_0(unsigned char* out, i64 blocks, u64 seed, float scale, float offset) {
    for (i64 b = (i64)blockIdx.x * blockDim.x + threadIdx.x; b < blocks; b += (i64)gridDim.x * blockDim.x) {
        float v[32];
        float amax = 0.0f;
#pragma unroll
        for (int j = 0; j < 32; j++) {
            v[j] = fill_value(seed, b * 32 + j, scale, offset);
            amax = fmaxf(amax, fabsf(v[j]));
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        unsigned char* blk = out + b * Q8_BYTES;
        const u16 dh = f2h(d);
        blk[0] = (unsigned char)(dh & 0xff);
        blk[1] = (unsigned char)(dh >> 8);
#pragma unroll
        for (int j = 0; j < 32; j++) blk[2 + j] = (unsigned char)(signed char)(int)roundf(v[j] * id);
    }
}

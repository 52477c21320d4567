/* Multi-head softmax attention of nq queries over [nk per-prompt keys | m keys shared by the batch],
 * for narrow heads (head width dh of a few numbers), forward and backward, on the CPU.
 *
 * Why a kernel: with dh = 4-12, every matrix product of the attention has an inner dimension of dh, so
 * BLAS spends its time on overhead, the (E, H, B, nq, nk + m) score block makes several passes through
 * memory, and splitting heads out of the projections costs copies. Here one work item is one (member,
 * head); it keeps its keys and values transposed (dh x P, P = nk + m) in a small buffer and computes each
 * query's scores, softmax and output in one pass over that buffer, vectorised over the P keys. The
 * shared keys are copied once per work item. Inputs and outputs stay in the projections' own layout
 * (heads side by side in the last dimension), so no copies are needed around the call.
 *
 * Determinism: each work item is computed by exactly one thread, in a fixed order, so the result does
 * not depend on the number of threads. Sums over keys are vectorised (their order is fixed by this
 * binary, not by the thread count). Work items write disjoint columns of the outputs.
 *
 * Layouts (C-contiguous), h = H dh, head hh in columns [hh dh, (hh + 1) dh):
 *   q, o, dq: (E, B, nq, h);  kv, dkv: (E, B, nk, 2h), keys in [0, h), values in [h, 2h);
 *   kve, dkve: (E, m, 2h), the same for the shared keys;  lse: (E, H, B, nq).
 * Scores are scale * (q . k). Called from algo_emu/models/kernel.py through ctypes (the caller checks
 * shapes, dtypes and layouts).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------------- *
 * float64: plain loops (used by the tests, to 1e-12 against a plain softmax attention)              *
 * ------------------------------------------------------------------------------------------------- */

void tsa_forward_f64(const double *q, const double *kv, const double *kve, double *o, double *lse, int64_t E,
                     int64_t H, int64_t B, int64_t nq, int64_t nk, int64_t m, int64_t dh, double scale,
                     int nthreads) {
    const int64_t h = H * dh, P = nk + m;
    #pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t w = 0; w < E * H; ++w) {
        const int64_t e = w / H, hh = w % H;
        double *s = (double *)malloc(sizeof(double) * P);
        for (int64_t b = 0; b < B; ++b) {
            const double *kvb = kv + (e * B + b) * nk * 2 * h + hh * dh, *kveb = kve + e * m * 2 * h + hh * dh;
            for (int64_t i = 0; i < nq; ++i) {
                const double *qi = q + ((e * B + b) * nq + i) * h + hh * dh;
                double mx = -INFINITY, z = 0;
                for (int64_t j = 0; j < P; ++j) {
                    const double *k = j < nk ? kvb + j * 2 * h : kveb + (j - nk) * 2 * h;
                    double a = 0;
                    for (int64_t d = 0; d < dh; ++d) a += (scale * qi[d]) * k[d];
                    s[j] = a;
                    mx = a > mx ? a : mx;
                }
                for (int64_t j = 0; j < P; ++j) { s[j] = exp(s[j] - mx); z += s[j]; }
                double *oi = o + ((e * B + b) * nq + i) * h + hh * dh;
                for (int64_t d = 0; d < dh; ++d) {
                    double acc = 0;
                    for (int64_t j = 0; j < P; ++j)
                        acc += s[j] * (j < nk ? kvb + j * 2 * h : kveb + (j - nk) * 2 * h)[h + d];
                    oi[d] = acc / z;
                }
                lse[((e * H + hh) * B + b) * nq + i] = log(z) + mx;
            }
        }
        free(s);
    }
}

void tsa_backward_f64(const double *dout, const double *q, const double *kv, const double *kve, const double *o,
                      const double *lse, double *dq, double *dkv, double *dkve, int64_t E, int64_t H, int64_t B,
                      int64_t nq, int64_t nk, int64_t m, int64_t dh, double scale, int nthreads) {
    const int64_t h = H * dh, P = nk + m;
    #pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t w = 0; w < E * H; ++w) {
        const int64_t e = w / H, hh = w % H;
        double *dkveb = dkve + e * m * 2 * h + hh * dh;
        for (int64_t j = 0; j < m; ++j)
            for (int64_t d = 0; d < dh; ++d) { dkveb[j * 2 * h + d] = 0; dkveb[j * 2 * h + h + d] = 0; }
        for (int64_t b = 0; b < B; ++b) {
            const double *kvb = kv + (e * B + b) * nk * 2 * h + hh * dh, *kveb = kve + e * m * 2 * h + hh * dh;
            double *dkvb = dkv + (e * B + b) * nk * 2 * h + hh * dh;
            for (int64_t j = 0; j < nk; ++j)
                for (int64_t d = 0; d < dh; ++d) { dkvb[j * 2 * h + d] = 0; dkvb[j * 2 * h + h + d] = 0; }
            for (int64_t i = 0; i < nq; ++i) {
                const int64_t row = ((e * B + b) * nq + i) * h + hh * dh;
                const double *qi = q + row, *gi = dout + row, *oi = o + row;
                const double l = lse[((e * H + hh) * B + b) * nq + i];
                double D = 0;
                for (int64_t d = 0; d < dh; ++d) { D += gi[d] * oi[d]; dq[row + d] = 0; }
                for (int64_t j = 0; j < P; ++j) {
                    const double *k = j < nk ? kvb + j * 2 * h : kveb + (j - nk) * 2 * h;
                    double *dk = j < nk ? dkvb + j * 2 * h : dkveb + (j - nk) * 2 * h;
                    double a = 0, g = 0;
                    for (int64_t d = 0; d < dh; ++d) { a += (scale * qi[d]) * k[d]; g += gi[d] * k[h + d]; }
                    const double p = exp(a - l), ds = p * (g - D);
                    for (int64_t d = 0; d < dh; ++d) {
                        dq[row + d] += ds * k[d] * scale;
                        dk[d] += ds * (scale * qi[d]);
                        dk[h + d] += p * gi[d];
                    }
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------------- *
 * float32: the keys are laid out in blocks of 16 (GCC vector extensions: AVX-512 where the CPU has it,
 * split into narrower vectors elsewhere). Per (member, head): K and V transposed, dh x NV blocks of 16
 * keys, zero-padded; a bias block adds -1e30 to the scores of the padding keys, whose weights are then
 * exactly 0. Per query, the scores, their softmax and the output stay in NV vectors.
 * ------------------------------------------------------------------------------------------------- */
typedef float v16 __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
#define MAXNV 16 /* P <= 256 keys */

static inline v16 splat(float a) { return (v16){a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a}; }

/* exp lane by lane (Cephes' expf: relative error < 2e-7), without branches; 0 below -87 (the arguments
 * are scores minus their maximum or minus the log-sum-exp, so <= 0 up to rounding) */
static inline v16 vexp(v16 x) {
    const v16 lo = splat(-87.0f);
    v16i small = x < lo;
    v16 xc = (v16)(((v16i)x & ~small) | ((v16i)lo & small));
    v16 t = xc * splat(1.44269504088896341f) + splat(12582912.0f); /* round to nearest: 1.5 * 2^23 */
    v16i ni = (v16i)t - (v16i)splat(12582912.0f);
    v16 n = t - splat(12582912.0f);
    v16 r = xc - n * splat(0.693359375f);
    r = r - n * splat(-2.12194440e-4f);
    v16 r2 = r * r;
    v16 y = splat(1.9875691500e-4f);
    y = y * r + splat(1.3981999507e-3f);
    y = y * r + splat(8.3334519073e-3f);
    y = y * r + splat(4.1665795894e-2f);
    y = y * r + splat(1.6666665459e-1f);
    y = y * r + splat(5.0000001201e-1f);
    y = y * r2 + r + splat(1.0f);
    v16 scale = (v16)((ni + 127) << 23);
    return (v16)((v16i)(y * scale) & ~small);
}

/* horizontal sum and maximum of the 16 lanes in 4 shuffle steps (the same order on every call) */
static const v16i SH8 = {8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7};
static const v16i SH4 = {4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11};
static const v16i SH2 = {2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13};
static const v16i SH1 = {1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14};

static inline v16 vmax(v16 a, v16 b) {
    v16i gt = a > b;
    return (v16)(((v16i)a & gt) | ((v16i)b & ~gt));
}

static inline float hsum(v16 a) {
    a += __builtin_shuffle(a, SH8);
    a += __builtin_shuffle(a, SH4);
    a += __builtin_shuffle(a, SH2);
    a += __builtin_shuffle(a, SH1);
    return a[0];
}

static inline float hmax(v16 a) {
    a = vmax(a, __builtin_shuffle(a, SH8));
    a = vmax(a, __builtin_shuffle(a, SH4));
    a = vmax(a, __builtin_shuffle(a, SH2));
    a = vmax(a, __builtin_shuffle(a, SH1));
    return a[0];
}

/* keys and values of n rows (row stride rs; values h further on) into the transposed blocks, from key
 * index off on */
static inline void load_keys(v16 *K, v16 *V, const float *kv, int64_t rs, int64_t h, int64_t n, int64_t off,
                             int64_t NV, int dh) {
    float *Kf = (float *)K, *Vf = (float *)V;
    for (int64_t j = 0; j < n; ++j)
        for (int d = 0; d < dh; ++d) {
            Kf[d * NV * 16 + off + j] = kv[j * rs + d];
            Vf[d * NV * 16 + off + j] = kv[j * rs + h + d];
        }
}

static inline __attribute__((always_inline)) void
fwd_item(const float *q, const float *kv, const float *kve, float *o, float *lse, int64_t B, int64_t nq,
         int64_t nk, int64_t m, int64_t h, const int dh, float scale, v16 *buf) {
    const int64_t P = nk + m, NV = (P + 15) / 16;
    v16 *K = buf, *V = buf + dh * NV, *bias = buf + 2 * dh * NV;
    memset(buf, 0, sizeof(v16) * (2 * dh + 1) * NV);
    for (int64_t j = P; j < NV * 16; ++j) ((float *)bias)[j] = -1e30f;
    load_keys(K, V, kve, 2 * h, h, m, nk, NV, dh);
    for (int64_t b = 0; b < B; ++b) {
        load_keys(K, V, kv + b * nk * 2 * h, 2 * h, h, nk, 0, NV, dh);
        for (int64_t i = 0; i < nq; ++i) {
            const float *qi = q + (b * nq + i) * h;
            v16 s[MAXNV] = {0};
            for (int64_t u = 0; u < NV; ++u) {
                v16 a = bias[u];
                for (int d = 0; d < dh; ++d) a += splat(scale * qi[d]) * K[d * NV + u];
                s[u] = a;
            }
            v16 mxv = s[0];
            for (int64_t u = 1; u < NV; ++u) mxv = vmax(s[u], mxv);
            const float mx = hmax(mxv);
            v16 zv = splat(0.0f);
            for (int64_t u = 0; u < NV; ++u) { s[u] = vexp(s[u] - splat(mx)); zv += s[u]; }
            const float z = hsum(zv);
            float *oi = o + (b * nq + i) * h;
            for (int d = 0; d < dh; ++d) {
                v16 a = s[0] * V[d * NV];
                for (int64_t u = 1; u < NV; ++u) a += s[u] * V[d * NV + u];
                oi[d] = hsum(a) / z;
            }
            lse[b * nq + i] = logf(z) + mx;
        }
    }
}

static inline __attribute__((always_inline)) void
bwd_item(const float *dout, const float *q, const float *kv, const float *kve, const float *o, const float *lse,
         float *dq, float *dkv, float *dkve, int64_t B, int64_t nq, int64_t nk, int64_t m, int64_t h, const int dh,
         float scale, v16 *buf) {
    const int64_t P = nk + m, NV = (P + 15) / 16;
    v16 *K = buf, *V = buf + dh * NV, *bias = buf + 2 * dh * NV, *dK = bias + NV, *dV = dK + dh * NV;
    memset(buf, 0, sizeof(v16) * (4 * dh + 1) * NV);
    for (int64_t j = P; j < NV * 16; ++j) ((float *)bias)[j] = -1e30f;
    load_keys(K, V, kve, 2 * h, h, m, nk, NV, dh);
    float *dKf = (float *)dK, *dVf = (float *)dV;
    for (int64_t b = 0; b < B; ++b) {
        load_keys(K, V, kv + b * nk * 2 * h, 2 * h, h, nk, 0, NV, dh);
        for (int d = 0; d < dh; ++d)
            for (int64_t j = 0; j < nk; ++j) { dKf[d * NV * 16 + j] = 0; dVf[d * NV * 16 + j] = 0; }
        for (int64_t i = 0; i < nq; ++i) {
            const float *qi = q + (b * nq + i) * h, *gi = dout + (b * nq + i) * h, *oi = o + (b * nq + i) * h;
            float D = 0;
            for (int d = 0; d < dh; ++d) D += gi[d] * oi[d];
            const v16 l = splat(lse[b * nq + i]);
            v16 p[MAXNV] = {0}, ds[MAXNV] = {0};
            for (int64_t u = 0; u < NV; ++u) {
                v16 a = bias[u], g = splat(-D);
                for (int d = 0; d < dh; ++d) { a += splat(scale * qi[d]) * K[d * NV + u]; g += splat(gi[d]) * V[d * NV + u]; }
                p[u] = vexp(a - l);
                ds[u] = p[u] * g;
            }
            float *dqi = dq + (b * nq + i) * h;
            for (int d = 0; d < dh; ++d) {
                const v16 qd = splat(scale * qi[d]), gd = splat(gi[d]);
                v16 a = splat(0.0f);
                for (int64_t u = 0; u < NV; ++u) {
                    a += ds[u] * K[d * NV + u];
                    dK[d * NV + u] += ds[u] * qd;
                    dV[d * NV + u] += p[u] * gd;
                }
                dqi[d] = hsum(a) * scale;
            }
        }
        float *dkvb = dkv + b * nk * 2 * h;
        for (int64_t j = 0; j < nk; ++j)
            for (int d = 0; d < dh; ++d) {
                dkvb[j * 2 * h + d] = dKf[d * NV * 16 + j];
                dkvb[j * 2 * h + h + d] = dVf[d * NV * 16 + j];
            }
    }
    for (int64_t j = 0; j < m; ++j)
        for (int d = 0; d < dh; ++d) {
            dkve[j * 2 * h + d] = dKf[d * NV * 16 + nk + j];
            dkve[j * 2 * h + h + d] = dVf[d * NV * 16 + nk + j];
        }
}

/* dh as a compile-time constant for the head widths the configs use (the loops over dh unroll) */
#define DISPATCH(CALL)                                  \
    switch (dh) {                                       \
    case 2: CALL(2); break;                             \
    case 4: CALL(4); break;                             \
    case 6: CALL(6); break;                             \
    case 8: CALL(8); break;                             \
    case 12: CALL(12); break;                           \
    default: CALL((int)dh); break;                      \
    }

int tsa_max_keys_f32(void) { return MAXNV * 16; }

void tsa_forward_f32(const float *q, const float *kv, const float *kve, float *o, float *lse, int64_t E, int64_t H,
                     int64_t B, int64_t nq, int64_t nk, int64_t m, int64_t dh, double scale, int nthreads) {
    const int64_t h = H * dh, NV = (nk + m + 15) / 16;
    #pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t w = 0; w < E * H; ++w) {
        const int64_t e = w / H, hh = w % H;
        v16 *buf = (v16 *)aligned_alloc(64, sizeof(v16) * (2 * dh + 1) * NV);
#define FWD(DH) fwd_item(q + e * B * nq * h + hh * dh, kv + e * B * nk * 2 * h + hh * dh, kve + e * m * 2 * h + hh * dh, \
                         o + e * B * nq * h + hh * dh, lse + w * B * nq, B, nq, nk, m, h, DH, (float)scale, buf)
        DISPATCH(FWD)
        free(buf);
    }
}

void tsa_backward_f32(const float *dout, const float *q, const float *kv, const float *kve, const float *o,
                      const float *lse, float *dq, float *dkv, float *dkve, int64_t E, int64_t H, int64_t B, int64_t nq,
                      int64_t nk, int64_t m, int64_t dh, double scale, int nthreads) {
    const int64_t h = H * dh, NV = (nk + m + 15) / 16;
    #pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t w = 0; w < E * H; ++w) {
        const int64_t e = w / H, hh = w % H;
        v16 *buf = (v16 *)aligned_alloc(64, sizeof(v16) * (4 * dh + 1) * NV);
#define BWD(DH) bwd_item(dout + e * B * nq * h + hh * dh, q + e * B * nq * h + hh * dh,                              \
                         kv + e * B * nk * 2 * h + hh * dh, kve + e * m * 2 * h + hh * dh, o + e * B * nq * h + hh * dh, \
                         lse + w * B * nq, dq + e * B * nq * h + hh * dh, dkv + e * B * nk * 2 * h + hh * dh,        \
                         dkve + e * m * 2 * h + hh * dh, B, nq, nk, m, h, DH, (float)scale, buf)
        DISPATCH(BWD)
        free(buf);
    }
}

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
 * exactly 0. Per query, the scores, their softmax and the output stay in NV vectors. The number of blocks NV
 * and the head width dh are compile-time constants for the shapes the configs use (the loops over them
 * unroll and the per-query vectors stay in registers). The dh horizontal sums of a query (its output, its
 * dq) are taken together (hsum_many, the same additions as one hsum each). The backward works prompt by
 * prompt in two passes: every query's weights and score gradients (and its dq) first, then the key and
 * value gradients, one block of 16 keys at a time, summed over the queries in registers (the queries in
 * their order, as a query-by-query update would).
 * ------------------------------------------------------------------------------------------------- */
typedef float v16 __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
#define MAXNV 16 /* P <= 256 keys */

static inline v16 splat(float a) { return (v16){a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a}; }

/* exp lane by lane, without branches: e^x = 2^n e^r, n = round(x log2 e), r = x - n ln 2 (in two parts, so r is
 * exact to float rounding), e^r by a degree-5 polynomial fitted to the relative error on [-ln2/2, ln2/2] (relative
 * error < 2.1e-7 evaluated in float32, as Cephes' expf), 2^n added to the exponent bits; 0 below -87 (the arguments
 * are scores minus their maximum or minus the log-sum-exp, so <= 0 up to rounding) */
static inline v16 vexp(v16 x) {
    const v16 lo = splat(-87.0f), magic = splat(12582912.0f); /* 1.5 * 2^23: adding it rounds to an integer */
    v16i small = x < lo;
    v16 xc = (v16)(((v16i)x & ~small) | ((v16i)lo & small));
    v16 t = xc * splat(1.44269504088896341f) + magic;        /* n + magic, n in the low mantissa bits */
    v16 n = t - magic;
    v16 r = xc - n * splat(0.693359375f);
    r = r - n * splat(-2.12194440e-4f);
    v16 y = splat(0.008297654800117016f);
    y = y * r + splat(0.04191538318991661f);
    y = y * r + splat(0.16667574644088745f);
    y = y * r + splat(0.49998894333839417f);
    y = y * r + splat(0.9999997019767761f);
    y = y * r + splat(1.0000001192092896f);
    /* (bits of t) << 23 is n << 23 (mod 2^32): the magic's own bit shifts out */
    return (v16)(((v16i)y + ((v16i)t << 23)) & ~small);
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

#ifdef __AVX512F__
/* the horizontal sums of k vectors at once (k <= 16): out[j] = hsum(a[j]), by the same additions in the same
 * order (lanes i and i + 8, then i and i + 4, i and i + 2, i and i + 1), in 4 steps of two-source shuffles over
 * all k vectors instead of 4 single-source shuffles per vector */
static const v16i LO8 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
static const v16i HI8 = {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
static const v16i LO4 = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
static const v16i HI4 = {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};
static const v16i LO2 = {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29};
static const v16i HI2 = {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31};
static const v16i LO1 = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
static const v16i HI1 = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};

static inline __attribute__((always_inline)) void hsum_many(const v16 *a, const int k, float *out) {
    const v16 zero = splat(0.0f);
    v16 w[8], x[4], y[2];
    for (int j = 0; j < 8; ++j) { /* lanes 0-7: vector 2j's lanes i + (i + 8); lanes 8-15: vector 2j + 1's */
        const v16 a0 = 2 * j < k ? a[2 * j] : zero, a1 = 2 * j + 1 < k ? a[2 * j + 1] : zero;
        w[j] = __builtin_shuffle(a0, a1, LO8) + __builtin_shuffle(a0, a1, HI8);
    }
    for (int j = 0; j < 4; ++j) x[j] = __builtin_shuffle(w[2 * j], w[2 * j + 1], LO4) + __builtin_shuffle(w[2 * j], w[2 * j + 1], HI4);
    for (int j = 0; j < 2; ++j) y[j] = __builtin_shuffle(x[2 * j], x[2 * j + 1], LO2) + __builtin_shuffle(x[2 * j], x[2 * j + 1], HI2);
    const v16 z = __builtin_shuffle(y[0], y[1], LO1) + __builtin_shuffle(y[0], y[1], HI1);
    for (int j = 0; j < k; ++j) out[j] = z[j];
}
#else
static inline __attribute__((always_inline)) void hsum_many(const v16 *a, const int k, float *out) {
    for (int j = 0; j < k; ++j) out[j] = hsum(a[j]);
}
#endif

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
         int64_t nk, int64_t m, int64_t h, const int dh, const int64_t NV, float scale, v16 *buf) {
    const int64_t P = nk + m;
    v16 *K = buf, *V = buf + dh * NV, *bias = buf + 2 * dh * NV;
    memset(buf, 0, sizeof(v16) * (2 * dh + 1) * NV);
    for (int64_t j = P; j < NV * 16; ++j) ((float *)bias)[j] = -1e30f;
    load_keys(K, V, kve, 2 * h, h, m, nk, NV, dh);
    for (int64_t b = 0; b < B; ++b) {
        load_keys(K, V, kv + b * nk * 2 * h, 2 * h, h, nk, 0, NV, dh);
        for (int64_t i = 0; i < nq; ++i) {
            const float *qi = q + (b * nq + i) * h;
            v16 s[MAXNV];
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
            for (int d0 = 0; d0 < dh; d0 += 16) { /* the sums of 16 head columns at a time */
                const int nd = dh - d0 < 16 ? dh - d0 : 16;
                v16 acc[16];
                float sums[16];
                for (int d = 0; d < nd; ++d) {
                    v16 a = s[0] * V[(d0 + d) * NV];
                    for (int64_t u = 1; u < NV; ++u) a += s[u] * V[(d0 + d) * NV + u];
                    acc[d] = a;
                }
                hsum_many(acc, nd, sums);
                for (int d = 0; d < nd; ++d) oi[d0 + d] = sums[d] / z;
            }
            lse[b * nq + i] = logf(z) + mx;
        }
    }
}

static inline __attribute__((always_inline)) void
bwd_item(const float *dout, const float *q, const float *kv, const float *kve, const float *o, const float *lse,
         float *dq, float *dkv, float *dkve, int64_t B, int64_t nq, int64_t nk, int64_t m, int64_t h, const int dh,
         const int64_t NV, float scale, v16 *buf) {
    /* per prompt: first every query's weights p and score gradients ds (and its dq), kept in PS; then the key and
     * value gradients, (d, block) by (d, block), summed over the queries in their order in registers */
    const int64_t P = nk + m;
    v16 *K = buf, *V = buf + dh * NV, *bias = buf + 2 * dh * NV, *dK = bias + NV, *dV = dK + dh * NV;
    v16 *PS = dV + dh * NV; /* nq x NV weights, then nq x NV score gradients */
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
            v16 *p = PS + i * NV, *ds = PS + (nq + i) * NV;
            for (int64_t u = 0; u < NV; ++u) {
                v16 a = bias[u], g = splat(-D);
                for (int d = 0; d < dh; ++d) { a += splat(scale * qi[d]) * K[d * NV + u]; g += splat(gi[d]) * V[d * NV + u]; }
                const v16 pu = vexp(a - l);
                p[u] = pu;
                ds[u] = pu * g;
            }
            float *dqi = dq + (b * nq + i) * h;
            for (int d0 = 0; d0 < dh; d0 += 16) {
                const int nd = dh - d0 < 16 ? dh - d0 : 16;
                v16 acc[16];
                float sums[16];
                for (int d = 0; d < nd; ++d) {
                    v16 a = splat(0.0f);
                    for (int64_t u = 0; u < NV; ++u) a += ds[u] * K[(d0 + d) * NV + u];
                    acc[d] = a;
                }
                hsum_many(acc, nd, sums);
                for (int d = 0; d < nd; ++d) dqi[d0 + d] = sums[d] * scale;
            }
        }
        /* dK[d][u] += sum_i ds_i[u] scale q_i[d], dV[d][u] += sum_i p_i[u] g_i[d], over i in order */
        const float *qb = q + b * nq * h, *gb = dout + b * nq * h;
        for (int64_t u = 0; u < NV; ++u)
            for (int d0 = 0; d0 < dh; d0 += 12) { /* 12 head columns at a time: 24 accumulators in registers */
                const int nd = dh - d0 < 12 ? dh - d0 : 12;
                v16 ak[12], av[12];
                for (int d = 0; d < nd; ++d) { ak[d] = dK[(d0 + d) * NV + u]; av[d] = dV[(d0 + d) * NV + u]; }
                for (int64_t i = 0; i < nq; ++i) {
                    const v16 dsu = PS[(nq + i) * NV + u], pu = PS[i * NV + u];
                    for (int d = 0; d < nd; ++d) {
                        ak[d] += dsu * splat(scale * qb[i * h + d0 + d]);
                        av[d] += pu * splat(gb[i * h + d0 + d]);
                    }
                }
                for (int d = 0; d < nd; ++d) { dK[(d0 + d) * NV + u] = ak[d]; dV[(d0 + d) * NV + u] = av[d]; }
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

/* dh and NV as compile-time constants for the head widths (4-24) and key counts (17-112) the configs use (the
 * loops unroll); others take the generic path */
#define DISPATCH_NV(CALL, DH)                           \
    switch (NV) {                                       \
    case 2: CALL(DH, 2); break;                         \
    case 3: CALL(DH, 3); break;                         \
    case 4: CALL(DH, 4); break;                         \
    case 5: CALL(DH, 5); break;                         \
    case 6: CALL(DH, 6); break;                         \
    case 7: CALL(DH, 7); break;                         \
    default: CALL(DH, NV); break;                       \
    }
#define DISPATCH(CALL)                                  \
    switch (dh) {                                       \
    case 4: DISPATCH_NV(CALL, 4); break;                \
    case 6: DISPATCH_NV(CALL, 6); break;                \
    case 8: DISPATCH_NV(CALL, 8); break;                \
    case 12: DISPATCH_NV(CALL, 12); break;              \
    case 24: DISPATCH_NV(CALL, 24); break;              \
    default: CALL((int)dh, NV); break;                  \
    }

int tsa_max_keys_f32(void) { return MAXNV * 16; }

void tsa_forward_f32(const float *q, const float *kv, const float *kve, float *o, float *lse, int64_t E, int64_t H,
                     int64_t B, int64_t nq, int64_t nk, int64_t m, int64_t dh, double scale, int nthreads) {
    const int64_t h = H * dh, NV = (nk + m + 15) / 16;
    #pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t w = 0; w < E * H; ++w) {
        const int64_t e = w / H, hh = w % H;
        v16 *buf = (v16 *)aligned_alloc(64, sizeof(v16) * (2 * dh + 1) * NV);
#define FWD(DH, NVC) fwd_item(q + e * B * nq * h + hh * dh, kv + e * B * nk * 2 * h + hh * dh, kve + e * m * 2 * h + hh * dh, \
                         o + e * B * nq * h + hh * dh, lse + w * B * nq, B, nq, nk, m, h, DH, NVC, (float)scale, buf)
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
        v16 *buf = (v16 *)aligned_alloc(64, sizeof(v16) * ((4 * dh + 1) * NV + 2 * nq * NV));
#define BWD(DH, NVC) bwd_item(dout + e * B * nq * h + hh * dh, q + e * B * nq * h + hh * dh,                              \
                         kv + e * B * nk * 2 * h + hh * dh, kve + e * m * 2 * h + hh * dh, o + e * B * nq * h + hh * dh, \
                         lse + w * B * nq, dq + e * B * nq * h + hh * dh, dkv + e * B * nk * 2 * h + hh * dh,        \
                         dkve + e * m * 2 * h + hh * dh, B, nq, nk, m, h, DH, NVC, (float)scale, buf)
        DISPATCH(BWD)
        free(buf);
    }
}

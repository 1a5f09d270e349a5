/* Fused kernels for the compressed store's exact re-rank (index/native.py is the Python side).
 *
 * Why C: in NumPy the re-rank of a block of 2,048 tokens is eight passes (nibble unpack, the
 * integer product, scale, offset, centroid gather, add, token scale, per-document max), each over
 * a fresh (2048, q) or (2048, 384) buffer, with the GIL held between them: 1.19 ms a block on a
 * 2-core AVX2 machine, of which the product is 0.50 ms; a second thread gained only 1.3-1.5x.
 * Here each token's 4-bit residual is unpacked in registers, multiplied by the query with AVX2's
 * u8 x s8 dot products, finished and max-reduced into its document's running maxima in one pass,
 * with the GIL released.
 *
 * Exactness: the integer dot products are exact (|partial| <= 8 * 2 * 15 * 127 < 2^15 in int16,
 * then int32), and each token's similarity is finished in float32 in the NumPy path's order
 * ((y * alpha + offset) + centroid score) * scale, without fused multiply-adds, so it is
 * bit-identical to the NumPy path's; only the final sum over query tokens may round differently.
 *
 * Documents are read where they lie, in the memory-mapped segments (no gather into a buffer:
 * in NumPy that copy was ~2 ms of a 160-document re-rank). Layouts (checked here):
 *   resid[s]  (n_s, nb) uint8: segment s's residuals, two 4-bit levels a byte; high nibble =
 *             dims 0, 2, 4, ..., low = 1, 3, ...
 *   codes[s]  (n_s,) uint16 or int32: centroid id of each token
 *   scale[s]  (n_s,) float32 or float16: 1 / |decoded token|; empty: 1 (version-1 segments)
 *   seg, start, length (ndocs,) int64: where each document's tokens are
 *   wp     (nb / 4, 2, njb, 8, 4) int8: the query's integer weights packed for the dot products:
 *          [group g, half h (0: high nibbles, 1: low), query block b, lane l, byte r] =
 *          w8[h * nb + 4 g + r, 8 b + l] (0 beyond q)
 *   alpha, offset (q,) float32; st (K, q) float32: query-centroid scores
 *   out    (ndocs,) float32: sum over query tokens of the document's best token similarity
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <stdint.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define SG_AVX2 1
#include <immintrin.h>
/* AVX-512 VNNI intrinsics: GCC 9+, clang 8+ (older compilers build the AVX2 path alone) */
#if (defined(__clang__) && __clang_major__ >= 8) || (!defined(__clang__) && __GNUC__ >= 9)
#define SG_VNNI 1
#endif
#endif

typedef struct {
    const uint8_t *resid; /* the document's first token's residual bytes */
    const void *codes;
    const void *scale; /* NULL: every token at scale 1 */
    int code_size;     /* 2 or 4 */
    int scale_size;    /* 2 (float16) or 4 */
    int64_t n;         /* tokens */
} doc_src;

typedef struct {
    const doc_src *docs;
    int64_t ndocs;
    int64_t nb;
    const int8_t *wp;
    const float *alpha;
    const float *offset;
    const float *st;
    int64_t q;
    float *out;
} rerank_args;

static inline int64_t code_at(const doc_src *d, int64_t t) {
    return d->code_size == 2 ? (int64_t)((const uint16_t *)d->codes)[t] : (int64_t)((const int32_t *)d->codes)[t];
}

/* IEEE half to float (exact; what NumPy's float16 -> float32 cast gives). */
static inline float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu, bits;
    if (exp == 0x1Fu) {
        bits = sign | 0x7F800000u | (man << 13);
    } else if (exp) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man) { /* subnormal: normalise */
        exp = 113u;
        while (!(man & 0x400u)) {
            man <<= 1;
            exp--;
        }
        bits = sign | (exp << 23) | ((man & 0x3FFu) << 13);
    } else {
        bits = sign;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline float scale_at(const doc_src *d, int64_t t) {
    if (!d->scale) return 1.0f;
    return d->scale_size == 2 ? half_to_float(((const uint16_t *)d->scale)[t]) : ((const float *)d->scale)[t];
}

/* Portable reference: the same arithmetic, one query token at a time. */
static void rerank_scalar(const rerank_args *a) {
    const int64_t nb = a->nb, q = a->q, njb = (q + 7) / 8;
    float best[8];
    for (int64_t d = 0; d < a->ndocs; d++) {
        const doc_src *src = &a->docs[d];
        float total = 0.0f;
        for (int64_t b = 0; b < njb; b++) {
            const int64_t lanes = q - 8 * b < 8 ? q - 8 * b : 8;
            for (int l = 0; l < 8; l++) best[l] = -FLT_MAX;
            for (int64_t t = 0; t < src->n; t++) {
                const uint8_t *r = src->resid + t * nb;
                const float *srow = a->st + code_at(src, t) * q;
                const float sc = scale_at(src, t);
                for (int64_t l = 0; l < lanes; l++) {
                    int32_t y = 0;
                    for (int64_t g = 0; g < nb / 4; g++) {
                        const int8_t *wh = a->wp + ((g * 2 + 0) * njb + b) * 32 + l * 4;
                        const int8_t *wl = a->wp + ((g * 2 + 1) * njb + b) * 32 + l * 4;
                        for (int k = 0; k < 4; k++) {
                            const uint8_t v = r[4 * g + k];
                            y += (int32_t)(v >> 4) * wh[k] + (int32_t)(v & 15) * wl[k];
                        }
                    }
                    const int64_t j = 8 * b + l;
                    float s = (float)y * a->alpha[j]; /* built with -ffp-contract=off: no FMA */
                    s = s + a->offset[j];
                    s = s + srow[j];
                    s = s * sc;
                    if (s > best[l]) best[l] = s;
                }
            }
            for (int64_t l = lanes; l < 8; l++) best[l] = 0.0f;
            total += ((best[0] + best[1]) + (best[2] + best[3])) + ((best[4] + best[5]) + (best[6] + best[7]));
        }
        a->out[d] = src->n ? total : 0.0f;
    }
}

#ifdef SG_AVX2
#define SG_TARGET __attribute__((target("avx2")))
#define SG_TARGET_VNNI __attribute__((target("avx2,avx512f,avx512vl,avx512vnni")))

/* One group (4 packed bytes: 8 dimensions) against NJB query blocks: int16 partial sums. */
#define SG_GROUP_AVX2(HI, LO, G)                                                                            \
    do {                                                                                                    \
        const int8_t *wh = wp + (((G) * 2 + 0) * njb + b0) * 32;                                            \
        const int8_t *wl = wp + (((G) * 2 + 1) * njb + b0) * 32;                                            \
        for (int i = 0; i < NJB; i++) {                                                                     \
            p[i] = _mm256_add_epi16(p[i], _mm256_maddubs_epi16(HI, _mm256_loadu_si256((const __m256i *)(wh + 32 * i)))); \
            p[i] = _mm256_add_epi16(p[i], _mm256_maddubs_epi16(LO, _mm256_loadu_si256((const __m256i *)(wl + 32 * i)))); \
        }                                                                                                   \
        /* keep the sums group by group: reassociated into one tree of 32 products, they spill */            \
        for (int i = 0; i < NJB; i++) __asm__("" : "+x"(p[i]));                                             \
    } while (0)

/* The integer products of one token's residual with NJB query blocks (8 query tokens each).
 * Four groups' nibbles are split with three vector instructions and each group's dword is
 * broadcast by an in-lane shuffle: ~10 scalar and broadcast instructions a group fewer than
 * unpacking each group in a general register (the loop is bound by instruction count more than
 * by the multiplies; docs/benchmarks.md, "The in-memory catalog, faster re-rank kernels"). */
SG_TARGET static inline __attribute__((always_inline)) void token_dots_avx2(const uint8_t *r, int64_t nb, const int8_t *wp,
                                                                             int64_t njb, int64_t b0, int NJB, __m256i *acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const int64_t ng = nb / 4;
    for (int i = 0; i < NJB; i++) acc[i] = _mm256_setzero_si256();
    int64_t g0 = 0;
    /* int16 partial sums of 4 groups x 2 halves: |each maddubs lane| <= 2 * 15 * 127 */
    for (; g0 + 4 <= ng; g0 += 4) {
        const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(r + 4 * g0)));
        const __m256i lo = _mm256_and_si256(v, low4);                         /* byte j: r[j] & 15 */
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);  /* byte j: r[j] >> 4 */
        __m256i p[4];
        for (int i = 0; i < NJB; i++) p[i] = _mm256_setzero_si256();
        SG_GROUP_AVX2(_mm256_shuffle_epi32(hi, 0x00), _mm256_shuffle_epi32(lo, 0x00), g0 + 0);
        SG_GROUP_AVX2(_mm256_shuffle_epi32(hi, 0x55), _mm256_shuffle_epi32(lo, 0x55), g0 + 1);
        SG_GROUP_AVX2(_mm256_shuffle_epi32(hi, 0xAA), _mm256_shuffle_epi32(lo, 0xAA), g0 + 2);
        SG_GROUP_AVX2(_mm256_shuffle_epi32(hi, 0xFF), _mm256_shuffle_epi32(lo, 0xFF), g0 + 3);
        for (int i = 0; i < NJB; i++) acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(p[i], ones));
    }
    if (g0 < ng) { /* fewer than 4 groups left (a dimension not a multiple of 32) */
        __m256i p[4];
        for (int i = 0; i < NJB; i++) p[i] = _mm256_setzero_si256();
        for (int64_t g = g0; g < ng; g++) {
            uint32_t x;
            memcpy(&x, r + 4 * g, 4);
            const __m256i hi = _mm256_set1_epi32((int)((x >> 4) & 0x0F0F0F0Fu));
            const __m256i lo = _mm256_set1_epi32((int)(x & 0x0F0F0F0Fu));
            SG_GROUP_AVX2(hi, lo, g);
        }
        for (int i = 0; i < NJB; i++) acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(p[i], ones));
    }
}

#ifdef SG_VNNI
/* The same products with VNNI's u8 x s8 four-way dot into int32 (one instruction where AVX2
 * needs maddubs + add and a madd every 4 groups): the same integers. Nibbles split and
 * broadcast as in the AVX2 path, four groups at a time, into four accumulators per query block
 * (high / low nibbles x even / odd groups): with one, each vpdpbusd waited for the previous
 * one's result (5 cycles) and the loop ran at the latency, not at two a cycle. */
#define SG_GROUP_VNNI(HI, LO, G, AH, AL)                                                                    \
    do {                                                                                                    \
        const int8_t *wh = wp + (((G) * 2 + 0) * njb + b0) * 32;                                            \
        const int8_t *wl = wp + (((G) * 2 + 1) * njb + b0) * 32;                                            \
        for (int i = 0; i < NJB; i++) {                                                                     \
            AH[i] = _mm256_dpbusd_epi32(AH[i], HI, _mm256_loadu_si256((const __m256i *)(wh + 32 * i)));     \
            AL[i] = _mm256_dpbusd_epi32(AL[i], LO, _mm256_loadu_si256((const __m256i *)(wl + 32 * i)));     \
        }                                                                                                   \
    } while (0)

SG_TARGET_VNNI static inline __attribute__((always_inline)) void token_dots_vnni(const uint8_t *r, int64_t nb, const int8_t *wp,
                                                                                  int64_t njb, int64_t b0, int NJB, __m256i *acc) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const int64_t ng = nb / 4;
    __m256i h0[4], l0[4], h1[4], l1[4];
    for (int i = 0; i < NJB; i++) h0[i] = l0[i] = h1[i] = l1[i] = _mm256_setzero_si256();
    int64_t g = 0;
    for (; g + 4 <= ng; g += 4) {
        const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(r + 4 * g)));
        const __m256i lo = _mm256_and_si256(v, low4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        SG_GROUP_VNNI(_mm256_shuffle_epi32(hi, 0x00), _mm256_shuffle_epi32(lo, 0x00), g + 0, h0, l0);
        SG_GROUP_VNNI(_mm256_shuffle_epi32(hi, 0x55), _mm256_shuffle_epi32(lo, 0x55), g + 1, h1, l1);
        SG_GROUP_VNNI(_mm256_shuffle_epi32(hi, 0xAA), _mm256_shuffle_epi32(lo, 0xAA), g + 2, h0, l0);
        SG_GROUP_VNNI(_mm256_shuffle_epi32(hi, 0xFF), _mm256_shuffle_epi32(lo, 0xFF), g + 3, h1, l1);
    }
    for (; g < ng; g++) {
        uint32_t x;
        memcpy(&x, r + 4 * g, 4);
        const __m256i hi = _mm256_set1_epi32((int)((x >> 4) & 0x0F0F0F0Fu));
        const __m256i lo = _mm256_set1_epi32((int)(x & 0x0F0F0F0Fu));
        SG_GROUP_VNNI(hi, lo, g, h0, l0);
    }
    for (int i = 0; i < NJB; i++)
        acc[i] = _mm256_add_epi32(_mm256_add_epi32(h0[i], l0[i]), _mm256_add_epi32(h1[i], l1[i]));
}

#endif

/* One pass over the documents' tokens for NJB query blocks; a copy per instruction set. */
#define SG_RERANK_VARIANT(SUFFIX, TARGET)                                                                    \
    TARGET static inline __attribute__((always_inline)) void rerank_blocks_##SUFFIX(const rerank_args *a,     \
                                                                                    int64_t b0, int NJB) {    \
        const int64_t nb = a->nb, q = a->q, njb = (q + 7) / 8;                                                \
        __m256 al[4], of[4];                                                                                  \
        __m256i mask[4];                                                                                      \
        for (int i = 0; i < NJB; i++) {                                                                       \
            const int64_t j0 = 8 * (b0 + i);                                                                  \
            int32_t m[8];                                                                                     \
            float av[8], ov[8];                                                                               \
            for (int l = 0; l < 8; l++) {                                                                     \
                m[l] = j0 + l < q ? -1 : 0;                                                                   \
                av[l] = j0 + l < q ? a->alpha[j0 + l] : 0.0f;                                                 \
                ov[l] = j0 + l < q ? a->offset[j0 + l] : 0.0f;                                                \
            }                                                                                                 \
            mask[i] = _mm256_loadu_si256((const __m256i *)m);                                                 \
            al[i] = _mm256_loadu_ps(av);                                                                      \
            of[i] = _mm256_loadu_ps(ov);                                                                      \
        }                                                                                                     \
        for (int64_t d = 0; d < a->ndocs; d++) {                                                              \
            const doc_src *src = &a->docs[d];                                                                 \
            __m256 best[4];                                                                                   \
            for (int i = 0; i < NJB; i++) best[i] = _mm256_set1_ps(-FLT_MAX);                                 \
            for (int64_t t = 0; t < src->n; t++) {                                                            \
                __m256i acc[4];                                                                               \
                token_dots_##SUFFIX(src->resid + t * nb, nb, a->wp, njb, b0, NJB, acc);                       \
                const float *srow = a->st + code_at(src, t) * q + 8 * b0;                                     \
                const __m256 sc = _mm256_set1_ps(scale_at(src, t));                                           \
                for (int i = 0; i < NJB; i++) {                                                               \
                    __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(acc[i]), al[i]);                              \
                    s = _mm256_add_ps(s, of[i]);                                                              \
                    s = _mm256_add_ps(s, _mm256_maskload_ps(srow + 8 * i, mask[i]));                          \
                    s = _mm256_mul_ps(s, sc);                                                                 \
                    best[i] = _mm256_max_ps(best[i], s);                                                      \
                }                                                                                             \
            }                                                                                                 \
            float total = 0.0f;                                                                               \
            if (src->n) {                                                                                     \
                for (int i = 0; i < NJB; i++) {                                                               \
                    float v[8];                                                                               \
                    _mm256_storeu_ps(v, _mm256_and_ps(best[i], _mm256_castsi256_ps(mask[i])));                \
                    total += ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));               \
                }                                                                                             \
            }                                                                                                 \
            a->out[d] += total;                                                                               \
        }                                                                                                     \
    }                                                                                                         \
    TARGET static void rerank_##SUFFIX(const rerank_args *a) {                                                \
        const int64_t njb = (a->q + 7) / 8;                                                                   \
        for (int64_t d = 0; d < a->ndocs; d++) a->out[d] = 0.0f;                                              \
        /* up to 4 query blocks (32 query tokens) per pass over the documents' tokens */                      \
        for (int64_t b0 = 0; b0 < njb; b0 += 4) {                                                             \
            switch (njb - b0 < 4 ? njb - b0 : 4) {                                                            \
                case 1: rerank_blocks_##SUFFIX(a, b0, 1); break;                                              \
                case 2: rerank_blocks_##SUFFIX(a, b0, 2); break;                                              \
                case 3: rerank_blocks_##SUFFIX(a, b0, 3); break;                                              \
                default: rerank_blocks_##SUFFIX(a, b0, 4); break;                                             \
            }                                                                                                 \
        }                                                                                                     \
    }

SG_RERANK_VARIANT(avx2, SG_TARGET)
#ifdef SG_VNNI
SG_RERANK_VARIANT(vnni, SG_TARGET_VNNI)
#endif

static int have_avx2(void) {
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return cached;
}

static int have_vnni(void) {
#ifdef SG_VNNI
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = have_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                 __builtin_cpu_supports("avx512vnni");
    }
    return cached;
#else
    return 0;
#endif
}
#endif

/* PLAID centroid interaction: out[d] = sum over query tokens of max over the document's tokens of
 * st[code, j] (no residual). Summed like the re-rank: blocks of 8 query tokens, pairwise. */
static void interaction_scalar(const rerank_args *a) {
    const int64_t q = a->q, njb = (q + 7) / 8;
    float best[8];
    for (int64_t d = 0; d < a->ndocs; d++) {
        const doc_src *src = &a->docs[d];
        float total = 0.0f;
        for (int64_t b = 0; b < njb; b++) {
            const int64_t lanes = q - 8 * b < 8 ? q - 8 * b : 8;
            for (int l = 0; l < 8; l++) best[l] = lanes > l ? -FLT_MAX : 0.0f;
            for (int64_t t = 0; t < src->n; t++) {
                const float *srow = a->st + code_at(src, t) * q + 8 * b;
                for (int64_t l = 0; l < lanes; l++) best[l] = srow[l] > best[l] ? srow[l] : best[l];
            }
            total += ((best[0] + best[1]) + (best[2] + best[3])) + ((best[4] + best[5]) + (best[6] + best[7]));
        }
        a->out[d] = src->n ? total : 0.0f;
    }
}

#ifdef SG_AVX2
SG_TARGET static void interaction_avx2(const rerank_args *a) {
    const int64_t q = a->q, njb = (q + 7) / 8;
    for (int64_t d = 0; d < a->ndocs; d++) {
        const doc_src *src = &a->docs[d];
        float total = 0.0f;
        for (int64_t b = 0; b < njb; b++) {
            int32_t m[8];
            for (int l = 0; l < 8; l++) m[l] = 8 * b + l < q ? -1 : 0;
            const __m256i mask = _mm256_loadu_si256((const __m256i *)m);
            __m256 best = _mm256_set1_ps(-FLT_MAX);
            for (int64_t t = 0; t < src->n; t++)
                best = _mm256_max_ps(best, _mm256_maskload_ps(a->st + code_at(src, t) * q + 8 * b, mask));
            float v[8];
            _mm256_storeu_ps(v, _mm256_and_ps(best, _mm256_castsi256_ps(mask)));
            total += ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
        }
        a->out[d] = src->n ? total : 0.0f;
    }
}
#endif

static int force_scalar = 0;

/* Buffers of one segment's arrays, acquired for the call. */
typedef struct {
    Py_buffer resid, codes, scale;
    int has_scale;
} seg_bufs;

static int get_buffer(PyObject *obj, Py_buffer *view, int writable, const char *name) {
    if (PyObject_GetBuffer(obj, view, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Format(PyExc_ValueError, "_kernels: %s is not a contiguous array", name);
        return -1;
    }
    return 0;
}

/* Point ds at tokens start .. start + length of segment seg's centroid ids (seg_codes[seg], with a
 * stride of `stride` bytes between segments' buffers), checking the segment, the range and every
 * id against n_centroids: -1 with a ValueError naming fn. */
static int doc_codes(doc_src *ds, const char *fn, const Py_buffer *seg_codes, size_t stride, Py_ssize_t nseg,
                     int64_t seg, int64_t start, int64_t length, int64_t n_centroids) {
    if (seg < 0 || seg >= nseg) {
        PyErr_Format(PyExc_ValueError, "%s: segment index out of range", fn);
        return -1;
    }
    const Py_buffer *cb = (const Py_buffer *)((const char *)seg_codes + (size_t)seg * stride);
    if (start < 0 || length < 0 || start + length > cb->len / cb->itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: document tokens out of range", fn);
        return -1;
    }
    ds->code_size = (int)cb->itemsize;
    ds->codes = (const char *)cb->buf + start * cb->itemsize;
    ds->n = length;
    for (int64_t t = 0; t < length; t++) {
        const int64_t c = code_at(ds, t);
        if (c < 0 || c >= n_centroids) {
            PyErr_Format(PyExc_ValueError, "%s: centroid id out of range", fn);
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(rerank_nibbles_doc,
"rerank_nibbles(resid, codes, scale, seg, start, length, wp, alpha, offset, st, out)\n\n"
"Exact MaxSim of documents from their 4-bit residuals, read in place from the segments' arrays\n"
"(resid, codes, scale: sequences with one array per segment; layouts in _kernels.c).");

static PyObject *rerank_nibbles(PyObject *self, PyObject *args) {
    PyObject *resid_l, *codes_l, *scale_l, *o[8];
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOO", &resid_l, &codes_l, &scale_l, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &o[6], &o[7]))
        return NULL;
    static const char *names[8] = {"seg", "start", "length", "wp", "alpha", "offset", "st", "out"};
    Py_buffer b[8];
    seg_bufs *segs = NULL;
    doc_src *docs = NULL;
    Py_ssize_t nseg = -1, nseg_got = 0;
    int got = 0;
    PyObject *result = NULL;
    PyObject *rs = PySequence_Fast(resid_l, "resid must be a sequence"), *cs = NULL, *ss = NULL;
    if (!rs) return NULL;
    cs = PySequence_Fast(codes_l, "codes must be a sequence");
    if (!cs) goto done;
    ss = PySequence_Fast(scale_l, "scale must be a sequence");
    if (!ss) goto done;
    nseg = PySequence_Fast_GET_SIZE(rs);
    if (PySequence_Fast_GET_SIZE(cs) != nseg || PySequence_Fast_GET_SIZE(ss) != nseg) {
        PyErr_SetString(PyExc_ValueError, "rerank_nibbles: one resid, codes and scale array per segment");
        goto done;
    }
    for (; got < 8; got++)
        if (get_buffer(o[got], &b[got], got == 7, names[got]) < 0) goto done;
    const int64_t ndocs = b[0].len / 8, q = b[4].len / 4;
    if (b[0].itemsize != 8 || b[1].itemsize != 8 || b[2].itemsize != 8 || b[1].len != b[0].len ||
        b[2].len != b[0].len || b[4].itemsize != 4 || b[5].len != b[4].len || b[6].itemsize != 4 ||
        b[7].itemsize != 4 || b[7].len != ndocs * 4 || q == 0 || b[6].len % (q * 4)) {
        PyErr_SetString(PyExc_ValueError, "rerank_nibbles: inconsistent array sizes");
        goto done;
    }
    const int64_t n_centroids = b[6].len / 4 / q, njb = (q + 7) / 8;
    segs = PyMem_Calloc(nseg ? nseg : 1, sizeof(seg_bufs));
    docs = PyMem_Calloc(ndocs ? ndocs : 1, sizeof(doc_src));
    if (!segs || !docs) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t nb = -1;
    for (; nseg_got < nseg; nseg_got++) {
        seg_bufs *sb = &segs[nseg_got];
        if (get_buffer(PySequence_Fast_GET_ITEM(rs, nseg_got), &sb->resid, 0, "resid") < 0) goto done;
        if (get_buffer(PySequence_Fast_GET_ITEM(cs, nseg_got), &sb->codes, 0, "codes") < 0) {
            PyBuffer_Release(&sb->resid);
            goto done;
        }
        PyObject *sc = PySequence_Fast_GET_ITEM(ss, nseg_got);
        sb->has_scale = sc != Py_None;
        if (sb->has_scale && get_buffer(sc, &sb->scale, 0, "scale") < 0) {
            PyBuffer_Release(&sb->resid);
            PyBuffer_Release(&sb->codes);
            goto done;
        }
        const Py_ssize_t n = sb->codes.itemsize ? sb->codes.len / sb->codes.itemsize : 0;
        const int64_t seg_nb = sb->resid.ndim == 2 ? sb->resid.shape[1] : -1;
        if ((sb->codes.itemsize != 2 && sb->codes.itemsize != 4) || sb->resid.itemsize != 1 || seg_nb < 0 ||
            sb->resid.shape[0] != n || (nb >= 0 && seg_nb != nb) ||
            (sb->has_scale && ((sb->scale.itemsize != 2 && sb->scale.itemsize != 4) || sb->scale.len != n * sb->scale.itemsize))) {
            nseg_got++;
            PyErr_SetString(PyExc_ValueError, "rerank_nibbles: a segment's arrays disagree");
            goto done;
        }
        nb = seg_nb;
    }
    if (nb < 0 || nb % 4 || b[3].len != (nb / 4) * 2 * njb * 32) {
        PyErr_SetString(PyExc_ValueError, "rerank_nibbles: weights do not match the residual width");
        goto done;
    }
    const int64_t *seg = b[0].buf, *start = b[1].buf, *length = b[2].buf;
    for (int64_t d = 0; d < ndocs; d++) {
        doc_src *ds = &docs[d];
        if (doc_codes(ds, "rerank_nibbles", &segs[0].codes, sizeof(seg_bufs), nseg, seg[d], start[d], length[d],
                      n_centroids) < 0)
            goto done;
        const seg_bufs *sb = &segs[seg[d]];
        ds->resid = (const uint8_t *)sb->resid.buf + start[d] * nb;
        ds->scale_size = sb->has_scale ? (int)sb->scale.itemsize : 0;
        ds->scale = sb->has_scale ? (const char *)sb->scale.buf + start[d] * sb->scale.itemsize : NULL;
    }
    {
        rerank_args a = {docs, ndocs, nb, b[3].buf, b[4].buf, b[5].buf, b[6].buf, q, b[7].buf};
        Py_BEGIN_ALLOW_THREADS
#ifdef SG_AVX2
#ifdef SG_VNNI
        if (!force_scalar && have_vnni())
            rerank_vnni(&a);
        else
#endif
        if (!force_scalar && have_avx2())
            rerank_avx2(&a);
        else
#endif
            rerank_scalar(&a);
        Py_END_ALLOW_THREADS
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    for (Py_ssize_t k = 0; k < nseg_got; k++) {
        PyBuffer_Release(&segs[k].resid);
        PyBuffer_Release(&segs[k].codes);
        if (segs[k].has_scale) PyBuffer_Release(&segs[k].scale);
    }
    for (int k = 0; k < got; k++) PyBuffer_Release(&b[k]);
    PyMem_Free(segs);
    PyMem_Free(docs);
    Py_XDECREF(rs);
    Py_XDECREF(cs);
    Py_XDECREF(ss);
    return result;
}

PyDoc_STRVAR(centroid_interaction_doc,
"centroid_interaction(codes, seg, start, length, st, out)\n\n"
"PLAID centroid interaction of documents read in place from the segments' centroid ids:\n"
"out[d] = sum over query tokens of max over the document's tokens of st[code, j].");

static PyObject *centroid_interaction(PyObject *self, PyObject *args) {
    PyObject *codes_l, *o[5];
    if (!PyArg_ParseTuple(args, "OOOOOO", &codes_l, &o[0], &o[1], &o[2], &o[3], &o[4])) return NULL;
    static const char *names[5] = {"seg", "start", "length", "st", "out"};
    Py_buffer b[5], *codes = NULL;
    doc_src *docs = NULL;
    Py_ssize_t nseg = 0, nseg_got = 0;
    int got = 0;
    PyObject *result = NULL;
    PyObject *cs = PySequence_Fast(codes_l, "codes must be a sequence");
    if (!cs) return NULL;
    nseg = PySequence_Fast_GET_SIZE(cs);
    for (; got < 5; got++)
        if (get_buffer(o[got], &b[got], got == 4, names[got]) < 0) goto done;
    const int64_t ndocs = b[0].len / 8;
    const int64_t q = b[3].ndim == 2 ? b[3].shape[1] : 0, n_centroids = b[3].ndim == 2 ? b[3].shape[0] : 0;
    if (b[0].itemsize != 8 || b[1].itemsize != 8 || b[2].itemsize != 8 || b[1].len != b[0].len ||
        b[2].len != b[0].len || b[3].itemsize != 4 || q == 0 || b[4].itemsize != 4 || b[4].len != ndocs * 4) {
        PyErr_SetString(PyExc_ValueError, "centroid_interaction: inconsistent array sizes");
        goto done;
    }
    codes = PyMem_Calloc(nseg ? nseg : 1, sizeof(Py_buffer));
    docs = PyMem_Calloc(ndocs ? ndocs : 1, sizeof(doc_src));
    if (!codes || !docs) {
        PyErr_NoMemory();
        goto done;
    }
    for (; nseg_got < nseg; nseg_got++) {
        if (get_buffer(PySequence_Fast_GET_ITEM(cs, nseg_got), &codes[nseg_got], 0, "codes") < 0) goto done;
        if (codes[nseg_got].itemsize != 2 && codes[nseg_got].itemsize != 4) {
            nseg_got++;
            PyErr_SetString(PyExc_ValueError, "centroid_interaction: centroid ids must be uint16 or int32");
            goto done;
        }
    }
    const int64_t *seg = b[0].buf, *start = b[1].buf, *length = b[2].buf;
    for (int64_t d = 0; d < ndocs; d++) {
        if (doc_codes(&docs[d], "centroid_interaction", codes, sizeof(Py_buffer), nseg, seg[d], start[d], length[d],
                      n_centroids) < 0)
            goto done;
    }
    {
        rerank_args a = {docs, ndocs, 0, NULL, NULL, NULL, b[3].buf, q, b[4].buf};
        Py_BEGIN_ALLOW_THREADS
#ifdef SG_AVX2
        if (!force_scalar && have_avx2())
            interaction_avx2(&a);
        else
#endif
            interaction_scalar(&a);
        Py_END_ALLOW_THREADS
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    for (Py_ssize_t k = 0; k < nseg_got; k++) PyBuffer_Release(&codes[k]);
    for (int k = 0; k < got; k++) PyBuffer_Release(&b[k]);
    PyMem_Free(codes);
    PyMem_Free(docs);
    Py_XDECREF(cs);
    return result;
}

PyDoc_STRVAR(candidates_doc,
"candidates(ivf, ivf_off, base, probes, vals, cur, acc, keep, impute_total, cand, score) -> n\n\n"
"WARP-style candidate generation (CompressedStore._candidates): for each query token, each\n"
"document's best value over the token's probed centroids' inverted lists, summed; the touched\n"
"documents that keep allows written to cand / score in document order.");

/* For query token j: cur[doc] = max over its probes' lists holding doc of vals[j, p] (> 0), then
 * acc[doc] += cur[doc] and cur back to 0. Token by token, in order: the float32 sums are the
 * NumPy path's exactly (adding 0 for an untouched document changes nothing). Then each touched
 * document (acc > 0) that keep allows is written out with score (float)((double)acc +
 * impute_total), as NumPy computed it, and acc goes back to 0: cur and acc are left zeroed. */
static PyObject *candidates(PyObject *self, PyObject *args) {
    PyObject *ivf_l, *off_l, *o[8];
    double impute_total;
    if (!PyArg_ParseTuple(args, "OOOOOOOOdOO", &ivf_l, &off_l, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &impute_total, &o[6], &o[7]))
        return NULL;
    static const char *names[8] = {"base", "probes", "vals", "cur", "acc", "keep", "cand", "score"};
    Py_buffer b[8], *ivf = NULL, *off = NULL;
    Py_ssize_t nseg = 0, nseg_got = 0;
    int got = 0;
    int64_t *touched = NULL;
    PyObject *result = NULL;
    PyObject *is = PySequence_Fast(ivf_l, "ivf must be a sequence"), *os = NULL;
    if (!is) return NULL;
    os = PySequence_Fast(off_l, "ivf_off must be a sequence");
    if (!os) goto done;
    nseg = PySequence_Fast_GET_SIZE(is);
    if (PySequence_Fast_GET_SIZE(os) != nseg) {
        PyErr_SetString(PyExc_ValueError, "candidates: one ivf and ivf_off array per segment");
        goto done;
    }
    for (; got < 8; got++)
        if (get_buffer(o[got], &b[got], got == 3 || got == 4 || got >= 6, names[got]) < 0) goto done;
    const int64_t n_docs = b[4].len / 4;
    const int64_t nprobe = b[1].ndim == 2 ? b[1].shape[1] : 0, q = b[1].ndim == 2 ? b[1].shape[0] : 0;
    if (b[0].itemsize != 8 || b[0].len != nseg * 8 || b[1].itemsize != 8 || b[2].itemsize != 4 ||
        b[2].len != b[1].len / 2 || b[3].itemsize != 4 || b[3].len != b[4].len || b[4].itemsize != 4 ||
        b[5].itemsize != 1 || b[5].len != n_docs || b[6].itemsize != 8 || b[6].len != n_docs * 8 ||
        b[7].itemsize != 4 || b[7].len != n_docs * 4) {
        PyErr_SetString(PyExc_ValueError, "candidates: inconsistent array sizes");
        goto done;
    }
    ivf = PyMem_Calloc(nseg ? nseg : 1, sizeof(Py_buffer));
    off = PyMem_Calloc(nseg ? nseg : 1, sizeof(Py_buffer));
    if (!ivf || !off) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *base = b[0].buf;
    for (; nseg_got < nseg; nseg_got++) {
        if (get_buffer(PySequence_Fast_GET_ITEM(is, nseg_got), &ivf[nseg_got], 0, "ivf") < 0) goto done;
        if (get_buffer(PySequence_Fast_GET_ITEM(os, nseg_got), &off[nseg_got], 0, "ivf_off") < 0) {
            PyBuffer_Release(&ivf[nseg_got]);
            goto done;
        }
        /* the lists' entries are checked as they are read (the whole index is too large to
           check on every search) */
        if (ivf[nseg_got].itemsize != 4 || off[nseg_got].itemsize != 8 || off[nseg_got].len < 8 || base[nseg_got] < 0) {
            nseg_got++;
            PyErr_SetString(PyExc_ValueError, "candidates: a segment's inverted lists have the wrong types");
            goto done;
        }
    }
    touched = PyMem_Malloc((n_docs ? n_docs : 1) * sizeof(int64_t));
    if (!touched) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t si = 0; si < nseg; si++) {
        if (base[si] > n_docs || (si && base[si] < base[si - 1])) {
            PyErr_SetString(PyExc_ValueError, "candidates: segment bases out of order");
            goto done;
        }
    }
    const int64_t *probes = b[1].buf;
    const float *vals = b[2].buf;
    float *cur = b[3].buf, *acc = b[4].buf, *score = b[7].buf;
    const uint8_t *keep = b[5].buf;
    int64_t *cand = b[6].buf, n_cand = 0;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    /* Segment by segment (a document's entries are all in its own segment, so its sums still
       add token by token): the segment's lists, offsets and documents' sums stay in the cache.
       Query token first over 244 segments (1M chunks) was 1.2x slower than NumPy, every
       (probe, segment) pair a cache miss. */
    for (Py_ssize_t si = 0; si < nseg && !bad; si++) {
        const int64_t *ov = off[si].buf;
        const int64_t n_off = off[si].len / 8, n_ivf = ivf[si].len / 4, bs = base[si];
        const int32_t *dv = (const int32_t *)ivf[si].buf;
        /* the segment's documents: base[si] .. the next base */
        const int64_t end = si + 1 < nseg ? base[si + 1] : n_docs, seg_docs = end - bs;
        for (int64_t j = 0; j < q && !bad; j++) {
            int64_t nt = 0;
            for (int64_t p = 0; p < nprobe; p++) {
                const int64_t c = probes[j * nprobe + p];
                const float v = vals[j * nprobe + p];
                if (c < 0 || c + 1 >= n_off) continue; /* centroid newer than the segment */
                if (ov[c] < 0 || ov[c] > ov[c + 1] || ov[c + 1] > n_ivf) {
                    bad = 1;
                    break;
                }
                for (int64_t k = ov[c]; k < ov[c + 1]; k++) {
                    if ((uint64_t)(int64_t)dv[k] >= (uint64_t)seg_docs) { /* not this segment's */
                        bad = 1;
                        break;
                    }
                    const int64_t g = bs + dv[k];
                    const float was = cur[g];
                    if (was == 0.0f) {
                        touched[nt++] = g;
                        cur[g] = v;
                    } else if (v > was) {
                        cur[g] = v;
                    }
                }
            }
            for (int64_t k = 0; k < nt; k++) {
                const int64_t g = touched[k];
                acc[g] += cur[g];
                cur[g] = 0.0f;
            }
        }
        /* the segment's touched documents, in order; branch-free (about half the documents of
           a 1M-chunk index are touched: a branch per document mispredicted every other time) */
        if (!bad) {
            for (int64_t g = bs; g < end; g++) {
                const float a = acc[g];
                cand[n_cand] = g;
                score[n_cand] = (float)((double)a + impute_total);
                n_cand += (a > 0.0f) & (keep[g] != 0);
                acc[g] = 0.0f;
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "candidates: an inverted list points outside the index");
        goto done;
    }
    result = PyLong_FromLongLong(n_cand);
done:
    for (Py_ssize_t k = 0; k < nseg_got; k++) {
        PyBuffer_Release(&ivf[k]);
        PyBuffer_Release(&off[k]);
    }
    for (int k = 0; k < got; k++) PyBuffer_Release(&b[k]);
    PyMem_Free(ivf);
    PyMem_Free(off);
    PyMem_Free(touched);
    Py_XDECREF(is);
    Py_XDECREF(os);
    return result;
}

static PyObject *simd(PyObject *self, PyObject *args) {
#ifdef SG_AVX2
    if (!force_scalar && have_vnni()) return PyUnicode_FromString("avx512vnni");
    if (!force_scalar && have_avx2()) return PyUnicode_FromString("avx2");
#endif
    return PyUnicode_FromString("scalar");
}

static PyObject *set_scalar(PyObject *self, PyObject *arg) {
    force_scalar = PyObject_IsTrue(arg);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"rerank_nibbles", rerank_nibbles, METH_VARARGS, rerank_nibbles_doc},
    {"candidates", candidates, METH_VARARGS, candidates_doc},
    {"centroid_interaction", centroid_interaction, METH_VARARGS, centroid_interaction_doc},
    {"simd", simd, METH_NOARGS, "The instruction set the kernels use: 'avx2' or 'scalar'."},
    {"set_scalar", set_scalar, METH_O, "Force the portable kernels (tests compare both)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels", "Fused re-rank kernels.", -1, methods};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }

// The independent reference of tests/runtime/test_fsdp_copy.c: random parameter groups,
// where torch.chunk puts every element of a group (computed from the shapes alone, or
// deliberately wrong for the control), and the byte buffers the checks compare. Static
// functions: included by that one test only.
#ifndef FSDP_COPY_REF_H
#define FSDP_COPY_REF_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rt_dtype.h"
#include "rt_fsdp.h"

#define MAXP 6

// ---- random groups ----------------------------------------------------------------------

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint32_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static int uniform(int lo, int hi) { return lo + (int)(next() % (uint32_t)(hi - lo + 1)); }

typedef struct group {
    int n;
    rt_fsdp_param_desc d[MAXP];
    char names[MAXP][16];
} group;

static void random_group(group* g, int largest_dim, int world) {
    g->n = uniform(1, MAXP);
    for (int i = 0; i < g->n; i++) {
        rt_fsdp_param_desc* d = &g->d[i];
        snprintf(g->names[i], sizeof g->names[i], "p%d", i);
        d->name = g->names[i];
        d->ndim = uniform(1, 3);
        for (int k = 0; k < d->ndim; k++) d->shape[k] = uniform(1, 9);
        d->placement = largest_dim ? RT_SHARD_LARGEST_DIM : RT_SHARD_DIM0;
        if (largest_dim) {
            // Shard(d > 0) must divide evenly: make the largest dim a multiple of world.
            int best = 0;
            for (int k = 1; k < d->ndim; k++)
                if (d->shape[k] > d->shape[best]) best = k;
            if (best > 0) d->shape[best] = world * uniform(2, 4);
        }
    }
}

// ---- the reference ----------------------------------------------------------------------

static int wrong = 0;  // the control: a plausible but wrong sharding

// One group's geometry as one rank sees it, from the shapes alone. Sharded: each parameter
// is (outer, D, inner) around its shard dim, chunk = ceil(D / world) rows per rank, each
// rank's padded shard outer * chunk * inner elements (`piece`). Post-forward: the padded
// dim-0 parameter (chunk rows of the shard group times its size) cut into pf_world flat
// pieces. Pieces sit back to back in a rank block (`off`).
typedef struct geo {
    int n, world, pf;
    int64_t numel[MAXP], outer[MAXP], d[MAXP], inner[MAXP], chunk[MAXP], piece[MAXP], off[MAXP];
    int64_t block;
} geo;

static void geometry(geo* G, const group* g, int world, int shard_world, int pf) {
    memset(G, 0, sizeof *G);
    G->n = g->n, G->world = world, G->pf = pf;
    for (int i = 0; i < g->n; i++) {
        const rt_fsdp_param_desc* d = &g->d[i];
        int sd = 0;
        if (d->placement == RT_SHARD_LARGEST_DIM)
            for (int k = 1; k < d->ndim; k++)
                if (d->shape[k] > d->shape[sd]) sd = k;
        G->outer[i] = G->inner[i] = 1;
        for (int k = 0; k < sd; k++) G->outer[i] *= d->shape[k];
        for (int k = sd + 1; k < d->ndim; k++) G->inner[i] *= d->shape[k];
        G->d[i] = d->shape[sd];
        G->numel[i] = G->outer[i] * G->d[i] * G->inner[i];
        G->chunk[i] = (G->d[i] + shard_world - 1) / shard_world;
        G->piece[i] = G->outer[i] * G->chunk[i] * G->inner[i];
        if (pf) G->piece[i] = G->piece[i] * shard_world / world;
        G->off[i] = G->block;
        G->block += G->piece[i];
    }
}

// The rank holding row r of D rows over W ranks and the row's index there: torch.chunk
// (ceil(D / W) rows each, the last ranks short or empty); wrong: np.array_split (the first
// D % W ranks one row more than the others).
static int owner(int64_t D, int64_t chunk, int W, int64_t r, int64_t* local) {
    if (!wrong) {
        *local = r % chunk;
        return (int)(r / chunk);
    }
    int64_t base = D / W, extra = D % W;
    if (r < extra * (base + 1)) {
        *local = r % (base + 1);
        return (int)(r / (base + 1));
    }
    r -= extra * (base + 1);
    *local = r % base;
    return (int)(extra + r / base);
}

// Element e (row-major) of parameter i: the rank whose piece holds it (its return) and its
// place in that padded piece.
static int place(const geo* G, int i, int64_t e, int64_t* pos) {
    if (G->pf) {  // flat slices of the padded parameter (wrong: dealt round-robin)
        *pos = wrong ? e / G->world : e % G->piece[i];
        return (int)(wrong ? e % G->world : e / G->piece[i]);
    }
    int64_t k = e % G->inner[i], r = e / G->inner[i] % G->d[i];
    int64_t o = e / (G->inner[i] * G->d[i]), local;
    int q = owner(G->d[i], G->chunk[i], G->world, r, &local);
    *pos = (o * G->chunk[i] + local) * G->inner[i] + k;
    return q;
}

// Its place in rank q's unpadded sharded gradient (the shard's own shape).
static int64_t sharded_place(const geo* G, int i, int64_t e, int q) {
    int64_t k = e % G->inner[i], r = e / G->inner[i] % G->d[i], o = e / (G->inner[i] * G->d[i]);
    int64_t rows = 0, local;
    for (int64_t x = 0; x < G->d[i]; x++)
        rows += owner(G->d[i], G->chunk[i], G->world, x, &local) == q;
    owner(G->d[i], G->chunk[i], G->world, r, &local);
    return (o * rows + local) * G->inner[i] + k;
}

// ---- buffers ----------------------------------------------------------------------------

// Bytes with a pattern, so that a run writing outside its place shows up.
static uint8_t* pattern(int64_t elems, uint8_t seed) {
    size_t bytes = (size_t)elems * 4 + 1;
    uint8_t* b = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) b[i] = (uint8_t)(seed + 37 * i);
    return b;
}

// n values of dt (in 4-byte slots' room) that survive bf16/fp16 without NaNs.
static uint8_t* values(int64_t n, rt_dtype dt) {
    uint8_t* b = malloc((size_t)n * 4 + 1);
    for (int64_t i = 0; i < n; i++)
        rt_store_f32(b, dt, (size_t)i, (float)uniform(-1000, 1000) / 7.0f);
    return b;
}

static uint8_t* dup(const uint8_t* b, int64_t elems) {
    uint8_t* c = malloc((size_t)elems * 4 + 1);
    memcpy(c, b, (size_t)elems * 4 + 1);
    return c;
}

// dst[di] (ddt) = src[si] (sdt) cast, or += when acc (cast first, add in fp32, round once).
static void put(uint8_t* dst, rt_dtype ddt, int64_t di, const uint8_t* src, rt_dtype sdt,
                int64_t si, int acc) {
    size_t ds = rt_dtype_size(ddt);
    uint8_t v[4];
    rt_convert(v, ddt, src + (size_t)si * rt_dtype_size(sdt), sdt, 1);
    if (acc) rt_store_f32(v, ddt, 0, rt_load_f32(dst, ddt, (size_t)di) + rt_load_f32(v, ddt, 0));
    memcpy(dst + (size_t)di * ds, v, ds);
}

static void zero(uint8_t* b, rt_dtype dt, int64_t at, int64_t n) {
    memset(b + (size_t)at * rt_dtype_size(dt), 0, (size_t)n * rt_dtype_size(dt));
}

// The unsharded buffer's two storages (the CUDA backend's UN_F32 and UN_PACKED): in a
// 16-bit group the odd parameters are packed (param_dtype's bits at the start of their
// fp32 slot, at 16-bit element offsets), and each plan leaves the other storage's
// parameters out. dts: each parameter's dtype, for the host API.
static void storages(int n, const int64_t* un_off, rt_dtype pdt, int64_t so[2][MAXP],
                     rt_dtype* dts) {
    for (int i = 0; i < n; i++) {
        const int packed = pdt != RT_F32 && i % 2;
        so[0][i] = packed ? -1 : un_off[i];
        so[1][i] = packed ? 2 * un_off[i] : -1;
        dts[i] = packed ? pdt : RT_F32;
    }
}

// Element e of parameter i in the unsharded buffer: its index in units of dts[i].
static int64_t un_index(const int64_t* un_off, const rt_dtype* dts, int i, int64_t e) {
    return (dts[i] == RT_F32 ? un_off[i] : 2 * un_off[i]) + e;
}

// Per-parameter pointers into a buffer at element offsets of dtype dt (or dts[i]).
static void ptrs(void** out, uint8_t* b, const int64_t* offs, int n, rt_dtype dt,
                 const rt_dtype* dts) {
    for (int i = 0; i < n; i++) {
        rt_dtype t = dts ? dts[i] : dt;
        int64_t o = dts && t != RT_F32 ? 2 * offs[i] : offs[i];
        out[i] = b + (size_t)o * rt_dtype_size(t);
    }
}

#endif

// The C side of the PyTorch safetensors interop check (tests/io/torch_interop.py):
//   st_interop write PATH   writes the reference tensors with our writer
//   st_interop read PATH    loads a file Python wrote and compares it bit for bit
// Both sides compute the same reference values independently (Python with torch, here
// with explicit round-to-nearest-even conversions), so agreement means the bytes, the
// dtypes, the shapes and the header all mean the same thing to both.
#include <stdint.h>

#include "io_test.h"
#include "rt_safetensors.h"

// ---- conversions (round to nearest even, as torch does) -----------------------------

static uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;  // NaN
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);  // NaN
    if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);  // >= 65520 rounds to inf
    if (ax <= 0x33000000u) return (uint16_t)sign;               // <= 2^-25 rounds to 0
    int e = (int)(ax >> 23) - 127;
    uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
    uint32_t bits, rem, half;
    if (e >= -14) {  // normal half
        bits = ((uint32_t)(e + 15) << 10) | ((m >> 13) & 0x3FFu);
        rem = m & 0x1FFFu;
        half = 0x1000u;
    } else {  // subnormal half: units of 2^-24
        int s = -e - 1;
        bits = m >> s;
        rem = m & ((1u << s) - 1);
        half = 1u << (s - 1);
    }
    if (rem > half || (rem == half && (bits & 1u))) bits++;  // may carry into the exponent
    return (uint16_t)(sign | bits);
}

// ---- reference tensors --------------------------------------------------------------

static float f32v[12], f32r[7], scalar = 3.5f;
static uint16_t bf16v[10], f16v[12];
static int32_t i32v[5];
static int64_t i64v[4];
static double f64v[3];

static const int64_t s_f32[] = {3, 4}, s_f32r[] = {7}, s_bf16[] = {2, 5}, s_f16[] = {12},
                     s_i32[] = {5}, s_i64[] = {2, 2}, s_f64[] = {3}, s_empty[] = {0, 3};

#define N_REF 9
static const rt_st_tensor ref[N_REF] = {
    {"f32", RT_ST_F32, 2, s_f32, f32v},
    {"f32_round", RT_ST_F32, 1, s_f32r, f32r},
    {"bf16", RT_ST_BF16, 2, s_bf16, bf16v},
    {"f16", RT_ST_F16, 1, s_f16, f16v},
    {"i32", RT_ST_I32, 1, s_i32, i32v},
    {"i64", RT_ST_I64, 2, s_i64, i64v},
    {"f64", RT_ST_F64, 1, s_f64, f64v},
    {"scalar", RT_ST_F32, 0, NULL, &scalar},
    {"empty", RT_ST_F32, 2, s_empty, NULL},
};

// Mirrors reference_tensors() in torch_interop.py.
static void make_reference(void) {
    for (int i = 0; i < 12; i++) f32v[i] = (float)i * 0.5f - 2.75f;
    for (int i = 0; i < 7; i++) f32r[i] = (float)(i * 0.1);
    for (int i = 0; i < 10; i++) bf16v[i] = f32_to_bf16((float)(i * 0.37 - 1.3));
    for (int i = 0; i < 10; i++) f16v[i] = f32_to_f16((float)(i * 0.3 - 1.7));
    f16v[10] = f32_to_f16((float)1e-6);  // subnormal in f16
    f16v[11] = f32_to_f16(70000.0f);     // overflows to inf
    for (int i = 0; i < 5; i++) i32v[i] = i * 1000003 - 7;
    for (int i = 0; i < 4; i++) i64v[i] = (int64_t)i * 3000000000LL - 5;
    for (int i = 0; i < 3; i++) f64v[i] = i / 3.0;
}

// ---- modes --------------------------------------------------------------------------

static int do_write(const char *path) {
    char err[512];
    rt_st_meta meta[] = {{"format", "pt"}, {"written_by", "fsdpgen st_interop"}};
    int rc = rt_st_write(path, ref, N_REF, meta, 2, err, sizeof err);
    CHECK(rc == 0, "C wrote %d reference tensors to %s%s%s", N_REF, path, rc ? ": " : "",
          rc ? err : "");
    return check_summary();
}

static int do_read(const char *path) {
    char err[512];
    rt_st_file *f = NULL;
    int rc = rt_st_open(path, &f, err, sizeof err);
    CHECK(rc == 0, "C opened the Python-written file (%s)", rc ? err : "ok");
    if (rc) return check_summary();
    CHECK(rt_st_count(f) == N_REF, "it holds %zu tensors, expected %d", rt_st_count(f), N_REF);
    for (size_t i = 0; i < rt_st_count(f); i++) {
        int known = 0;
        for (int k = 0; k < N_REF; k++) known |= strcmp(rt_st_at(f, i)->name, ref[k].name) == 0;
        if (!known) CHECK(0, "unexpected extra tensor '%s' in the Python file", rt_st_at(f, i)->name);
    }
    for (int k = 0; k < N_REF; k++) {
        const rt_st_tensor *t = &ref[k];
        size_t nb = rt_st_dtype_size(t->dtype);
        for (int d = 0; d < t->ndim; d++) nb *= (size_t)t->shape[d];
        unsigned char buf[256];
        rc = rt_st_load(f, t->name, t->dtype, t->ndim, t->shape, buf, sizeof buf, err, sizeof err);
        int same = rc == 0 && (nb == 0 || memcmp(buf, t->data, nb) == 0);
        CHECK(same, "C loads Python's '%s' (%s, %d dims, %zu bytes) bit-exact%s%s", t->name,
              rt_st_dtype_name(t->dtype), t->ndim, nb, rc ? ": " : "", rc ? err : "");
    }
    const char *fmt = rt_st_meta_get(f, "format");
    CHECK(fmt && strcmp(fmt, "pt") == 0, "metadata format = %s", fmt ? fmt : "(missing)");
    rt_st_close(f);
    return check_summary();
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[1], "write") != 0 && strcmp(argv[1], "read") != 0)) {
        fprintf(stderr, "usage: %s write|read FILE.safetensors\n", argv[0]);
        return 2;
    }
    make_reference();
    return strcmp(argv[1], "write") == 0 ? do_write(argv[2]) : do_read(argv[2]);
}

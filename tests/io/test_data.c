// Tests for token data: the batch offset contract on small synthetic files (raw bytes
// and .u16), exactness of the offset formula, and each open/batch error a user can hit.
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io_test.h"
#include "rt_data.h"

static char err[512];

// The contract, written independently of the library (plain 64-bit arithmetic).
static int64_t ref_offset(int64_t N, int64_t W, int64_t A, int64_t B, int64_t T, int64_t s,
                          int64_t a, int64_t r, int64_t b) {
    return ((((s * A + a) * W + r) * B + b) * T) % (N - T);
}

// ---- offsets and batches ------------------------------------------------------------

static void test_raw_bytes(void) {
    enum { N = 1000 };
    unsigned char bytes[N];
    for (int i = 0; i < N; i++) bytes[i] = (unsigned char)((i * 37 + 11) % 251);
    write_bytes(tpath("tokens.bin"), bytes, N);
    rt_data *d = NULL;
    int rc = rt_data_open(tpath("tokens.bin"), 256, 8, &d, err, sizeof err);
    CHECK(rc == 0, "open raw byte file of %d tokens (%s)", N, rc ? err : "ok");
    if (rc) return;
    CHECK(rt_data_n_tokens(d) == N, "N = %lld", (long long)rt_data_n_tokens(d));

    // A worked example of the formula: W=2, A=3, B=2, T=8, step 1, micro 2, rank 1, row 1:
    // ((((1*3+2)*2+1)*2+1)*8) = 184, mod (1000-8) = 184.
    rt_data_shape sh = {.world_size = 2, .n_micro = 3, .batch = 2, .seq_len = 8};
    int64_t o = rt_data_offset(&sh, N, 1, 2, 1, 1);
    CHECK(o == 184, "offset(s=1,a=2,r=1,b=1) = %lld, expected 184", (long long)o);
    // Step 20: (((20*3+2)*2+1)*2+1)*8 = 2008 -> 2008 mod 992 = 24 (wraps around the file).
    o = rt_data_offset(&sh, N, 20, 2, 1, 1);
    CHECK(o == 24, "offset(s=20,a=2,r=1,b=1) = %lld, expected 24 (wrapped)", (long long)o);

    // Every (s, a, r, b) over a few steps: offset matches the reference and the batch
    // holds tokens o..o+T-1 and o+1..o+T.
    int32_t in[2 * 8], tg[2 * 8];
    int bad_off = 0, bad_tok = 0, n_seq = 0;
    for (int64_t s = 0; s < 25; s++)
        for (int64_t a = 0; a < 3; a++)
            for (int64_t r = 0; r < 2; r++) {
                rc = rt_data_batch(d, &sh, s, a, r, in, tg, err, sizeof err);
                if (rc) {
                    bad_tok++;
                    continue;
                }
                for (int64_t b = 0; b < 2; b++, n_seq++) {
                    int64_t want = ref_offset(N, 2, 3, 2, 8, s, a, r, b);
                    if (rt_data_offset(&sh, N, s, a, r, b) != want) bad_off++;
                    for (int t = 0; t < 8; t++)
                        if (in[b * 8 + t] != bytes[want + t] || tg[b * 8 + t] != bytes[want + t + 1])
                            bad_tok++;
                }
            }
    CHECK(bad_off == 0, "%d sequences: offsets match the contract formula (%d mismatches)", n_seq,
          bad_off);
    CHECK(bad_tok == 0, "%d sequences: inputs = tokens[o..o+T), targets = tokens[o+1..o+T] (%d "
          "mismatches)", n_seq, bad_tok);

    // ---- batch argument errors
    rc = rt_data_batch(d, &sh, 0, 0, 2, in, tg, err, sizeof err);
    CHECK_ERR(rc, err, "rank == W", "rank 2 out of range", "rank < 2");
    rc = rt_data_batch(d, &sh, 0, 3, 0, in, tg, err, sizeof err);
    CHECK_ERR(rc, err, "microbatch == A", "microbatch 3", "microbatch < 3");
    rc = rt_data_batch(d, &sh, -1, 0, 0, in, tg, err, sizeof err);
    CHECK_ERR(rc, err, "negative step", "step -1");
    rt_data_shape sh16 = sh;
    sh16.seq_len = 16;
    rc = rt_data_batch(d, &sh16, 0, 0, 0, in, tg, err, sizeof err);
    CHECK_ERR(rc, err, "seq_len differs from open", "seq_len 16", "opened for seq_len 8");
    rt_data_shape sh0 = sh;
    sh0.batch = 0;
    rc = rt_data_batch(d, &sh0, 0, 0, 0, in, tg, err, sizeof err);
    CHECK_ERR(rc, err, "zero batch", "must all be > 0");
    rt_data_close(d);
}

static void test_u16(void) {
    enum { N = 3000 };
    unsigned char bytes[2 * N];
    uint16_t tok[N];
    for (int i = 0; i < N; i++) {
        tok[i] = (uint16_t)((i * 7919u + 3) % 50257u);
        bytes[2 * i] = (unsigned char)(tok[i] & 0xFF);  // little-endian on disk
        bytes[2 * i + 1] = (unsigned char)(tok[i] >> 8);
    }
    write_bytes(tpath("tokens.u16"), bytes, sizeof bytes);
    rt_data *d = NULL;
    int rc = rt_data_open(tpath("tokens.u16"), 50257, 64, &d, err, sizeof err);
    CHECK(rc == 0 && rt_data_n_tokens(d) == N, ".u16 file opens as %d uint16 tokens (%s)", N,
          rc ? err : "ok");
    if (rc) return;
    int maxtok = 0;
    for (int i = 0; i < N; i++)
        if (rt_data_token(d, i) > maxtok) maxtok = rt_data_token(d, i);
    CHECK(maxtok > 255 && rt_data_token(d, 5) == tok[5], "tokens above 255 decode little-endian "
          "(max %d, token[5] = %d want %d)", maxtok, rt_data_token(d, 5), tok[5]);
    rt_data_shape sh = {.world_size = 4, .n_micro = 2, .batch = 3, .seq_len = 64};
    int32_t in[3 * 64], tg[3 * 64];
    int bad = 0, n_seq = 0;
    for (int64_t s = 0; s < 10; s++)
        for (int64_t a = 0; a < 2; a++)
            for (int64_t r = 0; r < 4; r++) {
                rc = rt_data_batch(d, &sh, s, a, r, in, tg, err, sizeof err);
                for (int64_t b = 0; b < 3; b++, n_seq++) {
                    int64_t o = ref_offset(N, 4, 2, 3, 64, s, a, r, b);
                    for (int t = 0; t < 64; t++)
                        bad += rc != 0 || in[b * 64 + t] != tok[o + t] || tg[b * 64 + t] != tok[o + t + 1];
                }
            }
    CHECK(bad == 0, ".u16: %d sequences (W=4 A=2 B=3 T=64) match the contract (%d mismatches)",
          n_seq, bad);
    rt_data_close(d);
}

// .u32: Llama 3's vocabulary (128256 > 65536), little-endian, every byte of a token used.
static void test_u32(void) {
    enum { N = 500, V = 128256 };
    unsigned char bytes[4 * N];
    int32_t tok[N];
    for (int i = 0; i < N; i++) {
        tok[i] = (int32_t)((i * 104729u + 11) % V);
        for (int j = 0; j < 4; j++) bytes[4 * i + j] = (unsigned char)((uint32_t)tok[i] >> (8 * j));
    }
    write_bytes(tpath("tokens.u32"), bytes, sizeof bytes);
    rt_data *d = NULL;
    int rc = rt_data_open(tpath("tokens.u32"), V, 16, &d, err, sizeof err);
    CHECK(rc == 0 && rt_data_n_tokens(d) == N, ".u32 file opens as %d uint32 tokens (%s)", N,
          rc ? err : "ok");
    if (rc) return;
    int bad = 0, above = 0;
    for (int i = 0; i < N; i++) {
        bad += rt_data_token(d, i) != tok[i];
        above += tok[i] > 65535;
    }
    CHECK(bad == 0 && above > 0, ".u32 tokens decode little-endian, %d of them above 65535 (%d wrong)",
          above, bad);
    rt_data_close(d);
}

static void test_offset_exact(void) {
    // Large values: computed exactly (here no 64-bit overflow, so equal to int64 math).
    rt_data_shape sh = {.world_size = 8, .n_micro = 4, .batch = 16, .seq_len = 2048};
    int64_t N = 1000000007;
    int64_t got = rt_data_offset(&sh, N, 123456789, 3, 5, 15);
    int64_t want = ref_offset(N, 8, 4, 16, 2048, 123456789, 3, 5, 15);
    CHECK(got == want, "offset at step 123456789, N=1e9+7: %lld == %lld", (long long)got,
          (long long)want);
    // Past 2^63 the product would overflow int64; the library reduces mod (N-T) exactly.
    // Reference value from Python: ((((2**50*4+3)*8+5)*16+15)*2048) % (10**9+7-2048).
    got = rt_data_offset(&sh, N, (int64_t)1 << 50, 3, 5, 15);
    CHECK(got == 828145085, "offset at step 2^50 (product > 2^63) = %lld, exact value 828145085",
          (long long)got);
    // N = T + 1: only one possible sequence, every offset is 0.
    rt_data_shape one = {.world_size = 3, .n_micro = 2, .batch = 5, .seq_len = 9};
    int nz = 0;
    for (int s = 0; s < 5; s++)
        for (int b = 0; b < 5; b++) nz += rt_data_offset(&one, 10, s, 1, 2, b) != 0;
    CHECK(nz == 0, "N = T + 1: all offsets are 0 (%d nonzero)", nz);
    CHECK(rt_data_offset(&one, 9, 0, 0, 0, 0) == -1 && rt_data_offset(&one, 100, 0, 0, -1, 0) == -1,
          "offset is -1 for N <= T or a negative index (no division by zero)");
}

// ---- open errors --------------------------------------------------------------------

static void test_errors(void) {
    rt_data *d = NULL;
    int rc = rt_data_open(tpath("missing.u16"), 100, 8, &d, err, sizeof err);
    CHECK_ERR(rc, err, "missing file", "cannot open token file", "missing.u16", "No such file");
    CHECK(d == NULL, "no handle on error");

    write_bytes(tpath("empty.bin"), "", 0);
    rc = rt_data_open(tpath("empty.bin"), 100, 8, &d, err, sizeof err);
    CHECK_ERR(rc, err, "empty file", "empty.bin' is empty", "1-byte tokens");

    write_bytes(tpath("odd.u16"), "abcde", 5);
    rc = rt_data_open(tpath("odd.u16"), 30000, 1, &d, err, sizeof err);
    CHECK_ERR(rc, err, ".u16 with odd length", "length of 5 bytes, not a multiple of 2",
              "2-byte little-endian tokens");
    write_bytes(tpath("ragged.u32"), "abcdef", 6);
    rc = rt_data_open(tpath("ragged.u32"), 30000, 1, &d, err, sizeof err);
    CHECK_ERR(rc, err, ".u32 of 6 bytes", "length of 6 bytes, not a multiple of 4",
              "4-byte little-endian tokens");

    write_bytes(tpath("short.bin"), "abcdefgh", 8);
    rc = rt_data_open(tpath("short.bin"), 256, 8, &d, err, sizeof err);
    CHECK_ERR(rc, err, "N == T", "has 8 tokens", "sequences of 8 tokens need at least 9");
    unsigned char s16[16] = {0};
    write_bytes(tpath("short.u16"), s16, 16);
    rc = rt_data_open(tpath("short.u16"), 256, 32, &d, err, sizeof err);
    CHECK_ERR(rc, err, "N < T (.u16)", "has 8 tokens", "need at least 33");

    unsigned char b[40];
    for (int i = 0; i < 40; i++) b[i] = (unsigned char)(i % 50);
    b[17] = 200;
    write_bytes(tpath("badtok.bin"), b, 40);
    rc = rt_data_open(tpath("badtok.bin"), 100, 8, &d, err, sizeof err);
    CHECK_ERR(rc, err, "byte token >= vocab", "token 200", "token offset 17", "vocab size 100");

    unsigned char w[40] = {0};
    w[2 * 13] = 0x10;  // token 13 = 0x2710 = 10000
    w[2 * 13 + 1] = 0x27;
    write_bytes(tpath("badtok.u16"), w, 40);
    rc = rt_data_open(tpath("badtok.u16"), 5000, 8, &d, err, sizeof err);
    CHECK_ERR(rc, err, "u16 token >= vocab", "token 10000", "token offset 13", "byte offset 26",
              "vocab size 5000");
    rc = rt_data_open(tpath("badtok.u16"), 10001, 8, &d, err, sizeof err);
    CHECK(rc == 0, "same file opens with vocab 10001 (largest token 10000)");
    rt_data_close(d);
    d = NULL;

    rc = rt_data_open(tpath("badtok.u16"), 128256, 8, &d, err, sizeof err);
    CHECK_ERR(rc, err, ".u16 with Llama 3's vocabulary", "cannot hold the vocabulary of 128256 tokens",
              "as a .u32 file");

    unsigned char q[4 * 20] = {0};
    q[4 * 11] = 0x00, q[4 * 11 + 1] = 0xF5, q[4 * 11 + 2] = 0x01;  // token 11 = 0x1F500 = 128256
    write_bytes(tpath("badtok.u32"), q, sizeof q);
    rc = rt_data_open(tpath("badtok.u32"), 128256, 8, &d, err, sizeof err);
    CHECK_ERR(rc, err, "u32 token >= vocab", "token 128256", "token offset 11", "byte offset 44",
              "vocab size 128256");
    q[4 * 11 + 3] = 0x80;  // 2^31 + 128256: above INT32_MAX, still reported as the value it is
    write_bytes(tpath("badtok.u32"), q, sizeof q);
    rc = rt_data_open(tpath("badtok.u32"), 128256, 8, &d, err, sizeof err);
    CHECK_ERR(rc, err, "u32 token >= 2^31", "token 2147611904", "token offset 11");

    rc = rt_data_open(tpath("badtok.u16"), 0, 8, &d, err, sizeof err);
    CHECK_ERR(rc, err, "vocab 0", "vocab size must be > 0");
    rc = rt_data_open(tpath("badtok.u16"), 100, 0, &d, err, sizeof err);
    CHECK_ERR(rc, err, "seq_len 0", "sequence length must be > 0");
}

// ---- files that are not regular, or change after open -------------------------------

// A FIFO with no writer, a directory and a device are refused at once (alarm: a FIFO open
// that blocks ends the test as a crash instead of hanging it).
static void test_not_regular(void) {
    rt_data *d = NULL;
    char fifo[4096];
    snprintf(fifo, sizeof fifo, "%s", tpath("tokens_fifo.bin"));
    if (mkfifo(fifo, 0644) == 0) {
        alarm(20);
        int rc = rt_data_open(fifo, 256, 8, &d, err, sizeof err);
        alarm(0);
        CHECK_ERR(rc, err, "a FIFO with no writer: refused without blocking", "tokens_fifo.bin",
                  "a FIFO", "not a regular file");
    }
    mkdir(tpath("tokens_dir.bin"), 0755);
    int rc = rt_data_open(tpath("tokens_dir.bin"), 256, 8, &d, err, sizeof err);
    CHECK_ERR(rc, err, "a directory", "tokens_dir.bin", "a directory", "not a regular file");
    rc = rt_data_open("/dev/zero", 256, 8, &d, err, sizeof err);
    CHECK_ERR(rc, err, "/dev/zero", "a character device", "not a regular file");
    CHECK(d == NULL, "no handle on error");
}

// The file truncated, or rewritten with tokens >= vocab, after open: the next batch fails
// with a message naming the file and the offset (no SIGBUS, no out-of-range token).
static void test_changed_after_open(void) {
    enum { N = 4000 };
    unsigned char bytes[N];
    for (int i = 0; i < N; i++) bytes[i] = (unsigned char)(i % 16);
    char path[4096];
    snprintf(path, sizeof path, "%s", tpath("changing.bin"));
    write_bytes(path, bytes, N);
    rt_data *d = NULL;
    int rc = rt_data_open(path, 16, 8, &d, err, sizeof err);
    CHECK(rc == 0, "open a %d-token file, vocab 16 (%s)", N, rc ? err : "ok");
    if (rc) return;
    rt_data_shape sh = {.world_size = 1, .n_micro = 1, .batch = 4, .seq_len = 8};
    int32_t in[4 * 8], tg[4 * 8];
    rc = rt_data_batch(d, &sh, 100, 0, 0, in, tg, err, sizeof err);
    CHECK(rc == 0 && in[0] == bytes[rt_data_offset(&sh, N, 100, 0, 0, 0)], "step 100 reads (%s)",
          rc ? err : "ok");
    // Rewritten in place: token 200 at offset 3300 (step 100's rows lie at 3200..3232).
    FILE *fp = fopen(path, "r+b");
    if (fp) {
        fseek(fp, 3210, SEEK_SET);
        fputc(200, fp);
        fclose(fp);
    }
    rc = rt_data_batch(d, &sh, 100, 0, 0, in, tg, err, sizeof err);
    CHECK_ERR(rc, err, "a token rewritten to 200 after open", "changing.bin", "token 200",
              "token offset 3210", "vocab size 16");
    CHECK(rt_data_token(d, 3210) == -1 && rt_data_token(d, 3211) == bytes[3211],
          "rt_data_token: -1 for the out-of-range token, the others still read");
    // Truncated to 1000 bytes: a batch past the new end fails, one before it still reads.
    CHECK(truncate(path, 1000) == 0, "truncate the file to 1000 bytes");
    rc = rt_data_batch(d, &sh, 100, 0, 0, in, tg, err, sizeof err);
    CHECK_ERR(rc, err, "a batch past the end of the truncated file", "changing.bin",
              "nothing to read at byte offset 3200", "4000 bytes it had when opened", "truncated");
    rc = rt_data_batch(d, &sh, 1, 0, 0, in, tg, err, sizeof err);
    CHECK(rc == 0, "a batch before the new end still reads (%s)", rc ? err : "ok");
    CHECK(rt_data_token(d, 3999) == -1, "rt_data_token past the new end is -1");
    rt_data_close(d);
}

int main(void) {
    printf("== token data ==\n");
    test_raw_bytes();
    test_u16();
    test_u32();
    test_offset_exact();
    test_errors();
    test_not_regular();
    test_changed_after_open();
    return check_summary();
}

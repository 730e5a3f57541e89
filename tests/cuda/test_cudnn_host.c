// Host-only checks of rt_cudnn.h (runs without a GPU, as in CI): the argument checks and
// their one-line reasons, the [B, heads, T, HD] view (dims and strides) cuDNN gets of the
// packed tensors (a gradient's in rows of its own length too), the stats size; both SDPA
// graphs lowered to finalized cuDNN descriptors (rt_cudnn_sdpa_lower: cuDNN checks every
// operation's shapes and types without a GPU) at the shapes test_cudnn_attention runs, with
// dense and with strided gradients, with a control that such a check can fail; and,
// where no GPU is found, that create declines with a reason instead of failing (the caller
// then keeps the hand-written kernels), and that without a cuDNN to load (RT_CUDNN_SO naming
// no library) the program still starts and create declines. And the graphs themselves:
// this program run again
// (`--graph ...`) with cuDNN's API log on, the log's operation graph must read as
// tests/cuda/cudnn_sdpa_graphs.txt, which holds cudnn-frontend's graphs for the same
// shapes (`--normalize LOG` prints a log's graph in that form).
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cudnn_graph_log.h"
#include "cudnn_sdpa.h"
#include "rt_cudnn.h"

extern char** environ;

// --graph FORM B T NH NKV HD CAUSAL FP16 [LDQ LDK LDV]: builds one graph without a handle
// (its operation graph finalized, then destroyed: the log's last one), the gradients in rows
// of LDQ, LDK, LDV (0 or absent: dense). FORM: fwd_composite, fwd_unified, bwd_acc,
// bwd_direct. Exit status 0 when it built.
static int graph_main(int argc, char** a) {
    char why[512] = "";
    rt_cudnn_sdpa s = {.B = atoi(a[1]), .T = atoi(a[2]), .NH = atoi(a[3]), .NKV = atoi(a[4]),
                       .HD = atoi(a[5]), .causal = atoi(a[6])};
    if (argc == 11) s.ld_dq = atoi(a[8]), s.ld_dk = atoi(a[9]), s.ld_dv = atoi(a[10]);
    const cudnnDataType_t io = atoi(a[7]) ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
    cg* g = strncmp(a[0], "fwd", 3) == 0 ? &s.fwd : &s.bwd;
    cg_init(g, NULL, why, sizeof why);
    if (!strcmp(a[0], "fwd_composite")) cudnn_sdpa_build_forward(&s, io);
    else if (!strcmp(a[0], "fwd_unified")) cudnn_sdpa_build_forward_unified(&s, io);
    else cudnn_sdpa_build_backward(&s, io, !strcmp(a[0], "bwd_acc"));
    const int failed = g->failed;
    cg_free(g);
    if (failed) fprintf(stderr, "%s\n", why);
    return failed;
}

// Runs this program again with argv (argv[0] aside) and the environment but for the
// variables starting with `drop`, plus env[0..nenv); 1 when it exited with status 0.
static int run_self(char** argv, char** env, int nenv, const char* drop) {
    char* envp[64];
    int ne = 0;
    for (; ne < nenv; ne++) envp[ne] = env[ne];
    for (char** e = environ; *e && ne < 63; e++)
        if (strncmp(*e, drop, strlen(drop))) envp[ne++] = *e;
    envp[ne] = NULL;
    argv[0] = "/proc/self/exe";
    pid_t pid;
    int st = -1;
    fflush(stdout);
    return posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, envp) == 0 &&
           waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

// Runs `SELF --graph ARGS` with cuDNN's API log into a file; its normalized graph, or NULL.
static char* logged_graph(const char* args) {
    char log[64] = "/tmp/fsdpgen_cudnn_log.XXXXXX", cmd[256], env[128];
    int fd = mkstemp(log);
    if (fd < 0) return NULL;
    close(fd);
    snprintf(env, sizeof env, "CUDNN_LOGDEST_DBG=%s", log);
    snprintf(cmd, sizeof cmd, "--graph %s", args);
    char* argv[16] = {NULL};
    int n = 1;
    for (char* t = strtok(cmd, " "); t && n < 15; t = strtok(NULL, " ")) argv[n++] = t;
    argv[n] = NULL;
    char* envs[2] = {"CUDNN_LOGLEVEL_DBG=3", env};
    char* text = run_self(argv, envs, 2, "CUDNN_") ? cgl_normalize(log) : NULL;
    unlink(log);
    return text;
}

// The golden graphs: "== ARGS" then the graph, up to the next "==" (# lines: comments).
static void check_golden(const char* path) {
    FILE* f = fopen(path, "r");
    CHECK(f != NULL, "%s readable (run from the repository root)", path);
    if (!f) return;
    static char want[1 << 17];
    char line[1024], args[256] = "";
    size_t len = 0;
    int cases = 0;
    for (int more = 1; more;) {
        more = fgets(line, sizeof line, f) != NULL;
        if (more && line[0] == '#') continue;
        if (!more || !strncmp(line, "== ", 3)) {
            if (args[0]) {
                char* got = logged_graph(args);
                size_t at = 0;  // where got and want part
                while (got && got[at] && got[at] == want[at]) at++;
                int same = got && at == len && got[at] == 0;
                size_t ls = at;
                while (ls > 0 && want[ls - 1] != '\n') ls--;
                CHECK(same, "graph %s: as cudnn-frontend builds it%s%.80s", args,
                      same ? "" : "; the frontend's line where they part: ",
                      same ? "" : want + ls);
                free(got);
                cases++;
            }
            if (more) snprintf(args, sizeof args, "%.*s", (int)strcspn(line + 3, "\n"), line + 3);
            len = 0;
            want[0] = 0;
        } else if (len + strlen(line) < sizeof want) {
            memcpy(want + len, line, strlen(line) + 1);
            len += strlen(line);
        }
    }
    fclose(f);
    CHECK(cases >= 7, "%s: %d graphs compared", path, cases);
    // control: the logged text tells graphs apart that differ only in the 16-bit type
    char* a = logged_graph("fwd_composite 2 100 32 8 64 1 0");
    char* b = logged_graph("fwd_composite 2 100 32 8 64 1 1");
    CHECK(a && b && strcmp(a, b) != 0, "control: bf16 and fp16 graphs log differently");
    free(a), free(b);
}

static int refused_ld(int B, int T, int NH, int NKV, int HD, rt_dtype p, int ld_dq, int ld_dk,
                      int ld_dv, const char* word) {
    char why[256] = "";
    int rc = rt_cudnn_sdpa_check(B, T, NH, NKV, HD, p, ld_dq, ld_dk, ld_dv, why, sizeof why);
    printf("  reason: %s\n", why);
    return rc == -1 && strstr(why, word) != NULL && strchr(why, '\n') == NULL;
}

static int refused(int B, int T, int NH, int NKV, int HD, rt_dtype p, const char* word) {
    return refused_ld(B, T, NH, NKV, HD, p, 0, 0, 0, word);
}

// --unloadable: with RT_CUDNN_SO naming no library, create and lower decline with the
// loader's reason (exit 0), as a machine without cuDNN would.
static int unloadable_main(void) {
    char why[512] = "";
    rt_cudnn_sdpa* p = rt_cudnn_sdpa_create(2, 100, 4, 4, 64, 1, RT_BF16, 1, 0, 0, 0, why, sizeof why);
    printf("  reason: %s\n", why);
    static const char want[] = "cuDNN attention: cannot load /nonexistent/libcudnn.so.9 (";
    const int ok = !p && !strncmp(why, want, strlen(want));
    char why2[512] = "";
    const int lowered =
        rt_cudnn_sdpa_lower(2, 100, 4, 4, 64, 1, RT_BF16, 1, 0, 0, 0, why2, sizeof why2);
    return ok && lowered == -1 && !strcmp(why, why2) && cudnnGetVersion() == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
    if ((argc == 10 || argc == 13) && !strcmp(argv[1], "--graph"))
        return graph_main(argc - 2, argv + 2);
    if (argc == 2 && !strcmp(argv[1], "--unloadable")) return unloadable_main();
    if (argc == 3 && !strcmp(argv[1], "--normalize")) {
        char* text = cgl_normalize(argv[2]);
        if (text) fputs(text, stdout);
        free(text);
        return text ? 0 : 1;
    }
    char why[256] = "x";
    CHECK(rt_cudnn_sdpa_check(2, 100, 32, 8, 64, RT_BF16, 0, 0, 0, why, sizeof why) == 0 &&
              strcmp(why, "x") == 0,
          "GQA 32/8 heads, HD 64, bf16 accepted, reason untouched");
    CHECK(rt_cudnn_sdpa_check(1, 1, 1, 1, 8, RT_F16, 0, 0, 0, NULL, 0) == 0, "fp16, T=1 accepted");
    CHECK(rt_cudnn_sdpa_check(2, 100, 32, 8, 64, RT_BF16, 3072, 3072, 3072, NULL, 0) == 0 &&
              rt_cudnn_sdpa_check(2, 100, 32, 8, 64, RT_BF16, 2048, 0, 512, NULL, 0) == 0,
          "gradients in rows of 3072 (q, k, v side by side), or of their widths, accepted");
    CHECK(refused_ld(2, 100, 32, 8, 64, RT_BF16, 2040, 0, 0, "row length"),
          "dq in rows shorter than its width refused");
    CHECK(refused_ld(2, 100, 32, 8, 64, RT_BF16, 0, 3076, 0, "multiple of 8"),
          "dk in rows of 3076 (not a multiple of 8) refused");
    CHECK(refused_ld(2, 100, 32, 8, 64, RT_BF16, 0, 0, -8, "ld_dv=-8"),
          "dv in rows of -8 refused, the value in the reason");
    CHECK(refused(0, 100, 4, 4, 64, RT_BF16, "positive"), "B=0 refused");
    CHECK(refused(2, -1, 4, 4, 64, RT_BF16, "T=-1"), "T=-1 refused, the value in the reason");
    CHECK(refused(2, 100, 4, 0, 64, RT_BF16, "positive"), "NKV=0 refused (no division)");
    CHECK(refused(2, 100, 4, 4, 0, RT_BF16, "positive"), "HD=0 refused");
    CHECK(refused(2, 100, 12, 8, 64, RT_BF16, "multiple of NKV"), "NH=12, NKV=8 refused");
    CHECK(refused(2, 100, 4, 8, 64, RT_BF16, "multiple of NKV"), "NKV > NH refused");
    CHECK(refused(2, 100, 4, 4, 64, RT_F32, "bf16 or fp16"), "fp32 refused");
    CHECK(refused(2, 100, 4, 4, 64, RT_I32, "bf16 or fp16"), "int32 refused");
    CHECK(refused(1 << 20, 1 << 20, 64, 64, 128, RT_BF16, "too large"), "huge shape refused");
    CHECK(rt_cudnn_sdpa_check(0, 1, 1, 1, 1, RT_BF16, 0, 0, 0, NULL, 0) == -1,
          "NULL reason buffer");

    int64_t d[4], s[4];
    rt_cudnn_sdpa_layout(2, 100, 12, 64, 0, 0, d, s);
    CHECK(d[0] == 2 && d[1] == 12 && d[2] == 100 && d[3] == 64, "q dims [B,NH,T,HD]");
    CHECK(s[0] == 100 * 12 * 64 && s[1] == 64 && s[2] == 12 * 64 && s[3] == 1,
          "q strides [T*NH*HD, HD, NH*HD, 1] of the packed [B,T,NH*HD]");
    rt_cudnn_sdpa_layout(2, 100, 8, 128, 0, 1, d, s);
    CHECK(d[0] == 2 && d[1] == 8 && d[2] == 128 && d[3] == 100, "K^T dims [B,NKV,HD,T]");
    CHECK(s[0] == 100 * 8 * 128 && s[1] == 128 && s[2] == 1 && s[3] == 8 * 128,
          "K^T strides [T*NKV*HD, HD, 1, NKV*HD]");
    // element (b, h, t, e) of the view is element b*T*NH*HD + t*NH*HD + h*HD + e packed
    rt_cudnn_sdpa_layout(3, 5, 4, 8, 0, 0, d, s);
    CHECK(1 * s[0] + 2 * s[1] + 3 * s[2] + 7 * s[3] == 1 * 5 * 32 + 3 * 32 + 2 * 8 + 7,
          "view offset of (1, 2, 3, 7) is the packed offset");
    // a gradient in rows of 72: element (b, h, t, e) at b*T*72 + t*72 + h*HD + e of its slice
    rt_cudnn_sdpa_layout(3, 5, 4, 8, 72, 0, d, s);
    CHECK(d[0] == 3 && d[1] == 4 && d[2] == 5 && d[3] == 8 && s[0] == 5 * 72 && s[1] == 8 &&
              s[2] == 72 && s[3] == 1 &&
              1 * s[0] + 2 * s[1] + 3 * s[2] + 7 * s[3] == 1 * 5 * 72 + 3 * 72 + 2 * 8 + 7,
          "rows of 72: dims [B,heads,T,HD], strides [T*72, HD, 72, 1]");
    CHECK(rt_cudnn_sdpa_stats_floats(2, 12, 100) == 2400, "stats floats B*NH*T");
    CHECK(rt_cudnn_sdpa_workspace_bytes(NULL) == 0, "workspace of NULL is 0");

    // both graphs, both backward forms, causal or not, bf16 and fp16, the GPU test's shapes
    static const int shapes[][3] = {{12, 12, 64}, {32, 8, 64}, {8, 2, 128}, {4, 2, 16},
                                    {4, 4, 32}, {1, 1, 256}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int bad = 0;
        why[0] = 0;
        for (int c = 0; c < 2; c++)
            for (int p = 0; p < 2; p++)
                for (int acc = 0; acc < 2; acc++)
                    for (int ld = 0; ld < 2; ld++) {  // dense, or q, k, v side by side
                        const int w = (shapes[i][0] + 2 * shapes[i][1]) * shapes[i][2];
                        bad |= rt_cudnn_sdpa_lower(2, 100, shapes[i][0], shapes[i][1],
                                                   shapes[i][2], c, p ? RT_F16 : RT_BF16, acc,
                                                   ld * w, ld * w, ld * w, why, sizeof why);
                    }
        CHECK(!bad, "NH=%d NKV=%d HD=%d T=100: forward and backward graphs lower to cuDNN "
              "descriptors (causal or not, bf16 and fp16, both backward forms, dense and "
              "strided gradients)%s%s",
              shapes[i][0], shapes[i][1], shapes[i][2], bad ? ": " : "", bad ? why : "");
    }
    CHECK(rt_cudnn_sdpa_lower(2, 100, 4, 3, 64, 1, RT_BF16, 1, 0, 0, 0, why, sizeof why) == -1 &&
              strstr(why, "multiple of NKV"), "lower checks its arguments too");
    CHECK(rt_cudnn_sdpa_lower(2, 100, 4, 2, 64, 1, RT_BF16, 1, 0, 100, 0, why, sizeof why) == -1 &&
              strstr(why, "row length"), "lower checks the row lengths too");
    {  // control: cuDNN does refuse a malformed operation without a GPU (K^T's HD 60, Q's 64)
        cg g;
        cg_init(&g, NULL, why, sizeof why);
        const int64_t qd[4] = {2, 4, 100, 64}, qs[4] = {25600, 64, 256, 1};
        const int64_t kd[4] = {2, 4, 60, 100}, ks[4] = {24000, 60, 1, 240};
        const int64_t sd[4] = {2, 4, 100, 100}, ss[4] = {40000, 10000, 100, 1};
        cg_desc q = cg_tensor(&g, CUDNN_DATA_BFLOAT16, qd, qs, 1, 0);
        cg_desc k = cg_tensor(&g, CUDNN_DATA_BFLOAT16, kd, ks, 2, 0);
        cg_matmul(&g, q, k, cg_tensor(&g, CUDNN_DATA_FLOAT, sd, ss, 0, 1));
        printf("  reason: %s\n", why);
        CHECK(g.failed && strstr(why, "OPERATION_MATMUL"),
              "control: a matmul of mismatched shapes fails to lower, naming the call");
        cg_free(&g);
    }

    check_golden("tests/cuda/cudnn_sdpa_graphs.txt");

    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        why[0] = 0;
        rt_cudnn_sdpa* p = rt_cudnn_sdpa_create(2, 100, 4, 4, 64, 1, RT_BF16, 1, 0, 0, 0, why, sizeof why);
        printf("  reason: %s\n", why);
        CHECK(p == NULL && strstr(why, "no CUDA device") != NULL,
              "without a GPU create declines with a reason");
        rt_cudnn_sdpa_destroy(p);
    } else {
        printf("SKIP create without a GPU: this machine has one (test_cudnn_attention runs it)\n");
    }
    rt_cudnn_sdpa_destroy(NULL);
    // no cuDNN to load: this program again, with RT_CUDNN_SO naming no library
    char* argv2[] = {NULL, "--unloadable", NULL};
    char* env2[] = {"RT_CUDNN_SO=/nonexistent/libcudnn.so.9"};
    CHECK(run_self(argv2, env2, 1, "RT_CUDNN_SO="),
          "RT_CUDNN_SO=/nonexistent/libcudnn.so.9: the program starts, create and lower "
          "decline with the loader's reason, cudnnGetVersion() is 0");
    return check_summary();
}

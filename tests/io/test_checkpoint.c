// Tests for resumable checkpoints: a 4-rank save (ranks as threads, as in the CPU
// backend) and bit-exact reload, then every way a checkpoint can be incomplete, stale,
// damaged or mismatched, and saves that fail partway leaving nothing that loads; then
// checkpoint directories (ROOT/step_N): staging, publishing, keeping the newest K, and
// finding the newest complete one past what a killed save leaves.
#include <pthread.h>
#include <sys/wait.h>
#include <stdint.h>

#include "io_crc32.h"
#include "io_test.h"
#include "rt_checkpoint.h"

#define WORLD 4
#define STEP 42

static char err[512];

// ---- per-rank synthetic state -------------------------------------------------------

typedef struct {
    float params[1000 + WORLD];
    float exp_avg[1000 + WORLD];
    float exp_avg_sq[1000 + WORLD];
    int64_t counters[3];
    uint16_t bf16[7];  // odd byte count: exercises padding
    rt_ckpt_state st;
} rank_state;

static rank_state saved[WORLD], loaded[WORLD];

static uint64_t n_params(int r) { return 1000 + (uint64_t)r; }  // uneven shards

static void fill(rank_state *s, int r, uint64_t step) {
    uint32_t x = 0x9E3779B9u * (uint32_t)(r + 1);
    for (uint64_t i = 0; i < n_params(r); i++) {
        x = x * 1664525u + 1013904223u;
        uint32_t bits = x;
        memcpy(&s->params[i], &bits, 4);  // arbitrary bit patterns, NaNs included
        s->exp_avg[i] = (float)i * 0.001f - (float)r;
        s->exp_avg_sq[i] = (float)(i * i) * 1e-6f;
    }
    for (int i = 0; i < 3; i++) s->counters[i] = (int64_t)step * 1000 + r * 10 + i;
    for (int i = 0; i < 7; i++) s->bf16[i] = (uint16_t)(0x3F80 + r * 7 + i);
    s->st.step = step;
    s->st.data_cursor = step + 1;
    s->st.rng_seed = 0xC0FFEEull + (uint64_t)r;
    s->st.rng_offset = step * 4096 + (uint64_t)r;
}

static size_t blobs_of(rank_state *s, int r, rt_ckpt_blob *b) {
    rt_ckpt_blob v[] = {
        {"params", RT_ST_F32, n_params(r), s->params},
        {"adam.exp_avg", RT_ST_F32, n_params(r), s->exp_avg},
        {"adam.exp_avg_sq", RT_ST_F32, n_params(r), s->exp_avg_sq},
        {"counters", RT_ST_I64, 3, s->counters},
        {"bf16_buf", RT_ST_BF16, 7, s->bf16},
        {"empty", RT_ST_F32, 0, NULL},
    };
    memcpy(b, v, sizeof v);
    return sizeof v / sizeof *v;
}

static size_t slots_of(rank_state *s, int r, rt_ckpt_slot *o) {
    rt_ckpt_blob b[8];
    size_t n = blobs_of(s, r, b);
    for (size_t i = 0; i < n; i++) o[i] = (rt_ckpt_slot){b[i].name, b[i].dtype, b[i].count, (void *)b[i].data};
    return n;
}

// ---- a full save, every rank on its own thread --------------------------------------

typedef struct {
    const char *dir;
    int rank;
    int rc;
    char err[512];
} job;

static void *save_thread(void *p) {
    job *j = p;
    rt_ckpt_blob b[8];
    size_t n = blobs_of(&saved[j->rank], j->rank, b);
    j->rc = rt_ckpt_save_rank(j->dir, WORLD, j->rank, &saved[j->rank].st, b, n, j->err,
                              sizeof j->err);
    return NULL;
}

static void *load_thread(void *p) {
    job *j = p;
    rt_ckpt_slot s[8];
    size_t n = slots_of(&loaded[j->rank], j->rank, s);
    j->rc = rt_ckpt_load_rank(j->dir, WORLD, j->rank, &loaded[j->rank].st, s, n, j->err,
                              sizeof j->err);
    return NULL;
}

// Runs `fn` for every rank concurrently; returns the number of ranks that failed.
static int all_ranks(const char *dir, void *(*fn)(void *), job *jobs) {
    pthread_t th[WORLD];
    for (int r = 0; r < WORLD; r++) {
        jobs[r] = (job){.dir = dir, .rank = r};
        pthread_create(&th[r], NULL, fn, &jobs[r]);
    }
    int failed = 0;
    for (int r = 0; r < WORLD; r++) {
        pthread_join(th[r], NULL);
        if (jobs[r].rc) {
            failed++;
            printf("  rank %d: %s\n", r, jobs[r].err);
        }
    }
    return failed;
}

static int save_all(const char *dir, uint64_t step) {
    job jobs[WORLD];
    for (int r = 0; r < WORLD; r++) fill(&saved[r], r, step);
    if (rt_ckpt_begin(dir, err, sizeof err) != 0) return -1;
    if (all_ranks(dir, save_thread, jobs) != 0) return -1;
    return rt_ckpt_finish(dir, WORLD, step, err, sizeof err);
}

static int load_one(const char *dir, int world, int r) {
    rt_ckpt_slot s[8];
    size_t n = slots_of(&loaded[r], r, s);
    return rt_ckpt_load_rank(dir, world, r, &loaded[r].st, s, n, err, sizeof err);
}

// ---- tests --------------------------------------------------------------------------

static void test_crc(void) {
    uint32_t c = io_crc32(0, "123456789", 9);
    CHECK(c == 0xCBF43926u, "crc32(\"123456789\") = 0x%08x, expected 0xcbf43926", c);
    unsigned char buf[1000];
    for (int i = 0; i < 1000; i++) buf[i] = (unsigned char)(i * 31);
    uint32_t whole = io_crc32(0, buf, 1000), parts = io_crc32(io_crc32(0, buf, 337), buf + 337, 663);
    CHECK(whole == parts, "crc32 continues across chunks (0x%08x)", whole);
}

static void test_round_trip(const char *dir) {
    int rc = save_all(dir, STEP);
    CHECK(rc == 0, "save %d ranks concurrently at step %d (%s)", WORLD, STEP, rc ? err : "ok");
    int ws = 0;
    uint64_t step = 0;
    rc = rt_ckpt_probe(dir, &ws, &step, err, sizeof err);
    CHECK(rc == 1 && ws == WORLD && step == STEP, "probe: complete, world %d, step %llu", ws,
          (unsigned long long)step);
    CHECK(count_entries(dir, ".tmp") == 0 && count_entries(dir, ".ckpt") == WORLD,
          "directory holds %d rank files and no temp files", count_entries(dir, ".ckpt"));
    char rp[4096];
    rt_ckpt_rank_path(dir, 3, rp, sizeof rp);
    CHECK(strstr(rp, "/rank00003.ckpt") != NULL, "rank file name: %s", strrchr(rp, '/') + 1);

    memset(loaded, 0, sizeof loaded);
    job jobs[WORLD];
    int failed = all_ranks(dir, load_thread, jobs);
    CHECK(failed == 0, "load %d ranks concurrently", WORLD);
    for (int r = 0; r < WORLD; r++) {
        uint64_t n = n_params(r);
        int same = memcmp(saved[r].params, loaded[r].params, n * 4) == 0 &&
                   memcmp(saved[r].exp_avg, loaded[r].exp_avg, n * 4) == 0 &&
                   memcmp(saved[r].exp_avg_sq, loaded[r].exp_avg_sq, n * 4) == 0 &&
                   memcmp(saved[r].counters, loaded[r].counters, sizeof saved[r].counters) == 0 &&
                   memcmp(saved[r].bf16, loaded[r].bf16, sizeof saved[r].bf16) == 0;
        CHECK(same, "rank %d: %llu params + 2 optimizer states + counters + bf16 bit-exact", r,
              (unsigned long long)n);
        CHECK(memcmp(&saved[r].st, &loaded[r].st, sizeof saved[r].st) == 0,
              "rank %d: step %llu, data cursor %llu, rng seed 0x%llx offset %llu restored", r,
              (unsigned long long)loaded[r].st.step, (unsigned long long)loaded[r].st.data_cursor,
              (unsigned long long)loaded[r].st.rng_seed,
              (unsigned long long)loaded[r].st.rng_offset);
    }
}

// Copies the good checkpoint's rank file aside so damage tests can restore it.
static unsigned char *backup;
static size_t backup_n;
static void restore(const char *path) { write_bytes(path, backup, backup_n); }

static void test_damage(const char *dir) {
    char p1[4096];
    rt_ckpt_rank_path(dir, 1, p1, sizeof p1);
    backup = read_bytes(p1, &backup_n);

    write_bytes(p1, backup, backup_n - 100);
    int rc = load_one(dir, WORLD, 1);
    CHECK_ERR(rc, err, "truncated rank file", "rank00001.ckpt", "truncated", "header says");
    rc = load_one(dir, WORLD, 0);
    CHECK(rc == 0, "other ranks still load (%s)", rc ? err : "ok");
    write_bytes(p1, backup, 50);
    rc = load_one(dir, WORLD, 1);
    CHECK_ERR(rc, err, "rank file cut inside the header", "truncated", "50 bytes");
    restore(p1);

    flip_byte(p1, (long)backup_n - 5000);
    rc = load_one(dir, WORLD, 1);
    CHECK_ERR(rc, err, "flipped payload byte", "rank00001.ckpt", "corrupt", "payload CRC32");
    restore(p1);
    flip_byte(p1, 30);  // inside the step field
    rc = load_one(dir, WORLD, 1);
    CHECK_ERR(rc, err, "flipped header byte", "corrupt", "header CRC32");
    restore(p1);
    flip_byte(p1, 0);
    rc = load_one(dir, WORLD, 1);
    CHECK_ERR(rc, err, "wrong magic", "not an fsdpgen checkpoint file");
    restore(p1);
    unsigned char *extra = malloc(backup_n + 3);
    memcpy(extra, backup, backup_n);
    memset(extra + backup_n, 0, 3);
    write_bytes(p1, extra, backup_n + 3);
    free(extra);
    rc = load_one(dir, WORLD, 1);
    CHECK_ERR(rc, err, "trailing bytes", "3 unexpected bytes");
    restore(p1);
    rc = load_one(dir, WORLD, 1);
    CHECK(rc == 0, "restored file loads again (%s)", rc ? err : "ok");

    // Any single damaged byte anywhere (header, table, blob, padding) must be refused.
    int accepted = 0, tried = 0;
    uint32_t x = 777;
    for (long pos = 0; pos < (long)backup_n; pos += 1 + (long)((x = x * 1664525u + 1013904223u) >> 27)) {
        flip_byte(p1, pos);
        if (load_one(dir, WORLD, 1) == 0) {
            accepted++;
            printf("  flip at byte %ld was accepted\n", pos);
        }
        restore(p1);
        tried++;
    }
    CHECK(accepted == 0 && tried > 500, "%d single-byte corruptions spread over the %zu-byte file: "
          "all refused (%d accepted)", tried, backup_n, accepted);

    // ---- mismatches with this run
    rc = load_one(dir, 2, 1);
    CHECK_ERR(rc, err, "wrong world size", "saved with world size 4", "world size 2");
    rt_ckpt_slot s[8];
    size_t n = slots_of(&loaded[1], 1, s);
    rc = rt_ckpt_load_rank(dir, WORLD, 1, NULL, s, n - 1, err, sizeof err);
    CHECK_ERR(rc, err, "blob in file not requested", "blob 'empty'", "does not expect");
    rt_ckpt_slot more[9];
    memcpy(more, s, n * sizeof *s);
    more[n] = (rt_ckpt_slot){"adam.step", RT_ST_I64, 1, loaded[1].counters};
    rc = rt_ckpt_load_rank(dir, WORLD, 1, NULL, more, n + 1, err, sizeof err);
    CHECK_ERR(rc, err, "requested blob missing", "has no blob 'adam.step'");
    s[0].count = 999;
    rc = rt_ckpt_load_rank(dir, WORLD, 1, NULL, s, n, err, sizeof err);
    CHECK_ERR(rc, err, "element count differs", "'params' has 1001 F32 elements, expected 999 F32");
    s[0].count = 1001;
    s[0].dtype = RT_ST_BF16;
    rc = rt_ckpt_load_rank(dir, WORLD, 1, NULL, s, n, err, sizeof err);
    CHECK_ERR(rc, err, "dtype differs", "expected 1001 BF16");
    rc = rt_ckpt_load_rank(dir, WORLD, WORLD, NULL, s, n, err, sizeof err);
    CHECK_ERR(rc, err, "rank out of range", "rank 4 out of range");

    // A rank file from another step (a save that crashed after rank 1 wrote, if the
    // marker had not been removed) is refused by the step check.
    rank_state other;
    fill(&other, 1, STEP + 1);
    rt_ckpt_blob b[8];
    n = blobs_of(&other, 1, b);
    rt_ckpt_save_rank(dir, WORLD, 1, &other.st, b, n, err, sizeof err);
    rc = load_one(dir, WORLD, 1);
    CHECK_ERR(rc, err, "rank file from another step", "is from step 43", "marker says step 42");
    rc = rt_ckpt_finish(dir, WORLD, STEP, err, sizeof err);
    CHECK_ERR(rc, err, "finish refuses mixed steps", "step 43");
    restore(p1);

    // ---- missing pieces
    char p2[4096], mk[4096];
    rt_ckpt_rank_path(dir, 2, p2, sizeof p2);
    if (snprintf(mk, sizeof mk, "%s/COMPLETE", dir) >= (int)sizeof mk) return;
    size_t n2;
    unsigned char *b2 = read_bytes(p2, &n2);
    remove(p2);
    rc = load_one(dir, WORLD, 2);
    CHECK_ERR(rc, err, "missing rank file", "missing rank file", "rank00002.ckpt", "world size 4");
    rc = rt_ckpt_finish(dir, WORLD, STEP, err, sizeof err);
    CHECK_ERR(rc, err, "finish refuses a missing rank file", "rank00002.ckpt");
    write_bytes(p2, b2, n2);
    free(b2);

    size_t nm;
    unsigned char *m = read_bytes(mk, &nm);
    remove(mk);
    rc = load_one(dir, WORLD, 0);
    CHECK_ERR(rc, err, "missing COMPLETE marker", "no complete checkpoint", "COMPLETE' is missing");
    CHECK(rt_ckpt_probe(dir, NULL, NULL, err, sizeof err) == 0, "probe says 0 (start fresh)");
    write_bytes(mk, "fsdpgen checkpoint 1\nworld_size four\n", 37);
    rc = rt_ckpt_probe(dir, NULL, NULL, err, sizeof err);
    CHECK_ERR(rc, err, "malformed marker", "COMPLETE' is malformed");
    write_bytes(mk, m, nm);
    free(m);
    CHECK(rt_ckpt_probe(tpath("never_saved"), NULL, NULL, err, sizeof err) == 0,
          "probe of a directory that does not exist says 0");
    rc = load_one(dir, WORLD, 0);
    CHECK(rc == 0, "checkpoint loads again once repaired (%s)", rc ? err : "ok");
    free(backup);
}

static void test_failed_saves(const char *dir) {
    // A new save starts by removing the marker: until it finishes nothing loads, so a
    // crash between here and finish cannot resume from a mix of old and new files.
    int rc = rt_ckpt_begin(dir, err, sizeof err);
    CHECK(rc == 0 && rt_ckpt_probe(dir, NULL, NULL, err, sizeof err) == 0,
          "begin removes the previous marker (probe 0)");
    rc = load_one(dir, WORLD, 0);
    CHECK_ERR(rc, err, "load during a save in progress", "no complete checkpoint");

    // Writes fail partway (file size cap below one rank file): no rank file, no temp file,
    // no marker.
    const char *fresh = tpath("ckpt_fail");
    rc = rt_ckpt_begin(fresh, err, sizeof err);
    CHECK(rc == 0, "begin creates the directory");
    rt_ckpt_blob b[8];
    size_t n = blobs_of(&saved[0], 0, b);
    limit_file_size(6000);
    rc = rt_ckpt_save_rank(fresh, WORLD, 0, &saved[0].st, b, n, err, sizeof err);
    unlimit_file_size();
    CHECK_ERR(rc, err, "save failing midway (file size cap 6000 bytes)", "rank00000.ckpt.tmp",
              "File too large");
    CHECK(count_entries(fresh, "") == 0, "nothing left in the directory (%d entries)",
          count_entries(fresh, ""));
    rc = rt_ckpt_finish(fresh, WORLD, STEP, err, sizeof err);
    CHECK_ERR(rc, err, "finish after a failed save", "missing rank file");
    CHECK(rt_ckpt_probe(fresh, NULL, NULL, err, sizeof err) == 0, "no marker written");

    // The directory cannot be created: a regular file sits where it should be.
    write_bytes(tpath("a_file"), "x", 1);
    char under[4096];
    if (snprintf(under, sizeof under, "%s/ckpt", tpath("a_file")) >= (int)sizeof under) return;
    rc = rt_ckpt_begin(under, err, sizeof err);
    CHECK_ERR(rc, err, "directory under a regular file", "cannot create checkpoint directory");
    rc = rt_ckpt_save_rank(under, WORLD, 0, &saved[0].st, b, n, err, sizeof err);
    CHECK_ERR(rc, err, "save into an unusable directory", "cannot create", "rank00000.ckpt.tmp");

    // Unwritable directory. Permissions do not bind root, so as root the save runs in a
    // forked child that drops to uid/gid 65534 (nobody) first.
    const char *ro = tpath("readonly");
    rt_ckpt_begin(ro, err, sizeof err);
    chmod(ro, 0555);
    chmod(test_dir(), 0711);  // the child may pass through, so only `ro` stops it
    int pipefd[2];
    if (pipe(pipefd) == 0) {
        pid_t pid = fork();
        if (pid == 0) {
            close(pipefd[0]);
            if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(3);
            char cerr[512] = "";
            int crc = rt_ckpt_save_rank(ro, WORLD, 0, &saved[0].st, b, n, cerr, sizeof cerr);
            if (write(pipefd[1], cerr, strlen(cerr)) < 0) _exit(4);
            _exit(crc == -1 ? 0 : 1);
        }
        close(pipefd[1]);
        char msg[512] = "";
        ssize_t got = read(pipefd[0], msg, sizeof msg - 1);
        msg[got > 0 ? got : 0] = '\0';
        close(pipefd[0]);
        int status = 0;
        waitpid(pid, &status, 0);
        rc = (WIFEXITED(status) && WEXITSTATUS(status) == 0) ? -1 : 0;
        CHECK_ERR(rc, msg, "unwritable directory (save as an unprivileged user)",
                  "rank00000.ckpt.tmp", "Permission denied");
    }
    chmod(test_dir(), 0700);
    CHECK(count_entries(ro, "") == 0, "nothing left in the unwritable directory");
    chmod(ro, 0755);

    // Bad arguments are refused before any file is created.
    rt_ckpt_blob dup[2] = {b[0], b[0]};
    rc = rt_ckpt_save_rank(fresh, WORLD, 0, &saved[0].st, dup, 2, err, sizeof err);
    CHECK_ERR(rc, err, "duplicate blob names", "'params' given twice");
    rc = rt_ckpt_save_rank(fresh, WORLD, WORLD, &saved[0].st, b, n, err, sizeof err);
    CHECK_ERR(rc, err, "rank >= world", "rank 4 out of range for world size 4");
    CHECK(count_entries(fresh, "") == 0, "refused saves create no file");

    // And a complete save over the same directory works again.
    rc = save_all(dir, STEP + 10);
    int ws;
    uint64_t step;
    CHECK(rc == 0 && rt_ckpt_probe(dir, &ws, &step, err, sizeof err) == 1 && step == STEP + 10,
          "re-save at step %d completes", STEP + 10);
    rc = load_one(dir, WORLD, 3);
    CHECK(rc == 0 && loaded[3].st.step == STEP + 10, "and loads (%s)", rc ? err : "ok");
}

// ---- checkpoint directories (ROOT/step_N) -------------------------------------------

// A full save of `step` into ROOT: stage, every rank, finish, publish (keep K).
static int save_step(const char *root, uint64_t step, int keep, int publish) {
    char stage[4096];
    job jobs[WORLD];
    for (int r = 0; r < WORLD; r++) fill(&saved[r], r, step);
    if (rt_ckpt_stage(root, step, err, sizeof err) != 0 ||
        rt_ckpt_stage_path(root, step, stage, sizeof stage) != 0 ||
        all_ranks(stage, save_thread, jobs) != 0)
        return -1;
    if (!publish) return 0;  // as a save killed before its marker
    if (rt_ckpt_finish(stage, WORLD, step, err, sizeof err) != 0) return -1;
    return rt_ckpt_publish(root, step, keep, err, sizeof err);
}

static int newest(const char *root, uint64_t *step, char *dir) {
    return rt_ckpt_find(root, dir, 4096, NULL, step, err, sizeof err);
}

static void test_directories(void) {
    static char root[1024], path[2048], found[4096];  // sized so the joins fit
    snprintf(root, sizeof root, "%s", tpath("ckroot"));
    uint64_t step = 0;
    CHECK(newest(root, &step, found) == 0, "find in a missing ROOT: none");
    int rc = save_step(root, 10, 2, 1);
    rc |= save_step(root, 20, 2, 1);
    rc |= save_step(root, 30, 2, 1);
    snprintf(path, sizeof path, "%s/step_00000010", root);
    CHECK(rc == 0 && newest(root, &step, found) == 1 && step == 30 && strstr(found, "/step_00000030") &&
              !file_exists(path) && count_entries(root, "step_") == 2,
          "saves of steps 10, 20, 30 keeping 2: the newest is step 30, step 10 removed (%s)",
          rc ? err : found);
    rc = load_one(found, WORLD, 2);
    CHECK(rc == 0 && loaded[2].st.step == 30, "... and it loads (%s)", rc ? err : "ok");

    // A save killed before its marker: the staging directory is never found; the next save
    // of that step replaces it.
    rc = save_step(root, 40, 2, 0);
    CHECK(rc == 0 && newest(root, &step, found) == 1 && step == 30,
          "a staging step 40 without its marker: the newest is still step 30");
    rc = save_step(root, 40, 2, 1);
    CHECK(rc == 0 && newest(root, &step, found) == 1 && step == 40 && count_entries(root, ".tmp") == 0,
          "saving step 40 again over the leftover: published, no staging left (%s)", rc ? err : "ok");
    rt_ckpt_stage(root, 41, err, sizeof err);
    rt_ckpt_unstage(root, 41);
    CHECK(count_entries(root, ".tmp") == 0, "rt_ckpt_unstage removes a staging directory");
    rc = save_step(root, 40, 2, 1);
    CHECK_ERR(rc, err, "publishing over a complete step 40", "already exists");
    rt_ckpt_unstage(root, 40);

    // keep 0 keeps all; an incomplete step directory (a removal cut short) is never found
    // and is removed by the next save above it.
    rc = save_step(root, 50, 0, 1);
    CHECK(rc == 0 && count_entries(root, "step_") == 3, "keep 0: steps 30, 40 and 50 all kept");
    snprintf(path, sizeof path, "%s/step_00000060", root);
    mkdir(path, 0755);
    CHECK(newest(root, &step, found) == 1 && step == 50, "an empty step 60 directory is not a checkpoint");
    rc = save_step(root, 70, 1, 1);
    CHECK(rc == 0 && !file_exists(path) && count_entries(root, "step_") == 1 &&
              newest(root, &step, found) == 1 && step == 70,
          "saving step 70 keeping 1: step 60's debris and steps 30-50 removed (%s)", rc ? err : "ok");

    // Markers that lie are errors, not skipped.
    snprintf(path, sizeof path, "%s/step_00000080", root);
    rename(found, path);
    rc = newest(root, &step, found);
    CHECK_ERR(rc, err, "a step directory renamed by hand", "step_00000080", "holds step 70");
    snprintf(found, sizeof found, "%s/COMPLETE", path);
    write_bytes(found, "junk", 4);
    rc = newest(root, &step, found);
    CHECK_ERR(rc, err, "a malformed marker", "malformed");

    // ROOT itself holding a checkpoint (the layout before step directories) competes by step.
    static char old[4096];
    snprintf(old, sizeof old, "%s", tpath("ckold"));
    save_all(old, 5);
    CHECK(newest(old, &step, found) == 1 && step == 5 && !strcmp(found, old),
          "a checkpoint in ROOT itself is found");
    rc = save_step(old, 6, 2, 1);
    CHECK(rc == 0 && newest(old, &step, found) == 1 && step == 6 && strstr(found, "/step_00000006") &&
              rt_ckpt_probe(old, NULL, NULL, err, sizeof err) == 1,
          "a step directory above it is newer; ROOT's own checkpoint is left as it was");
}

int main(void) {
    printf("== checkpoint ==\n");
    static char dir[4096];  // tpath's buffers rotate; keep our own copy
    snprintf(dir, sizeof dir, "%s", tpath("ckpt/step"));  // begin creates missing parents
    test_crc();
    test_round_trip(dir);
    test_damage(dir);
    test_failed_saves(dir);
    test_directories();
    return check_summary();
}

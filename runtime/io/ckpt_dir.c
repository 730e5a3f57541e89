// A directory of checkpoints (see rt_checkpoint.h, "checkpoint directories"): ROOT/step_N
// holds one complete checkpoint each. A save is written beside the others, in the staging
// directory ROOT/step_N.tmp, and published by renaming it to ROOT/step_N once its COMPLETE
// marker is durable; only then are older ones removed. So a save that fails (a full disk)
// or is killed at any point leaves every checkpoint published before it intact, and the
// newest complete one is what rt_ckpt_find returns.
#include "rt_checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io_atomic.h"
#include "io_err.h"

#define STAGE_SUFFIX ".tmp"

// ---- names --------------------------------------------------------------------------

int rt_ckpt_step_path(const char *root, uint64_t step, char *buf, size_t buflen) {
    int n = snprintf(buf, buflen, "%s/step_%08llu", root, (unsigned long long)step);
    return (n < 0 || (size_t)n >= buflen) ? -1 : 0;
}

int rt_ckpt_stage_path(const char *root, uint64_t step, char *buf, size_t buflen) {
    int n = snprintf(buf, buflen, "%s/step_%08llu%s", root, (unsigned long long)step,
                     STAGE_SUFFIX);
    return (n < 0 || (size_t)n >= buflen) ? -1 : 0;
}

// "step_<digits>" (kind 1) or "step_<digits>.tmp" (kind 2), else 0.
static int parse_name(const char *name, uint64_t *step) {
    if (strncmp(name, "step_", 5) != 0) return 0;
    const char *p = name + 5;
    uint64_t v = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (v > (UINT64_MAX - 9) / 10) return 0;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (digits == 0) return 0;
    *step = v;
    if (*p == '\0') return 1;
    return strcmp(p, STAGE_SUFFIX) == 0 ? 2 : 0;
}

// ---- removal ------------------------------------------------------------------------

// Removes a checkpoint directory and the files in it (checkpoint directories are flat; a
// subdirectory or a symlink in place of the directory is left alone, as an error). The
// COMPLETE marker goes first, durably, so a crash halfway leaves an incomplete
// directory, which never loads and is removed at the next save.
static int remove_ckpt_dir(const char *path, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return 0;
        return IO_SYSERR(err, errlen, "cannot open checkpoint directory '%s' to remove it", path);
    }
    if (unlinkat(fd, "COMPLETE", 0) == 0) fsync(fd);
    DIR *d = fdopendir(fd);
    if (!d) {
        int rc = IO_SYSERR(err, errlen, "cannot list '%s' to remove it", path);
        close(fd);
        return rc;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (unlinkat(fd, e->d_name, 0) != 0)
            rc = IO_SYSERR(err, errlen, "cannot remove '%s/%s' (a checkpoint directory holds only "
                           "files)", path, e->d_name);
    }
    closedir(d);  // closes fd
    if (rc == 0 && rmdir(path) != 0)
        rc = IO_SYSERR(err, errlen, "cannot remove checkpoint directory '%s'", path);
    return rc;
}

static int is_dir_nofollow(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

// ---- saving -------------------------------------------------------------------------

int rt_ckpt_stage(const char *root, uint64_t step, char *err, size_t errlen) {
    char stage[4096];
    if (rt_ckpt_stage_path(root, step, stage, sizeof stage) != 0)
        return io_errf(err, errlen, "checkpoint directory path too long: '%s'", root);
    // A leftover of a save of this step that did not finish.
    if (is_dir_nofollow(stage) && remove_ckpt_dir(stage, err, errlen) != 0) return -1;
    return rt_ckpt_begin(stage, err, errlen);  // mkdir -p, fsync ROOT
}

void rt_ckpt_unstage(const char *root, uint64_t step) {
    char stage[4096];
    if (rt_ckpt_stage_path(root, step, stage, sizeof stage) == 0 && is_dir_nofollow(stage))
        remove_ckpt_dir(stage, NULL, 0);
}

typedef struct {
    uint64_t step;
    char name[sizeof(((struct dirent *)0)->d_name)];
} ck_entry_name;

static int cmp_step_desc(const void *a, const void *b) {
    uint64_t x = ((const ck_entry_name *)a)->step, y = ((const ck_entry_name *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

// Removes, below step `newest`: stale staging directories, incomplete step directories,
// and complete ones beyond the newest `keep` (keep 0: none).
static int prune(const char *root, uint64_t newest, int keep, char *err, size_t errlen) {
    DIR *d = opendir(root);
    if (!d) return IO_SYSERR(err, errlen, "cannot list checkpoint directory '%s'", root);
    ck_entry_name *kept = NULL;
    size_t n = 0, cap = 0;
    char path[4096];
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        uint64_t s = 0;
        int kind = parse_name(e->d_name, &s);
        if (!kind || s >= newest) continue;
        int len = snprintf(path, sizeof path, "%s/%s", root, e->d_name);
        if (len < 0 || (size_t)len >= sizeof path || !is_dir_nofollow(path)) continue;
        int complete = kind == 1 ? rt_ckpt_probe(path, NULL, NULL, NULL, 0) : 0;
        if (complete < 0) continue;  // a malformed marker: not ours to judge, left alone
        if (!complete) {
            rc = remove_ckpt_dir(path, err, errlen);
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            ck_entry_name *k = realloc(kept, cap * sizeof *kept);
            if (!k) {
                rc = io_errf(err, errlen, "out of memory listing '%s'", root);
                break;
            }
            kept = k;
        }
        kept[n].step = s;
        snprintf(kept[n].name, sizeof kept[n].name, "%s", e->d_name);
        n++;
    }
    closedir(d);
    if (rc == 0 && keep > 0 && n > (size_t)(keep - 1)) {
        qsort(kept, n, sizeof *kept, cmp_step_desc);
        for (size_t i = (size_t)(keep - 1); i < n && rc == 0; i++) {
            snprintf(path, sizeof path, "%s/%s", root, kept[i].name);
            rc = remove_ckpt_dir(path, err, errlen);
        }
    }
    free(kept);
    return rc;
}

int rt_ckpt_publish(const char *root, uint64_t step, int keep, char *err, size_t errlen) {
    char stage[4096], final[4096];
    if (rt_ckpt_stage_path(root, step, stage, sizeof stage) != 0 ||
        rt_ckpt_step_path(root, step, final, sizeof final) != 0)
        return io_errf(err, errlen, "checkpoint directory path too long: '%s'", root);
    if (rt_ckpt_probe(stage, NULL, NULL, err, errlen) != 1)
        return io_errf(err, errlen, "checkpoint publish: '%s' is not a complete checkpoint", stage);
    struct stat st;
    if (lstat(final, &st) == 0) {
        // A complete one of the same step is never replaced (a concurrent save into this
        // directory, or a caller that did not check); an incomplete one is debris.
        if (!S_ISDIR(st.st_mode))
            return io_errf(err, errlen, "cannot publish checkpoint '%s': %s is in the way", final,
                           io_file_kind(st.st_mode));
        if (rt_ckpt_probe(final, NULL, NULL, NULL, 0) != 0)
            return io_errf(err, errlen, "cannot publish checkpoint '%s': it already exists (is "
                           "another run saving into '%s'?)", final, root);
        if (remove_ckpt_dir(final, err, errlen) != 0) return -1;
    }
    if (rename(stage, final) != 0)
        return IO_SYSERR(err, errlen, "cannot rename '%s' to '%s'", stage, final);
    if (io_fsync_parent_dir(final, err, errlen) != 0) return -1;
    if (prune(root, step, keep, err, errlen) != 0) {
        char why[512];
        snprintf(why, sizeof why, "%s", err ? err : "");
        return io_errf(err, errlen, "checkpoint '%s' is saved, but removing older ones failed: %s",
                       final, why);
    }
    return 0;
}

// ---- finding the newest -------------------------------------------------------------

int rt_ckpt_find(const char *root, char *dir, size_t dirlen, int *world_size, uint64_t *step,
                 char *err, size_t errlen) {
    int best = 0, bw = 0;
    uint64_t bs = 0;
    char best_dir[4096] = "";
    // ROOT itself: a checkpoint written before step directories, or one given directly.
    int pr = rt_ckpt_probe(root, &bw, &bs, err, errlen);
    if (pr < 0) return -1;
    if (pr == 1) {
        best = 1;
        snprintf(best_dir, sizeof best_dir, "%s", root);
    }
    DIR *d = opendir(root);
    if (!d) {
        if (errno != ENOENT && errno != ENOTDIR)
            return IO_SYSERR(err, errlen, "cannot list checkpoint directory '%s'", root);
    } else {
        struct dirent *e;
        char path[4096];
        while ((e = readdir(d))) {
            uint64_t s = 0;
            if (parse_name(e->d_name, &s) != 1) continue;
            int len = snprintf(path, sizeof path, "%s/%s", root, e->d_name);
            if (len < 0 || (size_t)len >= sizeof path || !is_dir_nofollow(path)) continue;
            int w = 0;
            uint64_t ms = 0;
            pr = rt_ckpt_probe(path, &w, &ms, err, errlen);
            if (pr < 0) {
                closedir(d);
                return -1;
            }
            if (pr == 0) continue;  // a removal that was cut short: never loads
            if (ms != s) {
                closedir(d);
                return io_errf(err, errlen, "checkpoint '%s' holds step %llu, not the step its "
                               "name says (renamed by hand?)", path, (unsigned long long)ms);
            }
            if (!best || s > bs) {
                best = 1;
                bs = s;
                bw = w;
                snprintf(best_dir, sizeof best_dir, "%s", path);
            }
        }
        closedir(d);
    }
    if (!best) return 0;
    if (dir) {
        int n = snprintf(dir, dirlen, "%s", best_dir);
        if (n < 0 || (size_t)n >= dirlen)
            return io_errf(err, errlen, "checkpoint path too long: '%s'", best_dir);
    }
    if (world_size) *world_size = bw;
    if (step) *step = bs;
    return 1;
}

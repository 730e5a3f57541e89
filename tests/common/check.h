// Minimal test harness shared by every C test suite: named checks that print what
// they compared, and the closing `N passed, N failed` line tests/run_all.sh sums up.
#ifndef FSDPGEN_TESTS_CHECK_H
#define FSDPGEN_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>

// A test of several translation units defines CHECK_SHARED_COUNTS before including this,
// and one of its files defines check_passed_ and check_failed_: its checks then count
// together, as one file's would.
#ifdef CHECK_SHARED_COUNTS
extern int check_passed_, check_failed_;
#else
static int check_passed_ = 0;
static int check_failed_ = 0;
#endif

// CHECK(cond, "what was compared: %d", ...) prints one PASS/FAIL line per check.
#define CHECK(cond, ...)                                              \
    do {                                                              \
        if (cond) {                                                   \
            check_passed_++;                                          \
            printf("PASS ");                                          \
        } else {                                                      \
            check_failed_++;                                          \
            printf("FAIL %s:%d ", __FILE__, __LINE__);                \
        }                                                             \
        printf(__VA_ARGS__);                                          \
        printf("\n");                                                 \
    } while (0)

// CHECK_CLOSE(name, got, want, tol): relative-or-absolute closeness, prints both values.
#define CHECK_CLOSE(name, got, want, tol)                                              \
    do {                                                                               \
        double g_ = (double)(got), w_ = (double)(want);                                \
        double d_ = fabs(g_ - w_), s_ = fabs(w_) > 1.0 ? fabs(w_) : 1.0;               \
        CHECK(d_ <= (tol) * s_, "%s: got %.9g want %.9g (diff %.3g, tol %.3g)", name, \
              g_, w_, d_, (double)(tol));                                              \
    } while (0)

// Prints the closing line and returns the process exit status.
static inline int check_summary(void) {
    printf("%d passed, %d failed\n", check_passed_, check_failed_);
    return check_failed_ == 0 ? 0 : 1;
}

#endif

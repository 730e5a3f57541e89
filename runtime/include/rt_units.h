// Byte counts as a person reads them, by generator/util/units.lua's rule: binary units (KiB =
// 1024 bytes) with at most three digits. Messages print them next to the exact bytes,
// which tests and scripts read.
#pragma once
#include <stddef.h>
#include <stdio.h>

typedef struct {
    char s[24];
} rt_units_text;

// "27.8 MiB", "386 KiB", "1.50 GiB", "0.98 GiB" (never four digits), "96 B". The text
// lives in the returned value: use it within the same expression, e.g. as a printf argument.
static inline rt_units_text rt_units_bytes(size_t n) {
    static const char* const names[] = {"GiB", "MiB", "KiB"};
    rt_units_text t;
    for (int i = 0; i < 3; i++) {
        const double unit = (double)(1ull << (30 - 10 * i));
        if ((double)n >= unit * 999.5 / 1024) {
            const double v = (double)n / unit;
            if (v >= 99.95) snprintf(t.s, sizeof t.s, "%.0f %s", v, names[i]);
            else if (v >= 9.995) snprintf(t.s, sizeof t.s, "%.1f %s", v, names[i]);
            else snprintf(t.s, sizeof t.s, "%.2f %s", v, names[i]);
            return t;
        }
    }
    snprintf(t.s, sizeof t.s, "%zu B", n);
    return t;
}

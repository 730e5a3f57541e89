// The operation graph cuDNN prints in its API log (CUDNN_LOGLEVEL_DBG=3) as compact text,
// for comparing the graphs rt_cudnn.h builds with the ones NVIDIA's cudnn-frontend builds
// (tests/cuda/cudnn_sdpa_graphs.txt): the last OPERATIONGRAPH descriptor the log shows (the
// one destroyed last), one line per operation, descriptor and tensor, a tensor's fields on
// its line (data type, dims, strides, UID, virtual, by value), UIDs renumbered U0, U1, ... in
// order of appearance (the frontend numbers its own virtual tensors). For test_cudnn_host.
#ifndef FSDPGEN_TESTS_CUDA_CUDNN_GRAPH_LOG_H
#define FSDPGEN_TESTS_CUDA_CUDNN_GRAPH_LOG_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The text between "val=" and the next ';' (or the type after "type=" up to ':' for a
// descriptor line) into out.
static void cgl_value(const char* line, char* out, size_t n) {
    const char* v = strstr(line, "val=");
    const char* end = v ? strchr(v, ';') : NULL;
    if (!v) {
        v = strstr(line, "type=");
        end = v ? strrchr(v, ':') : NULL;
        if (v) v += 1;  // "ype=..." keeps the loop below uniform
    }
    if (!v || !end || end < v + 4) {
        snprintf(out, n, "?");
        return;
    }
    v += 4;
    snprintf(out, n, "%.*s", (int)(end - v), v);
}

// Shortens an enum value in place: no CUDNN_BACKEND_ / CUDNN_DATA_ / CUDNN_ prefix, no
// _DESCRIPTOR suffix, no " (number)".
static void cgl_short(char* v) {
    static const char* const cut[] = {"CUDNN_BACKEND_", "CUDNN_DATA_", "CUDNN_", "_DESCRIPTOR"};
    for (size_t i = 0; i < sizeof cut / sizeof cut[0]; i++)
        for (char* h; (h = strstr(v, cut[i]));)
            memmove(h, h + strlen(cut[i]), strlen(h + strlen(cut[i])) + 1);
    char* par = strstr(v, " (");
    if (par && par[strlen(par) - 1] == ')') *par = 0;
}

// Normalized text of the log's last operation graph (malloc'd), NULL if there is none.
static char* cgl_normalize(const char* path) {
    FILE* f = fopen(path, "r");
    if (!f) return NULL;
    char line[1024], val[512];
    char *out = NULL, *uids = calloc(1, 1);
    size_t cap = 0, len = 0;
    int in = 0, tensor_depth = -1, nuid = 0, base = -1;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "descriptor: type=CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR")) {
            in = 1, len = 0, tensor_depth = -1, nuid = 0, base = -1;
            uids[0] = 0;
            continue;
        }
        if (!in) continue;
        if (strncmp(line, "i!", 2) != 0 || strncmp(line, "i! Time", 7) == 0) {
            in = 0;
            continue;
        }
        const char* p = line + 2;
        int depth = 0;
        while (p[depth] == ' ') depth++;
        p += depth;
        char key[64];
        if (sscanf(p, "%63[^:]:", key) != 1) continue;
        cgl_value(p, val, sizeof val);
        cgl_short(val);
        if (tensor_depth >= 0 && depth <= tensor_depth) tensor_depth = -1;
        if (!strcmp(key, "uid")) {  // U<k>: the k-th distinct UID
            char pat[600];
            snprintf(pat, sizeof pat, "|%s=", val);
            char* hit = strstr(uids, pat);
            int k = hit ? atoi(hit + strlen(pat)) : nuid++;
            if (!hit) {
                size_t ul = strlen(uids);
                uids = realloc(uids, ul + strlen(pat) + 16);
                snprintf(uids + ul, strlen(pat) + 16, "%s%d", pat, k);
            }
            snprintf(val, sizeof val, "U%d", k);
        }
        char piece[700];
        if (base < 0) base = depth;
        if (tensor_depth >= 0) {  // a field of the tensor on the current line
            if (!strcmp(key, "nbDims") || !strcmp(key, "alignmentInBytes")) continue;
            if (!strcmp(key, "isVirtual") || !strcmp(key, "isByVal")) {
                if (strcmp(val, "true")) continue;
                snprintf(val, sizeof val, "%s", key[2] == 'V' ? "virtual" : "by-value");
            }
            snprintf(piece, sizeof piece, " %s", val);
        } else {
            const int ind = (depth - base) / 2;
            const int tensor = strstr(p, "type=CUDNN_BACKEND_TENSOR_DESCRIPTOR:") != NULL;
            snprintf(piece, sizeof piece, "%s%*s%s:%s%s", len ? "\n" : "", ind, "", key,
                     tensor ? "" : " ", tensor ? "" : val);
            if (tensor) tensor_depth = depth;
        }
        size_t pl = strlen(piece);
        if (len + pl + 2 > cap) {
            cap = 2 * (len + pl + 2);
            out = realloc(out, cap);
        }
        memcpy(out + len, piece, pl + 1);
        len += pl;
    }
    fclose(f);
    free(uids);
    if (out && len) {
        out[len++] = '\n';
        out[len] = 0;
    }
    return len ? out : (free(out), NULL);
}

#endif

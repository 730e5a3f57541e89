// hf.c — Hugging Face directories: the transforms of rt_hf_map (both ways), the checks of
// DIR, and --save-hf DIR: after training, DIR/model.safetensors (HF's names and layouts,
// fp32; LoRA adapters merged into their weights) and DIR/config.json. Reading them back is
// hf_load.c.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_safetensors.h"
#include "train_internal.h"

// ---- transforms -------------------------------------------------------------------------

int64_t train_hf_numel(const rt_hf_tensor* e) {
    int64_t n = 1;
    for (int d = 0; d < e->ndim; d++) n *= e->shape[d];
    return n;
}

void train_hf_move(const rt_model* m, const rt_hf_tensor* e, float* const* p, float* hf, int to_hf) {
    const int64_t rows = e->shape[0], cols = e->ndim > 1 ? e->shape[1] : 1;
    if (e->op == RT_HF_COPY) {
        if (to_hf)
            memcpy(hf, p[0], (size_t)train_hf_numel(e) * sizeof(float));
        else
            memcpy(p[0], hf, (size_t)train_hf_numel(e) * sizeof(float));
    } else if (e->op == RT_HF_TRANSPOSE || e->op == RT_HF_QKV) {
        // hf [in, sum of outs]: column block k holds parameter k transposed
        int64_t col0 = 0;
        for (int k = 0; k < 3 && e->src[k] >= 0; k++) {
            const int64_t out = m->params[e->src[k]].shape[0];
            for (int64_t r = 0; r < out; r++)
                for (int64_t c = 0; c < rows; c++) {
                    float* h = &hf[c * cols + col0 + r];
                    float* w = &p[k][r * rows + c];
                    if (to_hf)
                        *h = *w;
                    else
                        *w = *h;
                }
            col0 += out;
        }
    } else if (e->op == RT_HF_ROPE) {
        const int64_t hd = rows / e->heads, half = hd / 2;
        for (int64_t h = 0; h < e->heads; h++)
            for (int64_t i = 0; i < half; i++)
                for (int64_t j = 0; j < 2; j++) {
                    float* a = &hf[(h * hd + j * half + i) * cols];
                    float* w = &p[0][(h * hd + 2 * i + j) * cols];
                    if (to_hf)
                        memcpy(a, w, (size_t)cols * sizeof(float));
                    else
                        memcpy(w, a, (size_t)cols * sizeof(float));
                }
    } else if (to_hf) {  // RT_HF_ZEROS
        memset(hf, 0, (size_t)train_hf_numel(e) * sizeof(float));
    }
}

// ---- directories ------------------------------------------------------------------------

int train_hf_prepare_dir(const char* opt, const char* dir, int create) {
    struct stat st;
    if (create && lstat(dir, &st) != 0 && errno == ENOENT && mkdir(dir, 0777) != 0) {
        fprintf(stderr, "fsdpgen: %s %s: cannot create the directory: %s (its parent must exist)\n",
                opt, dir, strerror(errno));
        return 1;
    }
    if (lstat(dir, &st) != 0) {
        fprintf(stderr, "fsdpgen: %s %s: %s\n", opt, dir, strerror(errno));
        return 1;
    }
    if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
        fprintf(
            stderr, "fsdpgen: %s %s: %s (give a real directory)\n", opt, dir,
            S_ISLNK(st.st_mode) ? "it is a symlink, which is never followed" : "not a directory");
        return 1;
    }
    if (create && access(dir, W_OK) != 0) {
        fprintf(stderr, "fsdpgen: %s %s: the directory is not writable\n", opt, dir);
        return 1;
    }
    return 0;
}

// ---- save -------------------------------------------------------------------------------

// A LoRALinear's weight as a model without adapters holds it: W + scale * B A (torchtune's
// merged checkpoint), the product summed in double. NULL when out of memory.
static float* lora_merged(const rt_model* m, const rt_hf_tensor* e, float* const* full) {
    const rt_model_param* w = &m->params[e->src[0]];
    const int64_t out = w->shape[0], in = w->shape[1], rank = m->params[e->lora[0]].shape[0];
    const float *W = full[e->src[0]], *A = full[e->lora[0]], *B = full[e->lora[1]];
    float* merged = malloc((size_t)(out * in) * sizeof(float));
    for (int64_t r = 0; merged && r < out; r++)
        for (int64_t c = 0; c < in; c++) {
            double s = 0;
            for (int64_t k = 0; k < rank; k++) s += (double)B[r * rank + k] * A[k * in + c];
            merged[r * in + c] = (float)(W[r * in + c] + e->lora_scale * s);
        }
    return merged;
}

static int write_hf(train_run* run, float* const* full, const char* dir) {
    const rt_model* m = run->m;
    const rt_hf_map* h = m->hf;
    rt_st_tensor* t = calloc((size_t)h->ntensors, sizeof *t);
    float** bufs = calloc((size_t)h->ntensors, sizeof *bufs);
    char err[512], path[4200];
    int rc = !t || !bufs, n = 0;
    for (int i = 0; i < h->ntensors && !rc; i++) {
        const rt_hf_tensor* e = &h->tensors[i];
        if (e->tied) continue;
        float* merged = e->lora_scale != 0 ? lora_merged(m, e, full) : NULL;
        if ((e->lora_scale != 0 && !merged) ||
            !(bufs[n] = malloc((size_t)train_hf_numel(e) * sizeof(float))))
            rc = 1;
        else {
            float* p[3] = {NULL, NULL, NULL};
            for (int k = 0; k < 3; k++) p[k] = e->src[k] >= 0 ? full[e->src[k]] : NULL;
            if (merged) p[0] = merged;
            train_hf_move(m, e, p, bufs[n], 1);
            t[n] = (rt_st_tensor){e->name, RT_ST_F32, e->ndim, e->shape, bufs[n]};
            n++;
        }
        free(merged);
    }
    if (rc) train_fail(run, "--save-hf %s: out of memory", dir);
    rt_st_meta meta[] = {{"format", "pt"}};
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!rc && rt_st_write(path, t, (size_t)n, meta, 1, err, sizeof err) != 0) {
        train_fail(run, "--save-hf %s: %s", dir, err);
        rc = 1;
    }
    if (!rc && train_hf_write_config(m, dir, err, sizeof err) != 0) {
        train_fail(run, "--save-hf %s: config.json: %s", dir, err);
        rc = 1;
    }
    for (int i = 0; bufs && i < n; i++) free(bufs[i]);
    free(bufs);
    free(t);
    return rc;
}

int train_save_hf(train_run* run, rt_rank* R, const char* dir) {
    const rt_model* m = run->m;
    char what[1024];
    snprintf(what, sizeof what, "--save-hf %s", dir);
    float** full;
    int rc = train_gather_full(run, R, what, &full);
    if (!rc && R->rank == 0) {
        rc = write_hf(run, full, dir);
        int merged = 0;
        for (int i = 0; i < m->hf->ntensors; i++) merged += m->hf->tensors[i].lora_scale != 0;
        if (!rc && merged)
            printf("saved %d parameters as Hugging Face %s to %s (%d weights with their LoRA "
                   "adapters merged in)\n", m->nparams, m->hf->arch, dir, merged);
        else if (!rc)
            printf("saved %d parameters as Hugging Face %s to %s\n", m->nparams, m->hf->arch, dir);
    }
    train_free_full(m, full);
    return train_agree(run, R) || rc;
}

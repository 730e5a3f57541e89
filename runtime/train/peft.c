// peft.c — --save-peft DIR: a LoRA model's adapters as Hugging Face's PEFT library saves
// them, for PeftModel.from_pretrained(base, DIR): DIR/adapter_model.safetensors (each
// adapted weight's lora_A [r, in] and lora_B [out, r], fp32, under PEFT's names, lora_B's
// rows in the base weight's Hugging Face order) and DIR/adapter_config.json (the map's
// peft_config, written by the generator). Reading them back (--load-peft) is hf_load.c.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io_atomic.h"
#include "rt_safetensors.h"
#include "train_internal.h"

// "base_model.model." + the weight's HF module (its name less ".weight") + "." + which.
char* train_peft_name(const char* hf_name, const char* which) {
    size_t n = strlen(hf_name) - strlen(".weight");
    size_t cap = n + strlen(which) + 32;
    char* s = malloc(cap);
    if (s) snprintf(s, cap, "base_model.model.%.*s.%s", (int)n, hf_name, which);
    return s;
}

static int write_config(const rt_hf_map* h, const char* dir, char* err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    io_atomic a;
    int rc = io_atomic_open(&a, path, err, errlen);
    if (!rc) rc = io_atomic_write(&a, h->peft_config, strlen(h->peft_config), err, errlen);
    if (!rc) rc = io_atomic_write(&a, "\n", 1, err, errlen);
    if (!rc)
        rc = io_atomic_commit(&a, err, errlen);
    else
        io_atomic_abort(&a);
    return rc;
}

static int write_peft(train_run* run, float* const* full, const char* dir) {
    const rt_model* m = run->m;
    const rt_hf_map* h = m->hf;
    rt_st_tensor* t = calloc(2 * (size_t)h->ntensors, sizeof *t);
    float** bufs = calloc((size_t)h->ntensors, sizeof *bufs);
    char** names = calloc(2 * (size_t)h->ntensors, sizeof *names);
    int64_t(*shapes)[2] = calloc(2 * (size_t)h->ntensors, sizeof *shapes);
    char err[512], path[4200];
    int rc = !t || !bufs || !names || !shapes, n = 0, nb = 0;
    for (int i = 0; i < h->ntensors && !rc; i++) {
        const rt_hf_tensor* e = &h->tensors[i];
        if (e->lora_scale == 0) continue;
        const rt_model_param* a = &m->params[e->lora[0]];
        const rt_model_param* b = &m->params[e->lora[1]];
        names[n] = train_peft_name(e->name, "lora_A.weight");
        names[n + 1] = train_peft_name(e->name, "lora_B.weight");
        bufs[nb] = malloc((size_t)(b->shape[0] * b->shape[1]) * sizeof(float));
        if (!names[n] || !names[n + 1] || !bufs[nb]) {
            rc = 1;
            break;
        }
        // lora_B's rows as the base weight's: HF's q and k rows are the rotary pairs reordered
        rt_hf_tensor rows = {.op = e->op == RT_HF_ROPE ? RT_HF_ROPE : RT_HF_COPY,
                             .heads = e->heads, .ndim = 2, .shape = {b->shape[0], b->shape[1]}};
        float* src[3] = {full[e->lora[1]], NULL, NULL};
        train_hf_move(m, &rows, src, bufs[nb], 1);
        shapes[n][0] = a->shape[0], shapes[n][1] = a->shape[1];
        shapes[n + 1][0] = b->shape[0], shapes[n + 1][1] = b->shape[1];
        t[n] = (rt_st_tensor){names[n], RT_ST_F32, 2, shapes[n], full[e->lora[0]]};
        t[n + 1] = (rt_st_tensor){names[n + 1], RT_ST_F32, 2, shapes[n + 1], bufs[nb]};
        n += 2, nb++;
    }
    if (rc) train_fail(run, "--save-peft %s: out of memory", dir);
    rt_st_meta meta[] = {{"format", "pt"}};
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (!rc && rt_st_write(path, t, (size_t)n, meta, 1, err, sizeof err) != 0) {
        train_fail(run, "--save-peft %s: %s", dir, err);
        rc = 1;
    }
    if (!rc && write_config(h, dir, err, sizeof err) != 0) {
        train_fail(run, "--save-peft %s: adapter_config.json: %s", dir, err);
        rc = 1;
    }
    if (!rc) printf("saved %d LoRA adapters as PEFT's to %s\n", n / 2, dir);
    for (int i = 0; names && i < 2 * h->ntensors; i++) free(names[i]);
    for (int i = 0; bufs && i < h->ntensors; i++) free(bufs[i]);
    free(names), free(bufs), free(shapes), free(t);
    return rc;
}

int train_save_peft(train_run* run, rt_rank* R, const char* dir) {
    char what[1024];
    snprintf(what, sizeof what, "--save-peft %s", dir);
    float** full;
    int rc = train_gather_full(run, R, what, &full);
    if (!rc && R->rank == 0) rc = write_peft(run, full, dir);
    train_free_full(run->m, full);
    return train_agree(run, R) || rc;
}

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

// Adapter k (0: lora_A [r, in], 1: lora_B [out, r]) of adapted weight e as PEFT stores it:
// "base_model.model." + the weight's HF module (its name less ".weight") + ".lora_A.weight"
// or ".lora_B.weight"; lora_B's rows in the weight's HF order (q and k: the rotary pairs
// reordered), lora_A as it is. The name is malloc'd (NULL when out of memory).
rt_hf_tensor train_peft_tensor(const rt_model* m, const rt_hf_tensor* e, int k) {
    const rt_model_param* p = &m->params[e->lora[k]];
    rt_hf_tensor t = {.op = k && e->op == RT_HF_ROPE ? RT_HF_ROPE : RT_HF_COPY,
                      .src = {e->lora[k], -1, -1}, .heads = e->heads, .ndim = 2,
                      .shape = {p->shape[0], p->shape[1]}};
    size_t n = strlen(e->name) - strlen(".weight"), cap = n + 64;
    char* name = malloc(cap);
    if (name)
        snprintf(name, cap, "base_model.model.%.*s.%s", (int)n, e->name,
                 k ? "lora_B.weight" : "lora_A.weight");
    t.name = name;
    return t;
}

// DIR/adapter_config.json: the map's config text and a newline. 0, or 1 after train_fail.
static int write_config(train_run* run, const char* config, const char* dir) {
    char err[512], path[4200];
    size_t n = strlen(config);
    char* text = malloc(n + 1);
    int rc = !text;
    if (text) {
        memcpy(text, config, n);
        text[n] = '\n';
        snprintf(path, sizeof path, "%s/adapter_config.json", dir);
        rc = io_atomic_write_file(path, text, n + 1, err, sizeof err);
    }
    if (rc)
        train_fail(run, "--save-peft %s: adapter_config.json: %s", dir, text ? err : "out of memory");
    free(text);
    return rc != 0;
}

static int write_peft(train_run* run, float* const* full, const char* dir) {
    const rt_model* m = run->m;
    const rt_hf_map* h = m->hf;
    rt_hf_tensor* e = calloc(2 * (size_t)h->ntensors, sizeof *e);   // the adapters, as PEFT's
    rt_st_tensor* t = calloc(2 * (size_t)h->ntensors, sizeof *t);
    float** bufs = calloc(2 * (size_t)h->ntensors, sizeof *bufs);
    char err[512], path[4200];
    int rc = !e || !t || !bufs, n = 0;
    for (int i = 0; i < h->ntensors && !rc; i++) {
        if (h->tensors[i].lora_scale == 0) continue;
        for (int k = 0; k < 2 && !rc; k++, n++) {
            e[n] = train_peft_tensor(m, &h->tensors[i], k);
            bufs[n] = malloc((size_t)train_hf_numel(&e[n]) * sizeof(float));
            rc = !e[n].name || !bufs[n];
            if (rc) break;
            float* src[3] = {full[e[n].src[0]], NULL, NULL};
            train_hf_move(m, &e[n], src, bufs[n], 1);
            t[n] = (rt_st_tensor){e[n].name, RT_ST_F32, 2, e[n].shape, bufs[n]};
        }
    }
    if (rc) train_fail(run, "--save-peft %s: out of memory", dir);
    rt_st_meta meta[] = {{"format", "pt"}};
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (!rc && rt_st_write(path, t, (size_t)n, meta, 1, err, sizeof err) != 0) {
        train_fail(run, "--save-peft %s: %s", dir, err);
        rc = 1;
    }
    if (!rc) rc = write_config(run, h->peft_config, dir);
    if (!rc) printf("saved %d LoRA adapters as PEFT's to %s\n", n / 2, dir);
    for (int i = 0; e && bufs && i < 2 * h->ntensors; i++) free((char*)e[i].name), free(bufs[i]);
    free(e), free(bufs), free(t);
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

// hf_load.c — --load-hf DIR: config.json checked (hf_config.c), then the tensors of
// DIR/model.safetensors, or of the files DIR/model.safetensors.index.json lists, read as
// F32, BF16 or F16, strictly (nothing missing, nothing unexpected, every shape), turned
// back into the model's parameters (hf.c's transforms) and sharded, as --load does.
// --load-peft DIR: a PEFT LoRA directory's adapters the same way (peft.c writes them).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io_json.h"
#include "rt_safetensors.h"
#include "train_internal.h"

#define MAX_FILES 64

typedef struct hf_files {
    rt_st_file* f[MAX_FILES];
    int n;
} hf_files;

static void close_files(hf_files* fs) {
    for (int i = 0; i < fs->n; i++) rt_st_close(fs->f[i]);
    fs->n = 0;
}

// Opens DIR/model.safetensors, or every file DIR/model.safetensors.index.json's weight_map
// names (plain names inside DIR).
static int open_files(const char* dir, hf_files* fs, char* err, size_t errlen) {
    char path[4200];
    struct stat st;
    fs->n = 0;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (lstat(path, &st) == 0 || errno != ENOENT)
        return rt_st_open(path, &fs->f[fs->n++], err, errlen);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE* fp = fopen(path, "rb");
    if (!fp) {
        snprintf(err, errlen, "%.200s has no model.safetensors (nor model.safetensors.index.json)",
                 dir);
        return -1;
    }
    char* text = malloc(1 << 24);
    size_t len = text ? fread(text, 1, (1 << 24) - 1, fp) : 0;
    fclose(fp);
    io_json_doc* doc = NULL;
    char e[256];
    int rc = -1;
    if (!text)
        snprintf(err, errlen, "out of memory");
    else if (io_json_parse(text, len, &doc, e, sizeof e) != 0)
        snprintf(err, errlen, "%.200s: %.200s", path, e);
    const io_json* map = doc ? io_json_get(io_json_root(doc), "weight_map") : NULL;
    if (doc && (!map || map->type != IO_JSON_OBJECT))
        snprintf(err, errlen, "%.200s: no \"weight_map\" object", path);
    else if (map) {
        rc = 0;
        const char* names[MAX_FILES];
        for (const io_json* v = map->child; v && !rc; v = v->next) {
            int seen = 0;
            if (v->type != IO_JSON_STRING || strchr(v->str, '/') || v->str[0] == '.' ||
                !v->str[0]) {
                snprintf(
                    err, errlen,
                    "%.200s: bad file name for '%.200s' (plain names inside the directory only)",
                    path, v->key);
                rc = -1;
                break;
            }
            for (int i = 0; i < fs->n; i++) seen |= strcmp(names[i], v->str) == 0;
            if (seen) continue;
            if (fs->n == MAX_FILES) {
                snprintf(err, errlen, "%.200s: more than %d files", path, MAX_FILES);
                rc = -1;
                break;
            }
            char one[4400];
            snprintf(one, sizeof one, "%s/%s", dir, v->str);
            names[fs->n] = v->str;
            rc = rt_st_open(one, &fs->f[fs->n], err, errlen);
            if (!rc) fs->n++;
        }
    }
    if (doc) io_json_free(doc);
    free(text);
    if (rc) close_files(fs);
    return rc;
}

static const rt_st_info* find(const hf_files* fs, const char* name, rt_st_file** in) {
    for (int i = 0; i < fs->n && name; i++) {
        const rt_st_info* info = rt_st_find(fs->f[i], name);
        if (info) return *in = fs->f[i], info;
    }
    return NULL;
}

// HF buffers that from_pretrained ignores too (old GPT-2 masks, old Llama rotary caches).
static int ignorable(const char* name) {
    static const char* suffixes[] = {".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq"};
    size_t n = strlen(name);
    for (size_t k = 0; k < sizeof suffixes / sizeof suffixes[0]; k++) {
        size_t s = strlen(suffixes[k]);
        if (n > s && strcmp(name + n - s, suffixes[k]) == 0) return 1;
    }
    return 0;
}

// HF tensor e (its name or alt) as fp32 into out (train_hf_numel(e) floats); 0, or 1 after
// train_fail.
static int read_tensor(train_run* run, const char* opt, const hf_files* fs, const char* dir,
                       const rt_hf_tensor* e, float* out) {
    rt_st_file* f = NULL;
    const rt_st_info* info = find(fs, e->name, &f);
    const char* name = e->name;
    if (!info && (info = find(fs, e->alt, &f))) name = e->alt;
    char shape[96], have[96], err[512];
    rt_shape_str(e->ndim, e->shape, shape, sizeof shape);
    if (!info) {
        train_fail(run, "%s %s: tensor '%s' is missing (expected %s, F32, BF16 or F16)", opt, dir,
                   e->name, shape);
        return 1;
    }
    int same = info->ndim == e->ndim;
    for (int d = 0; same && d < e->ndim; d++) same = info->shape[d] == e->shape[d];
    if (!same) {
        rt_shape_str(info->ndim, info->shape, have, sizeof have);
        train_fail(run, "%s %s: tensor '%s' has shape %s, the spec's model needs %s", opt, dir,
                   name, have, shape);
        return 1;
    }
    rt_dtype dt = info->dtype == RT_ST_F32 ? RT_F32 : info->dtype == RT_ST_BF16 ? RT_BF16 : RT_F16;
    if (info->dtype != RT_ST_F32 && info->dtype != RT_ST_BF16 && info->dtype != RT_ST_F16) {
        train_fail(run, "%s %s: tensor '%s' is %s (allowed: F32, BF16, F16)", opt, dir, name,
                   rt_st_dtype_name(info->dtype));
        return 1;
    }
    size_t n = (size_t)train_hf_numel(e), bytes = n * rt_dtype_size(dt);
    void* raw = dt == RT_F32 ? (void*)out : malloc(bytes ? bytes : 1);
    int rc = !raw
                 ? -1
                 : rt_st_load(f, name, info->dtype, e->ndim, e->shape, raw, bytes, err, sizeof err);
    if (!rc && dt != RT_F32) rc = rt_convert(out, RT_F32, raw, dt, n);
    if (raw != out) free(raw);
    if (rc) train_fail(run, "%s %s: %s", opt, dir, raw ? err : "out of memory");
    return rc != 0;
}

// Loads entry e into the rank's shards (or, tied, checks it against its twin).
static int load_entry(train_run* run, rt_rank* R, const hf_files* fs, const char* dir,
                      const rt_hf_tensor* e) {
    const rt_model* m = run->m;
    const rt_hf_map* h = m->hf;
    rt_st_file* f;
    if (e->tied && !find(fs, e->name, &f) && !find(fs, e->alt, &f)) return 0;  // HF omits it
    size_t n = (size_t)train_hf_numel(e);
    float* hf = malloc(n * sizeof(float));
    float* twin = NULL;
    float* p[3] = {NULL, NULL, NULL};
    int rc = !hf;
    for (int k = 0; k < 3 && !rc && !e->tied; k++)
        if (e->src[k] >= 0) {
            int64_t pn = 1;
            for (int d = 0; d < m->params[e->src[k]].ndim; d++) pn *= m->params[e->src[k]].shape[d];
            rc = !(p[k] = malloc((size_t)pn * sizeof(float)));
        }
    if (rc) train_fail(run, "--load-hf %s: out of memory for '%s'", dir, e->name);
    if (!rc) rc = read_tensor(run, "--load-hf", fs, dir, e, hf);
    if (!rc && e->op == RT_HF_ZEROS) {
        for (size_t i = 0; i < n && !rc; i++) rc = hf[i] != 0.0f;
        if (rc)
            train_fail(run,
                       "--load-hf %s: tensor '%s' is not all zeros (fsdpgen's %s model has no such "
                       "parameter, so only zeros are the same model)",
                       dir, e->name, h->arch);
    } else if (!rc && e->tied) {
        // the untied entry of the same parameter, read again and compared
        const rt_hf_tensor* t = NULL;
        for (int i = 0; i < h->ntensors && !t; i++)
            if (!h->tensors[i].tied && h->tensors[i].src[0] == e->src[0]) t = &h->tensors[i];
        rc = !t || !(twin = malloc(n * sizeof(float)));
        if (rc) train_fail(run, "--load-hf %s: out of memory for '%s'", dir, e->name);
        if (!rc) rc = read_tensor(run, "--load-hf", fs, dir, t, twin);
        if (!rc && memcmp(twin, hf, n * sizeof(float)) != 0) {
            train_fail(run,
                       "--load-hf %s: '%s' differs from '%s', which it is tied to "
                       "(tie_word_embeddings)",
                       dir, e->name, t->name);
            rc = 1;
        }
    } else if (!rc) {
        train_hf_move(m, e, p, hf, 0);
        for (int k = 0; k < 3 && !rc; k++)
            if (p[k]) rc = train_shard_param(run, R, e->src[k], p[k], "--load-hf");
    }
    for (int k = 0; k < 3; k++) free(p[k]);
    free(twin);
    free(hf);
    return rc;
}

int train_load_hf(train_run* run, rt_rank* R, const char* dir) {
    const rt_model* m = run->m;
    const rt_hf_map* h = m->hf;
    char err[512];
    if (train_hf_check_config(m, dir, err, sizeof err) != 0) {
        train_fail(run, "--load-hf %s: %s", dir, err);
        return 1;
    }
    hf_files fs;
    if (open_files(dir, &fs, err, sizeof err) != 0) {
        train_fail(run, "--load-hf %s: %s", dir, err);
        return 1;
    }
    // LoRA adapters are in no Hugging Face file: they start from their initialization
    // (lora_b zeros), as a fresh run draws it, and the file gives the rest.
    int rc = 0, adapters = 0;
    for (int i = 0; i < h->ntensors; i++) adapters |= h->tensors[i].lora_scale != 0;
    if (adapters) rc = train_init_params(run, R);
    // Every tensor there (HF omits a tied one), then nothing else, as from_pretrained's
    // missing and unexpected keys.
    for (int i = 0; i < h->ntensors && !rc; i++) {
        const rt_hf_tensor* e = &h->tensors[i];
        rt_st_file* f;
        if (e->tied || find(&fs, e->name, &f) || find(&fs, e->alt, &f)) continue;
        char shape[96];
        rt_shape_str(e->ndim, e->shape, shape, sizeof shape);
        train_fail(run, "--load-hf %s: tensor '%s' is missing (expected %s, F32, BF16 or F16)", dir,
                   e->name, shape);
        rc = 1;
    }
    for (int k = 0; k < fs.n && !rc; k++)
        for (size_t i = 0; i < rt_st_count(fs.f[k]) && !rc; i++) {
            const char* name = rt_st_at(fs.f[k], i)->name;
            int known = ignorable(name);
            for (int j = 0; j < h->ntensors && !known; j++)
                known = !strcmp(name, h->tensors[j].name) ||
                        (h->tensors[j].alt && !strcmp(name, h->tensors[j].alt));
            if (!known) {
                train_fail(
                    run,
                    "--load-hf %s: unexpected tensor '%s' (not in Hugging Face's %s for this "
                    "spec; expected names such as '%s')",
                    dir, name, h->arch, h->tensors[0].name);
                rc = 1;
            }
        }
    for (int i = 0; i < h->ntensors && !rc; i++) rc = load_entry(run, R, &fs, dir, &h->tensors[i]);
    close_files(&fs);
    return rc;
}

// ---- --load-peft ------------------------------------------------------------------------

// DIR/adapter_config.json against the spec's (the map's peft_config): LoRA, the same r and
// lora_alpha, and none of PEFT's variants whose math differs (rsLoRA's alpha / sqrt(r),
// DoRA, fan_in_fan_out's transposed weights). 0, or -1 with why in err.
static int check_peft_config(const rt_hf_map* h, const char* dir, char* err, size_t errlen) {
    char path[4200], e[256];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    FILE* fp = fopen(path, "rb");
    if (!fp) return snprintf(err, errlen, "no adapter_config.json: %s", strerror(errno)), -1;
    char* text = malloc(1 << 20);
    size_t len = text ? fread(text, 1, (1 << 20) - 1, fp) : 0;
    fclose(fp);
    io_json_doc *doc = NULL, *want = NULL;
    int rc = -1;
    if (!text)
        snprintf(err, errlen, "out of memory");
    else if (io_json_parse(text, len, &doc, e, sizeof e) != 0)
        snprintf(err, errlen, "adapter_config.json: %s", e);
    else if (io_json_parse(h->peft_config, strlen(h->peft_config), &want, e, sizeof e) != 0)
        snprintf(err, errlen, "the spec's PEFT config: %s", e);  // a generator bug
    else {
        const io_json *got = io_json_root(doc), *spec = io_json_root(want);
        const io_json* type = io_json_get(got, "peft_type");
        rc = 0;
        if (!type || type->type != IO_JSON_STRING || strcmp(type->str, "LORA") != 0) {
            snprintf(err, errlen, "adapter_config.json's peft_type is not \"LORA\"");
            rc = -1;
        }
        static const char* numbers[] = {"r", "lora_alpha"};
        for (int k = 0; k < 2 && !rc; k++) {
            const io_json *a = io_json_get(got, numbers[k]), *b = io_json_get(spec, numbers[k]);
            if (!a || a->type != IO_JSON_NUMBER || a->num != b->num) {
                snprintf(err, errlen, "adapter_config.json's %s is %s, the spec's adapters have %g",
                         numbers[k], a && a->type == IO_JSON_NUMBER ? a->str : "not a number",
                         b->num);
                rc = -1;
            }
        }
        static const char* variants[] = {"use_rslora", "use_dora", "fan_in_fan_out"};
        for (int k = 0; k < 3 && !rc; k++) {
            const io_json* a = io_json_get(got, variants[k]);
            if (a && a->type != IO_JSON_FALSE && a->type != IO_JSON_NULL) {
                snprintf(err, errlen, "adapter_config.json sets %s, which fsdpgen's LoRA does not "
                         "compute (allowed: false or absent)", variants[k]);
                rc = -1;
            }
        }
    }
    if (doc) io_json_free(doc);
    if (want) io_json_free(want);
    free(text);
    return rc;
}

int train_load_peft(train_run* run, rt_rank* R, const char* dir) {
    const rt_model* m = run->m;
    const rt_hf_map* h = m->hf;
    char err[512], path[4200];
    if (check_peft_config(h, dir, err, sizeof err) != 0) {
        train_fail(run, "--load-peft %s: %s", dir, err);
        return 1;
    }
    hf_files fs = {.n = 0};
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (rt_st_open(path, &fs.f[0], err, sizeof err) != 0) {
        train_fail(run, "--load-peft %s: %s", dir, err);
        return 1;
    }
    fs.n = 1;
    int rc = 0, expected = 0;
    for (int i = 0; i < h->ntensors && !rc; i++) {
        const rt_hf_tensor* e = &h->tensors[i];
        if (e->lora_scale == 0) continue;
        for (int k = 0; k < 2 && !rc; k++) {
            rt_hf_tensor t = train_peft_tensor(m, e, k);
            size_t n = (size_t)train_hf_numel(&t);
            float *hf = malloc(n * sizeof(float)), *w = malloc(n * sizeof(float));
            rc = !t.name || !hf || !w;
            if (rc) train_fail(run, "--load-peft %s: out of memory", dir);
            if (!rc) rc = read_tensor(run, "--load-peft", &fs, dir, &t, hf);
            if (!rc) {
                float* dst[3] = {w, NULL, NULL};
                train_hf_move(m, &t, dst, hf, 0);
                rc = train_shard_param(run, R, t.src[0], w, "--load-peft");
            }
            expected++;
            free((char*)t.name), free(hf), free(w);
        }
    }
    // Nothing else: an adapter of a module the spec does not adapt is another model. PEFT
    // also saves the output head's base weight ("lm_head.base_layer.weight"), which the
    // base model gives here.
    int found = 0;
    for (size_t i = 0; i < rt_st_count(fs.f[0]) && !rc; i++) {
        const char* name = rt_st_at(fs.f[0], i)->name;
        size_t n = strlen(name), s = strlen(".base_layer.weight");
        if (n > s && strcmp(name + n - s, ".base_layer.weight") == 0) continue;
        int lora = strstr(name, ".lora_A.weight") || strstr(name, ".lora_B.weight");
        found += lora;
        if (!lora) {
            train_fail(run, "--load-peft %s: unexpected tensor '%s' (allowed: LoRA's lora_A and "
                       "lora_B of the spec's adapted modules)", dir, name);
            rc = 1;
        }
    }
    if (!rc && found != expected) {
        train_fail(run, "--load-peft %s: adapter_model.safetensors holds %d adapters' tensors, the "
                   "spec's are %d (its target_modules differ)", dir, found, expected);
        rc = 1;
    }
    close_files(&fs);
    return rc;
}

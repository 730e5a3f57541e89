// The attention sites of a generated step (rt_step.h rt_step_attention_*; rt_model.h
// rt_model_attention), common to every backend: the site's shape, then the backend's cuDNN
// where it chose cuDNN for the site at start, else fsdpgen's packed kernels with every tensor
// packed in the site's dtype and dq, dk, dv assigned, in rows of the site's row lengths: the
// call the generator emits for any other attention op of that form, so the CPU backend
// computes the same bits either way.
#include "rt_kernels.h"
#include "step_backend.h"

static const rt_model_attention* site_of(rt_rank* R, int site) {
    if (site < 0 || site >= R->model->nattention)
        rt_rank_die(R, "attention site %d out of range (the model has %d)", site,
                    R->model->nattention);
    return &R->model->attention[site];
}

void rtb_attention_kernels_forward(const rt_model_attention* a, void* out, float* stats,
                                   float* scratch, const void* q, const void* k, const void* v) {
    rt_attention_lowmem_packed_forward(out, stats, scratch, q, k, v, a->B, a->T, a->NH, a->NKV,
                                       a->HD, a->causal, a->dtype,
                                       RT_PACKED_OUT | RT_PACKED_INP | RT_PACKED_INP2 |
                                           RT_PACKED_INP3,
                                       a->dtype);
}

void rtb_attention_kernels_backward(const rt_model_attention* a, void* dq, void* dk, void* dv,
                                    float* scratch, const void* dout, const void* out,
                                    const void* q, const void* k, const void* v,
                                    const float* stats) {
    rt_attention_lowmem_packed_backward(
        dq, dk, dv, scratch, dout, out, q, k, v, stats, a->B, a->T, a->NH, a->NKV, a->HD,
        a->causal, a->dtype,
        RT_PACKED_OUT | RT_PACKED_INP | RT_PACKED_INP2 | RT_PACKED_INP3 | RT_PACKED_DINP |
            RT_PACKED_DINP2 | RT_PACKED_DINP3,
        a->dtype, RT_ASSIGN_1 | RT_ASSIGN_2 | RT_ASSIGN_3, a->ld_dq, a->ld_dk, a->ld_dv);
}

void rt_step_attention_forward(rt_rank* R, int site, void* out, float* stats, float* scratch,
                               const void* q, const void* k, const void* v) {
    const rt_model_attention* a = site_of(R, site);
    if (!rtb_attention_forward(R, site, out, stats, scratch, q, k, v))
        rtb_attention_kernels_forward(a, out, stats, scratch, q, k, v);
}

void rt_step_attention_backward(rt_rank* R, int site, void* dq, void* dk, void* dv,
                                float* scratch, const void* dout, const void* out,
                                const void* q, const void* k, const void* v,
                                const float* stats) {
    const rt_model_attention* a = site_of(R, site);
    if (!rtb_attention_backward(R, site, dq, dk, dv, scratch, dout, out, q, k, v, stats))
        rtb_attention_kernels_backward(a, dq, dk, dv, scratch, dout, out, q, k, v, stats);
}

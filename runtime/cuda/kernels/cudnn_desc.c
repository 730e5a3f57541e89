// cuDNN backend-API helpers (cudnn_desc.h): descriptors set and finalized the way NVIDIA's
// cudnn-frontend lowers its graph nodes (include/cudnn_frontend/node/{pointwise,matmul,
// reduction,reshape}.h, cudnn_frontend_{Tensor,OperationGraph,Heuristics,ExecutionPlan}.h),
// in plain C. Only host calls: nothing here allocates device memory or synchronizes.
#include "cudnn_desc.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_check.h"

void cg_init(cg* g, cudnnHandle_t handle, char* why, size_t why_len) {
    memset(g, 0, sizeof *g);
    g->handle = handle;
    g->next_uid = 1000;
    g->why = why;
    g->why_len = why_len;
}

void cg_status_text(cudnnStatus_t st, char* buf, size_t n) {
    char last[256] = "";
    cudnnGetLastErrorString(last, sizeof last);
    snprintf(buf, n, "%s%s%s", cudnnGetErrorString(st), last[0] ? ": " : "", last);
}

void cg_fail(cg* g, const char* call, cudnnStatus_t st) {
    if (g->failed) return;
    g->failed = 1;
    char text[384];
    cg_status_text(st, text, sizeof text);
    if (g->why && g->why_len) snprintf(g->why, g->why_len, "cuDNN %s failed: %s", call, text);
}

void cg_free(cg* g) {
    // reverse order: plans before the configs, graphs and operations they refer to
    for (int i = g->n_all - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(g->all[i]);
    free(g->all);
    g->all = NULL;
    g->n_all = g->cap_all = g->n_ops = 0;
}

static cg_desc cg_new(cg* g, cudnnBackendDescriptorType_t type, const char* what) {
    if (g->failed) return NULL;
    if (g->n_all == g->cap_all) {
        int cap = g->cap_all ? 2 * g->cap_all : 64;
        cg_desc* p = realloc(g->all, (size_t)cap * sizeof *p);
        if (!p) {
            g->failed = 1;
            snprintf(g->why, g->why_len, "out of host memory building a cuDNN graph");
            return NULL;
        }
        g->all = p, g->cap_all = cap;
    }
    cg_desc d = NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(type, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        cg_fail(g, what, st);
        return NULL;
    }
    g->all[g->n_all++] = d;
    return d;
}

// Sets one attribute; `what` names it in the failure message.
static void cg_set(cg* g, cg_desc d, cudnnBackendAttributeName_t name,
                   cudnnBackendAttributeType_t type, int64_t n, const void* v, const char* what) {
    if (g->failed) return;
    cudnnStatus_t st = cudnnBackendSetAttribute(d, name, type, n, v);
    if (st != CUDNN_STATUS_SUCCESS) cg_fail(g, what, st);
}

static void cg_fin(cg* g, cg_desc d, const char* what) {
    if (g->failed) return;
    cudnnStatus_t st = cudnnBackendFinalize(d);
    if (st != CUDNN_STATUS_SUCCESS) cg_fail(g, what, st);
}

#define SET(d, name, type, n, v) cg_set(g, d, name, type, n, v, "SetAttribute(" #name ")")

static cg_desc tensor(cg* g, cudnnDataType_t dt, int nd, const int64_t* dim,
                      const int64_t* stride, int64_t uid, int is_virtual, int by_value) {
    cg_desc t = cg_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "CreateDescriptor(TENSOR)");
    if (!uid) uid = g->next_uid++;
    const int64_t align = 16;  // the frontend's default alignment for every tensor
    SET(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    SET(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, nd, dim);
    SET(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, nd, stride);
    SET(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    SET(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    bool v = is_virtual != 0, b = by_value != 0;
    if (v) SET(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
    if (b) SET(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &b);
    cg_fin(g, t, "Finalize(TENSOR)");
    return g->failed ? NULL : t;
}

cg_desc cg_tensor(cg* g, cudnnDataType_t dt, const int64_t dim[4], const int64_t stride[4],
                  int64_t uid, int is_virtual) {
    return tensor(g, dt, 4, dim, stride, uid, is_virtual, 0);
}

cg_desc cg_scalar(cg* g, int64_t uid, int rank) {
    const int64_t one[4] = {1, 1, 1, 1};
    return tensor(g, CUDNN_DATA_FLOAT, rank, one, one, uid, 0, 1);
}

static void add_op(cg* g, cg_desc op) {
    if (g->failed) return;
    if (g->n_ops == (int)(sizeof g->ops / sizeof g->ops[0])) {
        g->failed = 1;
        snprintf(g->why, g->why_len, "cuDNN graph has too many operations (internal limit)");
        return;
    }
    g->ops[g->n_ops++] = op;
}

void cg_pointwise(cg* g, cudnnPointwiseMode_t mode, cudnnDataType_t comp, cg_desc x, cg_desc b,
                  cg_desc t, cg_desc y, int64_t axis) {
    cg_desc pw = cg_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "CreateDescriptor(POINTWISE)");
    SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    if (axis >= 0) SET(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    cg_fin(g, pw, "Finalize(POINTWISE)");
    cg_desc op = cg_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
                        "CreateDescriptor(OPERATION_POINTWISE)");
    SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    if (b) SET(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t) SET(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    const float alpha = 1.0f;  // the frontend sets both alphas to 1 on every pointwise op
    SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &alpha);
    SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &alpha);
    cg_fin(g, op, "Finalize(OPERATION_POINTWISE)");
    add_op(g, op);
}

void cg_matmul(cg* g, cg_desc a, cg_desc b, cg_desc c) {
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cg_desc mm = cg_new(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "CreateDescriptor(MATMUL)");
    SET(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    cg_fin(g, mm, "Finalize(MATMUL)");
    cg_desc op = cg_new(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR,
                        "CreateDescriptor(OPERATION_MATMUL)");
    SET(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    SET(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    SET(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    SET(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
    cg_fin(g, op, "Finalize(OPERATION_MATMUL)");
    add_op(g, op);
}

void cg_reduce(cg* g, cudnnReduceTensorOp_t red, cg_desc x, cg_desc y) {
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    const bool det = false;  // the frontend's default (attribute exists from cuDNN 9.11)
    cg_desc rd = cg_new(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "CreateDescriptor(REDUCTION)");
    SET(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    SET(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &red);
    if (cudnnGetVersion() >= 91100)
        SET(rd, CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, 1, &det);
    cg_fin(g, rd, "Finalize(REDUCTION)");
    cg_desc op = cg_new(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR,
                        "CreateDescriptor(OPERATION_REDUCTION)");
    SET(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd);
    SET(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    SET(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    cg_fin(g, op, "Finalize(OPERATION_REDUCTION)");
    add_op(g, op);
}

void cg_sdpa_fwd(cg* g, cg_desc q, cg_desc k, cg_desc v, cg_desc o, cg_desc stats,
                 cg_desc scale) {
    cg_desc op = cg_new(g, CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR,
                        "CreateDescriptor(OPERATION_SDPA_FWD)");
    SET(op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &q);
    SET(op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k);
    SET(op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
    SET(op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o);
    SET(op, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &stats);
    SET(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &scale);
    cg_fin(g, op, "Finalize(OPERATION_SDPA_FWD)");
    add_op(g, op);
}

void cg_reshape(cg* g, cg_desc x, cg_desc y) {
    cg_desc op = cg_new(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR,
                        "CreateDescriptor(OPERATION_RESHAPE)");
    SET(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    SET(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    cg_fin(g, op, "Finalize(OPERATION_RESHAPE)");
    add_op(g, op);
}

// The first engine config of heuristics `mode` whose plan finalizes; NULL when none does.
static cg_desc plan_from(cg* g, cg_desc graph, cudnnBackendHeurMode_t mode, int64_t* tried,
                         cudnnStatus_t* last) {
    cg_desc heur = cg_new(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "CreateDescriptor(ENGINEHEUR)");
    SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (g->sm_count > 0)
        SET(heur, CUDNN_ATTR_ENGINEHEUR_SM_COUNT_TARGET, CUDNN_TYPE_INT32, 1, &g->sm_count);
    if (g->failed) return NULL;
    cudnnStatus_t st = cudnnBackendFinalize(heur);
    int64_t count = 0;
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL);
    if (st != CUDNN_STATUS_SUCCESS) {
        *last = st;
        return NULL;
    }
    if (count > 16) count = 16;  // the first few configs are the ones worth trying
    cg_desc cfg[16];
    for (int64_t i = 0; i < count; i++)
        cfg[i] = cg_new(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "CreateDescriptor(ENGINECFG)");
    if (g->failed) return NULL;
    int64_t got = 0;
    st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg);
    if (st != CUDNN_STATUS_SUCCESS) {
        *last = st;
        return NULL;
    }
    for (int64_t i = 0; i < got && i < count; i++) {
        cg_desc plan = cg_new(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
                              "CreateDescriptor(EXECUTION_PLAN)");
        SET(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &g->handle);
        SET(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
            &cfg[i]);
        if (g->failed) return NULL;
        (*tried)++;
        st = cudnnBackendFinalize(plan);
        if (st == CUDNN_STATUS_SUCCESS) return plan;
        *last = st;  // this engine refuses the graph: try the next one
    }
    return NULL;
}

cg_desc cg_finish(cg* g, const char* what, int64_t* ws) {
    *ws = 0;
    cg_desc graph = cg_new(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR,
                           "CreateDescriptor(OPERATIONGRAPH)");
    SET(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->n_ops, g->ops);
    if (g->handle)
        SET(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &g->handle);
    cg_fin(g, graph, "Finalize(OPERATIONGRAPH)");
    if (g->failed || !g->handle) return NULL;
    int64_t tried = 0;
    cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
    // mode A first (what llm.c asks the frontend for), then cuDNN's fallback list
    cg_desc plan = plan_from(g, graph, CUDNN_HEUR_MODE_A, &tried, &last);
    if (!plan && !g->failed) plan = plan_from(g, graph, CUDNN_HEUR_MODE_FALLBACK, &tried, &last);
    if (g->failed) return NULL;
    if (!plan) {
        char text[384];
        cg_status_text(last, text, sizeof text);
        g->failed = 1;
        snprintf(g->why, g->why_len,
                 "cuDNN has no engine for the %s graph (%lld configs tried): %s", what,
                 (long long)tried, text);
        return NULL;
    }
    int64_t n = 0;
    cudnnStatus_t st = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                CUDNN_TYPE_INT64, 1, &n, ws);
    if (st != CUDNN_STATUS_SUCCESS) cg_fail(g, "GetAttribute(EXECUTION_PLAN_WORKSPACE_SIZE)", st);
    return g->failed ? NULL : plan;
}

int cg_execute(cudnnHandle_t handle, cg_desc plan, int n, const int64_t* uids, void** ptrs,
               void* workspace, const char* what, const char* file, int line, char* why,
               size_t why_len) {
    // A variant pack per call (as the frontend's execute): host memory only, so this runs
    // inside CUDA-graph capture; the pointers are read when cudnnBackendExecute enqueues.
    cg_desc vp = NULL;
    const char* call = "cudnnBackendCreateDescriptor(VARIANT_PACK)";
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (st == CUDNN_STATUS_SUCCESS) {
        call = "cudnnBackendSetAttribute(VARIANT_PACK)";
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                      n, uids);
    }
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                      CUDNN_TYPE_VOID_PTR, n, ptrs);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
                                      1, &workspace);
    if (st == CUDNN_STATUS_SUCCESS) call = "cudnnBackendFinalize(VARIANT_PACK)";
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(vp);
    if (st == CUDNN_STATUS_SUCCESS) call = what;
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendExecute(handle, plan, vp);
    if (vp) cudnnBackendDestroyDescriptor(vp);
    if (st == CUDNN_STATUS_SUCCESS) return 0;
    char text[384];
    cg_status_text(st, text, sizeof text);
    if (why) {
        snprintf(why, why_len, "%s failed: %s", call, text);
        return -1;
    }
    rt_check_fail(file, line, call, text,
                  "cuDNN refused the call at run time; rerun with CUDNN_LOGERR_DBG=1 "
                  "CUDNN_LOGDEST_DBG=stderr for cuDNN's own log");
    return -1;
}

// Small helpers over cuDNN's backend (descriptor) API, for cudnn_attention.c: tensors,
// pointwise / matmul / reduction / reshape operations, an operation graph finalized into
// an execution plan (engine heuristics, first engine config that finalizes), and the
// run-time execute with the runtime's error path. Builders record the first failure in
// `why` and then do nothing, so a graph is written as straight-line code checked once.
// Every descriptor a builder creates lives until cg_free (cuDNN's C++ frontend also keeps
// the tensors and operations of a plan alive with it).
#ifndef RT_CUDNN_GRAPH_H
#define RT_CUDNN_GRAPH_H

#include <cudnn.h>
#include <stddef.h>
#include <stdint.h>

typedef cudnnBackendDescriptor_t cg_desc;

typedef struct cg {
    cudnnHandle_t handle;
    cg_desc* all;      // every descriptor created, destroyed by cg_free
    int n_all, cap_all;
    cg_desc ops[64];   // the operations of the graph being built
    int n_ops;
    int64_t next_uid;  // for virtual tensors
    int32_t sm_count;  // SMs the engine heuristics plan for (0: the device's)
    char* why;         // the first failure, one line
    size_t why_len;
    int failed;
} cg;

// Starts a builder (no descriptor yet); why/why_len receive the first failure.
void cg_init(cg* g, cudnnHandle_t handle, char* why, size_t why_len);
// Records a failure of CALL with cuDNN's status and last error string (first one wins).
void cg_fail(cg* g, const char* call, cudnnStatus_t st);
// Destroys every descriptor the builder created.
void cg_free(cg* g);
// "STATUS: cuDNN's last error" into buf (the reason part of every message).
void cg_status_text(cudnnStatus_t st, char* buf, size_t n);

// A 4-d tensor; uid 0 gives a virtual tensor a fresh UID. NULL after a failure.
cg_desc cg_tensor(cg* g, cudnnDataType_t dt, const int64_t dim[4], const int64_t stride[4],
                  int64_t uid, int is_virtual);
// A float scalar passed by value, dims and strides all 1: rank 4 next to 4-d operands of
// pointwise operations (the frontend expands its fused scalars to their rank; cuDNN refuses
// a mismatch), rank 1 for the unified SDPA operation (as the frontend leaves it there).
cg_desc cg_scalar(cg* g, int64_t uid, int rank);

// y = mode(x[, b[, t]]) computed in `comp`; axis >= 0 for GEN_INDEX.
void cg_pointwise(cg* g, cudnnPointwiseMode_t mode, cudnnDataType_t comp, cg_desc x, cg_desc b,
                  cg_desc t, cg_desc y, int64_t axis);
// c = a @ b (batched over the leading dims), fp32 compute.
void cg_matmul(cg* g, cg_desc a, cg_desc b, cg_desc c);
// y = reduce(x) over the dims where y has size 1, fp32 compute.
void cg_reduce(cg* g, cudnnReduceTensorOp_t op, cg_desc x, cg_desc y);
// cuDNN's unified SDPA forward operation (cuDNN >= 9.13.1): o = softmax(scale q k^T) v with
// stats (logsumexp per row); q, k, v, o [B, heads, T, HD], no mask.
void cg_sdpa_fwd(cg* g, cg_desc q, cg_desc k, cg_desc v, cg_desc o, cg_desc stats,
                 cg_desc scale);
// y = x seen with y's dims and strides.
void cg_reshape(cg* g, cg_desc x, cg_desc y);

// Finalizes the operations added so far into an operation graph and, with a handle, into
// a plan; *ws gets its workspace bytes. NULL (and `why`) when cuDNN has no engine for the
// graph; always NULL without a handle (g->failed then says whether the graph finalized).
// `what` names the graph in messages.
cg_desc cg_finish(cg* g, const char* what, int64_t* ws);

// Runs plan with the n (uid, pointer) pairs and workspace on the handle's stream: 0. A
// failure is one line naming the call and cuDNN's reasons: in why (why_len bytes), and -1
// returned, or without why through rt_check_fail.
int cg_execute(cudnnHandle_t handle, cg_desc plan, int n, const int64_t* uids, void** ptrs,
               void* workspace, const char* what, const char* file, int line, char* why,
               size_t why_len);

#endif

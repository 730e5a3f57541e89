// NCCL on the CUDA emulator (tests/cuda/emu/include/nccl.h): communicators of one rank, so
// a world-1 run of the CUDA step backend (rt_nccl_run) goes through runtime/comm/nccl.c as
// on a GPU. A one-rank collective is a copy (all-gather, broadcast, and reductions by sum,
// average, min, max or product: x / 1 is x) or, for a PreMulSum op, x times the op's
// scalar rounded to the buffer's type; it is enqueued on the stream like any other work.
// More than one rank is refused at init with ncclInvalidUsage.
#include <stdio.h>
#include <string.h>

#include <vector>

#include "nccl.h"

struct emu_nccl_comm {
    bool aborted;
    std::vector<double> premul;  // the scalars of PreMulSum ops, op ncclAvg + 1 + index
    char last_error[256];
};

namespace {
const int first_custom_op = ncclAvg + 1;

size_t type_bytes(ncclDataType_t t) {
    switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    }
    return 0;
}

double scalar_value(const void* p, ncclDataType_t t) {
    switch (t) {
    case ncclFloat32: return *(const float*)p;
    case ncclFloat64: return *(const double*)p;
    case ncclBfloat16: return rt_bf16_to_f32_inl(*(const uint16_t*)p);
    case ncclFloat16: return rt_f16_to_f32_inl(*(const uint16_t*)p);
    default: return 0.0;
    }
}

// x[i] = round_t(s * x[i]) over n values of a float type, in float as NCCL's kernels.
void scale(void* x, size_t n, ncclDataType_t t, double s) {
    for (size_t i = 0; i < n; i++) {
        if (t == ncclFloat64) {
            ((double*)x)[i] *= s;
        } else if (t == ncclFloat32) {
            ((float*)x)[i] = (float)s * ((float*)x)[i];
        } else {
            uint16_t* h = (uint16_t*)x + i;
            const float v = (float)s * (float)scalar_value(h, t);
            *h = t == ncclBfloat16 ? rt_bf16_from_f32_inl(v) : rt_f16_from_f32_inl(v);
        }
    }
}

ncclResult_t fail(ncclComm_t comm, ncclResult_t r, const char* what) {
    if (comm) snprintf(comm->last_error, sizeof comm->last_error, "%s", what);
    return r;
}

// recv = op(send) over n values on the stream.
ncclResult_t one_rank(ncclComm_t comm, const void* send, void* recv, size_t n, ncclDataType_t t,
                      int op, cudaStream_t stream) {
    if (comm == NULL || comm->aborted) return ncclInvalidArgument;
    const size_t bytes = type_bytes(t);
    if (bytes == 0) return fail(comm, ncclInvalidArgument, "unknown data type");
    double s = 1.0;
    if (op >= first_custom_op) {
        const size_t k = (size_t)(op - first_custom_op);
        if (k >= comm->premul.size() || comm->premul[k] != comm->premul[k])
            return fail(comm, ncclInvalidArgument, "unknown or destroyed reduction op");
        if (t != ncclFloat32 && t != ncclFloat64 && t != ncclFloat16 && t != ncclBfloat16)
            return fail(comm, ncclInvalidArgument, "PreMulSum on an integer type");
        s = comm->premul[k];
    } else if (op < 0) {
        return fail(comm, ncclInvalidArgument, "unknown reduction op");
    }
    const bool custom = op >= first_custom_op;
    emu_note_kernel(stream, "nccl");
    const cudaError_t e = emu_enqueue(stream, [=] {
        if (send != recv && n) memmove(recv, send, n * bytes);
        if (custom) scale(recv, n, t, s);
    });
    return e == cudaSuccess ? ncclSuccess : fail(comm, ncclUnhandledCudaError, cudaGetErrorString(e));
}
}  // namespace

extern "C" {

const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    }
    return "unknown result code";
}
const char* ncclGetLastError(ncclComm_t comm) { return comm ? comm->last_error : ""; }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "cuda_emu");
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId, int rank,
                                    ncclConfig_t*) {
    *comm = NULL;
    if (nranks != 1 || rank != 0) {
        fprintf(stderr, "nccl_emu: a communicator of %d ranks: the emulator's NCCL runs one rank "
                "(one emulated GPU; several ranks on it: --local)\n", nranks);
        return ncclInvalidUsage;
    }
    *comm = new emu_nccl_comm();
    return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    return ncclCommInitRankConfig(comm, nranks, id, rank, NULL);
}
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int, ncclComm_t* newcomm, ncclConfig_t*) {
    *newcomm = NULL;
    if (comm == NULL || comm->aborted) return ncclInvalidArgument;
    if (color != NCCL_SPLIT_NOCOLOR) *newcomm = new emu_nccl_comm();
    return ncclSuccess;
}
ncclResult_t ncclCommFinalize(ncclComm_t comm) { return comm ? ncclSuccess : ncclInvalidArgument; }
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    delete comm;
    return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
    if (comm == NULL) return ncclInvalidArgument;
    *asyncError = ncclSuccess;
    return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
    if (comm == NULL) return ncclInvalidArgument;
    *count = 1;
    return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
    if (comm == NULL) return ncclInvalidArgument;
    *rank = 0;
    return ncclSuccess;
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
    if (comm == NULL || residence != ncclScalarHostImmediate)
        return fail(comm, ncclInvalidArgument, "PreMulSum: only host-immediate scalars emulated");
    comm->premul.push_back(scalar_value(scalar, datatype));
    *op = (ncclRedOp_t)(first_custom_op + (int)comm->premul.size() - 1);
    return ncclSuccess;
}
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
    const size_t k = (size_t)((int)op - first_custom_op);
    if (comm == NULL || (int)op < first_custom_op || k >= comm->premul.size())
        return ncclInvalidArgument;
    comm->premul[k] = __builtin_nan("");  // destroyed: a later use fails
    return ncclSuccess;
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
    return one_rank(comm, sendbuff, recvbuff, sendcount, datatype, ncclSum, stream);
}
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
    return one_rank(comm, sendbuff, recvbuff, recvcount, datatype, (int)op, stream);
}
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
    return one_rank(comm, sendbuff, recvbuff, count, datatype, (int)op, stream);
}
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
    if (root != 0) return fail(comm, ncclInvalidArgument, "broadcast root outside the communicator");
    return one_rank(comm, sendbuff, recvbuff, count, datatype, ncclSum, stream);
}
ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }

}  // extern "C"

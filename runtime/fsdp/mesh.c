// Device meshes for FSDP/HSDP over rt_comm: the (replicate x shard) split of the world as
// init_device_mesh lays it out, and the post-forward groups of reshard_after_forward=int.
#include <stdio.h>
#include <string.h>

#include "rt_fsdp.h"

// ---- meshes -----------------------------------------------------------------------------

int rt_fsdp_mesh_init(rt_comm* world, int replicate, int shard, rt_fsdp_mesh* out) {
    if (out) memset(out, 0, sizeof *out);
    if (!world || !out) {
        fprintf(stderr, "rt_fsdp_mesh_init: bad argument: %s is NULL\n", world ? "out" : "world");
        if (world) return rt_comm_abort(world, "rt_fsdp_mesh_init: out is NULL");
        return RT_ERR_ARG;
    }
    int ws = rt_comm_size(world), r = rt_comm_rank(world);
    if (shard < 1 || replicate < 0 || (replicate ? replicate * shard : shard) != ws) {
        char msg[200];
        snprintf(msg, sizeof msg, "rt_fsdp_mesh_init: mesh replicate %d x shard %d does not cover "
                 "the world of %d ranks", replicate, shard, ws);
        rt_comm_abort(world, msg);
        return RT_ERR_ARG;
    }
    // Rows of the (replicate, shard) grid are shard groups, columns replicate groups.
    int st = rt_comm_split(world, r / shard, r % shard, &out->shard);
    if (!st && replicate) st = rt_comm_split(world, r % shard, r / shard, &out->replicate);
    if (st) rt_fsdp_mesh_free(out);
    return st;
}

void rt_fsdp_mesh_free(rt_fsdp_mesh* mesh) {
    if (!mesh) return;
    rt_comm_free(mesh->shard);
    rt_comm_free(mesh->replicate);
    mesh->shard = mesh->replicate = NULL;
}

int rt_fsdp_post_forward_comm(rt_comm* shard, int size, rt_comm** out) {
    if (out) *out = NULL;
    if (!shard || !out) {
        fprintf(stderr, "rt_fsdp_post_forward_comm: bad argument: %s is NULL\n",
                shard ? "out" : "shard");
        if (shard) return rt_comm_abort(shard, "rt_fsdp_post_forward_comm: out is NULL");
        return RT_ERR_ARG;
    }
    int ws = rt_comm_size(shard), r = rt_comm_rank(shard);
    if (size < 1 || ws % size != 0) {
        char msg[200];
        snprintf(msg, sizeof msg, "rt_fsdp_post_forward_comm: reshard_after_forward=%d must be a "
                 "positive divisor of the shard group size %d", size, ws);
        rt_comm_abort(shard, msg);
        return RT_ERR_ARG;
    }
    return rt_comm_split(shard, r / size, r % size, out);
}

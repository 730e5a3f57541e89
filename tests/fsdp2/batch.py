#!/usr/bin/env python3
"""Runs many twins (files written by `fsdpgen torch`) in real FSDP2 on gloo CPU ranks:
torch is imported once, then for each group of twins read from stdin one set of ranks
is forked, which loads and runs every twin of the group in turn.

Usage: batch.py < GROUPS (one JSON line per group, read as they come)
A group: {"world": N, "jobs": [...]}, each job {"twin": PATH, "steps": N, "report": PATH,
"save": PATH or null, "val_every": N, "val_batches": K}. Rank 0 writes each job's report
(the twin's run_rank report, or {"error": "..."}); after each group this prints
`# world N: ...` and `# idle`.
"""
import datetime
import importlib.util
import json
import os
import socket
import sys
import time
import traceback
import types

import torch  # noqa: F401 (imported once, before the fork)
import torch._dynamo  # noqa: F401 (fully_shard imports it lazily: once here, not in every rank)
import torch.distributed.fsdp  # noqa: F401
import torch.distributed.tensor  # noqa: F401
import torch.distributed as dist
import torch.multiprocessing as mp


def load(path, index):
    spec = importlib.util.spec_from_file_location(f"fsdpgen_twin_{index}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rank_main(rank, world, port, jobs):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    for i, job in enumerate(jobs):
        report = None
        try:
            twin = load(job["twin"], i)
            opts = types.SimpleNamespace(steps=job["steps"], seed=None, data=job.get("data"), load=None,
                                         save=job.get("save"), save_init=None, report=None,
                                         val_every=job.get("val_every", 0), val_batches=job.get("val_batches", 8),
                                         val_data=None)
            report = twin.run_rank(rank, world, opts)
        except BaseException as e:  # noqa: BLE001 (reported as the job's failure)
            msg = traceback.format_exc(limit=3) if not isinstance(e, SystemExit) else str(e)
            report = {"error": msg.strip().splitlines()[-1] if rank == 0 else msg}
            if rank == 0:
                report["trace"] = msg[-3000:]
        if rank == 0:
            with open(job["report"], "w") as f:
                json.dump(report, f)
        dist.barrier()
    dist.destroy_process_group()


def free_port():
    """A TCP port nothing listens on now, for rank 0's store (the kernel's pick: a port drawn
    from a fixed range could be in use, and then the other ranks wait out their timeout)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ctx = mp.get_context("fork")
    worst = 0
    for line in sys.stdin:
        group = json.loads(line)
        world, jobs = group["world"], group["jobs"]
        t0 = time.time()
        port = free_port()
        procs = [ctx.Process(target=rank_main, args=(r, world, port, jobs)) for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        rc = max(p.exitcode or 0 for p in procs)
        worst = max(worst, rc)
        print(f"# world {world}: {len(jobs)} twins in FSDP2 in {time.time() - t0:.0f} s"
              + (f" (a rank exited {rc})" if rc else ""), flush=True)
        print("# idle", flush=True)
    return worst


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Runs many twins (files written by `fsdpgen torch`) in real FSDP2 on one set of gloo CPU
ranks, so torch is imported and the ranks started once per world size, not per spec.

Usage: batch.py WORLD JOBS.json
JOBS.json: a list of {"twin": PATH, "steps": N, "report": PATH, "save": PATH or null}.
Rank 0 writes each job's report (the twin's run_rank report, or {"error": "..."}).
The ranks are forked after torch is imported (each twin module is loaded in every rank).
"""
import datetime
import importlib.util
import json
import os
import sys
import traceback
import types

import torch  # noqa: F401 (imported once, before the fork)
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
                                         save=job.get("save"), save_init=None, report=None)
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


def main():
    world, jobs_path = int(sys.argv[1]), sys.argv[2]
    with open(jobs_path) as f:
        jobs = json.load(f)
    port = 20000 + (os.getpid() * 7 + world) % 20000
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=rank_main, args=(r, world, port, jobs)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return max(p.exitcode or 0 for p in procs)


if __name__ == "__main__":
    sys.exit(main())

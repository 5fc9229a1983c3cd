"""What JAX calls a process's local block (make_array_from_process_local_data),
to check tinyjax's tj_array_from_local / tj_array_read_local / tj_array_local_shape.

    /work/venv/bin/python tools/jax_process_local.py [NPROC NDEV MODEL]

starts NPROC CPU processes of NDEV/NPROC devices each (jax.distributed over
gloo, 127.0.0.1) on the mesh data=2 model=MODEL (default: 2 4 2), and prints
for every spec each process's sorted distinct block starts per axis, which
is the block it must pass, and whether the global array JAX builds from
those blocks is the intended one. Checked with JAX 0.10.2: 2 processes x 2
devices, "batch:model+data" -> process 0 rows of blocks 0 and 2, process 1
blocks 1 and 3; 3 x 2 on data=2 model=3, "batch:data embed:model" ->
process 1 batch blocks 0, 1 x embed blocks 0, 2."""
import os, subprocess, sys


def child(pid, nproc, ndev, model):
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={ndev // nproc}"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address="127.0.0.1:12355", num_processes=nproc, process_id=pid)
    mesh = Mesh(np.array(jax.devices()).reshape(2, model), ("data", "model"))
    B, E = 2 * ndev, ndev
    G = (np.arange(B * E) % 13 - 6).astype(np.float32).reshape(B, E)
    for spec in [P(("model", "data")), P(("data", "model")), P("data", "model"), P("model", "data"), P(None, ("model", "data"))]:
        sh = NamedSharding(mesh, spec)
        idx = sh.addressable_devices_indices_map((B, E))
        rows = sorted({s[0].start or 0 for s in idx.values()})
        cols = sorted({s[1].start or 0 for s in idx.values()})
        bs = sh.shard_shape((B, E))
        L = np.concatenate([np.concatenate([G[r:r + bs[0], c:c + bs[1]] for c in cols], 1) for r in rows], 0)
        arr = jax.make_array_from_process_local_data(sh, L, (B, E))
        full = np.asarray(multihost_utils.process_allgather(arr, tiled=True))
        print(f"process {pid} {spec}: batch blocks {[r // bs[0] for r in rows]} embed blocks {[c // bs[1] for c in cols]}"
              f" local shape {L.shape}; global == intended: {bool((full == G).all())}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*map(int, sys.argv[2:6]))
    else:
        nproc, ndev, model = (list(map(int, sys.argv[1:4])) + [2, 4, 2][len(sys.argv) - 1:])[:3]
        ps = [subprocess.Popen([sys.executable, __file__, "--child", str(p), str(nproc), str(ndev), str(model)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for p in range(nproc)]
        for p in ps:
            out, _ = p.communicate(timeout=300)
            sys.stdout.write("".join(l for l in out.splitlines(True) if l.startswith("process ")))

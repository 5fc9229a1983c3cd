#!/bin/bash
# test_nccl_launch.sh — how gpt2_train starts across GPUs, without a GPU.
#
# gpt2_train --cuda in N processes runs one device per process on its own
# GPU, with collectives through the NCCL transport. Everything before the
# first kernel is checked here with --dry-run (which stops after the NCCL
# communicators are made): the launcher's process count and rank, the node's
# local rank -> GPU, the NCCL id's way (a shared file, TCP, MPI_Bcast), and
# the clear errors of impossible setups. The binaries are gpt2_train linked
# with tests/nccl_mock.cpp (a pretend NCCL and CUDA runtime with 4 GPUs; its
# communicators need no peer to start), so this checks the demo's wiring,
# not NCCL or a GPU (tests/test_nccl_gpt2.cu does that where GPUs exist).
#
#   tests/test_nccl_launch.sh MOCK NONCCL [MOCK_MPI]
#     MOCK      gpt2_train with -DGPT2_CUDA -DTJ_NCCL, linked with the mock
#     NONCCL    gpt2_train with -DGPT2_CUDA only (no NCCL)
#     MOCK_MPI  as MOCK, with the library built -DTJ_MPI (mpirun cases; optional)
# Ends with "N passed, N failed"; exit status 1 on a failure.
MOCK=$1 NONCCL=$2 MOCK_MPI=$3
pass=0 fail=0
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
export TJ_TIMEOUT=20 # a broken case fails in seconds instead of 300
MPIRUN="mpirun --allow-run-as-root --oversubscribe --mca btl_vader_single_copy_mechanism none"

check() { # check NAME CONDITION...: count one case
    local name=$1; shift
    if "$@"; then pass=$((pass + 1)); echo "ok: $name"
    else fail=$((fail + 1)); echo "FAILED: $name"; sed 's/^/    | /' "$dir"/out.* 2>/dev/null; fi
}
# launch N COORD LOCAL BIN ARGS...: N processes of the plain launcher
# (TJ_NPROCS, TJ_RANK, TJ_COORD); LOCAL "r" sets TJ_LOCAL_RANK=rank, "mod K"
# rank % K, "-" leaves it unset; process r writes out.r, its status rc.r
launch() {
    local n=$1 coord=$2 local=$3 bin=$4 r; shift 4
    rm -f "$dir"/out.* "$dir"/rc.* "$dir"/id
    for ((r = 0; r < n; r++)); do
        (
            export TJ_NPROCS=$n TJ_RANK=$r TJ_COORD=$coord
            case $local in r) export TJ_LOCAL_RANK=$r ;; mod*) export TJ_LOCAL_RANK=$((r % ${local#mod })) ;; esac
            "$bin" "$@" > "$dir/out.$r" 2>&1; echo $? > "$dir/rc.$r"
        ) &
    done
    wait
}
all_rc() { local r; for ((r = 0; r < $1; r++)); do [ "$(cat "$dir/rc.$r")" = "$2" ] || return 1; done; }
has() { grep -qF -- "$2" "$dir/out.$1"; }
# every process r got GPU (r % K) of 4 and says so
gpus() {
    local n=$1 k=$2 mesh=$3 how=$4 r
    all_rc "$n" 0 || return 1
    for ((r = 0; r < n; r++)); do
        has $r "launch: process $r of $n, device $r of mesh \"$mesh\", GPU $((r % k)) of 4 on this node, transport nccl (NCCL id $how" || return 1
        has $r "dry run: stopped before data, model and kernels" || return 1
    done
}
port=$((20000 + $$ % 20000))

# ---- the plain launcher: TJ_NPROCS, TJ_RANK, TJ_COORD
launch 2 "$dir/id" - "$MOCK" --cuda --mesh "data=2" --dry-run
check "2 processes, NCCL id through a shared file, GPU = rank (no local rank given)" gpus 2 4 "data=2" "through TJ_COORD=$dir/id"
launch 4 "127.0.0.1:$port" r "$MOCK" --cuda --mesh "data=2 model=2" --dry-run
check "4 processes, NCCL id over TCP, GPU = TJ_LOCAL_RANK, mesh data=2 model=2" gpus 4 4 "data=2 model=2" "through TJ_COORD=127.0.0.1:$port"
launch 4 "$dir/id" "mod 2" "$MOCK" --cuda --mesh "data=4" --dry-run
check "two nodes of 2 processes (TJ_LOCAL_RANK = rank % 2): GPUs 0, 1, 0, 1" gpus 4 2 "data=4" "through TJ_COORD=$dir/id"

# ---- impossible setups: every process fails with a message that says why
launch 2 "$dir/id" - "$MOCK" --cuda --mesh "data=2 model=2" --dry-run
check "a mesh of 4 devices in 2 processes: refused before any wait" \
    eval 'all_rc 2 1 && has 0 "so the mesh needs 2 devices; --mesh \"data=2 model=2\" has 4" && has 1 "so the mesh needs 2 devices"'
launch 2 "$dir/id" - "$MOCK" --cuda --dry-run
check "2 processes without --mesh: refused (the default is one device)" eval 'all_rc 2 1 && has 0 "the default without --mesh has 1"'
launch 2 "$dir/id" - "$MOCK" --cuda --devices 3 --mesh "data=2" --dry-run
check "--devices 3 with a mesh of 2: refused, naming both" eval 'all_rc 2 2 && has 0 "mesh \"data=2\" has 2 devices but there are 3"'
rm -f "$dir"/out.* "$dir"/rc.* "$dir"/id
( export TJ_NPROCS=2 TJ_COORD=$dir/id TJ_TIMEOUT=3
  TJ_RANK=0 TJ_LOCAL_RANK=0 "$MOCK" --cuda --mesh "data=2" --dry-run > "$dir/out.0" 2>&1; echo $? > "$dir/rc.0" ) &
( export TJ_NPROCS=2 TJ_COORD=$dir/id TJ_TIMEOUT=3
  TJ_RANK=1 TJ_LOCAL_RANK=4 "$MOCK" --cuda --mesh "data=2" --dry-run > "$dir/out.1" 2>&1; echo $? > "$dir/rc.1" ) &
wait
check "a 5th process on a node of 4 GPUs: it says why, the other times out naming TJ_COORD" \
    eval 'all_rc 2 1 && has 1 "local rank 4 with 1 GPU per process needs GPU 4..4, but this node has 4 (more processes on this node than GPUs" && has 0 "TJ_COORD"'
launch 2 "$dir/id" - "$NONCCL" --cuda --mesh "data=2" --dry-run
check "--cuda in 2 processes, a build without NCCL: refused, naming NCCL" \
    eval 'all_rc 2 1 && has 0 "collectives between GPUs go through NCCL, and this gpt2_train was built without it"'
rm -f "$dir"/out.*
TJ_NPROCS=2 TJ_RANK=2 "$MOCK" --cuda --mesh "data=2" --dry-run > "$dir/out.0" 2>&1; echo $? > "$dir/rc.0"
check "TJ_RANK outside TJ_NPROCS: refused" eval 'all_rc 1 1 && has 0 "TJ_NPROCS='"'"'2'"'"' and TJ_RANK='"'"'2'"'"' are not a process count (1..64) and a rank below it"'

# ---- one process: GPU 0, or the CPU
rm -f "$dir"/out.*
"$MOCK" --cuda --dry-run > "$dir/out.0" 2>&1; echo $? > "$dir/rc.0"
check "one process with --cuda: GPU 0, one device" eval 'all_rc 1 0 && has 0 "launch: one process, 1 device, GPU 0 of 4 on this node"'
"$MOCK" --mesh "data=2 model=2" --dry-run > "$dir/out.0" 2>&1; echo $? > "$dir/rc.0"
check "one process on the CPU: 4 simulated devices" eval 'all_rc 1 0 && has 0 "launch: one process, 4 devices (mesh \"data=2 model=2\"), the CPU"'

# ---- mpirun (a -DTJ_MPI build): the id by MPI_Bcast, the local rank by MPI's node split
if [ -n "$MOCK_MPI" ]; then
    rm -f "$dir"/out.*
    $MPIRUN -np 2 --output-filename "$dir/mpi" "$MOCK_MPI" --cuda --mesh "data=2" --dry-run > "$dir/out.all" 2>&1; rc=$?
    for r in 0 1; do cat "$dir"/mpi/1/rank.$r/stdout "$dir"/mpi/1/rank.$r/stderr > "$dir/out.$r" 2>/dev/null; echo $rc > "$dir/rc.$r"; done
    check "mpirun -np 2: NCCL id by MPI_Bcast, GPU = local rank" gpus 2 4 "data=2" "by MPI_Bcast"
    rm -rf "$dir"/out.* "$dir"/mpi
    $MPIRUN -np 5 "$MOCK_MPI" --cuda --mesh "data=5" --dry-run > "$dir/out.0" 2>&1; echo $? > "$dir/rc.0"
    check "mpirun -np 5 on a node of 4 GPUs: all 5 processes fail at once with process 4's reason" \
        eval '! all_rc 1 0 && [ "$(grep -c "process 4 of 5 cannot start: nccl bootstrap: local rank 4 with 1 GPU per process needs GPU 4..4, but this node has 4" "$dir/out.0")" = 5 ]'
else
    echo "skipped: mpirun cases (no -DTJ_MPI build given)"
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]

#!/usr/bin/env bash
# JaxMARL's own IPPO scripts against jaxpo on a GPU, side by side (benchmarks/peer.py), one
# prepared script. Before the call, here:
#   python benchmarks/peer.py fetch [--from GITDIR]      # the peer's scripts into .peer/ (ignored)
#   ../shared/tools/device-wheels.sh                      # jaxmarl, distrax, ... into .whl/
# then (the .peer folder is ignored by git, so it must be carried; there is no git checkout on
# the device, so name jaxpo's commit):
#   run(command="JAXPO_COMMIT=<short sha> bash benchmarks/peer_device.sh", carry=[".whl", ".peer"], timeout_s=540)
# Every step has its own time limit (460 s together; with the install, under 8 minutes) and
# appends to $OUT/peer_gpu.jsonl as it goes, so a step that runs long costs only itself.
# One pair a setting (peer, then jaxpo), one warm-up call, two timed calls, jaxpo's options
# (off CPU those are XLA's defaults: neither side gets any):
#   MPE ippo_ff_mpe   E = 1024, 4096, 16384; 16 seeds x 1024 envs; 1024 runs x 16 envs
#   SMAX ippo_rnn_smax  E = 128, 1024
# Seeds: the peer's make_train vmapped over keys by the harness, as the script's own main
# vmaps it over NUM_SEEDS keys (its code unmodified); jaxpo: runs in one program.
set -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
[ -f .peer/jaxmarl/COMMIT.json ] || { echo "no .peer/jaxmarl: run benchmarks/peer.py fetch and carry .peer" | tee "$OUT/info.txt"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
mkdir -p /tmp/site && cp -r jaxpo /tmp/site/ && cp -r envs /tmp/site/jaxpo/envs  # the layered package, envs inside
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
unset JAX_COMPILATION_CACHE_DIR XLA_FLAGS  # real compiles; the harness passes the options itself
(cd /tmp && python3 -c "import jax, jaxmarl; print(jax.__version__, jax.devices())") 2>&1 | tee "$OUT/info.txt"

pair() {  # one harness call: its time limit, then its arguments; JSON lines appended
  local limit=$1; shift
  timeout "$limit" python3 benchmarks/peer.py pair --pairs 1 --options jaxpo --warmup 1 --calls 2 \
    --timeout "$((limit - 10))" "$@" 2>>"$OUT/peer_gpu.err" | tee -a "$OUT/peer_gpu.jsonl"
  echo "exit $? after ${SECONDS}s: $*" | tee -a "$OUT/info.txt"
}
pair 60 --setting mpe --num-envs 1024 --updates 10
pair 60 --setting mpe --num-envs 4096 --updates 5
pair 60 --setting mpe --num-envs 16384 --updates 2
pair 60 --setting mpe --num-envs 1024 --seeds 16 --updates 2
pair 70 --setting mpe --num-envs 16 --seeds 1024 --updates 2
pair 75 --setting smax --num-envs 128 --updates 5
pair 75 --setting smax --num-envs 1024 --updates 2

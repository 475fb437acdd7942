#!/usr/bin/env bash
# The benchmark protocol (benchmarks/protocol.py) on a GPU, one prepared script. The device
# image lacks jaxmarl and distrax: their wheels are expected in .whl/ (../shared/tools/device-wheels.sh):
#   run(command="bash benchmarks/protocol_device.sh", carry=[".whl", "benchmarks/results/protocol-gpu"], timeout_s=590)
# The suite is resumable: the run directories come back under $OUT/protocol-gpu; put them at
# benchmarks/results/protocol-gpu (carried in) and the next call continues where this one stopped.
# SUITE_ARGS overrides the slice (default: the full protocol, 10M steps x 10 seeds, SMAX first);
# SUITE_SECONDS bounds the suite so the copy-out always happens.
set -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
mkdir -p /tmp/site && cp -r jaxpo /tmp/site/ && cp -r envs /tmp/site/jaxpo/envs
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 JAX_COMPILATION_CACHE_DIR=/tmp/xla-cache
python3 -c "import jax; print(jax.__version__, jax.devices())" 2>&1 | tee "$OUT/info.txt"
RESULTS=benchmarks/results/protocol-gpu
mkdir -p "$RESULTS"
# shellcheck disable=SC2086
timeout "${SUITE_SECONDS:-500}" python3 benchmarks/protocol.py --out "$RESULTS" ${SUITE_ARGS:---suite all --steps 1e7 --seeds 10} \
  2>"$OUT/protocol.err" | tee "$OUT/protocol.jsonl"
echo "suite exit $?" | tee -a "$OUT/info.txt"
cp -r "$RESULTS" "$OUT/protocol-gpu"

#!/usr/bin/env bash
# The benchmark protocol (benchmarks/protocol.py) on a GPU, one prepared script. The device
# image lacks jaxmarl and distrax: their wheels are expected in .whl/ (../shared/tools/device-wheels.sh):
#   run(command="bash benchmarks/protocol_device.sh", carry=[".whl", "benchmarks/results/protocol-gpu"], timeout_s=590)
# The image also lacks what the run layer's reports import; fetch those wheels too:
#   ../shared/tools/device-wheels.sh rliable==1.0.8 "arch<8" "pandas<3" pytz tzdata tensorboardX
# The suite is resumable: its directory comes back as an archive in 15 MiB parts,
# $OUT/protocol-gpu.tar.gz.part-aa, -ab, ... (the device returns at most 8 files of 16 MiB):
# only what resuming needs travels (the latest checkpoint of an unfinished task; a finished
# one is skipped on resume). Rejoin and unpack it at benchmarks/results/protocol-gpu (carried in)
# and the next call continues where this one stopped:
#   cat protocol-gpu.tar.gz.part-* | tar -xz      (in the repository root)
# To keep what travels under the device's 64 MiB, a finished task may be carried as results
# only (eval.csv, summary.csv, absolute.csv, with results.json and marl_eval.json): the suite
# keeps its row and marl-eval entries as they were (see protocol.results_only).
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
EXCLUDE=()
for run in "$RESULTS"/*/checkpoints; do
  # a finished task needs neither its checkpoints nor its best parameters (the absolute metric is played)
  if [ -e "$(dirname "$run")/summary.csv" ]; then EXCLUDE+=("--exclude=$run" "--exclude=$(dirname "$run")/eval_best.npz"); continue; fi
  latest=$(ls "$run" | grep -E '^[0-9]+$' | sort -n | tail -1)
  for step in $(ls "$run" | grep -E '^[0-9]+$'); do [ "$step" = "$latest" ] || EXCLUDE+=("--exclude=$run/$step"); done
done
tar -cz "${EXCLUDE[@]}" -f - "$RESULTS" | split -b 15m - "$OUT/protocol-gpu.tar.gz.part-"
# the results alone (curves, tables, every run's csv files), should the archive exceed what comes back
tar -czf "$OUT/protocol-gpu-results.tar.gz" --exclude=checkpoints --exclude='*.npz' "$RESULTS"

#!/usr/bin/env bash
# Accelerator check, one prepared script (run from the repo root on a GPU machine whose image
# lacks jaxmarl and distrax: their wheels are expected in .whl/, see ../shared/tools/device-wheels.sh,
# with the run layer's report imports as extras:
#   ../shared/tools/device-wheels.sh rliable==1.0.8 "arch<8" "pandas<3" pytz tzdata tensorboardX):
#   run(command="bash benchmarks/device_check.sh", carry=[".whl"], timeout_s=540)
# (a 15-minute lease then has no room for the protocol script as well: run one of the two.
# Cut to 340 s once, the 4096/16384-env, 16 x 256 and first CLI steps did not finish.)
# jaxpo is copied into /tmp/site (as installed: envs/ -> jaxpo/envs). Every step has its own
# time limit and writes to $OUT as it goes, so a step that runs long costs only itself:
#   info.txt      jax, devices
#   tests.log     core tests on the accelerator (~50 s on an H200)
#   matched.jsonl throughput.py --matched (JaxMARL IPPO's settings): E = 1024, 4096, 16384;
#                 16 envs x 256 runs; 1024 envs x 16 runs; recurrent MAPPO at 1024 envs
#   train.log     the default experiment twice through the CLI: the second start-up reads
#                 the persistent compile cache the first wrote
set -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
mkdir -p /tmp/site && cp -r jaxpo /tmp/site/ && cp -r envs /tmp/site/jaxpo/envs  # the layered package, envs inside
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 JAX_COMPILATION_CACHE_DIR=/tmp/xla-cache
REPO=$PWD
(cd /tmp && python3 -c "import jax, jaxpo, jaxpo.envs; print(jax.__version__, jax.devices(), jaxpo.envs.__file__)") 2>&1 | tee "$OUT/info.txt"

mkdir -p /tmp/t && cp -r tests /tmp/t/ && cd /tmp/t
timeout 120 python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/test_train.py tests/test_losses.py tests/test_gae.py \
  tests/test_canonical.py 2>&1 | tail -15 | tee "$OUT/tests.log"
cd "$REPO"

bench() {  # one throughput.py call, its JSON lines appended to matched.jsonl
  timeout "$1" python3 benchmarks/throughput.py --chunks 3 --min-seconds 2 --timeout "$1" "${@:2}" \
    2>>"$OUT/bench.err" | tee -a "$OUT/matched.jsonl"
}
bench 150 --matched --num-envs 1024 4096 16384 --seeds 1
bench 90 --matched --num-envs 16 --seeds 256
bench 90 --matched --num-envs 1024 --seeds 16
bench 120 --num-envs 1024 --seeds 1 --num-steps 128 --recurrent --preset mappo --critic-input global --kinds train

cd /tmp && for i in 1 2; do
  /usr/bin/time -f "wall %e s (run $i)" timeout 90 python3 -c \
    "from jaxpo.cli import main; main(['train', '--out', '/tmp/runs', '--name', 'gpu$i', '--no-progress'])" 2>&1 \
    | tail -3 | tee -a "$OUT/train.log"
done

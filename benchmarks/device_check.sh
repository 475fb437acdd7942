#!/usr/bin/env bash
# Accelerator check (run from the repo root on a GPU machine whose image lacks jaxmarl and
# distrax: their wheels are expected in .whl/, see ../shared/tools/device-wheels.sh).
# jaxpo copied into /tmp/site (as installed: envs/ -> jaxpo/envs), core tests, throughput, default experiment.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
mkdir -p /tmp/site/jaxpo && cp -r jaxpo/*.py /tmp/site/jaxpo/ && cp -r envs /tmp/site/jaxpo/envs
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
REPO=$PWD
(cd /tmp && python3 -c "import jax, jaxpo, jaxpo.envs; print(jax.__version__, jax.devices(), jaxpo.envs.__file__)") 2>&1 | tee $OUT/info.txt
mkdir -p /tmp/t && cp -r tests /tmp/t/ && cd /tmp/t
timeout 180 python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/test_train.py tests/test_losses.py tests/test_gae.py tests/test_canonical.py tests/test_public_goods_learning.py 2>&1 | tail -25 | tee $OUT/tests.log
cd $REPO
timeout 170 python3 benchmarks/throughput.py --num-envs 1024 8192 2>>$OUT/bench.err | tee $OUT/bench.jsonl
cd /tmp && timeout 90 python3 -c "from jaxpo.cli import main; main(['train', '--out', '/tmp/runs', '--name', 'gpu', '--no-progress'])" 2>&1 | tail -4 | tee $OUT/train.log

#!/usr/bin/env bash
# The prepared GPU check (issue 7): the CUDA tests, every recipe's smoke run on CUDA under bf16-mixed, then
# `python -m benchmarks.gpu_check` (every backend against the reference on CUDA, in four processes at once,
# then the timings).
#
#   bash benchmarks/gpu_recipes_check.sh            # from the repository root, on a CUDA machine
#
# Needs a Python with attnmm's dependencies and a CUDA build of torch ($PYTHON, else .venv/bin/python,
# else python3). Recipes whose data is not under $ATTNMM_DATA (default: shared/data or ../shared/data)
# are reported as skipped; graph_graph generates its data. Logs go to $OUT (default: a new temporary
# folder). Each step has its own time limit and the whole check stops starting steps after
# $DEADLINE seconds (default 480), so it ends within about 9 minutes on one GPU. Exit code: 0 when
# every step that ran passed, 1 otherwise, 2 without CUDA. ACCELERATOR=cpu rehearses the recipe
# steps on the CPU (autocast bf16 there) and leaves out the CUDA-only parts. CALIBRATE=1 then calibrates
# the dispatcher's cost model on the GPU (python -m benchmarks.calibrate --device cuda, fp32 and bf16).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON; elif [ -x .venv/bin/python ]; then PY=$ROOT/.venv/bin/python; else PY=python3; fi
if [ -z "${ATTNMM_DATA:-}" ]; then
  for d in shared/data ../shared/data; do
    if [ -d "$d" ]; then ATTNMM_DATA=$(cd "$d" && pwd); export ATTNMM_DATA; break; fi
  done
fi
OUT=${OUT:-$(mktemp -d)}
DEADLINE=${DEADLINE:-480}
ACCELERATOR=${ACCELERATOR:-gpu}
export MPLBACKEND=Agg PYTHONWARNINGS=ignore PYTHONUNBUFFERED=1 PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT/runs"

ACCELERATOR=$ACCELERATOR "$PY" - <<'PY' || exit 2
import os
import torch
assert os.environ["ACCELERATOR"] == "cpu" or torch.cuda.is_available(), \
    f"no CUDA device visible to torch {torch.__version__}"
if torch.cuda.is_available():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, bf16: {torch.cuda.is_bf16_supported()}")
import attnmm, lightning, torch_geometric  # noqa: E401,F401  (fail here, not in every recipe)
PY

failed=()
step() {  # step NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 20 ]; then echo "== $name: not started (deadline of $DEADLINE s reached)"; failed+=("$name (not run)"); return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit $limit s)"
  local start=$SECONDS
  if timeout "$limit" "$@" >"$OUT/$name.log" 2>&1; then
    echo "   ok in $((SECONDS - start)) s. $(grep -h 'metrics written' "$OUT/$name.log" | tail -1)"
  else
    echo "   FAILED (exit $?) after $((SECONDS - start)) s; the end of $OUT/$name.log:"
    tail -25 "$OUT/$name.log" | sed 's/^/   | /'
    failed+=("$name")
  fi
}

if [ "$ACCELERATOR" = gpu ]; then
  # the CUDA tests: the layers against themselves on the CPU, flex against the reference, the pictures
  step cuda_tests 150 "$PY" -m pytest -q -p no:cacheprovider tests/nn/test_cuda_parity.py \
    tests/attention/backends/test_flex.py tests/lightning/test_attention_png.py
  tail -3 "$OUT/cuda_tests.log" 2>/dev/null
fi

declare -A DATA=([graph_graph]="" [graph_node]=planetoid [speech_truncated]=fsdd [image_patches]=MNIST
                 [text_pos]=ud_english_ewt [text_lm]=tinyshakespeare)
declare -A EXTRA=([graph_graph]="--data.num_graphs=64 --data.batch_size=16"
                  [text_lm]="--data.block_size=64 --data.eval_stride=64")
for recipe in graph_graph graph_node speech_truncated image_patches text_pos text_lm; do
  folder=${DATA[$recipe]}
  if [ -n "$folder" ] && [ ! -d "${ATTNMM_DATA:-/nonexistent}/$folder" ]; then
    echo "== $recipe: skipped, no data at \$ATTNMM_DATA/$folder"; continue
  fi
  mkdir -p "$OUT/runs/$recipe"
  # shellcheck disable=SC2086
  step "$recipe" 90 bash -c "cd '$OUT/runs/$recipe' && exec '$PY' '$ROOT/recipes/$recipe.py' fit \
    --trainer.fast_dev_run=true --trainer.accelerator=$ACCELERATOR --trainer.devices=1 \
    --trainer.precision=bf16-mixed ${EXTRA[$recipe]:-}"
done
if [ "$ACCELERATOR" = gpu ]; then
  # part 1 (compilation-bound: flex compiles each mask) in four processes at once, each a dtype and half the
  # cases; then part 2's timings alone on the GPU
  step gpu_check_part1 240 bash -c 'rc=0; pids=()
    for d in fp32 bf16; do for s in 0/2 1/2; do
      timeout 230 "$0" -m benchmarks.gpu_check --part 1 --dtype $d --shard $s > "$1/gpu_check_part1_${d}_${s%/*}.log" 2>&1 &
      pids+=($!)
    done; done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    cat "$1"/gpu_check_part1_*.log; exit $rc' "$PY" "$OUT"
  grep -h -E '^== done|FAILED' "$OUT"/gpu_check_part1_*.log 2>/dev/null
  step gpu_check_part2 200 "$PY" -m benchmarks.gpu_check --part 2
  sed -n '/^== done/,$p' "$OUT/gpu_check_part2.log" 2>/dev/null
  # LSTM vs causal attention training steps on the GPU: the rnn_attention study's part parallel_cuda, written
  # to a part store of its own ($OUT/rnn_parallel_cuda.json) for `python -m studies rnn_attention merge`
  step rnn_parallel_cuda 150 "$PY" -m studies rnn_attention measure parallel device=cuda rounds=2 \
    --store "$OUT/rnn_parallel_cuda.json" --no-progress
  tail -5 "$OUT/rnn_parallel_cuda.log" 2>/dev/null
fi

if [ "$ACCELERATOR" = gpu ] && [ "${CALIBRATE:-0}" = 1 ]; then
  # the dispatcher's cost model on this GPU, float32 then bf16 (about 5 minutes each, outside the deadline);
  # the merged constants are left in $OUT/_calibration.py, to commit as attnmm/attention/backends/_calibration.py
  DEADLINE=$((SECONDS + 1300))
  step calibrate_fp32 600 "$PY" -m benchmarks.calibrate --device cuda --budget 0.02
  step calibrate_bf16 600 "$PY" -m benchmarks.calibrate --device cuda --dtype bf16 --budget 0.02
  cat "$OUT"/calibrate_*.log 2>/dev/null
  cp attnmm/attention/backends/_calibration.py "$OUT/_calibration.py"
fi

echo "== finished in $SECONDS s; logs in $OUT"
if [ ${#failed[@]} -gt 0 ]; then echo "FAILED: ${failed[*]}"; exit 1; fi
echo "all steps passed"

#!/usr/bin/env bash
# Rows of the learning table trained on one CUDA GPU under a wall-clock cap, brought back as one file.
#
#   bash bench/gpu_rows.sh OUT_DIR CAP_SECONDS LEARNING_TABLE_ARGS...
#
# Runs bench/learning_table.py LEARNING_TABLE_ARGS --device cuda --out $WORK (default /tmp/gpu_rows) under
# CAP_SECONDS (a run cut short keeps its checkpoints: the same command resumes it), writes the page of
# whatever finished, and packs every run directory into OUT_DIR/table.tgz: metrics, logs, final
# evaluations and the last checkpoint (resumable), not the trajectories (hundreds of MB of token ids)
# nor the earlier checkpoints. OUT_DIR then holds three files (a device's $OUT brings back few files,
# each under 16 MiB; the script warns above 15 MiB). Untar it into runs/ and
# `learning_table.py --report-only --estimators ...` puts the rows on docs/results/results.md beside the CPU ones.
# The warm start comes from $TOOLGYM_CACHE (carry the cached warm start there: the recipe's key is the
# same on every device, so nothing is rebuilt). Example (GraphGPO on ALFWorld, three seeds side by side):
#   TOOLGYM_CACHE=runs/gpu_cache bash bench/gpu_rows.sh /tmp/g 480 --envs alfworld --estimators alfworld=graphgpo \
#     --seeds 0 1 2 --steps 20 --tasks 16 --group 8 --eval-tasks 96 --test-freq 5 --final-eval-tasks 480 --jobs 3
# A dry run on CPU at toy size: DEVICE=cpu bash bench/gpu_rows.sh /tmp/x 300 --envs alfworld --seeds 0 --steps 1 \
#   --tasks 2 --group 2 --eval-tasks 2 --test-freq 1 --estimators alfworld=graphgpo
set -uo pipefail
out=${1:?usage: bench/gpu_rows.sh OUT_DIR CAP_SECONDS LEARNING_TABLE_ARGS...}
cap=${2:?CAP_SECONDS}
shift 2
py=${PYTHON:-python3}
device=${DEVICE:-cuda}
here=$(cd "$(dirname "$0")" && pwd)
work=${WORK:-/tmp/gpu_rows}
mkdir -p "$out" "$work"
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE HF_HUB_DISABLE_PROGRESS_BARS=1 XLA_PYTHON_CLIENT_PREALLOCATE=false

echo "== learning table on $device (cap ${cap} s): $*"
started=$(date +%s)
timeout "$cap" "$py" "$here/learning_table.py" "$@" --no-speed --device "$device" --out "$work" --docs "$work/results.md"
echo "table exit $? (124: the cap stopped it) after $(( $(date +%s) - started )) s"
pkill -f "toolgym train" 2>/dev/null
pkill -f "warmstart_sweep.py --eval-model" 2>/dev/null
sleep 1
for log in "$work"/*/train.log; do
  [ -f "$log" ] && { echo "-- $(basename "$(dirname "$log")")"; tail -n 2 "$log"; }
done
# the page of what finished, without evaluating anything more (no --final-eval-tasks here)
"$py" "$here/learning_table.py" "$@" --no-speed --device "$device" --out "$work" --docs "$work/results.md" \
  --final-eval-tasks 0 --report-only --partial "Trained on one GPU (bench/gpu_rows.sh, cap ${cap} s)." | tail -n 1
last=()
for run in "$work"/*/; do
  step=$(ls -d "$run"step-* 2>/dev/null | sort | tail -n 1)
  [ -n "$step" ] && last+=("${step#"$work"/}")
done
tar -cf "$out/table.tar" -C "$work" --exclude=trajectories --exclude='step-*' .
[ "${#last[@]}" -eq 0 ] || tar -rf "$out/table.tar" -C "$work" "${last[@]}"  # an --exclude would drop these too
gzip -c "$out/table.tar" >"$out/table.tgz" && rm "$out/table.tar"
cp "$work/results.md" "$work/results_learning_curves.png" "$out/" 2>/dev/null
size=$(stat -c %s "$out/table.tgz")
echo "packed $(( size / 1024 )) KiB into $out/table.tgz"
[ "$size" -lt $(( 15 * 1024 * 1024 )) ] || echo "warning: table.tgz is over 15 MiB: a device's \$OUT may not bring it back"

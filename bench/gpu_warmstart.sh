#!/usr/bin/env bash
# Warm-start variants of one recipe, side by side on one CUDA GPU, under a wall-clock cap.
#
#   bash bench/gpu_warmstart.sh ENV OUT_DIR CAP_SECONDS NAME:FIELD=VALUE,... [NAME:...]
#
# bench/warmstart_sweep.py builds each variant (`toolgym warmstart --device cuda`: SFT and validation
# on the GPU, the scripted data on the CPUs; same recipe, same cache key as a CPU build). When the cap
# is reached the unfinished builds are stopped; their logs keep the validation checks they reached.
# Every variant's published warm start (self-contained: weights, tokenizer, warmstart.json) and build.log end up in
# OUT_DIR/builds.tar.gz, one file to bring back; untar it into a TOOLGYM_CACHE to use a build.
# SWEEP_SET="field=value ..." applies to every variant; JOBS (default: one per variant) and THREADS
# (default 3) size the run. A dry run on CPU at toy size:
#   DEVICE=cpu SWEEP_SET="episodes=8 sft_max_steps=2 sft_val_tasks=2" bash bench/gpu_warmstart.sh webshop /tmp/x 300 a: b:hidden_size=96,num_heads=3
set -uo pipefail
env_name=${1:?usage: bench/gpu_warmstart.sh ENV OUT_DIR CAP_SECONDS VARIANT...}
out=${2:?OUT_DIR}
cap=${3:?CAP_SECONDS}
shift 3
[ "$#" -gt 0 ] || { echo "name at least one variant (NAME: alone is the shipped recipe)"; exit 2; }
py=${PYTHON:-python3}
device=${DEVICE:-cuda}
jobs=${JOBS:-$#}
threads=${THREADS:-3}
sets=()
for f in ${SWEEP_SET:-}; do sets+=(--set "$f"); done
variants=()
for v in "$@"; do variants+=(--variant "$v"); done
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE HF_HUB_DISABLE_PROGRESS_BARS=1 XLA_PYTHON_CLIENT_PREALLOCATE=false

echo "== $env_name warm-start sweep on $device: $# variant(s), $jobs at a time, cap ${cap} s"
timeout "$cap" "$py" "$here/warmstart_sweep.py" --env "$env_name" --device "$device" --jobs "$jobs" --threads "$threads" \
  --out "$out/sweep" "${sets[@]}" "${variants[@]}"
echo "sweep exit $? (124: the cap stopped it)"
pkill -f "toolgym warmstart" 2>/dev/null
sleep 1
for log in "$out"/sweep/*/build.log; do
  [ -f "$log" ] || continue
  name=$(basename "$(dirname "$log")")
  echo "-- $name: $(tr '\r' '\n' <"$log" | grep -E 'validation|Error|error' | tail -3 | tr '\n' '|')"
done
(cd "$out/sweep" && tar czf ../builds.tar.gz --ignore-failed-read sweep.json */build.log */warmstart) && echo "wrote $out/builds.tar.gz ($(du -h "$out/builds.tar.gz" | cut -f1))"

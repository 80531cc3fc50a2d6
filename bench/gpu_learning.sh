#!/usr/bin/env bash
# The ALFWorld warm-start sweep and a short GRPO-vs-GiGPO table on one CUDA GPU, in one go.
#
#   bash bench/gpu_learning.sh OUT_DIR [SWEEP_SECONDS] [RL_SECONDS] [RL_STEPS]
#
# 1. bench/warmstart_sweep.py builds the ALFWorld warm start at several model sizes side by side
#    and with injected invalid repeats (SFT and validation on the GPU, scripted data on the CPUs),
#    3000 SFT steps at most, validation sampled at T=0.4 as the held-out
#    evaluation is, stopping at the recipe's validation target;
# 2. the smallest variant whose final validation success is >= 20 % (else the best one) is the warm
#    start of bench/learning_table.py: GRPO and GiGPO, 3 seeds, all six runs side by side;
# 3. results.md, the PNG, sweep.json and the chosen warm start are left in OUT_DIR.
# Each phase has a wall-clock cap (a run cut short keeps the steps it finished: the table shows them).
# A dry run on CPU at toy size: DEVICE=cpu SWEEP_SET="episodes=8 sft_max_steps=2 sft_val_tasks=2" \
#   TABLE="--tasks 2 --group 2 --eval-tasks 2 --test-freq 1 --seeds 0" bash bench/gpu_learning.sh /tmp/x 600 600 1
set -uo pipefail
out=${1:?usage: bench/gpu_learning.sh OUT_DIR [SWEEP_SECONDS] [RL_SECONDS] [RL_STEPS]}
sweep_s=${2:-260}
rl_s=${3:-250}
rl_steps=${4:-10}
py=${PYTHON:-python3}
device=${DEVICE:-cuda}
sets=()
for f in ${SWEEP_SET:-}; do sets+=(--set "$f"); done
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE HF_HUB_DISABLE_PROGRESS_BARS=1 XLA_PYTHON_CLIENT_PREALLOCATE=false

echo "== warm-start sweep (cap ${sweep_s} s)"
timeout "$sweep_s" "$py" "$here/warmstart_sweep.py" --env alfworld --device "$device" --jobs 5 --threads 2 --out "$out/sweep" \
  --set sft_max_steps=3000 --set sft_check_every=250 --set sft_val_temperature=0.4 "${sets[@]}" \
  --variant h64l2i:invalid_rate=0.1 \
  --variant h128l4:hidden_size=128,num_heads=4,num_layers=4 \
  --variant h128l4i:hidden_size=128,num_heads=4,num_layers=4,invalid_rate=0.1 \
  --variant h192l4i:hidden_size=192,num_heads=6,num_layers=4,invalid_rate=0.1
echo "sweep exit $?"
pkill -f "toolgym warmstart" 2>/dev/null

model=$("$py" - "$out/sweep" <<'EOF'
import json, sys
from pathlib import Path
found = []
for name in ("h64l2i", "h128l4", "h128l4i", "h192l4i"):  # smallest first
    for info in Path(sys.argv[1], name).glob("warmstart/*/warmstart.json"):
        data = json.loads(info.read_text())
        final = data["validation"][-1][1] if data["validation"] else 0.0
        found.append((name, final, str(info.parent)))
good = [f for f in found if f[1] >= 0.2]
pick = good[0] if good else max(found, key=lambda f: f[1], default=None)
print(pick[2] if pick else "")
EOF
)
if [ -z "$model" ]; then
  echo "no warm start was built"; exit 1
fi
echo "== warm start: $model"
echo "$model" >"$out/chosen.txt"

echo "== GRPO vs GiGPO (cap ${rl_s} s, ${rl_steps} RL steps)"
args=(--envs alfworld --seeds 0 1 2 --steps "$rl_steps" --tasks 16 --group 8 --eval-tasks 48 --test-freq 5 --no-speed
      --device "$device" --model "alfworld=$model" --jobs 6 --out "$out/table" --docs "$out/table/results.md" ${TABLE:-})
timeout "$rl_s" "$py" "$here/learning_table.py" "${args[@]}"
echo "table exit $?"
pkill -f "toolgym train" 2>/dev/null; sleep 1
"$py" "$here/learning_table.py" "${args[@]}" --report-only \
  --partial "Measured on one GPU (bench/gpu_learning.sh); runs cut at ${rl_s} s keep the steps they finished."

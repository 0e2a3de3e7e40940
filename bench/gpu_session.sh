#!/bin/bash
# Everything issue 45 asks of a GPU machine, in one script: run from a checkout on a machine with CUDA, the package and
# lm-eval installed (`pip install -e ".[test]"`; where the machine cannot download, install them from wheels first).
# Each step writes into $OUT (default ./gpu_out) and prints one summary line; paste the summaries into
# bench/RESULTS.md with the device named, and the tables into docs/speed.md where they quote them.
#
#   OUT=gpu_out bash bench/gpu_session.sh
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-}:$PWD
TP=$(lm-latent-eval tasks-path)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/device.csv"

# 1. The README's first command and each bundled backend's task: device chosen by the backend (no --device), on
#    cuda (asked for) and on this machine's CPU (item 2: at most half the CPU's time, or the CPU chosen and said).
for spec in "latent_kglm linked_wikitext2_tiny" "latent_hmm latent_ppl_tiny" "latent_entitynlm coref_tiny" \
            "latent_rnng ptb_rnng_tiny" "latent_masked masked_ppl_tiny" "latent_tokenization latent_ppl_tiny" \
            "latent_lda lda_pydoc"; do
  set -- $spec
  for dev in default cuda cpu; do
    flag=$([ $dev = default ] && echo "" || echo "--model_args device=$dev")
    S=$SECONDS
    timeout 600 lm_eval --model "$1" --tasks "$2" --include_path "$TP" $flag --output_path "$OUT/o_$1_$dev" \
      > "$OUT/${1}_$dev.log" 2>&1
    echo "$1 $2 $dev rc=$? $((SECONDS - S)) s $(grep -Eo 'device=cpu chosen over [a-z:0-9]+' "$OUT/${1}_$dev.log" | head -1)"
    grep -E "^\|.*(perplexity|acc) " "$OUT/${1}_$dev.log" | head -2
  done
done

# 2. Documents side by side on the device: operations, syncs and seconds, alone against together (item 1).
python3 bench/side_by_side.py --device cuda --output "$OUT/side_by_side_cuda.md" > /dev/null 2>&1
echo "side_by_side rc=$?"; cat "$OUT/side_by_side_cuda.md"

# 3. The paper's workload, both models, all seven settings, at the default memory budget (items 3 and the goal).
for model in kglm entitynlm; do
  S=$SECONDS
  python3 bench/paper_workload.py --model $model --device cuda --time-budget 540 \
    --output "$OUT/paper_${model}.json" > "$OUT/paper_${model}.md" 2>&1
  echo "paper_workload $model rc=$? $((SECONDS - S)) s"; tail -5 "$OUT/paper_${model}.md"
done

# 4. Precision: the shift of log p̂ in TF32 and bfloat16 against the Monte Carlo standard error (item 4).
python3 bench/precision_shift.py --device cuda --output "$OUT/precision_cuda.md" > "$OUT/precision.log" 2>&1
echo "precision_shift rc=$?"; tail -12 "$OUT/precision_cuda.md"

# 5. The fast test suite on a machine with CUDA (item 6).
S=$SECONDS
python3 -m pytest -q -p no:cacheprovider -n 8 > "$OUT/fast_suite.log" 2>&1
echo "fast suite rc=$? $((SECONDS - S)) s"; tail -3 "$OUT/fast_suite.log"

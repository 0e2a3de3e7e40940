#!/bin/bash
# What issues 44 (item 6) and 45 ask of a GPU machine, sized to one 15-minute lease (each step under its own timeout,
# most wanted first): run from a checkout on a machine with CUDA and the package, lm-eval and their dependencies
# installed (where it cannot download: from wheels, `pip install --target /tmp/site .whl/*.whl`, PATH and PYTHONPATH
# set to it), LLaDA's two modeling files in $LLADA and transformers 4.46.3 (with tokenizers 0.20.3 and
# huggingface_hub 0.36.2, the versions LLaDA's code loads under) in $TF446, a folder put first on PYTHONPATH for the
# LLaDA step alone. Each step writes into $OUT (default ./gpu_out) and prints its summary; paste them into
# bench/RESULTS.md with the device named, and the tables into the docs that quote them.
#
#   OUT=gpu_out LLADA=../shared/fixtures/masked-diffusion/llada TF446=/tmp/tf446 bash bench/gpu_session.sh
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-}:$PWD
TP=$(lm-latent-eval tasks-path)
# PACK (optional): a tarball of $OUT rewritten after each step, so a lease that ends mid-run still returns the rest
# STEPS (optional): the steps to run, of "masked readme paper side" (default all); SIDE_LIMIT: documents per corpus
STEPS=" ${STEPS:-masked readme paper side} "
want() { [[ $STEPS == *" $1 "* ]]; }
packed() { [ -z "${PACK:-}" ] || tar czf "$PACK" -C "$OUT" .; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/device.csv"

# 1. Issue 44 item 6: LLaDA's code at LLaDA-8B size (all 32 blocks, random weights, bfloat16, on the GPU), seconds per
#    document for the 128-draw ELBO and the default statement.
want masked && {
S=$SECONDS
PYTHONPATH=$TF446:$PYTHONPATH timeout 150 python3 bench/masked_width.py --llada "$LLADA" --layers 32 \
  --documents 43 --output "$OUT/masked_width.md" > "$OUT/masked_width.log" 2>&1
echo "masked_width rc=$? $((SECONDS - S)) s"; tail -8 "$OUT/masked_width.log"; packed
}

# 2. Issue 45's headline: the README's first command as a user types it (the backend chooses the device and says so),
#    then asked for cuda and for the CPU.
want readme && for dev in default cuda cpu; do
  flag=$([ $dev = default ] && echo "" || echo "--model_args device=$dev")
  S=$SECONDS
  timeout 80 lm_eval --model latent_kglm --tasks linked_wikitext2_tiny --include_path "$TP" --batch_size auto \
    $flag --output_path "$OUT/readme_$dev" > "$OUT/readme_$dev.log" 2>&1
  echo "README $dev rc=$? $((SECONDS - S)) s $(grep -Eo 'device=cpu chosen over [a-z:0-9]+' "$OUT/readme_$dev.log" | head -1)"
  grep -E "^\|.*perplexity" "$OUT/readme_$dev.log" | head -2; packed
done

# 3. The paper's workload at full size and the default memory budget (KGLM ran out of GPU memory there before):
#    EntityNLM all seven settings, KGLM the τ = 1 setting, each stopped after its first documents.
want paper && {
S=$SECONDS
timeout 100 python3 bench/paper_workload.py --model kglm --device cuda --settings 1.0 --time-budget 30 \
  --output "$OUT/paper_kglm.json" > "$OUT/paper_kglm.md" 2>&1
echo "paper_workload kglm rc=$? $((SECONDS - S)) s"; grep -iE "particles.tokens/s|GPU-hours|whole workload|memory" "$OUT/paper_kglm.md" | head -6; packed
S=$SECONDS
timeout 100 python3 bench/paper_workload.py --model entitynlm --device cuda --time-budget 30 \
  --output "$OUT/paper_entitynlm.json" > "$OUT/paper_entitynlm.md" 2>&1
echo "paper_workload entitynlm rc=$? $((SECONDS - S)) s"; grep -iE "particles.tokens/s|GPU-hours|whole workload|memory" "$OUT/paper_entitynlm.md" | head -6; packed
}

# 4. Documents side by side on the device: operations, syncs and seconds, alone against together.
want side && {
S=$SECONDS
timeout ${SIDE_TIMEOUT:-170} python3 bench/side_by_side.py --device cuda ${SIDE_LIMIT:+--limit $SIDE_LIMIT} --output "$OUT/side_by_side_cuda.md" > "$OUT/side_by_side.log" 2>&1
echo "side_by_side rc=$? $((SECONDS - S)) s"; cat "$OUT/side_by_side_cuda.md"; packed
}

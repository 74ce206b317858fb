#!/usr/bin/env bash
# The GPU check, for the day a device with an NVIDIA GPU is lent (never part of CI).
#
#   benchmarks/gpu_check.sh [--kit DIR] [--models DIR] [--profile NAME] [--out DIR]
#                           [--budget SECONDS] [--plan]
#
# 1. builds llama-cpp-python with CUDA for the card nvidia-smi reports (its compute
#    capability only, no examples, no multimodal tools), from the trimmed source and the
#    few wheels benchmarks/gpu_kit.sh put in --kit (that machine reaches no package index);
#    skipped when a CUDA build is importable already;
# 2. measures what a verify batch of every size, a draft step and a prefill cost on that GPU
#    (benchmarks/gpu_costs.py: specchat's own calibration, every layer offloaded) for the
#    models found in --models (a random-weight Qwen2.5-0.5B shape when there are none),
#    writes them as a cost profile and prints them beside the simulated --profile;
# 3. replays the recorded acceptance of the built-in set on the measured costs
#    (`specchat bench --cost-profile`), and with the Qwen2.5-Coder 1.5B/0.5B pair in
#    --models also times `specchat bench` for real on one prompt per category, so the
#    simulated and the measured speedups stand side by side.
# Every step is cut to what is left of --budget (default 470 s, under 8 minutes); results
# and logs go to --out ($OUT when set, else ./gpu-check). --plan prints the steps and exits.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
kit="$here/gpu-kit"
models="$here/gpu-kit/models"
profile="rtx3090-8b-q4_0"
out="${OUT:-$here/gpu-check}"
budget=470
plan=0

usage() { sed -n '4,5p' "$0" | sed 's/^# //' >&2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --kit) kit="${2:?--kit needs a folder}"; shift 2 ;;
        --models) models="${2:?--models needs a folder}"; shift 2 ;;
        --profile) profile="${2:?--profile needs a name or file}"; shift 2 ;;
        --out) out="${2:?--out needs a folder}"; shift 2 ;;
        --budget) budget="${2:?--budget needs seconds}"; shift 2 ;;
        --plan) plan=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "gpu_check: unknown argument $1" >&2; usage; exit 2 ;;
    esac
done
case "$budget" in ''|*[!0-9]*) echo "gpu_check: --budget takes whole seconds" >&2; exit 2 ;; esac

start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
say() { echo "gpu_check: $*" | tee -a "$out/gpu-check.log" >&2; }
# within RESERVE CMD...: run CMD with what is left of the budget less RESERVE seconds (kept
# for the steps after it); fail at once when nothing is left.
within() {
    local t=$(( $(left) - $1 )); shift
    if [ "$t" -lt 10 ]; then say "no time left for: $*"; return 124; fi
    timeout "$t" "$@"
}

if [ "$plan" = 1 ]; then
    echo "kit=$kit models=$models profile=$profile out=$out budget=${budget}s"
    echo "steps: detect GPU; build llama-cpp-python (CUDA) unless importable; measure costs;"
    echo "       replay recorded acceptance on them; time specchat bench when the pair is there"
    exit 0
fi

mkdir -p "$out"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! gpu=$(nvidia-smi \
        --query-gpu=name,compute_cap,memory.total --format=csv,noheader 2>/dev/null | head -1) \
        || [ -z "$gpu" ]; then
    say "no NVIDIA GPU found (nvidia-smi): this check is for a machine with one"
    exit 1
fi
arch=$(echo "$gpu" | cut -d, -f2 | tr -d ' .')
say "GPU: $gpu (CUDA architecture $arch)"

py="${PYTHON:-python3}"
site="$out/site"
export PYTHONPATH="$site:$here${PYTHONPATH:+:$PYTHONPATH}"
has_cuda() {
    "$py" - <<'PY' 2>/dev/null
import llama_cpp, sys
sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 1)
PY
}

if has_cuda; then
    say "llama-cpp-python with GPU offload is importable: no build"
else
    sdist=$(ls "$kit"/llama_cpp_python-*.tar.gz 2>/dev/null | head -1 || true)
    if [ -z "$sdist" ]; then
        say "no llama_cpp_python-*.tar.gz in $kit: run benchmarks/gpu_kit.sh $kit where a package index is reachable"
        exit 1
    fi
    wheels=$(ls "$kit"/*.whl 2>/dev/null || true)
    if [ -n "$wheels" ]; then
        # shellcheck disable=SC2086
        "$py" -m pip install -q --no-index --no-deps --target "$site" $wheels
    fi
    say "building $(basename "$sdist") for sm_$arch ($(left) s left)"
    # scikit-build-core, cmake and ninja come from the machine's own Python (no isolation:
    # nothing can be fetched there). Only this card's architecture, no examples or tools.
    export CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$arch -DGGML_NATIVE=off -DLLAVA_BUILD=off -DLLAMA_BUILD_EXAMPLES=off -DLLAMA_BUILD_TESTS=off -DLLAMA_BUILD_SERVER=off"
    export CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)"
    if ! within 150 "$py" -m pip install --no-index --no-deps \
            --no-build-isolation --target "$site" "$sdist" >"$out/build.log" 2>&1; then
        say "the build failed or ran out of time: the last lines of $out/build.log follow"
        tail -20 "$out/build.log" >&2
        exit 1
    fi
    has_cuda || { say "built, but llama_cpp reports no GPU offload"; exit 1; }
fi

say "measuring costs on the GPU ($(left) s left)"
within 60 "$py" "$here/benchmarks/gpu_costs.py" --models "$models" \
    "$HOME/.cache/specchat/models" --profile "$profile" --out "$out" --synthetic \
    | tee "$out/costs.txt"

say "replaying recorded acceptance on the measured costs ($(left) s left)"
within 30 "$py" -m specchat bench --cost-profile "$out/measured-profile.json" \
    --json "$out/replay.json" | tee "$out/replay.txt"

pair=$(find "$models" "$HOME/.cache/specchat/models" -name 'qwen2.5-coder-1.5b*.gguf' 2>/dev/null | head -1 || true)
draft=$(find "$models" "$HOME/.cache/specchat/models" -name 'qwen2.5-coder-0.5b*.gguf' 2>/dev/null | head -1 || true)
if [ -n "$pair" ] && [ -n "$draft" ] && [ "$(left)" -gt 90 ]; then
    say "timing specchat bench on the GPU, one prompt per category ($(left) s left)"
    SPECCHAT_HOME="$out/home" within 10 "$py" -m specchat bench \
        -m "$pair" --draft "$draft" --limit 1 -n 64 --modes auto,ngram,draft --no-llama-cpp \
        --json "$out/bench.json" | tee "$out/bench.txt" || say "the real bench stopped early"
else
    say "no Qwen2.5-Coder 1.5B/0.5B pair (or no time) for a real bench: replay only"
fi
say "done in $(( $(date +%s) - start )) s; results in $out"

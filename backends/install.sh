#!/usr/bin/env bash
# Rebuild llama-cpp-python (and the llama.cpp inside it) for one backend profile.
#
#   backends/install.sh PROFILE [--dry-run]      PROFILE: cpu, cuda, metal or vulkan
#
# Each profile is backends/PROFILE.env: the CMAKE_ARGS that select the ggml backend and the
# tools the build needs. Environment knobs:
#   PYTHON=python3.12            the interpreter whose environment to change (default python3)
#   CUDA_ARCHITECTURES="86;89"   GPU generations for the cuda profile (see cuda.env)
#   EXTRA_CMAKE_ARGS="..."       appended to the profile's CMAKE_ARGS
#   LLAMA_CPP_PYTHON_SPEC="llama-cpp-python==0.3.36"   default: the range in pyproject.toml
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
known="$(cd "$here" && ls -- *.env | sed 's/\.env$//' | tr '\n' ' ')"

usage() {
    echo "usage: backends/install.sh PROFILE [--dry-run]   (profiles: ${known% })" >&2
    exit 2
}

[ $# -ge 1 ] || usage
profile="$1"
shift
dry_run=0
for arg in "$@"; do
    case "$arg" in
        --dry-run|-n) dry_run=1 ;;
        *) usage ;;
    esac
done

env_file="$here/$profile.env"
if [ ! -f "$env_file" ] || [[ "$profile" == */* ]]; then
    echo "install.sh: unknown profile '$profile' (profiles: ${known% })" >&2
    exit 2
fi

CMAKE_ARGS=""
REQUIRES=""
# shellcheck source=/dev/null
. "$env_file"
if [ "$profile" = "cuda" ] && [ -n "${CUDA_ARCHITECTURES:-}" ]; then
    CMAKE_ARGS="$CMAKE_ARGS -DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHITECTURES"
fi
CMAKE_ARGS="$(echo "$CMAKE_ARGS ${EXTRA_CMAKE_ARGS:-}" | xargs)"

# One source of truth for the tested version range: pyproject.toml.
spec="$(grep -o '"llama-cpp-python[^"]*"' "$here/../pyproject.toml" 2>/dev/null | head -n 1 | tr -d '"' || true)"
spec="${LLAMA_CPP_PYTHON_SPEC:-${spec:-llama-cpp-python>=0.3.16,<0.4}}"
python="${PYTHON:-python3}"

missing=0
for tool in $REQUIRES; do
    if ! command -v "$tool" >/dev/null 2>&1 && ! { [ "$tool" = nvcc ] && [ -n "${CUDACXX:-}" ]; }; then
        echo "install.sh: the $profile profile needs '$tool' on PATH (see backends/$profile.env)" >&2
        missing=1
    fi
done

# --force-reinstall --no-cache-dir: pip would otherwise reuse the wheel it built before, with
# the old backend. --no-deps: do not reinstall numpy & co. The second command only adds
# dependencies that are missing (a first install) and rebuilds nothing.
rebuild=("$python" -m pip install --force-reinstall --no-cache-dir --no-deps "$spec")
deps=("$python" -m pip install "$spec")
# Print the commands quoted, so they can be pasted (the spec holds '<' and '>').
printf 'CMAKE_ARGS=%q' "$CMAKE_ARGS"
printf ' %q' "${rebuild[@]}"
printf '\n'
printf '%q ' "${deps[@]}"
printf '\n'
if [ "$dry_run" = 1 ]; then
    exit 0
fi
if [ "$missing" = 1 ]; then
    exit 1
fi

echo "building llama.cpp for '$profile' (several minutes; add PIP_VERBOSE=1 to watch)" >&2
CMAKE_ARGS="$CMAKE_ARGS" FORCE_CMAKE=1 "${rebuild[@]}"
"${deps[@]}"
echo "done; check the result with: specchat doctor" >&2

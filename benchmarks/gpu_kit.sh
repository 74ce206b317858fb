#!/usr/bin/env bash
# Put together what benchmarks/gpu_check.sh needs on a GPU machine that reaches no package
# index; run it where pip works:
#
#   benchmarks/gpu_kit.sh [DIR]          (default: ./gpu-kit, which git ignores)
#
# - llama-cpp-python's source at the version specchat is tested with, trimmed to what a
#   CUDA build of the library compiles (the full source is 77 MB, over the 64 MiB a device
#   run may carry: vocabulary test files, docs, the web UI and git data go);
# - the pure-Python wheels specchat needs that such a machine's image lacks.
# Then carry DIR to the device (the device tool's `carry`) and run gpu_check.sh there.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-$here/gpu-kit}"
version="0.3.36"
wheels=(diskcache prompt_toolkit wcwidth tomlkit gguf)
py="${PYTHON:-python3}"

mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

"$py" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$tmp"
tar -xzf "$tmp/llama_cpp_python-$version.tar.gz" -C "$tmp"
src="$tmp/llama_cpp_python-$version"
rm -rf "$src/.git" "$src/docs" "$src/examples" "$src/tests" \
    "$src/vendor/llama.cpp/.git" "$src/vendor/llama.cpp/docs" "$src/vendor/llama.cpp/models" \
    "$src/vendor/llama.cpp/tools/ui" "$src/vendor/llama.cpp/tools/server/public" \
    "$src/vendor/llama.cpp/benches" "$src/vendor/llama.cpp/examples" \
    "$src/vendor/llama.cpp/tests" "$src/vendor/llama.cpp/media" "$src/vendor/llama.cpp/gguf-py"
# CMake still reads the examples' and tests' lists when their options are on; the build in
# gpu_check.sh turns them off, and an empty list keeps older CMake files from failing.
mkdir -p "$src/vendor/llama.cpp/examples" "$src/vendor/llama.cpp/tests"
: >"$src/vendor/llama.cpp/examples/CMakeLists.txt"
: >"$src/vendor/llama.cpp/tests/CMakeLists.txt"
tar -czf "$dir/llama_cpp_python-$version.tar.gz" -C "$tmp" "llama_cpp_python-$version"

"$py" -m pip download -q --no-deps --only-binary=:all: -d "$dir" "${wheels[@]}"
du -sh "$dir"/* >&2
echo "gpu_kit: $dir is ready: carry it to the GPU machine and run benchmarks/gpu_check.sh" >&2

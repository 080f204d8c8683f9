#!/usr/bin/env bash
# Build llama.cpp's `llama-server` (CPU only) from the sources vendored in a pinned PyPI sdist.
# Cached under .cache/llama-server/<pin>/: rerunning with the same pin reuses the binary.
set -euo pipefail
# llama-cpp-python (MIT) ships llama.cpp's full source tree under vendor/llama.cpp in its sdist,
# so the build needs only pip, cmake and a C++ compiler (no git, no network besides PyPI).
PIN="${LLAMA_CPP_PYTHON_PIN:-0.3.36}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${CTXBUDGET_LLAMA_CACHE:-$ROOT/.cache/llama-server}/$PIN"
BIN="$CACHE/bin/llama-server"
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-$(nproc)}"

if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi
for tool in cmake c++; do
  command -v "$tool" >/dev/null || { echo "build_llama_server: '$tool' is required" >&2; exit 2; }
done
work="$CACHE/work"
src="$work/llama_cpp_python-$PIN/vendor/llama.cpp"
# An interrupted build resumes: the unpacked sources and the build folder are kept until done.
if [ ! -f "$src/CMakeLists.txt" ]; then
  rm -rf "$work" && mkdir -p "$work"
  "$PYTHON" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$PIN" -d "$work" >&2
  tar -xzf "$work/llama_cpp_python-$PIN.tar.gz" -C "$work"
fi
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$src" -B "$work/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_SERVER=ON >&2
cmake --build "$work/build" --target llama-server -j "$JOBS" >&2
mkdir -p "$CACHE/bin"
cp "$work/build/bin/llama-server" "$BIN"
rm -rf "$work"
echo "$BIN"

#!/usr/bin/env bash
# Build llama-cpp-python with llama.cpp's Vulkan backend and install it into a venv (the bundle's
# llama.cpp; a GPU-capable source install). Debian/Ubuntu; elsewhere install the Vulkan SDK and run
# the pip line below by hand.
#   bash packaging/build-llama-vulkan.sh            into ./.venv
#   PYTHON=/path/to/python bash packaging/build-llama-vulkan.sh
#
# How it is built, and why:
# - GGML_BACKEND_DL: the CPU and Vulkan backends are modules loaded at run time (engine/llama/backends.py),
#   so a machine without a Vulkan loader or driver still starts, on the CPU.
# - GGML_NATIVE off: the CPU module is built for x86-64-v3 (AVX2, FMA, F16C), not for this build
#   machine's CPU, so the bundle runs on any AVX2 CPU (2013 on), whatever machine built it.
# - Vulkan headers 1.4 from Debian 13: llama.cpp needs newer headers than Debian 12's 1.3.239
#   (VK_EXT_layer_settings). Headers only, unpacked into the cache; the program links against the
#   system's loader (libvulkan.so.1), whose newer functions llama.cpp looks up at run time.
# - glslc stays Debian 12's: it lacks the cooperative-matrix and integer-dot-product extensions, so
#   those shaders are left out (the README says what that costs). Debian 13's glslc needs glibc 2.38.
# The wheel is kept in the cache (~/.cache/specula-build), keyed by everything above: pip's own
# wheel cache ignores CMAKE_ARGS and would hand back the CPU-only wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
LLAMA_CPP_PYTHON="${LLAMA_CPP_PYTHON:-0.3.36}"
HEADERS_DEB="pool/main/v/vulkan-loader/libvulkan-dev_1.4.309.0-1_amd64.deb"
HEADERS_SHA256="8d329d465e16168afff58b1bd0dd6db46aac2cc3f56054a481b25a04e90b345a"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/specula-build"
mkdir -p "$CACHE"

bash packaging/system-deps.sh --vulkan

headers="$CACHE/vulkan-headers-1.4.309"
if [ ! -f "$headers/usr/include/vulkan/vulkan.hpp" ]; then
  deb="$CACHE/$(basename "$HEADERS_DEB")"
  # Python's own downloader: a fresh machine need not have curl.
  "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' \
    "http://deb.debian.org/debian/$HEADERS_DEB" "$deb"
  echo "$HEADERS_SHA256  $deb" | sha256sum -c --quiet
  rm -rf "$headers" && dpkg-deb -x "$deb" "$headers" && rm "$deb"
fi

args="-DGGML_VULKAN=on -DGGML_BACKEND_DL=on -DGGML_NATIVE=off -DVulkan_INCLUDE_DIR=$headers/usr/include"
key=$(echo "$LLAMA_CPP_PYTHON $args $(glslc --version | head -1) $(uname -m)" | sha256sum | cut -c1-12)
wheels="$CACHE/llama-vulkan-$key"
if ! ls "$wheels"/llama_cpp_python-*.whl >/dev/null 2>&1; then
  echo "building llama-cpp-python $LLAMA_CPP_PYTHON with Vulkan (about 10 minutes on 2 cores)"
  rm -rf "$wheels.partial"
  CMAKE_ARGS="$args" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    "$PYTHON" -m pip wheel --no-cache-dir --no-deps --no-binary llama-cpp-python -q \
    "llama-cpp-python==$LLAMA_CPP_PYTHON" -w "$wheels.partial"
  mv "$wheels.partial" "$wheels"
fi
"$PYTHON" -m pip install -q --force-reinstall --no-deps "$wheels"/llama_cpp_python-*.whl
"$PYTHON" -m engine info | grep -E "^(backend|device)"

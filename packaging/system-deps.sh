#!/usr/bin/env bash
# System libraries Qt's wheels load even on the offscreen platform, installed only if missing
# (Debian/Ubuntu, as root or with sudo). Elsewhere this prints what to install and carries on.
set -u
need=()
for lib in libGL.so.1 libEGL.so.1 libxkbcommon.so.0 libfontconfig.so.1 libdbus-1.so.3; do
  ldconfig -p 2>/dev/null | grep -q "$lib" || need+=("$lib")
done
[ ${#need[@]} -eq 0 ] && exit 0
echo "missing system libraries for Qt: ${need[*]}"
if command -v apt-get >/dev/null; then
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq && $sudo_cmd apt-get install -y -qq \
    libgl1 libegl1 libxkbcommon0 libfontconfig1 libdbus-1-3 >/dev/null
else
  echo "install them with your package manager, then run this again"
fi

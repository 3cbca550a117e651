#!/usr/bin/env bash
# System packages Qt's wheels load, installed only if missing (Debian/Ubuntu, as root or with sudo):
#   bash packaging/system-deps.sh        Qt itself (even offscreen) and its xcb (X11) and wayland
#                                        platform plugins: what `python -m app` needs on a desktop
#   bash packaging/system-deps.sh --ci   also Xvfb and xdotool, for the tests that open a real window
#   bash packaging/system-deps.sh --vulkan   what building llama.cpp with Vulkan needs (the loader,
#                                        glslc, SPIR-V headers), and lavapipe, Mesa's software Vulkan
#                                        device, to run the Vulkan backend without a GPU
# The plugins' libraries were read from their ELF headers (app/platform_check.py lists them with
# Fedora's package names). Elsewhere this prints what to install and carries on.
set -u
packages=(
  libgl1 libegl1 libxkbcommon0 libfontconfig1 libdbus-1-3
  # xcb: the small utility libraries desktops often lack, then libxcb and the X11 ones they sit on
  libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-render-util0 libxcb-util1 libxkbcommon-x11-0
  libxcb1 libxcb-randr0 libxcb-shape0 libxcb-xkb1 libxcb-sync1 libxcb-xfixes0 libxcb-shm0 libxcb-render0
  libxcb-glx0 libx11-xcb1 libx11-6
  libwayland-client0 libwayland-cursor0 libwayland-egl1
)
for option in "$@"; do
  case "$option" in
    --ci) packages+=(xvfb xdotool) ;;
    --vulkan) packages+=(libvulkan1 libvulkan-dev glslc spirv-headers mesa-vulkan-drivers) ;;
    *) echo "unknown option: $option (--ci, --vulkan)"; exit 2 ;;
  esac
done
if ! command -v apt-get >/dev/null || ! command -v dpkg-query >/dev/null; then
  echo "not Debian/Ubuntu: install Qt's system libraries with your package manager (see the README's Quick start)"
  exit 0
fi
need=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${db:Status-Status}\n' "$package" 2>/dev/null | grep -qx installed || need+=("$package")
done
[ ${#need[@]} -eq 0 ] && exit 0
echo "installing missing system packages: ${need[*]}"
sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
$sudo_cmd apt-get update -qq &&
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null

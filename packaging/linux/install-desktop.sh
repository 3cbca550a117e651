#!/usr/bin/env bash
# Put Specula in this user's application menu: a .desktop entry that runs the bundle, and its
# icon in the hicolor theme (under $XDG_DATA_HOME, default ~/.local/share; no root needed).
#   bash packaging/linux/install-desktop.sh [PATH/TO/specula]   default: dist/specula/specula
#   bash packaging/linux/install-desktop.sh --uninstall
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
data="${XDG_DATA_HOME:-$HOME/.local/share}"
entry="$data/applications/specula.desktop"
png="$data/icons/hicolor/256x256/apps/specula.png"
svg="$data/icons/hicolor/scalable/apps/specula.svg"

refresh() {  # menus and icon themes pick up changes without these too, only later
  if command -v update-desktop-database >/dev/null; then update-desktop-database -q "$data/applications" || true; fi
  if command -v gtk-update-icon-cache >/dev/null; then gtk-update-icon-cache -q -f -t "$data/icons/hicolor" || true; fi
}

if [ "${1:-}" = "--uninstall" ]; then
  rm -f "$entry" "$png" "$svg"
  refresh
  echo "removed Specula from the application menu"
  exit 0
fi

exe="$(realpath -m "${1:-$here/../../dist/specula/specula}")"
if [ ! -x "$exe" ]; then
  echo "no executable at $exe; build the bundle first: bash packaging/build.sh" >&2
  exit 1
fi
# Exec= is quoted; these characters would need escaping rules that are not worth supporting.
case "$exe" in *[\"\`\$\\%]*)
  echo "the path $exe contains one of \" \` \$ \\ %; move the bundle to a plainer path" >&2
  exit 1 ;;
esac
assets="$(dirname "$exe")/_internal/assets"  # the bundle's own copy, so icon and app match

mkdir -p "$(dirname "$entry")" "$(dirname "$png")" "$(dirname "$svg")"
install -m 644 "$assets/icon.png" "$png"
install -m 644 "$assets/icon.svg" "$svg"
template="$(<"$here/specula.desktop")"
template="${template//@EXEC@/"\"$exe\""}"
printf '%s\n' "${template//@TRYEXEC@/"$exe"}" > "$entry.tmp"
chmod 644 "$entry.tmp"
mv "$entry.tmp" "$entry"
refresh
echo "installed $entry (runs $exe)"

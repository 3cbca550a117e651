#!/usr/bin/env bash
# Build the double-click app: dist/specula/ (Linux, Windows) or dist/Specula.app (macOS).
#   bash packaging/build.sh            uses ./.venv (create it with the README's install command)
#   PYTHON=/path/to/python bash packaging/build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
# PyInstaller comes with the `bundle` extra; install it only when missing.
"$PYTHON" -c "import PyInstaller" 2>/dev/null || "$PYTHON" -m pip install -q -e '.[bundle]'
"$PYTHON" -m PyInstaller --noconfirm --clean --log-level WARN \
  --distpath dist --workpath build/pyinstaller packaging/specula.spec
echo "bundle: $(du -sh dist/specula | cut -f1) in dist/specula (models are not included)"

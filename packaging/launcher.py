"""The bundle's entry script: the desktop app, or `--self-test MODEL [DRAFT]` without any window,
or `--probe-backend MODULE` (engine/llama/backends.py tries a GPU driver in a child process this way)."""

import os
import sys


def restore_library_path() -> None:
    """Give child processes (xdg-open, file managers) the user's LD_LIBRARY_PATH, not the bundle's.

    PyInstaller's bootloader points LD_LIBRARY_PATH at the bundle's _internal folder. The dynamic
    loader read it when this process started, so changing it now only affects children, which
    would otherwise load our copies of glib, libstdc++ and friends instead of their own.
    """
    original = os.environ.pop("LD_LIBRARY_PATH_ORIG", None)
    if original is not None:
        os.environ["LD_LIBRARY_PATH"] = original
    else:
        os.environ.pop("LD_LIBRARY_PATH", None)


if __name__ == "__main__":
    if getattr(sys, "frozen", False) and sys.platform.startswith("linux"):
        restore_library_path()
    if sys.argv[1:2] == ["--probe-backend"]:
        from engine.llama.backends import probe_main

        sys.exit(probe_main(sys.argv[2]))
    if "--self-test" in sys.argv[1:]:
        # Only the Qt-light self-test module: the window modules are never imported on this path.
        from app.selftest import main as self_test

        sys.exit(self_test(sys.argv[1:]))
    from app.main import main

    sys.exit(main())

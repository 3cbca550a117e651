"""One Specula per data folder (app/single_instance.py), with real processes holding the lock."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from app.single_instance import SingleInstance
from tests.models import REPO

HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from PySide6.QtCore import QCoreApplication
    from app.single_instance import SingleInstance
    app = QCoreApplication([])
    instance = SingleInstance(Path(sys.argv[1]))
    print("claimed" if instance.claim() else "refused", flush=True)
    time.sleep(120)
    """
)


def test_a_running_app_holds_its_folder_and_a_killed_ones_lock_is_taken_over(qapp, tmp_path):
    folder, other = tmp_path / "specula", tmp_path / "another"
    folder.mkdir(), other.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "claimed"
        assert not SingleInstance(folder).claim()  # the first app is running: a later start gives way
        elsewhere = SingleInstance(other)
        assert elsewhere.claim()  # another data folder (SPECULA_HOME) is another Specula
        elsewhere.release()
        holder.kill()  # SIGKILL: as a crash or kill -9, its lock file stays behind
        holder.wait(30)
        after = SingleInstance(folder)
        assert (folder / "specula.lock").exists() and after.claim()  # its process is gone: taken over
        after.release()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()

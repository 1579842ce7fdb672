"""The kvtier_hangfs helper (src/testing/hangfs.cc) from Python: a pass-through FUSE mount whose
operations block on command. Used by the tests (conftest.py's `hangfs` fixture) and by
bench/hung_mount.py. Waits for the helper's answers, never for time."""

import os
import subprocess


class HangFs:
    def __init__(self, helper, root):
        self.backing = os.path.join(root, "backing")
        self.mount = os.path.join(root, "mnt")
        os.makedirs(self.backing)
        os.makedirs(self.mount)
        self._proc = subprocess.Popen([helper, self.backing, self.mount], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, bufsize=1)
        self.mounted = self._until("mounted")

    def _until(self, want):
        # readline ends at the helper's answer or its exit (a caller's ceiling is its own).
        for line in self._proc.stdout:
            if line.strip() == want:
                return True
        return False

    def _command(self, cmd, ack):
        self._proc.stdin.write(cmd + "\n")
        self._proc.stdin.flush()
        if not self._until(ack):
            raise RuntimeError(f"kvtier_hangfs did not answer {cmd}")

    def hang(self):
        self._command("hang", "hung")

    def release(self):
        self._command("release", "released")

    def close(self):
        try:
            self._proc.stdin.close()  # the helper releases, unmounts and exits
        except OSError:
            pass
        self._proc.wait()

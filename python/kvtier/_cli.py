"""The `kvtier` command a wheel installs: runs the CLI shipped inside the package."""

import os
import sys


def main() -> None:
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "kvtier")
    if not os.path.isfile(exe):
        sys.exit(f"kvtier: no CLI in this installation of the package (looked for {exe})")
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()

"""Entry point of the PyInstaller bundle: the same `tandem` command as the wheel installs."""

import sys

from app.main import main

if __name__ == "__main__":
    sys.exit(main())

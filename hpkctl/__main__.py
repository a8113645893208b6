import sys

from hpkctl.cli import entry

sys.exit(entry())

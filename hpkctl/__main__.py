import sys

from hpkctl.cli import main

sys.exit(main())

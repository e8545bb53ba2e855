"""`python -m nadpipe.cli`: the `nadpipe` command."""

import sys

from . import main

sys.exit(main())

"""`python -m gpuaudit.selftest`: the load process (selftest/load.py), started by the selftest itself."""

import sys

from gpuaudit.selftest.load import child_main

sys.exit(child_main())

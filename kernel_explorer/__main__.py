"""`python -m kernel_explorer`: the same command as `kernel-explorer`, for an environment whose
scripts folder is not on PATH (a notebook's kernel, a venv run by its python).

May import: views
"""

import sys

from kernel_explorer.views.cli import main

sys.exit(main())

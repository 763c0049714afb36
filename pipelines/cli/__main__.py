"""`python -m pipelines.cli`: the `conveyor` command."""

import sys

from pipelines.cli import main

sys.exit(main())

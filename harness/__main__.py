"""`python -m harness …` is `bench …` (workers are started this way)."""

from harness.cli import main

raise SystemExit(main())

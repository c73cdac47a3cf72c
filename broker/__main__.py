"""`python -m broker` runs the bundled broker (the same as `bench broker`)."""

from broker.cli import main

raise SystemExit(main())

import sys

from studies._runner.cli import main

sys.exit(main())

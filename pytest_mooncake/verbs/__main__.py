import sys

from pytest_mooncake.verbs.cli import main

sys.exit(main())

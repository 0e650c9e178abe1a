import sys

from site_builder.cli import main

sys.exit(main())

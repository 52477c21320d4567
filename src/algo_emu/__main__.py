import sys

from algo_emu.cli import main

sys.exit(main())

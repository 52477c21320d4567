"""python -m tools.campaign run | replay | save | pin | status | page | variants | converged [--dir SET] ..."""

import argparse
import logging
import sys

from tools.campaign import core


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    parser = argparse.ArgumentParser(prog="python -m tools.campaign", description=core.__doc__.split("\n\n")[0])
    core.add_parser(parser)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())

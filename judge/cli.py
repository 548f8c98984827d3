"""The `judge` command: one sub-command per verb of the design card."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="judge", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    from calibration import cli as calibration_cli

    calibration_cli.register(sub)

    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())

"""`memsync` and `python -m memsync`: a reading command answered by this user's warm daemon
where one serves its index, else the CLI in this process. Nothing heavy is imported first."""

import sys


def main() -> None:
    from memsync.daemon.endpoint import relayed

    code = relayed(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from memsync.cli.commands import main as cli

    cli()


if __name__ == "__main__":
    main()

import sys

from .harness import main


def _main() -> int:
    try:
        return main()
    except KeyboardInterrupt:  # the harness's finally blocks have removed its cluster and processes
        print("interrupted: no report written (the throwaway databases were removed)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(_main())

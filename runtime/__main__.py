"""``python -m hgemm_sm90 <command>``: the command line of runtime/cli.py (list, select, doctor, bench)."""

if __name__ == "__main__":  # not on a plain import (the layering test imports every module of the package)
    import sys

    from .cli import main

    sys.exit(main())

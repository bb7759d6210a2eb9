"""The ``tensor-arena`` console script: the Rust command line (``plan``, ``replay``), same flags."""

import sys

from . import _native


def main(argv=None):
    """Runs ``tensor-arena`` with ``argv`` (default: ``sys.argv[1:]``) and exits with its status."""
    args = sys.argv[1:] if argv is None else list(argv)
    sys.stdout.flush()
    sys.exit(_native.main(["tensor-arena", *args]))


if __name__ == "__main__":
    main()

"""One module per CLI command group.

Each module defines ``add_parser(subparsers)``, which registers its command(s) and sets
``handler=<callable(args) -> int>`` as the parser default. Modules are imported only when
their command runs, so ``gpu-fit`` never pays for SQLAlchemy or vendor libraries.
"""

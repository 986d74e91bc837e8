"""The command line (`jaxpareto`): argparse and printing only, one module per command."""

from jaxpareto.cli.main import main

__all__ = ["main"]

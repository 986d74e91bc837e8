"""The command line (`jaxpareto`): argparse and printing only, one module per command."""

from jaxpareto.cli.app import main

__all__ = ["main"]

from jaxpareto.cli.main import main

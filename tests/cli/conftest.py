"""The CLI tests' fixtures (defined in ``tests.cli.helpers``)."""

from tests.cli.helpers import cli  # noqa: F401

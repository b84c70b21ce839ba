"""``python -m protocol.example_agent``."""

from protocol.attribute_docstrings import install

# Before the ACP SDK's schema is imported (protocol/attribute_docstrings.py says why).
install()

from protocol.example_agent.agent import main  # noqa: E402

main()

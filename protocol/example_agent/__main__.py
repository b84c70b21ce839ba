"""``python -m protocol.example_agent``."""

from protocol.example_agent.agent import main

main()

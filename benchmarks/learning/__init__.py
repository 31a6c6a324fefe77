"""The learning runs behind the figures of docs/agent.md."""

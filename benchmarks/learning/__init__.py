"""The learning runs behind the figures of docs/tutorials/agent.md and docs/records/agent.md."""

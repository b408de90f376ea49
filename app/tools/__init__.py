"""MCP: server configs, transports, and the hub that lists and calls the servers' tools.
Qt-free."""

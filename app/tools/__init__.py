"""MCP: server configs (`config`), the tools as the model sees them (`catalog`), results
(`results`), the stdio transport (`stdio`) and the hub that lists and calls the servers' tools
(`hub`). Qt-free."""

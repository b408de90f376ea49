"""What drives the engine and the tools off the GUI thread: the chat session (the controller,
its chat model the view observes, its replies, tool turns and Compare runs), the engine worker
and the MCP tool runner. QtCore signals only (no widgets, no QtGui), and nothing from app.ui."""

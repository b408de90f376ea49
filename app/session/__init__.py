"""What drives the engine and the tools off the GUI thread: the engine worker and the MCP tool
runner. QtCore signals only (no widgets, no QtGui), and nothing from app.ui."""

"""The PySide6 interface: the main window, its chat view, composer, toolbar and panels, and the
chat session that ties them to the worker."""

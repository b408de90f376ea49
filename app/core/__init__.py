"""Qt-free logic: settings, the chat store, the request/reply types, text files and folders,
code-block matching, help text and logging. Nothing here imports PySide6 or app.ui."""

"""The app's dialogs: settings, models and downloads, tools, connections, the local server,
diffs, folders and the system prompt."""

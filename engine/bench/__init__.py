"""Benchmarks: side by side on one machine, several clients against one server, and the edit prompts."""

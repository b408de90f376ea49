"""Gemma 4's format: its chat template (rendered in a sandbox), thinking channels, tool-call syntax and grammar, and the reply assembler."""

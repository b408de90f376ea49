"""Prompts the equivalence, acceptance and batching tests run (plain, code, unicode, repetitive)."""

PROMPTS = [
    "Hello world, this is a test",
    "def f(x):\n    return x + 1",
    "The quick brown fox jumps over the lazy dog",
    "Gemma speed test python function",
    "a b c d e f g",
    "zzz yyy xxx www",
    "List: apples, pears, plums.",
    "Ünïcödé → ✓ 漢字",
]

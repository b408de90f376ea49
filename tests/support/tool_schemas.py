"""Tool parameter schemas the tool-call and agent tests share."""

# Strings the model writes freely never end with the synthetic model (its walk up the vocabulary
# never reaches Gemma's string delimiter), so the forced calls here choose among values: a real
# model closes its strings, and free strings are read in the piece-by-piece tests below.
WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"], "description": "the city"},
    "days": {"type": "integer"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    "hourly": {"type": "boolean"}}, "required": ["city", "unit"], "additionalProperties": False}

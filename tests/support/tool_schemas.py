"""Tool parameter schemas the tool-call and agent tests share."""

# Strings the model writes freely never end with the synthetic model (its walk up the vocabulary
# never reaches Gemma's string delimiter), so the forced calls here choose among values: a real
# model closes its strings, and free strings are read in the piece-by-piece tests below.
WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"], "description": "the city"},
    "days": {"type": "integer"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    "hourly": {"type": "boolean"}}, "required": ["city", "unit"], "additionalProperties": False}
FILES = {"type": "object", "properties": {
    "kinds": {"type": "array", "items": {"enum": ["py", "md", "toml"]}, "minItems": 1, "maxItems": 2},
    "depth": {"type": "integer"}, "hidden": {"type": "boolean"}}, "required": ["kinds"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather of a city",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "list_files", "description": "List the project's files",
                                      "parameters": FILES}},
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]

TRIP = {"type": "function", "function": {"name": "book_trip", "parameters": {
    "type": "object", "required": ["nights", "city"], "additionalProperties": False,
    "properties": {"nights": {"type": "integer", "minimum": 1, "maximum": 9},
                   "city": {"type": "string", "enum": ["Paris", "Rome"]}}}}}

"""Backends: where decoding happens. `engine.generation.Backend` is the interface; the local
llama.cpp engine (`engine.local.engine.Engine`) and `RemoteBackend` (an OpenAI-compatible server)
implement it."""

"""Local inference: llama.cpp in this process — the loaded models, the batch scheduler, prompts, sampling under grammars, media."""

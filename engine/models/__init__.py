"""Model management: the catalog, downloads, the user's library, drafter pairing, hardware fit
and speed estimates, and the GGUF checks that run before llama.cpp sees a file."""
